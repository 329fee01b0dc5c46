// FP8 linears on FP8 warpgroup MMAs (sm_90a `wgmma … e4m3.e4m3`): the reference's own FP8 GEMM
// (model-spec §5.4). The activations are quantized per token in 1×128 groups to e4m3 with
// power-of-two scales, s = 2^ceil(log2(max(amax, 1e-4) / 448)), and the GEMM is
// y[m, n] = Σ_kb (Σ_k q_x · q_w) · s_x[m, kb] · s_w[n / 128, kb] with f32 accumulation. The
// weights never pass through the SMs' registers: they are copied into shared memory in the
// 128-byte swizzle and read there by the tensor cores as the A operand (64 rows per MMA), the
// quantized activations (N = 8, 16, 32 or 64 tokens) as B. The register kernels of linear.cu
// decode each code to bf16 first (24 instructions per m16n8k16 MMA).
//
// Block (row tiles, K split ky, matrix e), one warpgroup: it quantizes its K share of the
// activations into shared memory during its first tile (each k-block loaded a stage ahead), and
// streams 64-row × 128-column weight stages (8 KiB) of its row tiles blockIdx.x,
// blockIdx.x + gridDim.x, … through a ring of 8 (64 tokens: 5) by `cp.async`. Per stage: four m64nNBk32 MMAs into a partial, whose f32 values are added to the
// tile's accumulators times s_x · s_w once per 128 columns. Split K (gridDim.y > 1): partial
// tiles in the split workspace, the last block of a tile to arrive sums them in split order and
// writes y (deterministic, as linear.cu).
//
// Compiled after linear_formats.cuh (WDesc, formats), linear_shared.cuh (the split workspace)
// and wgmma.cuh (descriptors, fences, the swizzle).

#define LWG_ROWS 64                      // weight rows per tile (the MMA's M)
#define LWG_STAGE (LWG_ROWS * 128)       // bytes of one stage: 64 rows × 128 columns
#define LWG_STAGES 8                     // stages in the ring (up to 32 tokens)
#define LWG_STAGES_N64 5                 // at 64 tokens (64 KiB of activations beside the ring)
#define LWG_THREADS 128                  // one warpgroup

// The exponent field e of a 128-column group's scale 2^(e-127): that of max(amax, 1e-4) / 448
// rounded up (quant/act.rs `group_scale`; IEEE division, as the CPU's).
__device__ __forceinline__ u32 act_scale_exp(float amax) {
    const u32 sb = __float_as_uint(fmaxf(amax, 1e-4f) / 448.f);
    return (sb >> 23) + ((sb & 0x7fffffu) != 0u);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// d (64 × NB, f32) = [d +] A · B: A (64 × 32 e4m3) and B (NB × 32 e4m3), K-major in shared
// memory in the 128-byte swizzle.
#define LWG_MMA(NB, REGS, IA, IB, IP, ...)                                                        \
    __device__ __forceinline__ void wg_fp8_n##NB(float (&d)[NB / 2], u32 da, u32 db, int acc) { \
        asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %" #IP ", 0;\n"          \
                     "mov.b64 da, {%" #IA ", " WG_DESC_HI "};\nmov.b64 db, {%" #IB ", " WG_DESC_HI "};\n" \
                     "wgmma.mma_async.sync.aligned.m64n" #NB "k32.f32.e4m3.e4m3 {" REGS "}, da, db, p, 1, 1;\n}\n" \
                     : __VA_ARGS__                                                                \
                     : "r"(da), "r"(db), "r"(acc));                                               \
    }
LWG_MMA(8, "%0, %1, %2, %3", 4, 5, 6, WG_F4(d, 0))
LWG_MMA(16, "%0, %1, %2, %3, %4, %5, %6, %7", 8, 9, 10, WG_F4(d, 0), WG_F4(d, 4))
LWG_MMA(32, "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15", 16, 17, 18, WG_F16(d, 0))
LWG_MMA(64,
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31",
        32, 33, 34, WG_F16(d, 0), WG_F16(d, 16))

template <int NB>
__device__ __forceinline__ void wg_fp8(float (&d)[NB / 2], u32 da, u32 db, int acc) {
    if constexpr (NB == 8) wg_fp8_n8(d, da, db, acc);
    else if constexpr (NB == 16) wg_fp8_n16(d, da, db, acc);
    else if constexpr (NB == 32) wg_fp8_n32(d, da, db, acc);
    else wg_fp8_n64(d, da, db, acc);
}

