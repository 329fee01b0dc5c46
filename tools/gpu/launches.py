#!/usr/bin/env python3
"""Per-launch device times of one decode step from an ncu report exported as CSV
(`ncu --import r.ncu-rep --csv --page raw`, metrics gpu__time_duration.sum and, where collected,
dram__bytes_read.sum), as `run.sh launches` makes it: the launches in order (kernel, grid, block,
µs, DRAM MB read and GB/s) of the first `--step` launches after `--skip`, then the kernels by
total time. With `--floors PROFILE_JSON` (an `amdahl profile --json` of the same GPU) each launch
also gets its one-shot floor: the time of a pure read of the bytes it read from DRAM, interpolated
in the profile's `read_floors` as `profiling::oneshot_seconds` does, and its time over that floor.

ncu serializes kernels and (by default) flushes caches between replays, so these are cold,
isolated times: the graph's step overlaps launch gaps and side-stream branches that they do not
show. Used to rank kernels, not to add up to the step.
"""

import argparse
import collections
import csv
import sys


# The columns read: ncu's raw page also lists .avg/.min/.max of a metric, each in its own unit.
TIME, DRAM = "gpu__time_duration.sum", "dram__bytes_read.sum"


SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


SCALE_B = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def rows(path):
    """The launch rows and the units of the duration and DRAM bytes columns (the row after the
    header)."""
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    out, unit, byte_unit = [], "nsecond", "byte"
    for r in csv.DictReader(lines):
        if not r.get("ID", "").strip().isdigit():
            for key, v in r.items():
                if key == TIME and v:
                    unit = v.strip()
                if key == DRAM and v:
                    byte_unit = v.strip()
            continue
        out.append(r)
    return out, unit, byte_unit


def dram_mb(r, byte_unit):
    """DRAM bytes read (MB), or None where the report lacks the metric."""
    v = r.get(DRAM)
    return float(v.replace(",", "")) * SCALE_B[byte_unit] / 1e6 if v else None


def floor_us(floors, mb):
    """One launch's one-shot floor (µs) at `mb` MB read: linear between the measured sizes,
    past the largest along the last segment (the engine's `oneshot_seconds` for one launch)."""
    pts = sorted((f["bytes"] / 1e6, f["seconds"] * 1e6) for f in floors)
    if len(pts) < 2:
        return None
    i = next((k for k in range(len(pts) - 1) if mb <= pts[k + 1][0]), len(pts) - 2)
    (b0, t0), (b1, t1) = pts[i], pts[i + 1]
    return max(0.0, t0 + (t1 - t0) / max(b1 - b0, 1e-9) * (mb - b0))


def duration_us(r, unit):
    v = r.get(TIME)
    if v is None:
        raise KeyError(f"{TIME} not in the report")
    return float(v.replace(",", "")) * SCALE_US[unit]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=0, help="launches to leave out first")
    ap.add_argument("--step", type=int, default=0, help="launches to list (0: all)")
    ap.add_argument("--floors", help="amdahl profile --json output with read_floors (same GPU)")
    a = ap.parse_args()
    floors = []
    if a.floors:
        import json

        with open(a.floors) as f:
            floors = json.load(f).get("read_floors", [])
    rs, unit, byte_unit = rows(a.csv)
    rs = rs[a.skip:]
    if a.step:
        rs = rs[: a.step]
    if not rs:
        sys.exit(f"{a.csv}: no launches")
    total = collections.Counter()
    count = collections.Counter()
    mb_total = collections.Counter()
    floor_total = collections.Counter()
    for i, r in enumerate(rs):
        name = r.get("Kernel Name", "?")
        us = duration_us(r, unit)
        total[name] += us
        count[name] += 1
        extra = ""
        mb = dram_mb(r, byte_unit)
        if mb is not None:
            mb_total[name] += mb
            extra = f"  {mb:8.2f} MB {mb / us * 1e3:7.0f} GB/s"
            fl = floor_us(floors, mb) if floors else None
            if fl:
                floor_total[name] += fl
                extra += f"  floor {fl:6.2f} us ({us / fl:4.1f}x)"
        print(f"{i:4d} {us:8.2f} us  {name:40s} grid {r.get('Grid Size', '?'):>16s} block {r.get('Block Size', '?')}{extra}")
    s = sum(total.values())
    print(f"--- {len(rs)} launches, {s:.1f} us in all (serialized, cold caches)", end="")
    if floor_total:
        print(f"; their one-shot floors {sum(floor_total.values()):.1f} us", end="")
    print()
    for name, us in total.most_common():
        line = f"{us:9.1f} us {100 * us / s:5.1f}%  {count[name]:3d}x  {name}"
        if name in mb_total:
            line += f"  {mb_total[name]:9.2f} MB"
        if name in floor_total:
            line += f"  floors {floor_total[name]:7.1f} us"
        print(line)


if __name__ == "__main__":
    main()
