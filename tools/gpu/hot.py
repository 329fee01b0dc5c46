#!/usr/bin/env python3
"""The hottest SASS instructions of one kernel from an ncu report's source page
(`ncu --import r.ncu-rep --page source --csv --print-source sass > src.csv`): the `--top` lines with
the most warp-stall samples, with their address, opcode text and the sample columns, so a
profile says which load or barrier a kernel waits on without the GUI.
"""

import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    # ncu heads the table with a line naming the kernel ("Kernel Name","hc_pre"): the table's
    # own header is the first line naming the stall samples.
    head = next((i for i, ln in enumerate(lines) if "Warp Stall Sampling" in ln), 0)
    rows = list(csv.DictReader(lines[head:]))
    if not rows:
        sys.exit(f"no source rows in {a.csv}")
    cols = [c for c in rows[0].keys() if c]
    samp = next((c for c in cols if "Warp Stall Sampling (All" in c), None)
    if samp is None:
        sys.exit(f"no warp-stall sampling column among {cols}")

    def num(v):
        try:
            return float((v or "0").replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r[samp]) for r in rows) or 1.0
    src = next((c for c in cols if c.strip() in ("Source", "# Source")), cols[1])
    addr = next((c for c in cols if "Address" in c), cols[0])
    print(f"{len(rows)} instructions, {total:.0f} stall samples")
    for r in sorted(rows, key=lambda r: -num(r[samp]))[: a.top]:
        print(f"{num(r[samp]) / total:6.1%}  {r[addr]:>8}  {r[src].strip()[:90]}")


if __name__ == "__main__":
    main()
