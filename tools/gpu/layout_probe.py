#!/usr/bin/env python3
"""Read bandwidth of a weight read in row strips against the same bytes stored tile by tile.

A decode linear streams its weight once: a block owns BM rows and walks K in stages of BK
bytes. Row-major storage makes each stage BM pieces of BK bytes at a K-byte stride (what the
FP8 linears read); tile order stores each (row group, stage) tile contiguously (what the FP4
experts' tiled layout does). Same kernel, same bytes, same instruction count: only the
addresses differ. Eight copies of each weight rotate so L2 holds none of them.

Run on the GPU machine: python3 tools/gpu/layout_probe.py  (prints a table; PERF.md keeps it)
"""
import os

import torch
import triton
import triton.language as tl


ONCE = os.environ.get("PROBE_ONCE") == "1"  # one launch per copy (for ncu), no timing


@triton.jit
def read_tiles(w, out, K4, nks, per_split, groups, BM: tl.constexpr, BK4: tl.constexpr, U: tl.constexpr,
               TILED: tl.constexpr):
    sp = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BK4)
    acc = tl.zeros([BM, BK4], dtype=tl.int32)
    # Program p takes row groups p, p + P, ... (P programs along axis 0).
    for g in range(tl.program_id(0), groups, tl.num_programs(0)):
        rb = g.to(tl.int64)
        for i in range(0, per_split, U):
            # Unrolled: the U loads do not depend on acc, so they are all issued before the adds.
            for u in tl.static_range(U):
                ks = sp * per_split + i + u
                if TILED:
                    off = (rb * nks + ks) * (BM * BK4) + rows[:, None] * BK4 + cols[None, :]
                else:
                    off = (rb * BM + rows[:, None]) * K4 + ks * BK4 + cols[None, :]
                acc += tl.load(w + off)
    tl.store(out + tl.program_id(0) * tl.num_programs(1) + sp, tl.sum(acc))


def bench(ws, out, n_rows, k_bytes, bm, bk, tiled, splits, warps, u, progs=None):
    k4, bk4 = k_bytes // 4, bk // 4
    nks = k4 // bk4
    per = nks // splits
    groups = n_rows // bm
    grid = (min(groups, progs or groups), splits)
    args = dict(BM=bm, BK4=bk4, U=u, TILED=tiled, num_warps=warps)
    for w in ws:  # compile and warm
        read_tiles[grid](w, out, k4, nks, per, groups, **args)
    torch.cuda.synchronize()
    if ONCE:
        return float("nan")
    best = float("inf")
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(4):
            for w in ws:
                read_tiles[grid](w, out, k4, nks, per, groups, **args)
        e1.record()
        torch.cuda.synchronize()
        best = min(best, e0.elapsed_time(e1) / 1e3 / (4 * len(ws)))
    return best


def row(name, n, k, tile, splits, warps, u, t_s, t_t):
    by = n * k
    print(f"| {name} | {n} × {k} | {tile} | {splits} | {warps} | {u} | {by / t_s / 1e9:.0f} "
          f"({t_s * 1e6:.1f} µs) | {by / t_t / 1e9:.0f} ({t_t * 1e6:.1f} µs) | {t_s / t_t:.2f} |")


def main():
    dev = torch.cuda.get_device_name()
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    copy = float("inf")
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); b.copy_(a); e1.record(); torch.cuda.synchronize()
        copy = min(copy, e0.elapsed_time(e1) / 1e3)
    copy_bw = 2 * a.numel() / copy
    del a, b
    print(f"# {dev}: copy {copy_bw / 1e9:.0f} GB/s (read + write)")
    out = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    shapes = [("wq_b", 32768, 1024), ("wo_b", 4096, 8192), ("wo_a", 8192, 4096)]
    print("| weight | rows × K bytes | tile BM × BK | splits | warps | U | strips GB/s | tiles GB/s | tiles / strips |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, k in shapes:
        ws = [torch.randint(0, 255, (n * k // 4,), dtype=torch.int32, device="cuda") for _ in range(8)]
        for bm, bk, warps, u in [(64, 128, 4, 4), (64, 128, 4, 8), (64, 256, 4, 4), (128, 128, 8, 4),
                                 (16, 512, 4, 4), (64, 512, 8, 4)]:
            nks = k // bk
            groups = n // bm
            # Enough programs for ~8 per SM, whole stages per split, at least U stages each.
            splits = 1
            while groups * splits < 132 * 8 and nks % (2 * splits) == 0 and nks // (2 * splits) >= u:
                splits *= 2
            if nks // splits < u or (nks // splits) % u:
                continue
            t_s = bench(ws, out, n, k, bm, bk, False, splits, warps, u)
            t_t = bench(ws, out, n, k, bm, bk, True, splits, warps, u)
            row(name, n, k, f"{bm} × {bk}", splits, warps, u, t_s, t_t)
        # linear_wg's shape: 64 × 128 stages, 2 or 4 programs per SM looping over row groups, 1 split
        # (wq_b) or as many as fill them.
        for progs, u in [(264, 4), (264, 8), (528, 4), (1056, 4)]:
            nks = k // 128
            splits = 1
            while (n // 64) * splits < progs and nks % (2 * splits) == 0 and nks // (2 * splits) >= u:
                splits *= 2
            p = max(1, progs // splits)
            t_s = bench(ws, out, n, k, 64, 128, False, splits, 4, u, p)
            t_t = bench(ws, out, n, k, 64, 128, True, splits, 4, u, p)
            row(name, n, k, f"64 × 128, {p} × {splits} programs", splits, 4, u, t_s, t_t)
        del ws
    print(f"# read bandwidth targets: copy {copy_bw / 1e9:.0f} GB/s")


if __name__ == "__main__":
    main()
