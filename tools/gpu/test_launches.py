#!/usr/bin/env python3
"""Checks tools/gpu/launches.py on a small report shaped like ncu's raw CSV page, where each
metric comes with .avg/.max/.min columns in units of their own (the thirteenth session's bug:
the .avg column was read in the .sum column's unit, 1000× off). Standard library only:

    python3 tools/gpu/test_launches.py
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


def main():
    with tempfile.TemporaryDirectory() as tmp:
        report, floors = os.path.join(tmp, "r.csv"), os.path.join(tmp, "p.json")
        with open(report, "w") as f:
            f.write("==PROF== a line ncu prints that is not CSV\n")
            for row in [HEADER, UNITS] + LAUNCHES:
                f.write(",".join(f'"{v}"' for v in row) + "\n")
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
    bad = [what for ok, what in checks if not ok]
    if bad:
        sys.exit("launches.py: wrong " + "; ".join(bad) + "\n" + out)
    print(f"launches.py: {len(checks)} checks passed")


if __name__ == "__main__":
    main()
