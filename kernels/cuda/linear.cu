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
// Compiled before this file, in order (amdahl-kernels `LINEAR`): the formats, their decodes and
// `WDesc` (linear_formats.cuh), the split workspace and the SwiGLU (linear_shared.cuh), the MMA
// loop, the warps' reduction and the row bytes (linear_core.cuh), the persistent linear
// (linear_persist.cuh), the expert kernels (linear_experts.cuh) and the f32-input router
// (linear_router.cuh). This file holds the dense linear, its L2 prefetch and every entry point.
// The streamed decode kernels are linear_stream.cu, the tiled GEMM for many tokens linear_gemm.cu.

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

#define LINEAR_PERSIST_ENTRY(NAME, FMT)                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) linear_##NAME##_nt2_p(                         \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int out_bf16) {           \
        pdl_enter();                                                                                     \
        linear_persist_kernel<FMT>(d, x, ldx, y, ldy, M, N, K, out_bf16);                                \
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
