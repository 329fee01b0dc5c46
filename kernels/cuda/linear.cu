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
// The formats, their decodes and `WDesc` are in linear_formats.cuh, the split workspace and the
// SwiGLU in linear_shared.cuh, both compiled just before this file (amdahl-kernels `LINEAR`); the
// streamed decode kernels are linear_stream.cu, the tiled GEMM for many tokens linear_gemm.cu.

#define LIN_WARPS 8

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

// Persistent dense linear at two token groups (FP8 formats, K ≤ 8 warps × 2 superchunks = 1024
// columns; launch/linear.rs `persist_applies`): blocks of 8 warps loop over the 16-row tiles
// blockIdx.x, blockIdx.x + gridDim.x, … of matrix blockIdx.z. Each warp loads its K share of
// the activations once into registers (at 16 tokens twice a tile's weight bytes, which the
// one-tile blocks re-read per tile) and the next tile's weights before the current tile's MMAs,
// cross-warp reduction and store, so a block's loads stay in flight across its tiles (ncu, H100,
// wq_b at b16: 34% of stalls on the first use of the weights, blocks ~5.6K cycles for one round
// of loads). Built in the fourteenth session with no device time left: not yet measured.
template <int FMT>
__device__ void linear_persist_kernel(WDesc d, const u16* __restrict__ x, int ldx, void* y, int ldy,
                                      int M, int N, int K, int out_bf16) {
    constexpr int NT = 2, V = Vec<FMT>::V, SC = 32 * V, P = 2;
    extern __shared__ float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int e = blockIdx.z;
    x += (i64)e * K;
    y = out_bf16 ? (void*)(reinterpret_cast<u16*>(y) + (i64)e * N) : (void*)(reinterpret_cast<float*>(y) + (i64)e * N);
    const float post = post_scale<FMT>(d, e);
    const int nsc = K / SC, per = (nsc + LIN_WARPS - 1) / LIN_WARPS;
    const int c_begin = warp * per, c_end = min(nsc, c_begin + per);
    u32 xv[P][NT][4 * V];
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int k = (c_begin + p) * SC + t * 8 * V;
        const bool live = c_begin + p < c_end;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int m = j * 8 + g;
#pragma unroll
            for (int q = 0; q < V; q++) {
                uint4 v = make_uint4(0, 0, 0, 0);
                if (live && m < M) v = *reinterpret_cast<const uint4*>(x + (i64)m * ldx + k + 8 * q);
                xv[p][j][4 * q] = v.x; xv[p][j][4 * q + 1] = v.y; xv[p][j][4 * q + 2] = v.z; xv[p][j][4 * q + 3] = v.w;
            }
        }
    }
    const int tiles = (N + 15) / 16;
    auto load_w = [&](int tile, u32 (&wa)[P][4 * V], u32 (&wb)[P][4 * V]) {
        const int r0 = min(tile * 16 + g, N - 1), r1 = min(tile * 16 + g + 8, N - 1);
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int k = (c_begin + p) * SC + t * 8 * V;
            if (c_begin + p < c_end) {
                load_wv<FMT, V>(d, e, r0, k, K, wa[p]);
                load_wv<FMT, V>(d, e, r1, k, K, wb[p]);
            } else {
#pragma unroll
                for (int i = 0; i < 4 * V; i++) wa[p][i] = wb[p][i] = 0;
            }
        }
    };
    // One tile from weights (wa, wb), its sum over the warps and its store.
    auto finish = [&](int tile, const u32 (&wa)[P][4 * V], const u32 (&wb)[P][4 * V]) {
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int s = 0; s < 2 * V; s++) {
                const u32 a[4] = {wa[p][2 * s], wb[p][2 * s], wa[p][2 * s + 1], wb[p][2 * s + 1]};
#pragma unroll
                for (int j = 0; j < NT; j++) mma_bf16(acc[j], a, xv[p][j][2 * s], xv[p][j][2 * s + 1]);
            }
        reduce_warps<NT>(acc, red);
        for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
            int row, tok;
            tile_coord(i, &row, &tok);
            const int n = tile * 16 + row, m = tok;
            if (n < N && m < M) {
                const float v = red[i] * post;
                if (out_bf16) reinterpret_cast<u16*>(y)[(i64)m * ldy + n] = f2bf(v);
                else reinterpret_cast<float*>(y)[(i64)m * ldy + n] = v;
            }
        }
        __syncthreads();  // red is free for the next tile
    };
    u32 wa0[P][4 * V], wb0[P][4 * V], wa1[P][4 * V], wb1[P][4 * V];
    int tile = blockIdx.x;
    if (tile < tiles) load_w(tile, wa0, wb0);
    // Two tiles per round, so each weight buffer is a fixed set of registers.
    while (tile < tiles) {
        const int t1 = tile + gridDim.x;
        if (t1 < tiles) load_w(t1, wa1, wb1);
        finish(tile, wa0, wb0);
        if (t1 >= tiles) break;
        const int t2 = t1 + gridDim.x;
        if (t2 < tiles) load_w(t2, wa0, wb0);
        finish(t1, wa1, wb1);
        tile = t2;
    }
}

