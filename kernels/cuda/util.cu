// Device-side helpers: deterministic random fills for dummy-weight benchmarks (a model of real
// V4-Flash widths is generated on the GPU, never on the host), and small copies.

__device__ __forceinline__ u32 hash_u32(u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (u32)x;
}

// Uniform f32 in [-1, 1) from (seed, index).
__device__ __forceinline__ float hash_unit(u64 seed, u64 i) {
    return (float)(hash_u32(seed * 0x9e3779b97f4a7c15ull + i) >> 8) * (2.f / 16777216.f) - 1.f;
}

// Random bytes; `kind` 0: any byte; 1: E4M3 codes with exponent field in [lo, hi] (finite,
// moderate magnitudes); 2 / 3: scale bytes (E8M0 / positive E4M3) uniform in [lo, hi].
extern "C" __global__ void fill_bytes(u8* __restrict__ p, i64 n, u64 seed, int kind, int lo, int hi) {
    pdl_enter();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        u32 r = hash_u32(seed * 0x9e3779b97f4a7c15ull + (u64)i);
        u8 b = (u8)(r & 0xff);
        if (kind == 1) b = (u8)((r & 0x80u) | ((u32)(lo + (int)((r >> 8) % (u32)(hi - lo + 1))) << 3) | ((r >> 16) & 7u));
        if (kind == 2 || kind == 3) b = (u8)(lo + (int)(r % (u32)(hi - lo + 1)));
        p[i] = b;
    }
}

// Uniform values in [-scale, scale) + offset: bf16 (is_bf16) or f32.
extern "C" __global__ void fill_values(void* __restrict__ p, i64 n, u64 seed, float scale,
                                       float offset, int is_bf16) {
    pdl_enter();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float v = hash_unit(seed, (u64)i) * scale + offset;
        if (is_bf16) reinterpret_cast<u16*>(p)[i] = f2bf(v);
        else reinterpret_cast<float*>(p)[i] = v;
    }
}

// Random ints in [0, mod).
extern "C" __global__ void fill_ints(int* __restrict__ p, i64 n, u64 seed, int mod) {
    pdl_enter();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        p[i] = (int)(hash_u32(seed * 0x9e3779b97f4a7c15ull + (u64)i) % (u32)mod);
}

// Streaming copy (bandwidth probe): dst[i] = src[i] as 16-byte words.
extern "C" __global__ void copy_u128(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    pdl_enter();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// One-shot read (latency probe of `amdahl profile`): n 16-byte words read once, each thread
// issuing 4 loads per round before it folds them, the grid striding over the words. Nothing is
// stored unless the fold equals `never` (the host reads a zeroed buffer, so it cannot), which
// keeps the loads live. With n = 0 it is an empty kernel: the cost of a launch alone.
extern "C" __global__ void probe_read(const uint4* __restrict__ src, i64 n, u32 never, u32* __restrict__ sink) {
    pdl_enter();
    const i64 stride = (i64)gridDim.x * blockDim.x;
    u32 acc = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = i + j * stride < n ? __ldg(src + i + j * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < 4; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == never) sink[0] = acc;
}

// L2 prefetch of up to four byte ranges (amdahl-kernels util::PREFETCH_*), launched on its own
// stream ahead of the kernels that read them: thread i issues piece i of every range (a bulk
// prefetch of PREFETCH_PIECE bytes by `prefetch_piece`, nothing kept in registers), so the whole
// list is requested at once and the block exits. sm_90+; elsewhere it does nothing.
#define PREFETCH_THREADS 256
extern "C" __global__ void __launch_bounds__(PREFETCH_THREADS) prefetch_l2_ranges(const char* p0, i64 n0, const char* p1, i64 n1,
                                                                     const char* p2, i64 n2, const char* p3, i64 n3) {
    pdl_enter();
#if __CUDA_ARCH__ >= 900
    const char* p[4] = {p0, p1, p2, p3};
    const i64 n[4] = {n0, n1, n2, n3};
    i64 piece = (i64)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const i64 pieces = (n[r] + PREFETCH_PIECE - 1) / PREFETCH_PIECE;
        if (piece < pieces) {
            prefetch_piece(p[r], piece * PREFETCH_PIECE, n[r]);
            return;
        }
        piece -= pieces;
    }
#endif
}

// L2 prefetch of the active experts' share of one stacked weight: the MoE plan's active list
// (`act_list`: count, then expert ids) gives the experts; expert e's codes are
// [w + e·w_bytes, + w_bytes) and its scales [s + e·s_bytes, + s_bytes) (s_bytes 0: none). Thread
// i issues piece i of the (slot, codes then scales) sequence, for the first `slots` active
// experts.
extern "C" __global__ void __launch_bounds__(PREFETCH_THREADS) prefetch_l2_experts(
    const int* __restrict__ act_list, int slots, const char* w, i64 w_bytes, const char* s, i64 s_bytes) {
    pdl_enter();
#if __CUDA_ARCH__ >= 900
    const i64 wp = (w_bytes + PREFETCH_PIECE - 1) / PREFETCH_PIECE;
    const i64 sp = (s_bytes + PREFETCH_PIECE - 1) / PREFETCH_PIECE;
    const i64 piece = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 slot = piece / (wp + sp), q = piece % (wp + sp);
    if (slot >= min(act_list[0], slots)) return;
    const int e = act_list[1 + slot];
    if (q < wp) prefetch_piece(w + e * w_bytes, q * PREFETCH_PIECE, w_bytes);
    else prefetch_piece(s + e * s_bytes, (q - wp) * PREFETCH_PIECE, s_bytes);
#endif
}
