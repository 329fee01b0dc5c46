// Streamed decode linears (sm_90+): weights through per-warp shared-memory rings.
//
// The decode GEMVs of linear.cu keep their loads in registers, so an SM has ~48 KB in flight and a
// block waits a full DRAM latency per round (ncu, wq_b at batch 1: 52% of stalls on L1TEX
// loads, DRAM 32% busy). Here every warp streams its own work through a ring of STAGES shared-
// memory stages filled by bulk async copies (cp.async.bulk, completion on an mbarrier per
// stage), issuing stage q + STAGES − 1 before it consumes stage q: ~100 KB per SM in flight, no
// block-wide synchronisation. A stage is 4 superchunks of one 16-row tile (4 KB of codes per
// matrix: 16 row segments of 256 B row-major, or 4 contiguous 16×128 blocks of the tiled FP4
// layout plus their scale bytes).
//
// Work items are (matrix or active expert, 16-row tile, K split); a warp takes a contiguous run
// of them (balanced to ±1 item) and streams across item boundaries. With K split (`splits` > 1,
// one token group only), each item leaves its 16×8·NT partial in the split workspace and the
// last of a tile's items to arrive (counted in `cnt`, which it resets) sums them in split order
// and applies the epilogue: deterministic. The split count is chosen on the device from the
// number of items (MoE: the active experts), so one captured graph serves every routing.

#define STREAM_WARPS 8
#define STREAM_SC 4

template <int FMT>
struct Stream {
    static constexpr int V = Vec<FMT>::V;
    static constexpr int COLS = STREAM_SC * 32 * V;                 // columns per stage
    // Row-major rows sit 320 B apart so the two rows of a quarter-warp's 16-byte loads fall in
    // different banks (256 would put rows g and g + 1 on the same ones).
    static constexpr int ROW = IS_TILED(FMT) ? 256 : 320;
    static constexpr int CODES = 16 * ROW;                          // code bytes per matrix
    static constexpr int SCALES = FMT == FMT_NVFP4T ? STREAM_SC * 128 : FMT == FMT_MXFP4T ? STREAM_SC * 64 : 0;
    static constexpr int BYTES = CODES + SCALES;                    // per matrix per stage
    static constexpr int XFER = 4096 + SCALES;                      // bytes copied per matrix
    static constexpr int SB = FMT == FMT_NVFP4T ? 2 : 1;            // tiled scale bytes per slot
};

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

#if __CUDA_ARCH__ >= 900
// FP8 in the streamed kernels: the e4m3 codes become exact f16 values by the hardware converts
// (one per pair, against ~6 integer ops for the bf16 placement) and meet the activations in f16
// (exact from bf16 but for magnitudes beyond f16's range, saturated, or below 2^-14, rounded),
// the block scale applied to the f32 accumulators per 128 columns.
__device__ __forceinline__ void e4m3x4_to_h2(u32 w, u32* lo, u32* hi) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(*lo), "=r"(*hi)
        : "r"(w));
}
__device__ __forceinline__ u32 bf2_to_h2(u32 b) {
    u32 d;
    asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(bf_hi(b)), "f"(bf_lo(b)));
    return d;
}
#endif

// What the streamed kernels' accumulators leave out: FP8 there is exact values (the per-tensor
// scale remains), the rest, and FP8 decoded to bf16 (RAW8), as in the register kernels.
template <int FMT, int RAW8 = 0>
__device__ __forceinline__ float stream_post(const WDesc& d, int e) {
    if (IS_FP8(FMT) && !RAW8) return FMT == FMT_FP8T ? d.g[e] : 1.f;
    return post_scale<FMT>(d, e);
}

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(u32 bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}
// `bytes` (% 16 == 0) from global `src` to shared `dst` (both 16-byte aligned), completing on
// `bar`; the weights are read once, so L2 may evict them first.
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar, u64 policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
}
#endif

