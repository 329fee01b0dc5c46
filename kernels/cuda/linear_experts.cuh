// The MoE expert kernels (entries `moe_up_*` / `moe_down_*` and the warp variants `moe_*_w_*` in
// linear.cu): the block variants on linear_core.cuh's MMA loop, one block row per active expert,
// and the decode warp variants, a warp per (expert, 16-row) tile over all of K.

// MoE up projection of active expert act_list[1 + blockIdx.y] over its tokens: act =
// silu(min(W1x, L)) ⊙ clamp(W3x, ±L), written as bf16 rows at the plan's positions.
template <int FMT, int NT>
__device__ void moe_up_kernel(WDesc w1, WDesc w3, const u16* __restrict__ x, int ldx,
                              const int* __restrict__ offsets, const int* __restrict__ tok_of,
                              const int* __restrict__ act_list, u16* __restrict__ act, int N,
                              int K, float limit) {
    extern __shared__ float red[];
    if ((int)blockIdx.y >= act_list[0]) return;
    const int e = act_list[1 + blockIdx.y];
    const int start = offsets[e], count = offsets[e + 1] - start;
    if (count <= 0) return;
    float* red3 = red + LIN_WARPS * 128 * NT;
    const int n0 = blockIdx.x * 16;
    const int g = (threadIdx.x & 31) >> 2;
    for (int m0 = 0; m0 < count; m0 += 8 * NT) {
        float a1[NT][4], a3[NT][4];
        const u16* xr[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            a1[j][0] = a1[j][1] = a1[j][2] = a1[j][3] = 0.f;
            a3[j][0] = a3[j][1] = a3[j][2] = a3[j][3] = 0.f;
            int m = m0 + j * 8 + g;
            xr[j] = m < count ? x + (i64)tok_of[start + m] * ldx : nullptr;
        }
        mma_core<FMT, NT, 1>(w1, w3, e, n0, N, K, 0, 1 << 30, xr, a1, a3);
        reduce_warps<NT>(a1, red);
        reduce_warps<NT>(a3, red3);
        const float p1 = post_scale<FMT>(w1, e), p3 = post_scale<FMT>(w3, e);
        for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
            int row, tok;
            tile_coord(i, &row, &tok);
            int n = n0 + row, m = m0 + tok;
            if (n < N && m < count) act[(i64)(start + m) * N + n] = f2bf(swiglu(red[i] * p1, red3[i] * p3, limit));
        }
        __syncthreads();
    }
}

// MoE down projection of active expert act_list[1 + blockIdx.y]: y[pos] = w[pos] · W2 act[pos]
// (f32 rows of [T·k, N]).
template <int FMT, int NT>
__device__ void moe_down_kernel(WDesc w2, const u16* __restrict__ act,
                                const int* __restrict__ offsets, const float* __restrict__ wt,
                                const int* __restrict__ act_list, float* __restrict__ y, int N,
                                int K) {
    extern __shared__ float red[];
    if ((int)blockIdx.y >= act_list[0]) return;
    const int e = act_list[1 + blockIdx.y];
    const int start = offsets[e], count = offsets[e + 1] - start;
    if (count <= 0) return;
    const int n0 = blockIdx.x * 16;
    const int g = (threadIdx.x & 31) >> 2;
    for (int m0 = 0; m0 < count; m0 += 8 * NT) {
        float acc[NT][4];
        const u16* xr[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
            int m = m0 + j * 8 + g;
            xr[j] = m < count ? act + (i64)(start + m) * K : nullptr;
        }
        mma_core<FMT, NT, 0>(w2, w2, e, n0, N, K, 0, 1 << 30, xr, acc, acc);
        reduce_warps<NT>(acc, red);
        const float post = post_scale<FMT>(w2, e);
        for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
            int row, tok;
            tile_coord(i, &row, &tok);
            int n = n0 + row, m = m0 + tok;
            if (n < N && m < count) y[(i64)(start + m) * N + n] = red[i] * post * wt[start + m];
        }
        __syncthreads();
    }
}

// V 16-byte activation loads as the 4V words of the MMA's B operands.
template <int V>
__device__ __forceinline__ void unpack_x(const uint4 (&xq)[V], u32 (&xv)[4 * V]) {
#pragma unroll
    for (int q = 0; q < V; q++) {
        xv[4 * q] = xq[q].x; xv[4 * q + 1] = xq[q].y; xv[4 * q + 2] = xq[q].z; xv[4 * q + 3] = xq[q].w;
    }
}

