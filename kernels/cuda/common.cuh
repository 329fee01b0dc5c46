// Shared device helpers for every amdahl kernel module. NVRTC compiles each module with this
// header prepended (no system headers are needed): bf16 / e4m3 / e8m0 / e2m1 conversions, warp
// and block reductions, and the fixed-width integer names the modules use.
//
// Conventions: activations are f32 or bf16 (stored as `unsigned short`), row-major; every size
// and offset that varies between steps is read from device memory, so a captured CUDA graph
// replays correctly with new metadata.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define NEG_INF (__int_as_float(0xff800000))
#define POS_INF (__int_as_float(0x7f800000))

__device__ __forceinline__ float bf2f(u16 x) { return __uint_as_float(((u32)x) << 16); }

// Round to nearest even; NaN stays NaN. sm_80+: the hardware converts (one instruction per value
// or pair; the integer sequence below took ~6 ops per value, ~10% of the sparse attention's
// instructions in its q and P splits); the same bits for every non-NaN input.
__device__ __forceinline__ u16 f2bf(float f) {
#if __CUDA_ARCH__ >= 800
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
#endif
}

__device__ __forceinline__ u32 pack_bf2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return (u32)f2bf(lo) | ((u32)f2bf(hi) << 16);
#endif
}

__device__ __forceinline__ float bf_lo(u32 p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float bf_hi(u32 p) { return __uint_as_float(p & 0xffff0000u); }

__device__ __forceinline__ float f16_to_f32(u16 h) {
    u32 s = (u32)(h >> 15) << 31;
    u32 e = (h >> 10) & 0x1f;
    u32 m = h & 0x3ff;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;  // 2^-24
        return s ? -v : v;
    }
    if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
    return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
}

// FP8 E4M3FN: bias 7, no infinities, S.1111.111 = NaN, subnormals m·2^-9.
__device__ __forceinline__ float e4m3_to_f32(u8 b) {
    u32 s = (u32)(b >> 7) << 31;
    u32 e = (b >> 3) & 0xf;
    u32 m = b & 0x7;
    if (e == 0) {
        float v = (float)m * 0.001953125f;  // 2^-9
        return s ? -v : v;
    }
    if (e == 15 && m == 7) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(s | ((e + 120) << 23) | (m << 20));
}

// E8M0 scale: 2^(b-127); 0xff (NaN) is refused at load time.
__device__ __forceinline__ float e8m0_to_f32(u8 b) {
    if (b == 0) return __uint_as_float(0x00400000u);  // 2^-127
    return __uint_as_float(((u32)b) << 23);
}

// FP4 E2M1 code (4 bits, sign in bit 3) to f32, without a table (no local memory).
__device__ __forceinline__ float e2m1_to_f32(u32 c) {
    const u32 m = c & 7u;
    const u32 bits = (m < 2u) ? (m ? 0x3f000000u : 0u) : (((126u + (m >> 1)) << 23) | ((m & 1u) << 22));
    return __uint_as_float(bits | ((c & 8u) << 28));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block; `scratch` holds >= 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    // The warps' sums by one more butterfly (every lane, hence every thread, gets the same
    // bits: each level adds the same two values), not a serial loop over nw of them.
    return warp_sum(lane < nw ? scratch[lane] : 0.f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < nw ? scratch[lane] : NEG_INF);
}

// Exclusive prefix sum of `v` over the block (in thread order); `scratch` holds >= 33 ints.
// Returns the exclusive prefix; `*total` gets the block total.
__device__ __forceinline__ int block_exclusive_scan(int v, int* scratch, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) scratch[warp] = x;
    __syncthreads();
    // Warp 0 scans the warp totals (lanes past the last warp add 0, so lane 31 ends with the sum).
    if (warp == 0) {
        const int w = lane < nw ? scratch[lane] : 0;
        int s = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        scratch[lane] = s - w;
        if (lane == 31) scratch[32] = s;
    }
    __syncthreads();
    int r = scratch[warp] + x - v;
    *total = scratch[32];
    __syncthreads();  // before the scratch's next use
    return r;
}