// K splits of `tiles` tiles whose K is `spk` stages, over `nw` warps: the divisor of spk (≤ 32,
// items within the workspace) least in modelled time, a warp's most items × (its stages + half
// a stage for the item's epilogue); 1 when splitting is not allowed. Lane d − 1 of the warp
// prices split d (32-bit: this runs at every launch, before any weight arrives).
__device__ __forceinline__ int stream_splits(int tiles, int spk, int nw, int cap, bool allowed) {
    const int lane = threadIdx.x & 31, d = lane + 1;
    int key = 0x7fffffff;
    const bool ok = d == 1 || (allowed && tiles <= SPLIT_TILES && d <= spk && spk % d == 0 && tiles * d <= cap);
    if (ok) key = ((tiles * d + nw - 1) / nw) * (2 * (spk / d) + 1) * 32 + lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) key = min(key, __shfl_xor_sync(0xffffffffu, key, o));
    return (key & 31) + 1;
}

// Where one item's stages come from and whom its results are for.
struct SItem {
    int e;      // matrix (expert) index into the weights
    int tile;   // partial-sum slot of the tile (item / splits)
    int n0;     // first row
    int k0;     // first column
    int start;  // first token entry
    int count;  // token entries
};

// The streamed core. `item(i)` describes item i of `total`; `xrow(entry)` is the bf16 input row
// of a token entry (of matrix e); `store(e, entry, n, v0, v1)` takes one finished output (v1: the second
// matrix, DUAL) before post-scaling. Passes of 8·NT entries re-stream an item's weights (an
// expert with more tokens than that; never with splits > 1). EARLY (the dense linears, whose
// items and row pointers are arithmetic): in level-2 builds the kernel entered without waiting
// (`pdl_enter_after_weights`), and each warp issues its first ring stages of weights, which no
// earlier kernel writes, before `pdl_enter()`, so their latency overlaps the previous kernel.
// RAW8 (FP8 formats): decode the codes to bf16 by integer ops and bf16 MMAs on the activations
// as stored, as the register kernels do, instead of the hardware converts to f16: no conversion
// of the activations per tile (which at two token groups doubles the converts per weight byte).
template <int FMT, int NT, int DUAL, int EARLY, int RAW8, class Item, class XRow, class Store>
__device__ __forceinline__ void stream_core(const WDesc& d0, const WDesc& d1, int N, int K,
                                            int total, int splits, int stages, float* ws,
                                            unsigned* cnt, Item item, XRow xrow, Store store) {
#if __CUDA_ARCH__ >= 900
    using G = Stream<FMT>;
    constexpr int V = G::V, SC = 32 * V, M = 1 + DUAL;
    constexpr int BPE = (FMT == FMT_BF16 || FMT == FMT_F16) ? 2 : 1;
    extern __shared__ __align__(128) u8 sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int stage_bytes = M * G::BYTES;
    u8* ring = sm + (i64)warp * stages * stage_bytes;
    const u32 bars = smem_addr(sm + (i64)STREAM_WARPS * stages * stage_bytes) + warp * stages * 8;
    u32 smem_size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_size));
    if ((i64)STREAM_WARPS * stages * (stage_bytes + 8) > smem_size) __trap();  // launcher's sizing
    if (lane == 0) {
        for (int s = 0; s < stages; s++) mbar_init(bars + 8 * s);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    u64 policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));

    const int nw = gridDim.x * STREAM_WARPS, gw = blockIdx.x * STREAM_WARPS + warp;
    const int q_items = total / nw, r_items = total % nw;  // warps below r_items take one more
    const int i0 = gw * q_items + min(gw, r_items), i1 = i0 + q_items + (gw < r_items);
    const int spi = K / splits / G::COLS;  // stages per item pass
    const int per_pass = 8 * NT;

    // Producer cursor: item, pass, stage within the pass.
    int p_it = i0, p_pass = 0, p_sub = 0, p_passes = 0;
    SItem p_info;
    if (p_it < i1) {
        p_info = item(p_it);
        p_passes = max(1, (p_info.count + per_pass - 1) / per_pass);
    }
    auto issue = [&](int q) {
        const int slot = q % stages;
        const u32 dst = smem_addr(ring + slot * stage_bytes), bar = bars + 8 * slot;
        const int k = p_info.k0 + p_sub * G::COLS;
        if (lane == 0) mbar_expect(bar, M * G::XFER);
        __syncwarp();
        if (IS_TILED(FMT)) {
            // Lanes 2m, 2m + 1: codes and scales of matrix m (fields picked, not the struct,
            // which would go to the stack).
            if (lane < 2 * M) {
                const bool m1 = lane >> 1;
                const i64 blk = (i64)(p_info.n0 >> 4) * (K >> 7) + (k >> 7);
                const u32 at = dst + (lane >> 1) * G::BYTES;
                if (lane & 1) {
                    const u8* sp = (m1 ? d1.s : d0.s) + p_info.e * (m1 ? d1.s_stride : d0.s_stride);
                    bulk_load(at + G::CODES, sp + blk * 64 * G::SB, G::SCALES, bar, policy);
                } else {
                    const u8* wp = (m1 ? d1.w : d0.w) + p_info.e * (m1 ? d1.w_stride : d0.w_stride);
                    bulk_load(at, wp + blk * 1024, G::CODES, bar, policy);
                }
            }
        } else if (lane < 16 * M) {  // lane 16m + i: row n0 + i of matrix m
            const bool m1 = lane >= 16;
            const int r = min(p_info.n0 + (lane & 15), N - 1);
            const u8* wp = (m1 ? d1.w : d0.w) + p_info.e * (m1 ? d1.w_stride : d0.w_stride);
            bulk_load(dst + (lane >> 4) * G::BYTES + (lane & 15) * G::ROW, wp + ((i64)r * K + k) * BPE, 256, bar, policy);
        }
        if (++p_sub == spi) {
            p_sub = 0;
            if (++p_pass == p_passes) {
                p_pass = 0;
                if (++p_it < i1) {
                    p_info = item(p_it);
                    p_passes = max(1, (p_info.count + per_pass - 1) / per_pass);
                }
            }
        }
    };

    int nst = 0;  // this warp's stages in all
    for (int i = i0; i < i1; i++) {
        const SItem f = item(i);
        nst += max(1, (f.count + per_pass - 1) / per_pass) * spi;
    }
    int issued = 0;
