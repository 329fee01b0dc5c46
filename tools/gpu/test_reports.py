#!/usr/bin/env python3
"""Checks the GPU-run report scripts on small reports shaped like ncu's CSV pages: launches.py on
the raw page, where each metric comes with .avg/.max/.min columns in units of their own (the
thirteenth session's bug: the .avg column was read in the .sum column's unit, 1000× off), and
hot.py on the source page, whose table follows a line naming the kernel (the same session's
"no warp-stall sampling column among ['Kernel Name', 'hc_pre']"). Standard library only:

    python3 tools/gpu/test_reports.py
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

HEADER = ["ID", "Kernel Name", "Grid Size", "Block Size",
          "dram__bytes_read.avg", "dram__bytes_read.sum",
          "gpu__time_duration.avg", "gpu__time_duration.sum"]
UNITS = ["", "", "", "", "Mbyte", "Gbyte", "nsecond", "usecond"]
# Launch 0 reads 33.6 MB in 18 µs, launch 1 1.5 MB in 4 µs (.avg is per DRAM unit, not the launch).
LAUNCHES = [["0", "wq_b", "(264, 1, 1)", "(256, 1, 1)", "4.20", "0.0336", "9000", "18.0"],
            ["1", "hc_post", "(128, 1, 1)", "(256, 1, 1)", "0.19", "0.0015", "2000", "4.0"]]
FLOORS = {"read_floors": [{"bytes": 0, "seconds": 2e-6}, {"bytes": 33_600_000, "seconds": 12e-6}]}


def write_csv(path, rows, preamble):
    with open(path, "w") as f:
        f.write(preamble)
        for row in rows:
            f.write(",".join(f'"{v}"' for v in row) + "\n")


def check(name, checks, out):
    bad = [what for ok, what in checks if not ok]
    if bad:
        sys.exit(f"{name}: wrong " + "; ".join(bad) + "\n" + out)
    print(f"{name}: {len(checks)} checks passed")


def hot():
    rows = [["Kernel Name", "hc_pre"],
            ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)"],
            ["0x10", "LDG.E R2, [R4]", "30", "28"],
            ["0x20", "FADD R3, R2, R2", "10", "9"],
            ["0x30", "BAR.SYNC 0x0", "60", "60"]]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src.csv")
        write_csv(src, rows, "==PROF== Connected to process\n")
        out = subprocess.run([sys.executable, os.path.join(HERE, "hot.py"), src, "--top", "2"],
                             check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    check("hot.py", [
        (lines[0] == "3 instructions, 100 stall samples", "the count and the samples"),
        (len(lines) == 3, "the --top lines"),
        ("60.0%" in lines[1] and "0x30" in lines[1] and "BAR.SYNC" in lines[1], "the hottest first"),
        ("30.0%" in lines[2] and "LDG.E" in lines[2], "the second"),
    ], out)


def launches():
    with tempfile.TemporaryDirectory() as tmp:
        report, floors = os.path.join(tmp, "r.csv"), os.path.join(tmp, "p.json")
        write_csv(report, [HEADER, UNITS] + LAUNCHES, "==PROF== a line ncu prints that is not CSV\n")
        with open(floors, "w") as f:
            json.dump(FLOORS, f)
        out = subprocess.run([sys.executable, os.path.join(HERE, "launches.py"), report, "--floors", floors],
                             check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    first = next(ln for ln in lines if "wq_b" in ln and "grid" in ln)
    second = next(ln for ln in lines if "hc_post" in ln and "grid" in ln)
    summary = next(ln for ln in lines if ln.startswith("---"))
    checks = [
        ("18.00 us" in first, "launch 0's time from the .sum column in µs"),
        ("33.60 MB" in first, "launch 0's bytes from the .sum column in Gbyte"),
        ("1867 GB/s" in first, "launch 0's rate"),
        ("floor  12.00 us" in first and "1.5x" in first, "launch 0 at its floor's end point"),
        ("1.50 MB" in second and "floor   2.45 us" in second, "launch 1 interpolated between the floors"),
        ("22.0 us in all" in summary and "one-shot floors 14.4 us" in summary, "the totals"),
    ]
    check("launches.py", checks, out)


def main():
    launches()
    hot()


if __name__ == "__main__":
    main()
