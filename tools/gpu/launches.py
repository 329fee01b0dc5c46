#!/usr/bin/env python3
"""Per-launch device times of one decode step from an ncu report exported as CSV
(`ncu --import r.ncu-rep --csv --page raw --metrics gpu__time_duration.sum`), as `run.sh
launches` makes it: the launches in order (kernel, grid, block, µs) of the first `--step`
launches after `--skip`, then the kernels by total time.

ncu serializes kernels and (by default) flushes caches between replays, so these are cold,
isolated times: the graph's step overlaps launch gaps and side-stream branches that they do not
show. Used to rank kernels, not to add up to the step.
"""

import argparse
import collections
import csv
import sys


SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def rows(path):
    """The launch rows and the duration column's unit (the row after the header)."""
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    out, unit = [], "nsecond"
    for r in csv.DictReader(lines):
        if not r.get("ID", "").strip().isdigit():
            for key, v in r.items():
                if key and key.startswith("gpu__time_duration") and v:
                    unit = v.strip()
            continue
        out.append(r)
    return out, unit


def duration_us(r, unit):
    for key, v in r.items():
        if key and key.startswith("gpu__time_duration"):
            return float(v.replace(",", "")) * SCALE_US[unit]
    raise KeyError("gpu__time_duration.sum not in the report")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=0, help="launches to leave out first")
    ap.add_argument("--step", type=int, default=0, help="launches to list (0: all)")
    a = ap.parse_args()
    rs, unit = rows(a.csv)
    rs = rs[a.skip:]
    if a.step:
        rs = rs[: a.step]
    if not rs:
        sys.exit(f"{a.csv}: no launches")
    total = collections.Counter()
    count = collections.Counter()
    for i, r in enumerate(rs):
        name = r.get("Kernel Name", "?")
        us = duration_us(r, unit)
        total[name] += us
        count[name] += 1
        print(f"{i:4d} {us:8.2f} us  {name:40s} grid {r.get('Grid Size', '?'):>16s} block {r.get('Block Size', '?')}")
    s = sum(total.values())
    print(f"--- {len(rs)} launches, {s:.1f} us in all (serialized, cold caches)")
    for name, us in total.most_common():
        print(f"{us:9.1f} us {100 * us / s:5.1f}%  {count[name]:3d}x  {name}")


if __name__ == "__main__":
    main()
