#!/usr/bin/env python3
"""Searches bit layouts of 8 FP4 (E2M1) codes in a 32-bit word for a cheaper decode to 4 pairs
of 16-bit floats (docs/PERF.md, ninth session). Each output word holds two codes: the sign at
bit 15 / 31 and the exponent's two low bits with the mantissa's top bit (EEM) just below the
exponent's top (bf16: bits 8..6 / 24..22, value · 2^-126; f16: bits 11..9 / 27..25, value ·
2^-14; E2M1's subnormal becomes the float's subnormal, so both are exact). An output word is
either `(W << s) & mask` (one integer-pipe op, the shift on the FMA pipe) or
`((W & m) * K) & mask` with K = 2^a + 2^b (two integer-pipe ops), whose shifted copies of m
must not overlap (no carries). The 4 output words' source bits must tile the 32 bits of W.
Prints the layouts with 3 shift words + 1 multiply word, or 2 + 2, if any exist.

    python3 tools/fp4_layout_search.py bf16
    python3 tools/fp4_layout_search.py f16
"""

import itertools
import sys

TARGETS = {"bf16": [6, 7, 8, 15, 22, 23, 24, 31], "f16": [9, 10, 11, 15, 25, 26, 27, 31]}


def shift_words(q):
    """Source bit sets of the `(W << s) & mask` words (s >= 0)."""
    return [(("shl", s), frozenset(t - s for t in q)) for s in range(32) if min(q) - s >= 0]


def multiply_words(q, terms=2):
    """Source bit sets of the `((W & m) * K) & mask` words, K a sum of `terms` powers of two."""
    out = {}
    for ks in itertools.combinations(range(26), terms):
        for assign in itertools.product(range(terms), repeat=len(q)):
            src = [t - ks[a] for t, a in zip(q, assign)]
            if min(src) < 0 or len(set(src)) < len(q):
                continue
            m = frozenset(src)
            copies = [{x + k for x in m} for k in ks]
            if any(a & b for a, b in itertools.combinations(copies, 2)):
                continue
            out.setdefault(m, ("mul", ks, assign))
    return out


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "f16"
    q = TARGETS[kind]
    shifts, muls = shift_words(q), multiply_words(q)
    every = frozenset(range(32))
    found = 0
    for n in (3, 2):
        for ws in itertools.combinations(shifts, n):
            used = set()
            for _, s in ws:
                used |= s
            if sum(len(s) for _, s in ws) != len(used):
                continue
            rest = every - used
            if n == 3 and rest in muls:
                print(kind, "3 shift words + 1 multiply word:", [w[0] for w in ws], muls[rest])
                found += 1
            if n == 2:
                for m, op in muls.items():
                    if m <= rest and (rest - m) in muls:
                        print(kind, "2 shift words + 2 multiply words:", [w[0] for w in ws], op, muls[rest - m])
                        found += 1
                        break
        if found:
            break
    if not found:
        print(kind, "no layout of 3 + 1 or 2 + 2 such words: the pairs keep their byte permutes")


if __name__ == "__main__":
    main()