// Two floats to two e4m3 codes (lo in the low byte), nearest even, saturating at ±448.
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// k-block b of the activations (rows [0, M), zeros for rows M..NB; columns k0 + 128·b …) in
// registers: per round r (of NB / 8), a half-warp holds row 8r + 2·warp + half, 8 columns per
// lane (16 bytes). Loaded one stage before `lwg_quant_kb` needs them, so their latency hides
// behind the stage's wait and MMAs.
template <int NB>
__device__ __forceinline__ void lwg_load_kb(const u16* __restrict__ x, int ldx, int M, int k0, uint4 (&v)[NB / 8]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < NB / 8; r++) {
        const int m = 8 * r + 2 * warp + (lane >> 4);
        v[r] = make_uint4(0, 0, 0, 0);
        if (m < M) v[r] = *reinterpret_cast<const uint4*>(x + (i64)m * ldx + k0 + (lane & 15) * 8);
    }
}

// The loaded k-block b as e4m3 codes in the 128-byte swizzle (k-block b: NB rows of 128 bytes
// at xq + b·NB·128) and its per-row scales xs[b·NB + m]: a half-warp's 128 columns are one
// group (`act_scale_exp`).
template <int NB>
__device__ __forceinline__ void lwg_quant_kb(const uint4 (&v)[NB / 8], int M, int b, u8* xq, float* xs) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hl = lane & 15;
#pragma unroll
    for (int r = 0; r < NB / 8; r++) {
        const int m = 8 * r + 2 * warp + (lane >> 4);
        const u32 w[4] = {v[r].x, v[r].y, v[r].z, v[r].w};
        float f[8], a = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = bf_lo(w[i]);
            f[2 * i + 1] = bf_hi(w[i]);
            a = fmaxf(a, fmaxf(fabsf(f[2 * i]), fabsf(f[2 * i + 1])));
        }
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        const u32 ex = act_scale_exp(a);
        const float inv = __uint_as_float((254u - ex) << 23);
        uint2 q;
        q.x = e4m3x2(f[0] * inv, f[1] * inv) | (e4m3x2(f[2] * inv, f[3] * inv) << 16);
        q.y = e4m3x2(f[4] * inv, f[5] * inv) | (e4m3x2(f[6] * inv, f[7] * inv) << 16);
        *reinterpret_cast<uint2*>(xq + b * (NB * 128) + sw128(m, hl >> 1) + (hl & 1) * 8) = q;
        if (hl == 0) xs[b * NB + m] = m < M ? __uint_as_float(ex << 23) : 0.f;
    }
}

// The weight scale of row n at k-block kb (f32; FP8T: 1, its tensor scale is applied at the end).
template <int FMT>
__device__ __forceinline__ float lwg_wscale(const WDesc& d, int e, int n, int kb) {
    if (FMT == FMT_FP8T) return 1.f;
    const i64 si = (i64)((n + d.row_phase) >> 7) * d.s_ld + kb;
    if (FMT == FMT_FP8B_E8M0) return __uint_as_float((u32)d.s[e * d.s_stride + si] << 23);
    return reinterpret_cast<const float*>(d.s + e * d.s_stride)[si];
}

#endif

