#!/usr/bin/env python3
"""Step overlap on the GPU gives what serial steps give.

  [SEQUENTIAL=1] overlap_check.py run URL OUT.json
                                      24 completions sent at once (one at a time with
                                      SEQUENTIAL=1) (greedy, seeded sampling
                                      with penalties and logprobs, short limits): the texts,
                                      token logprobs and finish reasons into OUT.json
  overlap_check.py compare A.json B.json
                                      how many of the replies are equal (exit 1 if any differ)

Run against `inferd serve --step-overlap off`, then `on`: a row's result never depends on
the batch, so every reply must be the same.
"""
import json
import os
import sys
import threading
import urllib.request

TOPICS = ["printing presses", "bees", "the sky", "chess", "compilers", "rain", "stars", "vaccines"]


def request(i, model):
    body = {
        "model": model,
        "prompt": f"Question {i}: explain {TOPICS[i % len(TOPICS)]} in detail." + " More." * (i % 5),
        "max_tokens": 8 + 10 * (i % 4),
    }
    if i % 3 == 1:
        body.update(temperature=0.8, top_p=0.9, presence_penalty=0.3, seed=100 + i, logprobs=2)
    else:
        body.update(temperature=0)
    return body


def post(url, body):
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        c = json.load(r)["choices"][0]
    lp = c.get("logprobs") or {}
    return {
        "text": c["text"],
        "finish": c["finish_reason"],
        "logprobs": [round(x, 3) for x in (lp.get("token_logprobs") or [])],
    }


def run(url, out):
    n = 24
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        model = json.load(r)["data"][0]["id"]
    res = [None] * n

    def one(i):
        try:
            res[i] = post(url, request(i, model))
        except Exception as e:  # recorded, so compare reports it
            res[i] = {"error": str(e)}

    if os.environ.get("SEQUENTIAL") == "1":  # one at a time: every pass the same either way
        for i in range(n):
            one(i)
    else:
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    json.dump(res, open(out, "w"), indent=1)
    errors = [r["error"] for r in res if "error" in r]
    for e in errors[:3]:
        print("  error:", e)
    print(f"{n} replies, {len(errors)} errors, {sum(len(r.get('text', '')) for r in res)} chars")


def compare(a, b):
    a, b = json.load(open(a)), json.load(open(b))
    same = sum(x == y and "error" not in x for x, y in zip(a, b))
    print(f"step overlap: {same} of {len(a)} replies equal to serial steps' (text, finish, logprobs)")
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            print(f"  reply {i} differs:\n    serial  {x}\n    overlap {y}")
    sys.exit(0 if same == len(a) else 1)


if __name__ == "__main__":
    {"run": run, "compare": compare}[sys.argv[1]](*sys.argv[2:])