#ifdef PDL_PREFETCH
    if (EARLY) {
        while (issued < min(nst, stages)) issue(issued++);
        pdl_enter();
    }
#endif
    int c_it = i0, c_pass = 0, c_sub = 0;
    SItem c = i0 < i1 ? item(i0) : SItem{};
    int c_passes = max(1, (c.count + per_pass - 1) / per_pass);
    float acc0[NT][4], acc1[NT][4], blk0[NT][4], blk1[NT][4];
    const u16* xr[NT];
    for (int q = 0; q < nst; q++) {
        if (c_sub == 0) {
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int r = 0; r < 4; r++) acc0[j][r] = acc1[j][r] = 0.f;
                const int m = c_pass * per_pass + j * 8 + g;
                xr[j] = m < c.count ? xrow(c.e, c.start + m) : nullptr;
            }
        }
        // Stages up to q + stages − 1 in flight (the first pass fills the ring); one call
        // site, so the issue stays inline.
        while (issued < min(nst, q + stages)) issue(issued++);
        const int kq = c.k0 + c_sub * G::COLS;
        const int r0 = min(c.n0 + g, N - 1), r1 = min(c.n0 + g + 8, N - 1);
        // Activations of superchunk s (columns kq + kc + [0, 8V)) for every token group. The
        // first XPRE superchunks' are loaded before the wait (the asm barrier keeps loads from
        // moving across it), so their latency overlaps the stage's arrival.
        constexpr int XPRE = V * NT * M <= 2 ? STREAM_SC : 1;
        uint4 xpre[XPRE][NT][V];
        auto load_x = [&](int s, uint4 (&out)[NT][V]) {
            const int kc = s * SC + t * 8 * V;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int v = 0; v < V; v++)
                    out[j][v] = xr[j] ? *reinterpret_cast<const uint4*>(xr[j] + kq + kc + 8 * v) : make_uint4(0, 0, 0, 0);
        };
