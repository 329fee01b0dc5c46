// Linear layers y = x · Wᵀ on tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate) with the
// weight kept in its stored format and dequantized to bf16 in registers: bf16, f32, f16, DeepSeek
// FP8 with 128×128 block scales (E8M0 or f32), FP8 per-tensor, NVFP4 (E4M3 per 16 + f32 global),
// MXFP4 (E8M0 per 32). A block owns 16 weight rows; its 8 warps split K; the 16×(8·NT) tile of a
// token group is reduced across warps in shared memory. Weights are read once per token group,
// so for decode (≤ 8·NT tokens) every weight byte crosses HBM exactly once.
//
// k permutation: a superchunk is 32·V columns, V = 16 bytes of weight / 8 elements (bf16 1, fp8
// 2, fp4 4). Thread (g = lane/4, t = lane%4) loads 8V contiguous weights of rows n0+g and n0+g+8
// (16 bytes each) and 8V contiguous activations of token g, all at k = k0 + 8V·t. MMA step s ∈
// [0, 2V) uses real k = 8Vt+4s+{0,1} as virtual columns {2t, 2t+1} and 8Vt+4s+{2,3} as {2t+8,
// 2t+9}, for A and B alike, so the dot product is unchanged while every load is a 16-byte one.
// Each warp takes a contiguous run of superchunks, U at a time with all loads issued first.
//
// MoE variants run the same core per expert over the expert's token list (a counting-sort plan):
// `moe_up` fuses W1 and W3 with the clamped SwiGLU, `moe_down` scales rows by routing weights.
// The block variants launch one block row per active expert (the plan's `act` list); the warp
// variants (`moe_up_w`, `moe_down_w`, decode) give each warp whole 16-row tiles over all of K
// in a fixed grid, so no block waits on a cross-warp reduction and idle experts cost nothing.
//
// The formats, their decodes and `WDesc` are in linear_formats.cuh, compiled just before this
// file (amdahl-kernels `LINEAR`).

#define LIN_WARPS 8
// The split-K workspace (gpu.rs SPLIT_COUNTERS, SPLIT_PARTIAL_BYTES / 4): tile counters, floats.
#define SPLIT_TILES 4096
#define SPLIT_PARTS 1048576

// Accumulates the 16-row tile at n0 for up to 8·NT tokens over this warp's share (of 8) of the
// superchunks [sc_lo, sc_hi) of K (sc_hi past the end: to the end).
// xr[j]: row pointer (bf16) of token j·8 + g of the group, or null.
template <int FMT, int NT, int DUAL>
__device__ __forceinline__ void mma_core(const WDesc& d0, const WDesc& d1, int e, int n0, int N,
                                         int K, int sc_lo, int sc_hi, const u16* const xr[NT],
                                         float acc0[NT][4], float acc1[NT][4]) {
    constexpr int V = Vec<FMT>::V;
    constexpr int SC = 32 * V;
    constexpr int U = (NT >= 4) ? 1 : (DUAL ? (V >= 2 ? 1 : 2) : (V == 4 ? 2 : 4 / V));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    const int hi = min((K + SC - 1) / SC, sc_hi);
    const int per = (hi - sc_lo + LIN_WARPS - 1) / LIN_WARPS;
    const int c_begin = sc_lo + warp * per, c_end = min(hi, c_begin + per);
    for (int c0 = c_begin; c0 < c_end; c0 += U) {
        u32 wa[U][4 * V], wb[U][4 * V], va[U][4 * V], vb[U][4 * V];
        u32 xv[U][NT][4 * V];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = (c0 + u) * SC + t * 8 * V;
            const bool live = c0 + u < c_end;
            // 16-byte loads need 16-byte-aligned rows: K % 16 (fp8) or K % 32 (fp4).
            const bool vec_ok = (V == 1) || (K % (8 * V) == 0);
            if (live && vec_ok && k + 8 * V <= K) {
                load_wv<FMT, V>(d0, e, r0, k, K, wa[u]);
                load_wv<FMT, V>(d0, e, r1, k, K, wb[u]);
                if (DUAL) {
                    load_wv<FMT, V>(d1, e, r0, k, K, va[u]);
                    load_wv<FMT, V>(d1, e, r1, k, K, vb[u]);
                }
            } else {
                // Tail (or no work): 8-element groups, zeros past K.
#pragma unroll
                for (int q = 0; q < V; q++) {
                    const int kq = k + 8 * q;
                    const bool in = live && kq < K;
#pragma unroll
                    for (int i = 0; i < 4; i++) wa[u][4 * q + i] = wb[u][4 * q + i] = va[u][4 * q + i] = vb[u][4 * q + i] = 0;
                    if (in) {
                        load_w8<FMT>(d0, e, r0, kq, K, &wa[u][4 * q]);
                        load_w8<FMT>(d0, e, r1, kq, K, &wb[u][4 * q]);
                        if (DUAL) {
                            load_w8<FMT>(d1, e, r0, kq, K, &va[u][4 * q]);
                            load_w8<FMT>(d1, e, r1, kq, K, &vb[u][4 * q]);
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int q = 0; q < V; q++) {
                    const int kq = k + 8 * q;
                    if (live && kq < K && xr[j] != nullptr) {
                        const uint4 v = *reinterpret_cast<const uint4*>(xr[j] + kq);
                        xv[u][j][4 * q] = v.x; xv[u][j][4 * q + 1] = v.y; xv[u][j][4 * q + 2] = v.z; xv[u][j][4 * q + 3] = v.w;
                    } else {
                        xv[u][j][4 * q] = xv[u][j][4 * q + 1] = xv[u][j][4 * q + 2] = xv[u][j][4 * q + 3] = 0;
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int s = 0; s < 2 * V; s++) {
                const u32 a[4] = {wa[u][2 * s], wb[u][2 * s], wa[u][2 * s + 1], wb[u][2 * s + 1]};
#pragma unroll
                for (int j = 0; j < NT; j++) mma_bf16(acc0[j], a, xv[u][j][2 * s], xv[u][j][2 * s + 1]);
                if (DUAL) {
                    const u32 b[4] = {va[u][2 * s], vb[u][2 * s], va[u][2 * s + 1], vb[u][2 * s + 1]};
#pragma unroll
                    for (int j = 0; j < NT; j++) mma_bf16(acc1[j], b, xv[u][j][2 * s], xv[u][j][2 * s + 1]);
                }
            }
        }
    }
}

// Sums the warps' partial tiles into red[0..128·NT) (index j·128 + lane·4 + r), in place.
template <int NT>
__device__ __forceinline__ void reduce_warps(float acc[NT][4], float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) red[warp * 128 * NT + j * 128 + lane * 4 + r] = acc[j][r];
    __syncthreads();
    for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < LIN_WARPS; w++) s += red[w * 128 * NT + i];
        red[i] = s;
    }
    __syncthreads();
}