#define LINEAR_PERSIST_ENTRY(NAME, FMT)                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) linear_##NAME##_nt2_p(                         \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int out_bf16) {           \
        pdl_enter();                                                                                     \
        linear_persist_kernel<FMT>(d, x, ldx, y, ldy, M, N, K, out_bf16);                                \
    }

// Bytes per stored row of a row-major dense format (0: not prefetched: tiled FP4, f32).
template <int FMT>
__device__ __forceinline__ i64 row_bytes(int K) {
    if (IS_TILED(FMT) || FMT == FMT_F32) return 0;
    return FMT == FMT_BF16 || FMT == FMT_F16 ? 2 * (i64)K : IS_FP4(FMT) ? K / 2 : K;
}

// The weight bytes block (tile, ky, matrix) of `linear_kernel` reads, prefetched into L2 before
// `pdl_enter()` (AMDAHL_PDL=2 builds): the tile's 16 rows whole (one range) or, with K split,
// each row's share of 64 bytes per superchunk (a thread per row). Rows of whole 16-byte units.
template <int FMT>
__device__ __forceinline__ void linear_prefetch(const WDesc& d, int N, int K) {
#ifdef PDL_PREFETCH
    const i64 rb = row_bytes<FMT>(K);
    if (rb == 0 || rb % 16 != 0) return;
    const int n0 = blockIdx.x * 16, rows = min(16, N - n0), ks = gridDim.y;
    const u8* w = d.w + blockIdx.z * d.w_stride + n0 * rb;
    if (ks == 1) {
        prefetch_l2(w, rows * rb);
        return;
    }
    constexpr int SC = 32 * Vec<FMT>::V;
    const int per_k = ((K + SC - 1) / SC + ks - 1) / ks;
    const i64 lo = (i64)blockIdx.y * per_k * 64, hi = min(rb, lo + (i64)per_k * 64);
    if ((int)threadIdx.x < rows && lo < hi) prefetch_l2_own(w + threadIdx.x * rb + lo, hi - lo);
#endif
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
                                           int* groups) {
    const int wpb = blockDim.x >> 5, w = threadIdx.x >> 5;
    const int nw = gridDim.x * wpb;
    *groups = (N + 15) >> 4;
    const int total = act_list[0] * *groups;
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
    int begin, end, groups;
    warp_items(act_list, N, &begin, &end, &groups);
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
    const int total = act_list[0] * groups, nw = gridDim.x * (blockDim.x >> 5);
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

// Blocks per SM the register budget must allow: three for one token group of a non-FP4 format
// (85 registers, no spills at sm_90; more warps in flight on a latency-bound decode GEMV), two up
// to 16 tokens, one beyond.
#define LIN_MIN_BLOCKS(FMT, NT) ((NT) == 1 && !IS_FP4(FMT) ? 3 : (NT) <= 2 ? 2 : 1)

#define LINEAR_ENTRY(NAME, FMT, NT)                                                                      \
    extern "C" __global__ void __launch_bounds__(256, LIN_MIN_BLOCKS(FMT, NT)) linear_##NAME##_nt##NT(    \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int out_bf16, float* ws,  \
        unsigned* cnt) {                                                                                 \
        linear_prefetch<FMT>(d, N, K);                                                                   \
        pdl_enter();                                                                                     \
        linear_kernel<FMT, NT>(d, x, ldx, y, ldy, M, N, K, out_bf16, ws, cnt);                           \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, LIN_MIN_BLOCKS(FMT, NT)) moe_up_##NAME##_nt##NT(    \
        WDesc w1, WDesc w3, const u16* x, int ldx, const int* offsets, const int* tok_of,                \
        const int* act_list, u16* act, int N, int K, float limit) { pdl_enter();                         \
        moe_up_kernel<FMT, NT>(w1, w3, x, ldx, offsets, tok_of, act_list, act, N, K, limit);             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, LIN_MIN_BLOCKS(FMT, NT)) moe_down_##NAME##_nt##NT(  \
        WDesc w2, const u16* act, const int* offsets, const float* wt, const int* act_list, float* y,    \
        int N, int K) { pdl_enter();                                                                     \
        moe_down_kernel<FMT, NT>(w2, act, offsets, wt, act_list, y, N, K);                               \
    }