#pragma unroll
        for (int s = 0; s < XPRE; s++) load_x(s, xpre[s]);
        mbar_wait(bars + 8 * (q % stages), (q / stages) & 1);
        const u8* st = ring + (q % stages) * stage_bytes;
#pragma unroll
        for (int s = 0; s < STREAM_SC; s++) {
            const int kc = s * SC + t * 8 * V;  // column within the stage
            uint4 xl[NT][V];
            if (s >= XPRE) load_x(s, xl);
            u32 xv[NT][4 * V];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int v = 0; v < V; v++) {
                    const uint4 a = s < XPRE ? xpre[s < XPRE ? s : 0][j][v] : xl[j][v];
                    xv[j][4 * v] = a.x; xv[j][4 * v + 1] = a.y; xv[j][4 * v + 2] = a.z; xv[j][4 * v + 3] = a.w;
                }
            // Rows g (A) and g + 8 (B) of matrix m at this superchunk, from the stage.
            auto rows = [&](int m, RawW& A, RawW& B) {
                const u8* ms = st + m * G::BYTES;
                const WDesc& d = m ? d1 : d0;
                A.q2 = B.q2 = make_uint4(0, 0, 0, 0);
                A.s = B.s = 0;
                if (IS_TILED(FMT)) {
                    A.q = *reinterpret_cast<const uint4*>(ms + s * 1024 + lane * 16);
                    B.q = *reinterpret_cast<const uint4*>(ms + s * 1024 + 512 + lane * 16);
                    const u8* sp = ms + G::CODES + (s * 64 + lane) * G::SB;
                    A.s = G::SB == 2 ? *reinterpret_cast<const u16*>(sp) : *sp;
                    B.s = G::SB == 2 ? *reinterpret_cast<const u16*>(sp + 32 * G::SB) : sp[32];
                } else {
                    A.q = *reinterpret_cast<const uint4*>(ms + g * G::ROW + kc * BPE);
                    B.q = *reinterpret_cast<const uint4*>(ms + (g + 8) * G::ROW + kc * BPE);
                    if (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32) {
                        const u8* sp = d.s + c.e * d.s_stride;
                        const int kb = (kq + kc) >> 7;
                        const i64 sa = (i64)((r0 + d.row_phase) >> 7) * d.s_ld + kb;
                        const i64 sb = (i64)((r1 + d.row_phase) >> 7) * d.s_ld + kb;
                        A.s = FMT == FMT_FP8B_E8M0 ? sp[sa] : reinterpret_cast<const u32*>(sp)[sa];
                        B.s = FMT == FMT_FP8B_E8M0 ? sp[sb] : reinterpret_cast<const u32*>(sp)[sb];
                    }
                }
            };
            if constexpr (IS_FP8(FMT) && !RAW8) {
                u32 xh[NT][4 * V];
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int i = 0; i < 4 * V; i++) xh[j][i] = bf2_to_h2(xv[j][i]);
                // Matrix m's rows g, g + 8 into `into`: word w of the 16-byte rows holds k step
                // w's four codes (the low pair at k 2t, 2t + 1, the high at 2t + 8, 2t + 9).
                auto fp8_mma = [&](int m, float (*into)[4]) {
                    const u8* ms = st + m * G::BYTES;
                    const uint4 qa = *reinterpret_cast<const uint4*>(ms + g * G::ROW + kc);
                    const uint4 qb = *reinterpret_cast<const uint4*>(ms + (g + 8) * G::ROW + kc);
                    const u32 wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                    for (int w = 0; w < 4; w++) {
                        u32 a[4];
                        e4m3x4_to_h2(wa[w], &a[0], &a[2]);
                        e4m3x4_to_h2(wb[w], &a[1], &a[3]);
#pragma unroll
                        for (int j = 0; j < NT; j++) mma_f16(into[j], a, xh[j][2 * w], xh[j][2 * w + 1]);
                    }
                };
                if (FMT == FMT_FP8T) {
                    fp8_mma(0, acc0);
                    if (DUAL) fp8_mma(1, acc1);
                } else {
                    // Superchunks 2b, 2b + 1 are 128-column scale block b of the stage.
                    if ((s & 1) == 0) {
#pragma unroll
                        for (int j = 0; j < NT; j++)
#pragma unroll
                            for (int r = 0; r < 4; r++) blk0[j][r] = blk1[j][r] = 0.f;
                    }
                    fp8_mma(0, blk0);
                    if (DUAL) fp8_mma(1, blk1);
                    if (s & 1) {
                        const int kb = (kq + s * SC) >> 7;
#pragma unroll
                        for (int m = 0; m < M; m++) {
                            const u8* sp = (m ? d1.s : d0.s) + c.e * (m ? d1.s_stride : d0.s_stride);
                            const int ph = m ? d1.row_phase : d0.row_phase, ld = m ? d1.s_ld : d0.s_ld;
                            const i64 ia = (i64)((r0 + ph) >> 7) * ld + kb;
                            const i64 ib = (i64)((r1 + ph) >> 7) * ld + kb;
                            const float sa = FMT == FMT_FP8B_E8M0 ? e8m0_to_f32(sp[ia]) : reinterpret_cast<const float*>(sp)[ia];
                            const float sb = FMT == FMT_FP8B_E8M0 ? e8m0_to_f32(sp[ib]) : reinterpret_cast<const float*>(sp)[ib];
                            float (*acc)[4] = m ? acc1 : acc0;
                            float (*blk)[4] = m ? blk1 : blk0;
#pragma unroll
                            for (int j = 0; j < NT; j++) {
                                acc[j][0] += sa * blk[j][0];
                                acc[j][1] += sa * blk[j][1];
                                acc[j][2] += sb * blk[j][2];
                                acc[j][3] += sb * blk[j][3];
                            }
                        }
                    }
                }
            } else {
                RawW A, B;
                rows(0, A, B);
                mma_raw<FMT, V, NT>(A, B, xv, acc0);
                if (DUAL) {
                    RawW C, D;
                    rows(1, C, D);
                    mma_raw<FMT, V, NT>(C, D, xv, acc1);
                }
            }
        }
        __syncwarp();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        if (++c_sub < spi) continue;
        // The pass is complete: its outputs, or this split's partial.
        c_sub = 0;
        bool finish = true;
        if (splits > 1) {
            const int part = 128 * NT * M;
            float* mine = ws + ((i64)c.tile * splits + (c.k0 / (K / splits))) * part;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    mine[j * 128 + lane * 4 + r] = acc0[j][r];
                    if (DUAL) mine[128 * NT + j * 128 + lane * 4 + r] = acc1[j][r];
                }
            __threadfence();
            __syncwarp();
            unsigned prior = 0;
            if (lane == 0) prior = atomicAdd(&cnt[c.tile], 1u);
            finish = __shfl_sync(0xffffffffu, prior, 0) == (unsigned)splits - 1;
            if (finish) {
                __threadfence();
                const float* all = ws + (i64)c.tile * splits * part;
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        float v0 = 0.f, v1 = 0.f;
#pragma unroll 8
                        for (int p = 0; p < splits; p++) {
                            v0 += __ldcg(all + (i64)p * part + j * 128 + lane * 4 + r);
                            if (DUAL) v1 += __ldcg(all + (i64)p * part + 128 * NT + j * 128 + lane * 4 + r);
                        }
                        acc0[j][r] = v0;
                        acc1[j][r] = v1;
                    }
                if (lane == 0) cnt[c.tile] = 0;
            }
        }
        if (finish) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int n = c.n0 + g + ((r & 2) ? 8 : 0), m = c_pass * per_pass + j * 8 + 2 * t + (r & 1);
                    if (n < N && m < c.count) store(c.e, c.start + m, n, acc0[j][r], acc1[j][r]);
                }
        }
        if (++c_pass == c_passes) {
            c_pass = 0;
            if (++c_it < i1) {
                c = item(c_it);
                c_passes = max(1, (c.count + per_pass - 1) / per_pass);
            }
        }
    }