// Output coordinates of reduced element i: weight row offset (0..15) and token (0..8·NT).
__device__ __forceinline__ void tile_coord(int i, int* row, int* tok) {
    const int j = i >> 7, lane = (i >> 2) & 31, r = i & 3;
    *row = (lane >> 2) + ((r & 2) ? 8 : 0);
    *tok = j * 8 + 2 * (lane & 3) + (r & 1);
}

// Dense linear: x [M, ldx] bf16 (K columns used) → y [M, ldy] at column offset 0, f32 or bf16.
// A stacked weight (gridDim.z = its matrices) is a grouped linear: matrix e maps x columns
// [e·K, (e+1)·K) to y columns [e·N, (e+1)·N).
//
// Split K (gridDim.y > 1, M <= 8·NT): block (tile, ky) covers the ky-th share of K's
// superchunks and stores its reduced tile in ws; the last block of a tile to arrive (counted in
// cnt, which it resets) sums the gridDim.y partials in ky order and writes y. Deterministic, and
// a linear of few row tiles (wkv: 32) fills the GPU instead of 32 SMs.
template <int FMT, int NT>
__device__ void linear_kernel(WDesc d, const u16* __restrict__ x, int ldx, void* y, int ldy,
                              int M, int N, int K, int out_bf16, float* __restrict__ ws,
                              unsigned* __restrict__ cnt) {
    extern __shared__ float red[];
    __shared__ int last;
    const int n0 = blockIdx.x * 16, e = blockIdx.z;
    const int g = (threadIdx.x & 31) >> 2;
    constexpr int SC = 32 * Vec<FMT>::V;
    const int ks = gridDim.y;
    const int per_k = ((K + SC - 1) / SC + ks - 1) / ks;
    const int sc_lo = blockIdx.y * per_k;
    x += (i64)e * K;
    y = out_bf16 ? (void*)(reinterpret_cast<u16*>(y) + (i64)e * N) : (void*)(reinterpret_cast<float*>(y) + (i64)e * N);
    const float post = post_scale<FMT>(d, e);
    for (int m0 = 0; m0 < M; m0 += 8 * NT) {
        float acc[NT][4];
        const u16* xr[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
            int m = m0 + j * 8 + g;
            xr[j] = m < M ? x + (i64)m * ldx : nullptr;
        }
        mma_core<FMT, NT, 0>(d, d, e, n0, N, K, sc_lo, sc_lo + per_k, xr, acc, acc);
        reduce_warps<NT>(acc, red);
        if (ks > 1) {
            const int tile = blockIdx.z * gridDim.x + blockIdx.x;
            float* mine = ws + ((i64)tile * ks + blockIdx.y) * 128 * NT;
            for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) mine[i] = red[i];
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) last = atomicAdd(&cnt[tile], 1u) == (unsigned)ks - 1;
            __syncthreads();
            if (!last) return;
            __threadfence();
            const float* all = ws + (i64)tile * ks * 128 * NT;
            for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
                float v = 0.f;
                for (int q = 0; q < ks; q++) v += __ldcg(all + (i64)q * 128 * NT + i);
                red[i] = v;
            }
            if (threadIdx.x == 0) cnt[tile] = 0;
            __syncthreads();
        }
        for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
            int row, tok;
            tile_coord(i, &row, &tok);
            int n = n0 + row, m = m0 + tok;
            if (n < N && m < M) {
                const float v = red[i] * post;
                if (out_bf16) reinterpret_cast<u16*>(y)[(i64)m * ldy + n] = f2bf(v);
                else reinterpret_cast<float*>(y)[(i64)m * ldy + n] = v;
            }
        }
        __syncthreads();
    }
}

// The clamped SwiGLU of V4's experts on the f32 gate and up values.
__device__ __forceinline__ float swiglu(float gate, float up, float limit) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return g / (1.f + expf(-g)) * u;
}

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