// x [M, ldx] bf16 (M ≤ NB; matrix e reads columns [e·K, (e+1)·K)) → y [M, ldy] (matrix e writes
// columns [e·N, (e+1)·N)), f32 or bf16. K % 128 == 0, kc % 128 == 0 (columns per split).
template <int FMT, int NB>
__device__ void linear_wg_kernel(WDesc d, const u16* __restrict__ x, int ldx, void* y, int ldy, int M,
                                 int N, int K, int out_bf16, int kc, float* __restrict__ ws,
                                 unsigned* __restrict__ cnt) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int S = NB >= 64 ? LWG_STAGES_N64 : LWG_STAGES;
    extern __shared__ __align__(16) u8 smem_raw[];
    __shared__ int last;
    // The swizzle is a function of address bits 4–9: operands start on 1024-byte boundaries.
    u8* ring = smem_raw + ((1024 - ((u32)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    u8* xq = ring + S * LWG_STAGE;
    float* xs = reinterpret_cast<float*>(xq + NB * kc);
    const int e = blockIdx.z, ky = blockIdx.y, ks = gridDim.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int k_lo = ky * kc, kbn = (min(K, k_lo + kc) - k_lo) / 128;
    const int tiles = (N + LWG_ROWS - 1) / LWG_ROWS;
    const int mine = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int total = mine * kbn;
    const u8* wb = d.w + e * d.w_stride;
    // Stage q: k-block q % kbn of tile blockIdx.x + (q / kbn)·gridDim.x; 16-byte piece i of it is
    // row i / 8, piece i % 8 (a warp copies 4 rows of 128 contiguous bytes).
    auto issue = [&](int q) {
        if (q < total) {
            const int tile = blockIdx.x + (q / kbn) * gridDim.x, b = q % kbn;
            u8* dst = ring + (q % S) * LWG_STAGE;
#pragma unroll
            for (int u = 0; u < LWG_STAGE / 16 / LWG_THREADS; u++) {
                const int i = tid + u * LWG_THREADS, r = i >> 3, j = i & 7;
                const int n = min(tile * LWG_ROWS + r, N - 1);
                cp_async16(dst + sw128(r, j), wb + (i64)n * K + k_lo + b * 128 + j * 16);
            }
        }
        cp_async_commit();
    };
    for (int q = 0; q < S - 1; q++) issue(q);
    // The activations are quantized k-block by k-block during the first tile, each loaded one
    // stage ahead.
    x += (i64)e * K + k_lo;
    uint4 xv[NB / 8];
    if (total > 0) lwg_load_kb<NB>(x, ldx, M, 0, xv);
    y = out_bf16 ? (void*)(reinterpret_cast<u16*>(y) + (i64)e * N) : (void*)(reinterpret_cast<float*>(y) + (i64)e * N);
    const float post = FMT == FMT_FP8T ? d.g[e] : 1.f;
    const u32 dx = wg_desc_lo(xq, 16);
    float acc[NB / 2], part[NB / 2];
#pragma unroll
    for (int i = 0; i < NB / 2; i++) acc[i] = 0.f;
    // This thread's rows' weight scales at stage q, loaded a stage ahead (a dependent global
    // load per stage was the kernel's most sampled stall).
    auto wscales = [&](int q, float* s0, float* s1) {
        if (q >= total) return;
        const int r = blockIdx.x * LWG_ROWS + (q / kbn) * gridDim.x * LWG_ROWS + warp * 16 + g;
        *s0 = lwg_wscale<FMT>(d, e, min(r, N - 1), k_lo / 128 + q % kbn);
        *s1 = lwg_wscale<FMT>(d, e, min(r + 8, N - 1), k_lo / 128 + q % kbn);
    };
    float nsw0 = 0.f, nsw1 = 0.f;
    wscales(0, &nsw0, &nsw1);
    for (int q = 0; q < total; q++) {
        const int tile = blockIdx.x + (q / kbn) * gridDim.x, b = q % kbn;
        const int r0 = tile * LWG_ROWS + warp * 16 + g;
        const float sw0 = nsw0, sw1 = nsw1;
        wscales(q + 1, &nsw0, &nsw1);
        if (q < kbn) {
            lwg_quant_kb<NB>(xv, M, q, xq, xs);
            if (q + 1 < kbn) lwg_load_kb<NB>(x, ldx, M, (q + 1) * 128, xv);
        }
        cp_async_wait<S - 2>();
        fence_async_smem();
        __syncthreads();
        // The stage read in the previous round is free: every thread's MMAs on it completed.
        issue(q + S - 1);
        const u32 da = wg_desc_lo(ring + (q % S) * LWG_STAGE, 16);
        const u32 db = dx + ((b * NB * 128) >> 4);
        wg_fence();
#pragma unroll
        for (int s = 0; s < 4; s++) wg_fp8<NB>(part, da + 2 * s, db + 2 * s, s);
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < NB / 2; i++) wg_pin(part[i]);
        // part[4c + h]: row r0 (+8 for h ≥ 2), token 8c + 2·tq + (h & 1).
#pragma unroll
        for (int c = 0; c < NB / 8; c++) {
            const float sx0 = xs[b * NB + 8 * c + 2 * tq], sx1 = xs[b * NB + 8 * c + 2 * tq + 1];
            acc[4 * c] += part[4 * c] * (sw0 * sx0);
            acc[4 * c + 1] += part[4 * c + 1] * (sw0 * sx1);
            acc[4 * c + 2] += part[4 * c + 2] * (sw1 * sx0);
            acc[4 * c + 3] += part[4 * c + 3] * (sw1 * sx1);
        }
        if (b + 1 < kbn) continue;
        // The tile's last k-block: its sum over the splits, then y.
        const int tid_tile = e * tiles + tile;
        if (ks > 1) {
            float* my = ws + ((i64)tid_tile * ks + ky) * (LWG_ROWS * NB) + tid * (NB / 2);
#pragma unroll
            for (int i = 0; i < NB / 2; i++) my[i] = acc[i];
            __threadfence();
            __syncthreads();
            if (tid == 0) last = atomicAdd(&cnt[tid_tile], 1u) == (unsigned)ks - 1;
            __syncthreads();
            if (last) {
                __threadfence();
                const float* all = ws + (i64)tid_tile * ks * (LWG_ROWS * NB) + tid * (NB / 2);
                // The splits in order, NB / 2 loads in flight per split (not one).
#pragma unroll
                for (int i = 0; i < NB / 2; i++) acc[i] = 0.f;
#pragma unroll 1
                for (int p = 0; p < ks; p++) {
                    float v[NB / 2];
#pragma unroll
                    for (int i = 0; i < NB / 2; i++) v[i] = __ldcg(all + (i64)p * (LWG_ROWS * NB) + i);
#pragma unroll
                    for (int i = 0; i < NB / 2; i++) acc[i] += v[i];
                }
                if (tid == 0) cnt[tid_tile] = 0;
            }
        }
        if (ks == 1 || last) {
#pragma unroll
            for (int i = 0; i < NB / 2; i++) {
                const int n = r0 + ((i & 2) ? 8 : 0), m = 8 * (i >> 2) + 2 * tq + (i & 1);
                if (n < N && m < M) {
                    const float v = acc[i] * post;
                    if (out_bf16) reinterpret_cast<u16*>(y)[(i64)m * ldy + n] = f2bf(v);
                    else reinterpret_cast<float*>(y)[(i64)m * ldy + n] = v;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < NB / 2; i++) acc[i] = 0.f;
    }
    cp_async_wait<0>();
#endif
}

#define LWG_ENTRY(NAME, FMT, NB)                                                                        \
    extern "C" __global__ void __launch_bounds__(LWG_THREADS) linear_wg_##NAME##_n##NB(                 \
        WDesc d, const u16* x, int ldx, void* y, int ldy, int M, int N, int K, int out_bf16, int kc,     \
        float* ws, unsigned* cnt) {                                                                      \
        pdl_enter();                                                                                     \
        linear_wg_kernel<FMT, NB>(d, x, ldx, y, ldy, M, N, K, out_bf16, kc, ws, cnt);                    \
    }

#define LWG_FORMAT(NAME, FMT) \
    LWG_ENTRY(NAME, FMT, 8)   \
    LWG_ENTRY(NAME, FMT, 16)  \
    LWG_ENTRY(NAME, FMT, 32)  \
    LWG_ENTRY(NAME, FMT, 64)

LWG_FORMAT(fp8b_e8m0, FMT_FP8B_E8M0)
LWG_FORMAT(fp8b_f32, FMT_FP8B_F32)
LWG_FORMAT(fp8t, FMT_FP8T)

// The FP8 activations of linear_wg for every other kernel that multiplies FP8 weights
// (launch/linear_wg.rs `fp8_rows`): rows [0, M) of x (columns [0, W), ld ldx) to out (ld W) as
// the bf16 values e4m3(x / s) · s (exact in bf16), groups of 128 columns restarting at every
// multiple of seg (a grouped linear's matrices). Block: 4 warps, a warp per (row, group) with 4
// columns per lane; grid (⌈groups per row / 4⌉, M). Portable: the e4m3 rounding by scaling, not
// by the sm_89+ convert (both round to nearest even; the GPU tests check both against the CPU).
__device__ __forceinline__ float e4m3_round(float v) {
    const float a = fabsf(v);
    const int e = max((int)((__float_as_uint(a) >> 23) & 0xff) - 127, -6);  // subnormals: 2^-9 steps
    const float up = __uint_as_float((u32)(130 - e) << 23), step = __uint_as_float((u32)(e + 124) << 23);
    return copysignf(fminf(rintf(a * up) * step, 448.f), v);
}

extern "C" __global__ void __launch_bounds__(128) act_quant_rows(const u16* __restrict__ x, int ldx, int M, int W,
                                                                int seg, u16* __restrict__ out) {
    pdl_enter();
    const int lane = threadIdx.x & 31, m = blockIdx.y;
    const int per_seg = (seg + 127) / 128;
    const int gi = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (m >= M || gi >= per_seg * (W / seg)) return;
    const int c0 = (gi / per_seg) * seg + (gi % per_seg) * 128;
    const int c1 = min(c0 + 128, (gi / per_seg + 1) * seg);
    float v[4];
    float a = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int c = c0 + lane * 4 + i;
        v[i] = c < c1 ? bf2f(x[(i64)m * ldx + c]) : 0.f;
        a = fmaxf(a, fabsf(v[i]));
    }
    const u32 ex = act_scale_exp(warp_max(a));
    const float s = __uint_as_float(ex << 23), inv = __uint_as_float((254u - ex) << 23);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int c = c0 + lane * 4 + i;
        if (c < c1) out[(i64)m * W + c] = f2bf(e4m3_round(v[i] * inv) * s);
    }
}