#else
    __trap();
#endif
}

// Dense (grouped) linear, streamed: `matrices` stacked matrices (1: plain), as linear_kernel.
template <int FMT, int NT, int RAW8 = 0>
__device__ void stream_linear_kernel(WDesc d, const u16* __restrict__ x, int ldx, void* y, int ldy,
                                     int M, int N, int K, int matrices, int out_bf16, int stages,
                                     float* __restrict__ ws, unsigned* __restrict__ cnt) {
    const int tiles = (N + 15) >> 4, spk = K / Stream<FMT>::COLS;
    const int nw = gridDim.x * STREAM_WARPS;
    const int splits = stream_splits(tiles * matrices, spk, nw, SPLIT_PARTS / (128 * NT), M <= 8 * NT);
    const int per = tiles * splits;
    stream_core<FMT, NT, 0, 1, RAW8>(
        d, d, N, K, matrices * per, splits, stages, ws, cnt,
        [&](int i) {
            const int e = i / per, r = i % per, tile = r / splits;
            return SItem{e, e * tiles + tile, tile * 16, (r % splits) * (K / splits), 0, M};
        },
        [&](int e, int m) { return x + (i64)m * ldx + (i64)e * K; },
        [&](int e, int m, int n, float v, float) {
            v *= stream_post<FMT, RAW8>(d, e);
            if (out_bf16) reinterpret_cast<u16*>(y)[(i64)m * ldy + (i64)e * N + n] = f2bf(v);
            else reinterpret_cast<float*>(y)[(i64)m * ldy + (i64)e * N + n] = v;
        });
}