// Loads in flight per warp of the warp kernels: FP4 rows are 16 B per 32 weights, so up (two
// matrices) keeps 2 superchunks and down 4; wider formats fewer bytes per register.
#define WARP_ENTRY(NAME, FMT)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_up_w_##NAME(                               \
        WDesc w1, WDesc w3, const u16* x, int ldx, const int* offsets, const int* tok_of,                \
        const int* act_list, u16* act, int N, int K, float limit, unsigned* work) { pdl_enter();          \
        moe_up_warp_kernel<FMT, 2>(w1, w3, x, ldx, offsets, tok_of, act_list, act, N, K, limit, work);   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_down_w_##NAME(                             \
        WDesc w2, const u16* act, const int* offsets, const float* wt, const int* act_list, float* y,    \
        int N, int K, unsigned* work) { pdl_enter();                                                     \
        moe_down_warp_kernel<FMT, (Vec<FMT>::V == 4 ? 3 : 2)>(w2, act, offsets, wt, act_list, y, N, K,   \
                                                              work);                                     \
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
LINEAR_PERSIST_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
LINEAR_PERSIST_ENTRY(fp8b_f32, FMT_FP8B_F32)
LINEAR_PERSIST_ENTRY(fp8t, FMT_FP8T)

// f32-input linear for small, selection-sensitive projections (the MoE router). Block = 32 rows
// (a lane per row) × 16 tokens; its 8 warps split each 256-wide K chunk (32 columns each), with
// the chunk's x [16, 256] f32 staged in shared memory and read as broadcasts, so each weight is
// loaded once per 16 tokens and each x element once per 32 rows (a warp per (row, token) read
// both once per pair: 100 MB of L2 traffic at 16 tokens for a 2 MB router). K is split over
// gridDim.y with the dense linear's deterministic last-arrival sum (ws, cnt). y [M, N] f32;
// K % 8 == 0, ldx % 4 == 0.
#define F32X_KC 256

// The router block's weight share (32 rows, its K chunks), prefetched into L2 before
// `pdl_enter()` (AMDAHL_PDL=2 builds) by the first token block only: a thread per row.
template <int FMT>
__device__ __forceinline__ void f32x_prefetch(const WDesc& d, int N, int K) {
#ifdef PDL_PREFETCH
    const i64 rb = row_bytes<FMT>(K);
    if (rb == 0 || rb % 16 != 0 || blockIdx.z != 0) return;
    const int n = blockIdx.x * 32 + (int)threadIdx.x, ks = gridDim.y;
    const int chunks = (K + F32X_KC - 1) / F32X_KC, per = (chunks + ks - 1) / ks;
    const i64 esz = rb / K;  // bytes per element (2-byte formats only reach here with K % 8 == 0)
    const i64 lo = (i64)blockIdx.y * per * F32X_KC * esz, hi = min(rb, lo + (i64)per * F32X_KC * esz);
    if (threadIdx.x < 32 && n < N && lo < hi) prefetch_l2_own(d.w + n * rb + lo, hi - lo);
#endif
}
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
        f32x_prefetch<FMT>(d, N, K);                                                      \
        pdl_enter();                                                                      \
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