// warp_core for the tiled FP4 formats: the lane's two slots of superchunk c sit at fixed offsets
// from the tile's first (codes 1 KiB per superchunk, rows n0+8.. 512 B on; scales SB bytes per
// slot), so the codes, scales and activations are read through pointers that step once per U
// superchunks with the offsets inside in the loads' immediates (no 64-bit address arithmetic
// per load; each scale byte becomes its bf16 pair by one IMAD, `tiled_scale2`): the integer
// pipe, which paces these kernels on the H200, is left little but the codes' decode (ncu,
// docs/PERF.md ninth session).
template <int FMT, int DUAL, int U>
__device__ __forceinline__ void warp_core_tiled(const WDesc& d0, const WDesc& d1, int e, int n0,
                                                int K, const u16* xr, float (&acc0)[4],
                                                float (&acc1)[4]) {
    constexpr int V = Vec<FMT>::V;
    constexpr int SC = 32 * V;
    constexpr int SB = FMT == FMT_NVFP4T ? 2 : 1;
    const int lane = threadIdx.x & 31, t = lane & 3;
    const int nsc = K / SC;
    const i64 first = (i64)(n0 >> 4) * nsc * 64 + lane;
    const u8* q0 = d0.w + e * d0.w_stride + first * 16;
    const u8* p0 = d0.s + e * d0.s_stride + first * SB;
    const u8* q1 = DUAL ? d1.w + e * d1.w_stride + first * 16 : q0;
    const u8* p1 = DUAL ? d1.s + e * d1.s_stride + first * SB : p0;
    const bool has_x = xr != nullptr;
    const u16* xp = has_x ? xr + t * 8 * V : nullptr;
    for (int c0 = 0; c0 < nsc; c0 += U) {
        RawW ra[U], rb[U], rc[U], rd[U];
        uint4 xq[U][V];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u < nsc) {
                ra[u] = load_tiled<FMT>(q0 + u * 1024, p0 + u * 64 * SB);
                rb[u] = load_tiled<FMT>(q0 + u * 1024 + 512, p0 + (u * 64 + 32) * SB);
                if (DUAL) {
                    rc[u] = load_tiled<FMT>(q1 + u * 1024, p1 + u * 64 * SB);
                    rd[u] = load_tiled<FMT>(q1 + u * 1024 + 512, p1 + (u * 64 + 32) * SB);
                }
#pragma unroll
                for (int q = 0; q < V; q++)
                    xq[u][q] = has_x ? *reinterpret_cast<const uint4*>(xp + u * SC + 8 * q) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u >= nsc) break;
            u32 xv[4 * V];
            unpack_x<V>(xq[u], xv);
            mma_raw<FMT, V, 1>(ra[u], rb[u], &xv, &acc0);
            if (DUAL) mma_raw<FMT, V, 1>(rc[u], rd[u], &xv, &acc1);
        }
        q0 += U * 1024;
        p0 += U * 64 * SB;
        if (DUAL) {
            q1 += U * 1024;
            p1 += U * 64 * SB;
        }
        if (has_x) xp += U * SC;
    }
}

// One warp's 16-row tile at n0 of expert e over all of K (K % (32·V) == 0) for the 8 tokens
// whose rows xr (per lane group g) point at (null: no token), U superchunks of loads in flight.
template <int FMT, int DUAL, int U>
__device__ __forceinline__ void warp_core(const WDesc& d0, const WDesc& d1, int e, int n0, int N,
                                          int K, const u16* xr, float (&acc0)[4], float (&acc1)[4]) {
    if (IS_TILED(FMT)) {
        warp_core_tiled<FMT, DUAL, U>(d0, d1, e, n0, K, xr, acc0, acc1);
        return;
    }
    constexpr int V = Vec<FMT>::V;
    constexpr int SC = 32 * V;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    const int nsc = K / SC;
    for (int c0 = 0; c0 < nsc; c0 += U) {
        RawW ra[U], rb[U], rc[U], rd[U];
        uint4 xq[U][V];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = (c0 + u) * SC + t * 8 * V;
            if (c0 + u < nsc) {
                ra[u] = load_raw<FMT>(d0, e, r0, k, K);
                rb[u] = load_raw<FMT>(d0, e, r1, k, K);
                if (DUAL) {
                    rc[u] = load_raw<FMT>(d1, e, r0, k, K);
                    rd[u] = load_raw<FMT>(d1, e, r1, k, K);
                }
#pragma unroll
                for (int q = 0; q < V; q++)
                    xq[u][q] = xr ? *reinterpret_cast<const uint4*>(xr + k + 8 * q) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u >= nsc) break;
            u32 xv[4 * V];
            unpack_x<V>(xq[u], xv);
            mma_raw<FMT, V, 1>(ra[u], rb[u], &xv, &acc0);
            if (DUAL) mma_raw<FMT, V, 1>(rc[u], rd[u], &xv, &acc1);
        }
    }
}