// The active experts' items: (slot in the active list, tile, split), the slot's expert and its
// token entries from the plan.
template <int FMT, int NT, int DUAL>
__device__ __forceinline__ int stream_expert_items(const int* act_list, int N, int K, int tokens,
                                                   int* per, int* splits) {
    const int tiles = (N + 15) >> 4, active = act_list[0];
    *splits = stream_splits(active * tiles, K / Stream<FMT>::COLS, gridDim.x * STREAM_WARPS,
                            SPLIT_PARTS / (128 * NT * (1 + DUAL)), tokens <= 8 * NT);
    *per = tiles * *splits;
    return active * *per;
}

__device__ __forceinline__ SItem expert_item(int i, int per, int splits, int K,
                                             const int* __restrict__ act_list,
                                             const int* __restrict__ offsets) {
    const int slot = i / per, r = i % per, tile = r / splits;
    const int e = act_list[1 + slot], start = offsets[e];
    return SItem{e, slot * (per / splits) + tile, tile * 16, (r % splits) * (K / splits), start,
                 offsets[e + 1] - start};
}

// Decode MoE up projection with the clamped SwiGLU, streamed (`tokens`: the step's tokens).
template <int FMT>
__device__ void stream_up_kernel(WDesc w1, WDesc w3, const u16* __restrict__ x, int ldx,
                                 const int* __restrict__ offsets, const int* __restrict__ tok_of,
                                 const int* __restrict__ act_list, u16* __restrict__ act, int N,
                                 int K, float limit, int tokens, int stages, float* ws,
                                 unsigned* cnt) {
    int per, splits;
    const int total = stream_expert_items<FMT, 1, 1>(act_list, N, K, tokens, &per, &splits);
    stream_core<FMT, 1, 1, 0, 0>(
        w1, w3, N, K, total, splits, stages, ws, cnt,
        [&](int i) { return expert_item(i, per, splits, K, act_list, offsets); },
        [&](int, int entry) { return x + (i64)tok_of[entry] * ldx; },
        [&](int e, int entry, int n, float v1, float v3) {
            act[(i64)entry * N + n] =
                f2bf(swiglu(v1 * stream_post<FMT>(w1, e), v3 * stream_post<FMT>(w3, e), limit));
        });
}

