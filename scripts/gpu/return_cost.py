#!/usr/bin/env python3
"""Where an agent's return over a long context spends its time to the first token.

Usage: return_cost.py PORT CONTEXT... (a running `inferd serve`, token-id prompts).
For each context C: one prompt of C random ids (prefilled once, untimed), then REPS times,
each a request of its own with max_tokens 1: the same prompt plus 16 new ids (a return:
the first C cached, 16 new). Each request is timed by the client (wall, non-streaming) and,
from /metrics snapshots around it, by the server: its time to first token
(`inferd_time_to_first_token_seconds`, from the engine's admission) and the step phases
of the steps it took (`inferd_step_phase_seconds`). What the client sees beyond the
server's TTFT is the HTTP path (parse, validate, queue into the engine, the reply);
what the server's TTFT holds beyond its steps' phases is admission and waiting.
"""
import json, random, re, sys, time, urllib.request

port, contexts = sys.argv[1], [int(c) for c in sys.argv[2:]]
base = f"http://127.0.0.1:{port}"
REPS = 5


def metrics():
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    out = {}
    for m in re.finditer(r'^inferd_step_phase_seconds_(sum|count)\{phase="(\w+)"\}\s+(\S+)', text, re.M):
        out[(m.group(2), m.group(1))] = float(m.group(3))
    for m in re.finditer(r"^inferd_time_to_first_token_seconds_(sum|count)\s+(\S+)", text, re.M):
        out[("ttft", m.group(1))] = float(m.group(2))
    return out


def complete(ids):
    body = json.dumps({"prompt": ids, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"content-type": "application/json"})
    t0 = time.perf_counter()
    r = json.loads(urllib.request.urlopen(req).read())
    return (time.perf_counter() - t0) * 1e3, r.get("usage", {})


rng = random.Random(5)
print("| context | client ms | server TTFT ms | steps | forward ms | schedule ms | other phases ms | cached |")
print("|---|---|---|---|---|---|---|---|")
for ctx in contexts:
    prompt = [rng.randrange(1000, 30000) for _ in range(ctx)]
    complete(prompt)  # prefill, untimed
    for rep in range(REPS):
        ids = prompt + [rng.randrange(1000, 30000) for _ in range(16)]
        before = metrics()
        wall, usage = complete(ids)
        after = metrics()
        d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        steps = int(d.get(("forward", "count"), 0))
        phase = {p: d.get((p, "sum"), 0) * 1e3 for (p, kind) in d if kind == "sum" and p != "ttft"}
        other = sum(v for p, v in phase.items() if p not in ("forward", "schedule"))
        ttft = d.get(("ttft", "sum"), 0) * 1e3
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", "?")
        print(f"| {ctx} | {wall:.2f} | {ttft:.2f} | {steps} | {phase.get('forward', 0):.2f} | "
              f"{phase.get('schedule', 0):.2f} | {other:.2f} | {cached} |", flush=True)
        prompt = ids  # the next return extends this one