// One superchunk of a 16-row tile on the tensor cores: the raw weights of rows g (A) and g + 8
// (B) decoded word by word into MMA operands against NT token groups' activations xv.
template <int FMT, int V, int NT>
__device__ __forceinline__ void mma_raw(const RawW& A, const RawW& B, const u32 (*xv)[4 * V],
                                        float (*acc)[4]) {
    u32 sa0, sa1, sb0, sb1;
    raw_scales<FMT>(A, &sa0, &sa1);
    raw_scales<FMT>(B, &sb0, &sb1);
    u32 pa_prev = 0, pb_prev = 0;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        u32 pa[V], pb[V];
        decode_word<FMT, V>(A, sa0, sa1, w, pa);
        decode_word<FMT, V>(B, sb0, sb1, w, pb);
        if (V >= 2) {
#pragma unroll
            for (int j = 0; j < V; j += 2) {
                const int st = (w * V + j) / 2;
                const u32 a[4] = {pa[j], pb[j], pa[(j + 1) % V], pb[(j + 1) % V]};
#pragma unroll
                for (int m = 0; m < NT; m++) mma_bf16(acc[m], a, xv[m][2 * st], xv[m][2 * st + 1]);
            }
        } else if (w & 1) {
            const u32 a[4] = {pa_prev, pb_prev, pa[0], pb[0]};
#pragma unroll
            for (int m = 0; m < NT; m++) mma_bf16(acc[m], a, xv[m][w - 1], xv[m][w]);
        } else {
            pa_prev = pa[0];
            pb_prev = pb[0];
        }
    }
}

// One warp's 16-row tile at n0 of expert e over all of K (K % (32·V) == 0) for the 8 tokens
// whose rows xr (per lane group g) point at (null: no token), U superchunks of loads in flight.
template <int FMT, int DUAL, int U>
__device__ __forceinline__ void warp_core(const WDesc& d0, const WDesc& d1, int e, int n0, int N,
                                          int K, const u16* xr, float (&acc0)[4], float (&acc1)[4]) {
    constexpr int V = Vec<FMT>::V;
    constexpr int SC = 32 * V;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    const int nsc = K / SC;
    // Tiled FP4: the lane's two slots of superchunk c sit at fixed offsets from the tile's first
    // (codes 1 KiB per superchunk, rows n0+8.. 512 B on; scales SB bytes per slot).
    constexpr int SB = FMT == FMT_NVFP4T ? 2 : 1;
    const u8 *q0 = nullptr, *q1 = nullptr, *p0 = nullptr, *p1 = nullptr;
    if (IS_TILED(FMT)) {
        const i64 first = (i64)(n0 >> 4) * nsc * 64 + lane;
        q0 = d0.w + e * d0.w_stride + first * 16;
        p0 = d0.s + e * d0.s_stride + first * SB;
        if (DUAL) {
            q1 = d1.w + e * d1.w_stride + first * 16;
            p1 = d1.s + e * d1.s_stride + first * SB;
        }
    }
    for (int c0 = 0; c0 < nsc; c0 += U) {
        RawW ra[U], rb[U], rc[U], rd[U];
        uint4 xq[U][V];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = (c0 + u) * SC + t * 8 * V;
            if (c0 + u < nsc) {
                if (IS_TILED(FMT)) {
                    const int c = c0 + u;
                    ra[u] = load_tiled<FMT>(q0 + c * 1024, p0 + c * 64 * SB);
                    rb[u] = load_tiled<FMT>(q0 + c * 1024 + 512, p0 + (c * 64 + 32) * SB);
                    if (DUAL) {
                        rc[u] = load_tiled<FMT>(q1 + c * 1024, p1 + c * 64 * SB);
                        rd[u] = load_tiled<FMT>(q1 + c * 1024 + 512, p1 + (c * 64 + 32) * SB);
                    }
                } else {
                    ra[u] = load_raw<FMT>(d0, e, r0, k, K);
                    rb[u] = load_raw<FMT>(d0, e, r1, k, K);
                    if (DUAL) {
                        rc[u] = load_raw<FMT>(d1, e, r0, k, K);
                        rd[u] = load_raw<FMT>(d1, e, r1, k, K);
                    }
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
#pragma unroll
            for (int q = 0; q < V; q++) {
                xv[4 * q] = xq[u][q].x; xv[4 * q + 1] = xq[u][q].y; xv[4 * q + 2] = xq[u][q].z; xv[4 * q + 3] = xq[u][q].w;
            }
            mma_raw<FMT, V, 1>(ra[u], rb[u], &xv, &acc0);
            if (DUAL) mma_raw<FMT, V, 1>(rc[u], rd[u], &xv, &acc1);
        }
    }
}

// Work of the warp kernels: tile i of the active experts' (expert, 16-row group) list, warps
// taking contiguous runs so a warp stays on one expert's plan entries.
__device__ __forceinline__ void warp_items(const int* act_list, int N, int* begin, int* end,
                                           int* groups) {
    const int wpb = blockDim.x >> 5;
    const int nw = gridDim.x * wpb, gw = blockIdx.x * wpb + (threadIdx.x >> 5);
    *groups = (N + 15) >> 4;
    const int total = act_list[0] * *groups;
    const int per = (total + nw - 1) / nw;
    *begin = gw * per;
    *end = min(total, *begin + per);
}

// The loop of the warp expert kernels: for every (active expert, 16-row tile) this warp owns
// and every 8 of the expert's plan entries, the tile over all of K (`xrow(entry)`: the entry's
// input row), each lane's 4 results handed to `store(e, entry, n, acc0, acc1)` for in-range
// rows n and entries.
template <int FMT, int DUAL, int U, class XRow, class Store>
__device__ __forceinline__ void warp_expert_loop(const WDesc& d0, const WDesc& d1,
                                                 const int* __restrict__ offsets,
                                                 const int* __restrict__ act_list, int N, int K,
                                                 XRow xrow, Store store) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int begin, end, groups;
    warp_items(act_list, N, &begin, &end, &groups);
    for (int item = begin; item < end; item++) {
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
    }
}

