#!/usr/bin/env python3
"""Peak memory of `inferd serve` while it parses large request bodies.

Starts the given binary on the default model, sends N bodies of about 4 MiB at once for
each case (the body limit's size; every one is refused by the server or generates one
token), and prints the server's peak RSS (VmHWM) growth per case, over a fresh server
each time.

    python3 scripts/dev/body-memory.py target/release/inferd [N] [CASE-SUBSTRING]
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

BIN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 8
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""
PORT = 18731
SIZE = 4 << 20
ONES = ",".join(["1"] * ((SIZE - 200) // 2))
EMPTIES = ",".join(['""'] * ((SIZE - 200) // 3))


def cases():
    yield "completions: prompt of token ids", "/v1/completions", \
        '{"prompt": [' + ONES + '], "max_tokens": 1}'
    yield "chat: unknown top-level field (an array of numbers)", "/v1/chat/completions", \
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "junk": [' + ONES + ']}'
    yield "chat: an array of numbers inside a message", "/v1/chat/completions", \
        '{"messages": [{"role": "user", "content": "hi", "junk": [' + ONES + ']}], "max_tokens": 1}'
    yield "responses: an array of numbers inside an input item", "/v1/responses", \
        '{"input": [{"role": "user", "content": "hi", "junk": [' + ONES + ']}], "max_output_tokens": 16}'
    yield "chat: stop as an array of numbers", "/v1/chat/completions", \
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stop": [' + ONES + ']}'
    yield "chat: dry_sequence_breakers of empty strings (DRY off)", "/v1/chat/completions", \
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "dry_sequence_breakers": [' + EMPTIES + ']}'
    yield "messages: stop_sequences of empty strings", "/v1/messages", \
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stop_sequences": [' + EMPTIES + ']}'
    yield "chat: one long message (text)", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "word " * ((SIZE - 200) // 5)}], "max_tokens": 1})


def vm_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024


def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=body.encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def serve():
    p = subprocess.Popen([BIN, "serve", "--port", str(PORT)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1):
                return p
        except Exception:
            time.sleep(0.2)
    p.kill()
    sys.exit("the server did not come up")


print(f"{BIN}: {N} bodies of {SIZE >> 20} MiB at once")
for name, path, body in cases():
    if ONLY not in name:
        continue
    p = serve()
    base = vm_hwm(p.pid)
    codes = []
    ts = [threading.Thread(target=lambda: codes.append(post(path, body))) for _ in range(N)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    peak = vm_hwm(p.pid)
    p.terminate()
    p.wait()
    print(f"  {name}: peak RSS +{peak - base} MiB (statuses {sorted(set(codes))})")