// Work of the warp kernels: tile i of the active experts' (expert, 16-row group) list, warps
// taking contiguous runs so a warp stays on one expert's plan entries. With no more tiles than
// warps (batch 1: 768 up or 1536 down tiles for 2112 warps) tile i goes to warp i / gridDim.x of
// block i % gridDim.x, so every block (SM) gets a share instead of the first blocks all of them.
__device__ __forceinline__ void warp_items(const int* act_list, int N, int* begin, int* end,
                                           int* groups, int* total_out) {
    const int wpb = blockDim.x >> 5, w = threadIdx.x >> 5;
    const int nw = gridDim.x * wpb;
    *groups = (N + 15) >> 4;
    const int total = act_list[0] * *groups;
    *total_out = total;
    if (total <= nw) {  // one tile per warp either way: tile i to warp i / gridDim.x of block i % gridDim.x
        *begin = w * gridDim.x + blockIdx.x;
        *end = min(total, *begin + 1);
        return;
    }
    const int per = (total + nw - 1) / nw;
    *begin = (blockIdx.x * wpb + w) * per;
    *end = min(total, *begin + per);
}

// The loop of the warp expert kernels: for every (active expert, 16-row tile) this warp owns
// and every 8 of the expert's plan entries, the tile over all of K (`xrow(entry)`: the entry's
// input row), each lane's 4 results handed to `store(e, entry, n, acc0, acc1)` for in-range
// rows n and entries. With more tiles than warps they are handed out by a counter (`work[0]`;
// `work[1]` counts the warps done, and the last one resets both for the next launch): a warp
// takes the next tile when it finishes one (requesting it before computing the current), so
// blocks that start late, on SMs still running the other stream's kernels (the shared expert
// beside the routed ones), take fewer tiles instead of finishing last. Each tile is still one
// warp's whole sum: the results do not depend on which warp computes it.
template <int FMT, int DUAL, int U, class XRow, class Store>
__device__ __forceinline__ void warp_expert_loop(const WDesc& d0, const WDesc& d1,
                                                 const int* __restrict__ offsets,
                                                 const int* __restrict__ act_list, int N, int K,
                                                 unsigned* __restrict__ work, XRow xrow, Store store) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int begin, end, groups, total;
    warp_items(act_list, N, &begin, &end, &groups, &total);
    auto tile = [&](int item) {
        const int e = act_list[1 + item / groups], n0 = (item % groups) * 16;
        const int start = offsets[e], count = offsets[e + 1] - start;
        for (int m0 = 0; m0 < count; m0 += 8) {
            float a0[4] = {0.f, 0.f, 0.f, 0.f}, a1[4] = {0.f, 0.f, 0.f, 0.f};
            const u16* xr = m0 + g < count ? xrow(start + m0 + g) : nullptr;
            warp_core<FMT, DUAL, U>(d0, d1, e, n0, N, K, xr, a0, a1);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int n = n0 + g + ((r & 2) ? 8 : 0), m = m0 + 2 * t + (r & 1);
                if (n < N && m < count) store(e, start + m, n, a0[r], a1[r]);
            }
        }
    };
    const int nw = gridDim.x * (blockDim.x >> 5);
    const bool queue = work != nullptr && total > nw;
    auto take = [&]() {
        unsigned q = 0;
        if (lane == 0) q = atomicAdd(&work[0], 1u);
        return (int)__shfl_sync(0xffffffffu, q, 0);
    };
    int item = queue ? take() : begin;
    const int stop = queue ? total : end;
    while (item < stop) {
        const int next = queue ? take() : item + 1;
        tile(item);
        item = next;
    }
    if (queue && lane == 0 && atomicAdd(&work[1], 1u) == (unsigned)nw - 1) {
        work[0] = 0u;
        work[1] = 0u;
    }
}

// Decode-time MoE up projection with the clamped SwiGLU, one warp per 16-row tile.
template <int FMT, int U>
__device__ void moe_up_warp_kernel(WDesc w1, WDesc w3, const u16* __restrict__ x, int ldx,
                                   const int* __restrict__ offsets, const int* __restrict__ tok_of,
                                   const int* __restrict__ act_list, u16* __restrict__ act, int N,
                                   int K, float limit, unsigned* __restrict__ work) {
    warp_expert_loop<FMT, 1, U>(
        w1, w3, offsets, act_list, N, K, work,
        [&](int entry) { return x + (i64)tok_of[entry] * ldx; },
        [&](int e, int entry, int n, float v1, float v3) {
            act[(i64)entry * N + n] =
                f2bf(swiglu(v1 * post_scale<FMT>(w1, e), v3 * post_scale<FMT>(w3, e), limit));
        });
}

// Decode-time MoE down projection, rows scaled by their routing weight.
template <int FMT, int U>
__device__ void moe_down_warp_kernel(WDesc w2, const u16* __restrict__ act,
                                     const int* __restrict__ offsets, const float* __restrict__ wt,
                                     const int* __restrict__ act_list, float* __restrict__ y, int N,
                                     int K, unsigned* __restrict__ work) {
    warp_expert_loop<FMT, 0, U>(
        w2, w2, offsets, act_list, N, K, work,
        [&](int entry) { return act + (i64)entry * K; },
        [&](int e, int entry, int n, float v, float) {
            y[(i64)entry * N + n] = v * post_scale<FMT>(w2, e) * wt[entry];
        });
}