// Decode-time MoE up projection with the clamped SwiGLU, one warp per 16-row tile.
template <int FMT, int U>
__device__ void moe_up_warp_kernel(WDesc w1, WDesc w3, const u16* __restrict__ x, int ldx,
                                   const int* __restrict__ offsets, const int* __restrict__ tok_of,
                                   const int* __restrict__ act_list, u16* __restrict__ act, int N,
                                   int K, float limit) {
    warp_expert_loop<FMT, 1, U>(
        w1, w3, offsets, act_list, N, K,
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
                                     int K) {
    warp_expert_loop<FMT, 0, U>(
        w2, w2, offsets, act_list, N, K,
        [&](int entry) { return act + (i64)entry * K; },
        [&](int e, int entry, int n, float v, float) {
            y[(i64)entry * N + n] = v * post_scale<FMT>(w2, e) * wt[entry];
        });
}

// Blocks per SM the register budget must allow: three for one token group of a non-FP4 format
// (85 registers, no spills at sm_90; more warps in flight on a latency-bound decode GEMV), two up
// to 16 tokens, one beyond.
#define LIN_MIN_BLOCKS(FMT, NT) ((NT) == 1 && !IS_FP4(FMT) ? 3 : (NT) <= 2 ? 2 : 1)

#define LINEAR_ENTRY(NAME, FMT, NT)                                                                      \
    extern "C" __global__ void __launch_bounds__(256, LIN_MIN_BLOCKS(FMT, NT)) linear_##NAME##_nt##NT(    \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int out_bf16, float* ws,  \
        unsigned* cnt) {                                                                                 \
        linear_kernel<FMT, NT>(d, x, ldx, y, ldy, M, N, K, out_bf16, ws, cnt);                           \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, LIN_MIN_BLOCKS(FMT, NT)) moe_up_##NAME##_nt##NT(    \
        WDesc w1, WDesc w3, const u16* x, int ldx, const int* offsets, const int* tok_of,                \
        const int* act_list, u16* act, int N, int K, float limit) {                                      \
        moe_up_kernel<FMT, NT>(w1, w3, x, ldx, offsets, tok_of, act_list, act, N, K, limit);             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, LIN_MIN_BLOCKS(FMT, NT)) moe_down_##NAME##_nt##NT(  \
        WDesc w2, const u16* act, const int* offsets, const float* wt, const int* act_list, float* y,    \
        int N, int K) {                                                                                  \
        moe_down_kernel<FMT, NT>(w2, act, offsets, wt, act_list, y, N, K);                               \
    }

// Loads in flight per warp of the warp kernels: FP4 rows are 16 B per 32 weights, so up (two
// matrices) keeps 2 superchunks and down 4; wider formats fewer bytes per register.
#define WARP_ENTRY(NAME, FMT)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_up_w_##NAME(                               \
        WDesc w1, WDesc w3, const u16* x, int ldx, const int* offsets, const int* tok_of,                \
        const int* act_list, u16* act, int N, int K, float limit) {                                      \
        moe_up_warp_kernel<FMT, 2>(w1, w3, x, ldx, offsets, tok_of, act_list, act, N, K, limit);         \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_down_w_##NAME(                             \
        WDesc w2, const u16* act, const int* offsets, const float* wt, const int* act_list, float* y,    \
        int N, int K) {                                                                                  \
        moe_down_warp_kernel<FMT, (Vec<FMT>::V == 4 ? 3 : 2)>(w2, act, offsets, wt, act_list, y, N, K);  \
    }

#define LINEAR_FORMAT(NAME, FMT) \
    LINEAR_ENTRY(NAME, FMT, 1)   \
    LINEAR_ENTRY(NAME, FMT, 2)   \
    LINEAR_ENTRY(NAME, FMT, 4)   \
    LINEAR_ENTRY(NAME, FMT, 8)   \
    WARP_ENTRY(NAME, FMT)

LINEAR_FORMAT(bf16, FMT_BF16)
LINEAR_FORMAT(f32, FMT_F32)
LINEAR_FORMAT(f16, FMT_F16)
LINEAR_FORMAT(fp8b_e8m0, FMT_FP8B_E8M0)
LINEAR_FORMAT(fp8b_f32, FMT_FP8B_F32)
LINEAR_FORMAT(fp8t, FMT_FP8T)
LINEAR_FORMAT(nvfp4, FMT_NVFP4)
LINEAR_FORMAT(mxfp4, FMT_MXFP4)
LINEAR_FORMAT(nvfp4t, FMT_NVFP4T)
LINEAR_FORMAT(mxfp4t, FMT_MXFP4T)

// ---- Streamed decode linears (sm_90+): weights through per-warp shared-memory rings ----------
//
// The decode GEMVs above keep their loads in registers, so an SM has ~48 KB in flight and a
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