// Decode MoE down projection, rows scaled by their routing weight, streamed.
template <int FMT>
__device__ void stream_down_kernel(WDesc w2, const u16* __restrict__ act,
                                   const int* __restrict__ offsets, const float* __restrict__ wt,
                                   const int* __restrict__ act_list, float* __restrict__ y, int N,
                                   int K, int tokens, int stages, float* ws, unsigned* cnt) {
    int per, splits;
    const int total = stream_expert_items<FMT, 1, 0>(act_list, N, K, tokens, &per, &splits);
    stream_core<FMT, 1, 0, 0, 0>(
        w2, w2, N, K, total, splits, stages, ws, cnt,
        [&](int i) { return expert_item(i, per, splits, K, act_list, offsets); },
        [&](int, int entry) { return act + (i64)entry * K; },
        [&](int e, int entry, int n, float v, float) {
            y[(i64)entry * N + n] = v * stream_post<FMT>(w2, e) * wt[entry];
        });
}

#define STREAM_ENTRY(NAME, FMT)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_linear_##NAME##_nt1(                      \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int matrices,             \
        int out_bf16, int stages, float* ws, unsigned* cnt) { pdl_enter_after_weights();                 \
        stream_linear_kernel<FMT, 1>(d, x, ldx, y, ldy, M, N, K, matrices, out_bf16, stages, ws, cnt);   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_linear_##NAME##_nt2(                      \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int matrices,             \
        int out_bf16, int stages, float* ws, unsigned* cnt) { pdl_enter_after_weights();                 \
        stream_linear_kernel<FMT, 2>(d, x, ldx, y, ldy, M, N, K, matrices, out_bf16, stages, ws, cnt);   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_up_##NAME(                                \
        WDesc w1, WDesc w3, const u16* x, int ldx, const int* offsets, const int* tok_of,                \
        const int* act_list, u16* act, int N, int K, float limit, int tokens, int stages, float* ws,     \
        unsigned* cnt) { pdl_enter();                                                                    \
        stream_up_kernel<FMT>(w1, w3, x, ldx, offsets, tok_of, act_list, act, N, K, limit, tokens,       \
                              stages, ws, cnt);                                                          \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_down_##NAME(                              \
        WDesc w2, const u16* act, const int* offsets, const float* wt, const int* act_list, float* y,    \
        int N, int K, int tokens, int stages, float* ws, unsigned* cnt) { pdl_enter();                   \
        stream_down_kernel<FMT>(w2, act, offsets, wt, act_list, y, N, K, tokens, stages, ws, cnt);       \
    }

// FP8 decoded to bf16 (RAW8): `stream_linear_raw_{format}_nt{1,2}` (amdahl-kernels
// `stream_raw_entries`).
#define STREAM_RAW_ENTRY(NAME, FMT)                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_linear_raw_##NAME##_nt1(                  \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int matrices,             \
        int out_bf16, int stages, float* ws, unsigned* cnt) { pdl_enter_after_weights();                 \
        stream_linear_kernel<FMT, 1, 1>(d, x, ldx, y, ldy, M, N, K, matrices, out_bf16, stages, ws, cnt); \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_linear_raw_##NAME##_nt2(                  \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int matrices,             \
        int out_bf16, int stages, float* ws, unsigned* cnt) { pdl_enter_after_weights();                 \
        stream_linear_kernel<FMT, 2, 1>(d, x, ldx, y, ldy, M, N, K, matrices, out_bf16, stages, ws, cnt); \
    }

STREAM_ENTRY(bf16, FMT_BF16)
STREAM_ENTRY(f16, FMT_F16)
STREAM_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
STREAM_ENTRY(fp8b_f32, FMT_FP8B_F32)
STREAM_ENTRY(fp8t, FMT_FP8T)
STREAM_ENTRY(nvfp4t, FMT_NVFP4T)
STREAM_ENTRY(mxfp4t, FMT_MXFP4T)
STREAM_RAW_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
STREAM_RAW_ENTRY(fp8b_f32, FMT_FP8B_F32)
STREAM_RAW_ENTRY(fp8t, FMT_FP8T)
