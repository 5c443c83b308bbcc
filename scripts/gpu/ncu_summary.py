#!/usr/bin/env python3
"""Sums an `ncu --csv --page raw --metrics gpu__time_duration.sum` capture by kernel.

Usage: ncu_summary.py CAPTURE.csv [TOP]
Prints the kernels' total device time, their count, and the TOP kernel names by time (a
name shortened to its function, template arguments cut) with count, total and mean µs.
"""
import csv
import re
import sys
from collections import defaultdict

SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def short(name: str) -> str:
    name = re.sub(r"\(.*$", "", name)  # arguments
    depth, out = 0, []
    for ch in name:  # template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out)
    return name.split("::")[-1].strip() or name


def main() -> None:
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    rows = list(csv.reader(lines))
    if len(rows) < 2:
        print(f"{path}: no kernels captured")
        return
    head = rows[0]
    name_i, time_i = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    data = rows[1:]
    scale = 1.0
    if data and data[0][time_i] in SCALE:  # the units row
        scale = SCALE[data[0][time_i]]
        data = data[1:]
    by = defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in data:
        t = float(r[time_i].replace(",", "")) * scale
        k = by[short(r[name_i])]
        k[0] += 1
        k[1] += t
        total += t
    print(f"{path}: {len(data)} kernels, {total / 1e3:.3f} ms of device time")
    print("| kernel | count | total µs | mean µs | share |")
    print("|---|---|---|---|---|")
    for name, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {name[:60]} | {n} | {t:.0f} | {t / n:.1f} | {100 * t / total:.1f}% |")


if __name__ == "__main__":
    main()