#define IS_FP8(F) ((F) == FMT_FP8B_E8M0 || (F) == FMT_FP8B_F32 || (F) == FMT_FP8T)

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
// scale remains), the rest as in the register kernels.
template <int FMT>
__device__ __forceinline__ float stream_post(const WDesc& d, int e) {
    if (IS_FP8(FMT)) return FMT == FMT_FP8T ? d.g[e] : 1.f;
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
// expert with more tokens than that; never with splits > 1).
template <int FMT, int NT, int DUAL, class Item, class XRow, class Store>
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
            if constexpr (IS_FP8(FMT)) {
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
template <int FMT, int NT>
__device__ void stream_linear_kernel(WDesc d, const u16* __restrict__ x, int ldx, void* y, int ldy,
                                     int M, int N, int K, int matrices, int out_bf16, int stages,
                                     float* __restrict__ ws, unsigned* __restrict__ cnt) {
    const int tiles = (N + 15) >> 4, spk = K / Stream<FMT>::COLS;
    const int nw = gridDim.x * STREAM_WARPS;
    const int splits = stream_splits(tiles * matrices, spk, nw, SPLIT_PARTS / (128 * NT), M <= 8 * NT);
    const int per = tiles * splits;
    stream_core<FMT, NT, 0>(
        d, d, N, K, matrices * per, splits, stages, ws, cnt,
        [&](int i) {
            const int e = i / per, r = i % per, tile = r / splits;
            return SItem{e, e * tiles + tile, tile * 16, (r % splits) * (K / splits), 0, M};
        },
        [&](int e, int m) { return x + (i64)m * ldx + (i64)e * K; },
        [&](int e, int m, int n, float v, float) {
            v *= stream_post<FMT>(d, e);
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
    stream_core<FMT, 1, 1>(
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
    stream_core<FMT, 1, 0>(
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
        int out_bf16, int stages, float* ws, unsigned* cnt) {                                            \
        stream_linear_kernel<FMT, 1>(d, x, ldx, y, ldy, M, N, K, matrices, out_bf16, stages, ws, cnt);   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_linear_##NAME##_nt2(                      \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int matrices,             \
        int out_bf16, int stages, float* ws, unsigned* cnt) {                                            \
        stream_linear_kernel<FMT, 2>(d, x, ldx, y, ldy, M, N, K, matrices, out_bf16, stages, ws, cnt);   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_up_##NAME(                                \
        WDesc w1, WDesc w3, const u16* x, int ldx, const int* offsets, const int* tok_of,                \
        const int* act_list, u16* act, int N, int K, float limit, int tokens, int stages, float* ws,     \
        unsigned* cnt) {                                                                                 \
        stream_up_kernel<FMT>(w1, w3, x, ldx, offsets, tok_of, act_list, act, N, K, limit, tokens,       \
                              stages, ws, cnt);                                                          \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) stream_down_##NAME(                              \
        WDesc w2, const u16* act, const int* offsets, const float* wt, const int* act_list, float* y,    \
        int N, int K, int tokens, int stages, float* ws, unsigned* cnt) {                                \
        stream_down_kernel<FMT>(w2, act, offsets, wt, act_list, y, N, K, tokens, stages, ws, cnt);       \
    }

STREAM_ENTRY(bf16, FMT_BF16)
STREAM_ENTRY(f16, FMT_F16)
STREAM_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
STREAM_ENTRY(fp8b_f32, FMT_FP8B_F32)
STREAM_ENTRY(fp8t, FMT_FP8T)
STREAM_ENTRY(nvfp4t, FMT_NVFP4T)
STREAM_ENTRY(mxfp4t, FMT_MXFP4T)

// ---- Tiled GEMM for many tokens (decode batches beyond 32, prefill chunks) ----------------------
//
// The kernels above give a block 16 weight rows and read x straight from L2 for each of them: at
// 64 tokens the LM head re-reads x (512 KB) per 16 rows, 4 GB of L2 traffic for 1 GB of weights,
// and prefill re-reads each weight tile once per 64-token group. Here a block owns a BN-row ×
// BM-token output tile. K advances 64 columns a step through a ring of 3 shared-memory stages
// filled by cp.async (the weight codes as stored, x as bf16; rows past N or M zero-filled), so
// each weight byte is read once per BM tokens and each x element once per BN rows. Each warp
// computes 32 rows × 8·WN tokens of m16n8k16 MMAs, the weight fragments decoded from shared
// memory as the decode kernels do (FP8 placed into bf16 and scaled by the 128×128 block scale;
// the same k permutation: thread t takes 8 contiguous columns of each 32-column superchunk, for
// weights and x alike). Geometry (`GemmGeo`): FP8 at 64 tokens puts all 8 warps along rows (BN
// 256, each warp all 64 tokens: every weight decoded once); otherwise 4 warps along rows × 2
// along tokens (BN 128, BM 64 or 128). K may be split over gridDim.z (= matrices × splits): each
// split stores its post-scaled tile, row-major [BM][BN], in ws and `gemm_reduce` sums the splits
// in order (deterministic, every SM taking part). Formats: bf16 and FP8 (block E8M0 / f32
// scales, per-tensor); K % 64 == 0, ldx % 8 == 0. Matrix e reads x from column e·xe: xe = K for a
// grouped linear, 0 for two weights of one input (the shared expert's W1 and W3, y = [W1x | W3x]).
#define GEMM_BK 64
#define GEMM_STAGES 3
#define GEMM_XLD 192                          // bytes per shared x row: 128 + 64, conflict-free
#define GEMM_WLD(F) (IS_FP8(F) ? 96 : 192)    // bytes per shared weight row (64 or 128 + pad)
// Blocks per SM the registers must allow: two, but one where shared memory holds one (bf16, 128).
#define GEMM_MIN_BLOCKS(F, BM) (!IS_FP8(F) && (BM) == 128 ? 1 : 2)

template <int FMT, int BM>
struct GemmGeo {
    static constexpr bool WIDE = IS_FP8(FMT) && BM == 64;
    static constexpr int WROWS = WIDE ? 8 : 4;  // warps along rows; 8 / WROWS along tokens
    static constexpr int BN = 32 * WROWS;
    static constexpr int WN = BM / (8 * (8 / WROWS));  // n8 token tiles per warp
};

__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const u32 a = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const u32 a = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(gmem));
}

template <int FMT, int BM>
__device__ void gemm_kernel(WDesc d, const u16* __restrict__ x, int ldx, int xe, void* y, int ldy,
                            int M, int N, int K, int out_bf16, int splits, float* __restrict__ ws) {
    using G = GemmGeo<FMT, BM>;
    constexpr int BN = G::BN, WN = G::WN, WROWS = G::WROWS, ST = GEMM_STAGES, WLD = GEMM_WLD(FMT);
    constexpr int BPE = IS_FP8(FMT) ? 1 : 2;
    constexpr int WBYTES = BN * WLD, SBYTES = WBYTES + BM * GEMM_XLD;
    constexpr int WC = GEMM_BK * BPE / 16;          // 16-byte chunks per weight row and step
    constexpr int WPT = BN * WC / 256, XPT = BM * 8 / 256;  // chunks per thread and step
    constexpr bool BLOCKSC = FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32;
    extern __shared__ __align__(16) u8 gsm[];
    __shared__ u32 scl[ST][2];  // the stage's block scales of the tile's (at most 2) scale rows
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3, wr = warp % WROWS, wt = warp / WROWS;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int e = blockIdx.z / splits, sp = blockIdx.z % splits;
    const int steps = K / GEMM_BK, per = (steps + splits - 1) / splits;
    const int s_lo = sp * per, nsteps = max(0, min(steps, s_lo + per) - s_lo);
    const u8* wbase = d.w + e * d.w_stride;
    const u8* sbase = BLOCKSC ? d.s + e * d.s_stride : nullptr;
    x += (i64)e * xe;
    const int srow0 = (n0 + d.row_phase) >> 7, srow_last = (N - 1 + d.row_phase) >> 7;

    // This thread's copies: weight chunks at rows wr0 + i·(256 / WC), x chunks at rows xr0 + 32i.
    const int wr0 = tid / WC, wq = tid % WC, xr0 = tid >> 3, xq = tid & 7;
    const u8* wsrc = wbase + ((i64)(n0 + wr0) * K) * BPE + wq * 16;
    const i64 wstride = (i64)(256 / WC) * K * BPE;
    const u16* xsrc = x + (i64)(m0 + xr0) * ldx + xq * 8;
    const i64 xstride = (i64)32 * ldx;
    u32 wvalid = 0, xvalid = 0;
#pragma unroll
    for (int i = 0; i < WPT; i++) wvalid |= (u32)(n0 + wr0 + i * (256 / WC) < N) << i;
#pragma unroll
    for (int i = 0; i < XPT; i++) xvalid |= (u32)(m0 + xr0 + 32 * i < M) << i;
    auto load = [&](int step, int slot) {
        u8* wsm = gsm + slot * SBYTES + wr0 * WLD + wq * 16;
        u8* xsm = gsm + slot * SBYTES + WBYTES + xr0 * GEMM_XLD + xq * 16;
        const int k0 = step * GEMM_BK;
#pragma unroll
        for (int i = 0; i < WPT; i++) {
            const bool ok = (wvalid >> i) & 1;
            cp_async16_zfill(wsm + i * (256 / WC) * WLD, ok ? wsrc + i * wstride + k0 * BPE : wbase, ok);
        }
#pragma unroll
        for (int i = 0; i < XPT; i++) {
            const bool ok = (xvalid >> i) & 1;
            cp_async16_zfill(xsm + i * 32 * GEMM_XLD, ok ? xsrc + i * xstride + k0 : x, ok);
        }
        if (BLOCKSC && tid < 2) {
            const i64 si = (i64)min(srow0 + tid, srow_last) * d.s_ld + (k0 >> 7);
            // E8M0: the aligned word holding the byte (its place is found again at use).
            const u8* src = FMT == FMT_FP8B_F32 ? sbase + si * 4 : (const u8*)((unsigned long long)(sbase + si) & ~3ull);
            cp_async4(&scl[slot][tid], src);
        }
    };
    // Which of the tile's two scale rows each of this thread's 4 weight rows uses.
    int sq[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = min(n0 + wr * 32 + mt * 16 + g + 8 * h, N - 1);
            sq[mt][h] = ((n + d.row_phase) >> 7) - srow0;
        }

    float acc[2][WN][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < WN; j++) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.f;
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (i < nsteps) load(s_lo + i, i);
        cp_async_commit();
    }
    for (int i = 0; i < nsteps; i++) {
        cp_async_wait<ST - 2>();
        __syncthreads();  // stage i landed for all; stage i - 1's slot is free
        if (i + ST - 1 < nsteps) load(s_lo + i + ST - 1, (i + ST - 1) % ST);
        cp_async_commit();
        const int slot = i % ST;
        const u8* wsm = gsm + slot * SBYTES;
        const u8* xsm = wsm + WBYTES;
        u32 s2[2] = {0x71807180u, 0x71807180u};  // FP8T: 2^100
        if (BLOCKSC) {
            const int kb = ((s_lo + i) * GEMM_BK) >> 7;
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const u32 raw = scl[slot][q];
                if (FMT == FMT_FP8B_F32) {
                    s2[q] = bf2_bcast(f2bf(__uint_as_float(raw) * 1.2676506002282294e30f));
                } else {
                    const i64 si = (i64)min(srow0 + q, srow_last) * d.s_ld + kb;
                    const u32 b = (raw >> (8 * (u32)((unsigned long long)(sbase + si) & 3ull))) & 0xffu;
                    s2[q] = bf2_bcast((b + 100u) << 7);  // 2^(b-127) · 2^100
                }
            }
        }
#pragma unroll
        for (int kc = 0; kc < GEMM_BK / 32; kc++) {
            u32 a[2][2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const u8* rp = wsm + (wr * 32 + mt * 16 + g + 8 * h) * WLD;
                    if (BPE == 1) {
                        const u32 sc = sq[mt][h] ? s2[1] : s2[0];
                        const uint2 v = *reinterpret_cast<const uint2*>(rp + kc * 32 + 8 * t);
                        u32 p2[2];
                        fp8x4_to_bf16(v.x, p2);
                        a[mt][h][0] = bf2_mul(p2[0], sc);
                        a[mt][h][1] = bf2_mul(p2[1], sc);
                        fp8x4_to_bf16(v.y, p2);
                        a[mt][h][2] = bf2_mul(p2[0], sc);
                        a[mt][h][3] = bf2_mul(p2[1], sc);
                    } else {
                        const uint4 v = *reinterpret_cast<const uint4*>(rp + kc * 64 + 16 * t);
                        a[mt][h][0] = v.x; a[mt][h][1] = v.y; a[mt][h][2] = v.z; a[mt][h][3] = v.w;
                    }
                }
#pragma unroll
            for (int j = 0; j < WN; j++) {
                const uint4 xv = *reinterpret_cast<const uint4*>(xsm + (wt * 8 * WN + j * 8 + g) * GEMM_XLD + kc * 64 + 16 * t);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const u32 f0[4] = {a[mt][0][0], a[mt][1][0], a[mt][0][1], a[mt][1][1]};
                    mma_bf16(acc[mt][j], f0, xv.x, xv.y);
                    const u32 f1[4] = {a[mt][0][2], a[mt][1][2], a[mt][0][3], a[mt][1][3]};
                    mma_bf16(acc[mt][j], f1, xv.z, xv.w);
                }
            }
        }
    }
    cp_async_wait<0>();
    const float post = post_scale<FMT>(d, e);
    if (splits > 1) {
        // This split's tile, post-scaled, row-major [BM][BN] for gemm_reduce.
        const int tile = (e * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        float* part = ws + ((i64)tile * splits + sp) * (BN * BM);
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int j = 0; j < WN; j++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int row = wr * 32 + mt * 16 + g + (r & 2 ? 8 : 0);
                    const int tok = wt * 8 * WN + j * 8 + 2 * t + (r & 1);
                    part[tok * BN + row] = acc[mt][j][r] * post;
                }
        return;
    }
    u16* yb = reinterpret_cast<u16*>(y) + (i64)e * N;
    float* yf = reinterpret_cast<float*>(y) + (i64)e * N;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < WN; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int n = n0 + wr * 32 + mt * 16 + g + (r & 2 ? 8 : 0);
                const int m = m0 + wt * 8 * WN + j * 8 + 2 * t + (r & 1);
                if (n < N && m < M) {
                    const float v = acc[mt][j][r] * post;
                    if (out_bf16) yb[(i64)m * ldy + n] = f2bf(v);
                    else yf[(i64)m * ldy + n] = v;
                }
            }
}

