#!/usr/bin/env python3
"""The engine's mean step phase times between two /metrics snapshots.

Usage: phases.py BEFORE.txt AFTER.txt LABEL
Reads `inferd_step_phase_seconds_sum{phase=...}` and `_count` and prints, per phase, the
mean milliseconds over the steps taken between the two snapshots, the mean tokens a
step (`inferd_step_tokens_sum`), how the decode passes between them ran (eager, captured
into a graph, replayed: `inferd_backend_events{event=...}`), and, where steps computed
grammar masks, their mean wall time a step (`inferd_grammar_masks_seconds`).
"""
import re
import sys


def read(path):
    out = {}
    try:
        text = open(path).read()
    except OSError:
        return out
    for m in re.finditer(r'inferd_step_phase_seconds_(sum|count)\{phase="(\w+)"\}\s+([0-9.eE+-]+)', text):
        out[(m.group(2), m.group(1))] = float(m.group(3))
    for m in re.finditer(r'inferd_backend_events\{event="(\w+)"\}\s+([0-9.eE+-]+)', text):
        out[(m.group(1), "events")] = float(m.group(2))
    m = re.search(r"^inferd_step_tokens_sum\s+([0-9.eE+-]+)", text, re.M)
    if m:
        out[("tokens", "sum")] = float(m.group(1))
    for m in re.finditer(r"^inferd_grammar_masks_seconds_(sum|count)\s+([0-9.eE+-]+)", text, re.M):
        out[("masks", m.group(1))] = float(m.group(2))
    return out


def main() -> None:
    a, b, label = read(sys.argv[1]), read(sys.argv[2]), sys.argv[3]
    parts = []
    steps = 0
    for phase in ("schedule", "forward", "sample", "land", "finish"):
        n = b.get((phase, "count"), 0) - a.get((phase, "count"), 0)
        s = b.get((phase, "sum"), 0) - a.get((phase, "sum"), 0)
        steps = max(steps, n)
        parts.append(f"{phase} {1e3 * s / n:.3f} ms" if n else f"{phase} -")
    tok = b.get(("tokens", "sum"), 0) - a.get(("tokens", "sum"), 0)
    per = f", {tok / steps:.0f} tokens a step" if steps else ""
    events = [
        f"{e} {b.get((e, 'events'), 0) - a.get((e, 'events'), 0):.0f}"
        for e in ("decode_eager", "graph_captured", "graph_replayed")
        if (e, "events") in b
    ]
    ev = f"; decode passes: {', '.join(events)}" if events else ""
    n = b.get(("masks", "count"), 0) - a.get(("masks", "count"), 0)
    s = b.get(("masks", "sum"), 0) - a.get(("masks", "sum"), 0)
    masks = f"; masks {1e3 * s / n:.3f} ms a step over {n:.0f} steps" if n else ""
    print(f"{label}: {steps:.0f} steps{per}, mean " + ", ".join(parts) + ev + masks)


if __name__ == "__main__":
    main()