// Order-preserving map of a float to an unsigned key (larger float => larger key).
__device__ __forceinline__ u32 float_key(float f) {
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Rotary embedding of one (even, odd) pair by angle pos * inv_freq (angles formed in f32,
// cos/sin in f64 like the CPU reference), times `scale`; `sign` -1 rotates back.
__device__ __forceinline__ void rope_pair(float* x0, float* x1, float inv_freq, int pos,
                                          float scale, float sign) {
    float a = inv_freq * (float)pos;
    float c = (float)cos((double)a) * scale;
    float s = sign * (float)sin((double)a) * scale;
    float a0 = *x0, a1 = *x1;
    *x0 = a0 * c - a1 * s;
    *x1 = a1 * c + a0 * s;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

// Tensor-core pieces: c += a · b on m16n8k16 bf16 fragments (f32 accumulate), ldmatrix of four
// 8×8 b16 matrices from shared memory (row addresses from lanes 8i..8i+7 for matrix i; .trans
// transposes each), and 16-byte cp.async copies global → shared with their group waits.
__device__ __forceinline__ void mma_bf16(float c[4], const u32 a[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same on f16 fragments.
__device__ __forceinline__ void mma_f16(float c[4], const u32 a[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(u32 r[4], const void* p) {
    const u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void ldsm_x2(u32 r[2], const void* p) {
    const u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(u32 r[4], const void* p) {
    const u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const u32 a = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}

// The same with zero fill when !valid (nothing read), and a 4-byte copy (through L1).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const u32 a = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const u32 a = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(gmem));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Programmatic dependent launch (sm_90+; modules compiled with AMDAHL_PDL defined, which the
// host then launches as programmatic dependents; otherwise these helpers are empty). Every kernel
// calls `pdl_enter()` first: it waits until the kernel before it on the stream has finished and
// its writes are visible, then lets the next kernel start launching, so the next grid's blocks
// are resident and waiting when this one ends instead of being launched after it. Before
// `pdl_enter()` a kernel may only prefetch weights into L2 (`prefetch_l2`, AMDAHL_PDL=2 builds):
// they do not depend on earlier kernels, and the prefetch overlaps the previous kernel.
#if defined(AMDAHL_PDL) && __CUDA_ARCH__ >= 900
#define PDL_ON 1
#if AMDAHL_PDL >= 2
#define PDL_PREFETCH 1
#endif
#endif

__device__ __forceinline__ void pdl_enter() {
#ifdef PDL_ON
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// `pdl_enter()` for the streamed dense linears: in level-2 builds they enter without waiting and
// wait in `stream_core` after issuing their first stages of weights (linear_stream.cu).
__device__ __forceinline__ void pdl_enter_after_weights() {
#ifndef PDL_PREFETCH
    pdl_enter();
#endif
}

#define PREFETCH_PIECE 4096  // bytes per bulk L2 prefetch (amdahl-kernels util::PREFETCH_PIECE)

// One bulk L2 prefetch (sm_90+; nothing before): the PREFETCH_PIECE piece of [c, c + bytes) at
// offset o, less its last partial 16 bytes (a hint, not a copy: bulk sizes are multiples of 16).
__device__ __forceinline__ void prefetch_piece(const char* c, i64 o, i64 bytes) {
#if __CUDA_ARCH__ >= 900
    const u32 n = (u32)min((i64)PREFETCH_PIECE, bytes - o) & ~15u;
    if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c + o), "r"(n) : "memory");
#endif
}

// Prefetches [p, p + bytes) into L2 in AMDAHL_PDL=2 builds (p and bytes multiples of 16):
// `prefetch_l2` with the block's threads taking consecutive 4 KiB pieces, `prefetch_l2_own` by
// the calling thread alone.
__device__ __forceinline__ void prefetch_l2(const void* p, i64 bytes) {
#ifdef PDL_PREFETCH
    const char* c = static_cast<const char*>(p);
    for (i64 o = (i64)threadIdx.x * PREFETCH_PIECE; o < bytes; o += (i64)blockDim.x * PREFETCH_PIECE) prefetch_piece(c, o, bytes);
#endif
}

__device__ __forceinline__ void prefetch_l2_own(const void* p, i64 bytes) {
#ifdef PDL_PREFETCH
    const char* c = static_cast<const char*>(p);
    for (i64 o = 0; o < bytes; o += PREFETCH_PIECE) prefetch_piece(c, o, bytes);
#endif
}