// The split GEMM's sum: y = Σ_q ws[tile][q] in split order, 4 consecutive rows of one token per
// thread. Grid (bn · bm / 1024, tiles), tile = (e · tiles_y + ty) · tiles_x + tx.
extern "C" __global__ void __launch_bounds__(256) gemm_reduce(const float* __restrict__ ws, void* y, int ldy,
                                                              int M, int N, int bn, int bm, int tiles_x,
                                                              int tiles_y, int splits, int out_bf16) {
    const int tile = blockIdx.y;
    const int tx = tile % tiles_x, ty = (tile / tiles_x) % tiles_y, e = tile / (tiles_x * tiles_y);
    const int i = (blockIdx.x * 256 + threadIdx.x) * 4;
    if (i >= bn * bm) return;
    const int tok = i / bn, row = i % bn;
    const float4* p = reinterpret_cast<const float4*>(ws + (i64)tile * splits * bn * bm + i);
    const int stride = bn * bm / 4;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    int q = 0;
    for (; q + 4 <= splits; q += 4) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = __ldcg(p + (i64)(q + u) * stride);
#pragma unroll
        for (int u = 0; u < 4; u++) { s.x += v[u].x; s.y += v[u].y; s.z += v[u].z; s.w += v[u].w; }
    }
    for (; q < splits; q++) {
        const float4 v = __ldcg(p + (i64)q * stride);
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    const int m = ty * bm + tok, n = tx * bn + row;
    if (m >= M) return;
    const float o[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int c = 0; c < 4; c++) {
        if (n + c >= N) break;
        const i64 at = (i64)m * ldy + (i64)e * N + n + c;
        if (out_bf16) reinterpret_cast<u16*>(y)[at] = f2bf(o[c]);
        else reinterpret_cast<float*>(y)[at] = o[c];
    }
}

// The shared expert's SwiGLU after the paired GEMM: act[m, j] = swiglu(h[m, j], h[m, I + j]) as
// bf16, h = [W1x | W3x] f32 rows of 2I.
extern "C" __global__ void gemm_swiglu(const float* __restrict__ h, u16* __restrict__ act, int M, int I,
                                       float limit) {
    const i64 n = (i64)M * I;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 m = i / I, j = i % I;
        act[i] = f2bf(swiglu(h[m * 2 * I + j], h[m * 2 * I + I + j], limit));
    }
}

#define GEMM_ENTRY(NAME, FMT)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, GEMM_MIN_BLOCKS(FMT, 64)) gemm_##NAME##_m64(       \
        WDesc d, const u16* x, int ldx, int xe, void* y, int ldy, int M, int N, int K, int out_bf16,     \
        int splits, float* ws) {                                                                         \
        gemm_kernel<FMT, 64>(d, x, ldx, xe, y, ldy, M, N, K, out_bf16, splits, ws);                      \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, GEMM_MIN_BLOCKS(FMT, 128)) gemm_##NAME##_m128(       \
        WDesc d, const u16* x, int ldx, int xe, void* y, int ldy, int M, int N, int K, int out_bf16,     \
        int splits, float* ws) {                                                                         \
        gemm_kernel<FMT, 128>(d, x, ldx, xe, y, ldy, M, N, K, out_bf16, splits, ws);                     \
    }

GEMM_ENTRY(bf16, FMT_BF16)
GEMM_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
GEMM_ENTRY(fp8b_f32, FMT_FP8B_F32)
GEMM_ENTRY(fp8t, FMT_FP8T)

// f32-input linear for small, selection-sensitive projections (the MoE router). Block = 32 rows
// (a lane per row) × 16 tokens; its 8 warps split each 256-wide K chunk (32 columns each), with
// the chunk's x [16, 256] f32 staged in shared memory and read as broadcasts, so each weight is
// loaded once per 16 tokens and each x element once per 32 rows (a warp per (row, token) read
// both once per pair: 100 MB of L2 traffic at 16 tokens for a 2 MB router). K is split over
// gridDim.y with the dense linear's deterministic last-arrival sum (ws, cnt). y [M, N] f32;
// K % 8 == 0, ldx % 4 == 0.
#define F32X_KC 256
template <int FMT>
__device__ void linear_f32x_kernel(WDesc d, const float* __restrict__ x, int ldx,
                                   float* __restrict__ y, int M, int N, int K,
                                   float* __restrict__ ws, unsigned* __restrict__ cnt) {
    __shared__ __align__(16) float xs[16][F32X_KC];
    __shared__ float red[8][16][32];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n = blockIdx.x * 32 + lane, m0 = blockIdx.z * 16;
    const int ks = gridDim.y;
    const int chunks = (K + F32X_KC - 1) / F32X_KC;
    const int per = (chunks + ks - 1) / ks;
    const int c_lo = blockIdx.y * per, c_hi = min(chunks, c_lo + per);
    float acc[16];
#pragma unroll
    for (int t = 0; t < 16; t++) acc[t] = 0.f;
    for (int c = c_lo; c < c_hi; c++) {
        const int k0 = c * F32X_KC, kc = min(F32X_KC, K - k0);
        __syncthreads();
        for (int i = threadIdx.x; i < 16 * (F32X_KC / 4); i += blockDim.x) {
            const int t = i / (F32X_KC / 4), q = i % (F32X_KC / 4);
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (m0 + t < M && q * 4 < kc)
                v = *reinterpret_cast<const float4*>(x + (i64)(m0 + t) * ldx + k0 + q * 4);
            reinterpret_cast<float4*>(xs[t])[q] = v;
        }
        __syncthreads();
        float w[4][8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int k = k0 + warp * 32 + j * 8;
            if (n < N && k < K) {
                load_w8f<FMT>(d, 0, n, k, K, w[j]);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) w[j][i] = 0.f;
            }
        }
#pragma unroll
        for (int t = 0; t < 16; t++) {
            const float4* xp = reinterpret_cast<const float4*>(&xs[t][warp * 32]);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float4 a = xp[2 * j], b = xp[2 * j + 1];
                float s = acc[t];
                s = fmaf(w[j][0], a.x, s); s = fmaf(w[j][1], a.y, s);
                s = fmaf(w[j][2], a.z, s); s = fmaf(w[j][3], a.w, s);
                s = fmaf(w[j][4], b.x, s); s = fmaf(w[j][5], b.y, s);
                s = fmaf(w[j][6], b.z, s); s = fmaf(w[j][7], b.w, s);
                acc[t] = s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < 16; t++) red[warp][t][lane] = acc[t];
    __syncthreads();
    float out[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = threadIdx.x + r * 256;
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < 8; w++) v += red[w][i >> 5][i & 31];
        out[r] = v;
    }
    if (ks > 1) {
        const int tile = blockIdx.z * gridDim.x + blockIdx.x;
        float* mine = ws + ((i64)tile * ks + blockIdx.y) * 512;
        mine[threadIdx.x] = out[0];
        mine[threadIdx.x + 256] = out[1];
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(&cnt[tile], 1u) == (unsigned)ks - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        const float* all = ws + (i64)tile * ks * 512;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float v = 0.f;
            for (int q = 0; q < ks; q++) v += __ldcg(all + (i64)q * 512 + threadIdx.x + r * 256);
            out[r] = v;
        }
        if (threadIdx.x == 0) cnt[tile] = 0;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = threadIdx.x + r * 256;
        const int nn = blockIdx.x * 32 + (i & 31), m = m0 + (i >> 5);
        if (nn < N && m < M) y[(i64)m * N + nn] = out[r];
    }
}

#define F32X_ENTRY(NAME, FMT)                                                             \
    extern "C" __global__ void __launch_bounds__(256)                                     \
        linear_f32x_##NAME(WDesc d, const float* x, int ldx, float* y, int M, int N, int K,  \
                           float* ws, unsigned* cnt) {                                    \
        linear_f32x_kernel<FMT>(d, x, ldx, y, M, N, K, ws, cnt);                          \
    }

F32X_ENTRY(bf16, FMT_BF16)
F32X_ENTRY(f32, FMT_F32)
F32X_ENTRY(f16, FMT_F16)
F32X_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
F32X_ENTRY(fp8b_f32, FMT_FP8B_F32)
F32X_ENTRY(fp8t, FMT_FP8T)
F32X_ENTRY(nvfp4, FMT_NVFP4)
F32X_ENTRY(mxfp4, FMT_MXFP4)
F32X_ENTRY(nvfp4t, FMT_NVFP4T)
F32X_ENTRY(mxfp4t, FMT_MXFP4T)
