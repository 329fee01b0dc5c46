// Read-rate probes for a decode linear's weight stream (tools/gpu/ring_probe.py compiles them
// with NVRTC and times them). A weight of rg·64 rows × ld bytes is read once as tiles of 64 rows
// × K bytes (rg row groups × ld / K column splits): a block takes tiles blockIdx.x,
// blockIdx.x + gridDim.x, … and walks each in 64 × 128-byte stages (the stage of linear_wg.cu),
// stored row-major (tiled = 0: 64 pieces of 128 bytes at an ld-byte stride) or stage by stage
// (tiled = 1: 8 KiB contiguous). Nothing is computed: one word per
// thread per stage is folded so the loads stay live, stored only if it equals `never`.
typedef unsigned int u32;
typedef unsigned char u8;
typedef long long i64;

#define ROWS 64
#define STAGE (ROWS * 128)
#define THREADS 128

// Tile t: row group t % rg, columns [(t / rg)·K, +K).
__device__ __forceinline__ const u8* stage_src(const u8* w, int tile, int b, int K, int i, int tiled, int rg, int ld) {
    const int r = i >> 3, j = i & 7;
    if (tiled) return w + ((i64)tile * (K / 128) + b) * STAGE + r * 128 + j * 16;
    return w + ((i64)(tile % rg) * ROWS + r) * ld + (tile / rg) * K + b * 128 + j * 16;
}

// linear_wg's ring: S stages by cp.async (16 bytes, L2 only), wait for the oldest, a block
// barrier, the next stage issued, the stage read from shared memory.
template <int S>
__device__ void ring_body(const u8* __restrict__ w, int tiles, int K, int tiled, int rg, int ld, u32 never, u32* sink) {
    extern __shared__ __align__(16) u8 smem[];
    const int tid = threadIdx.x, kbn = K / 128;
    const int mine = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int total = mine * kbn;
    auto issue = [&](int q) {
        if (q < total) {
            const int tile = blockIdx.x + (q / kbn) * gridDim.x, b = q % kbn;
            u8* dst = smem + (q % S) * STAGE;
#pragma unroll
            for (int u = 0; u < STAGE / 16 / THREADS; u++) {
                const int i = tid + u * THREADS;
                const u32 d = (u32)__cvta_generic_to_shared(dst + i * 16);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(stage_src(w, tile, b, K, i, tiled, rg, ld)));
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    for (int q = 0; q < S - 1; q++) issue(q);
    u32 acc = 0;
    for (int q = 0; q < total; q++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));
        __syncthreads();
        issue(q + S - 1);
        acc ^= reinterpret_cast<const u32*>(smem + (q % S) * STAGE)[tid * 16];
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    if (acc == never) sink[0] = acc;
}

// The same stages by plain 16-byte loads into registers, U stages in flight per thread.
template <int U>
__device__ void ldg_body(const u8* __restrict__ w, int tiles, int K, int tiled, int rg, int ld, u32 never, u32* sink) {
    const int tid = threadIdx.x, kbn = K / 128;
    const int mine = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int total = mine * kbn;
    u32 acc = 0;
    for (int q0 = 0; q0 < total; q0 += U) {
        uint4 v[U][4];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int q = q0 + u;
            const int tile = blockIdx.x + (q / kbn) * gridDim.x, b = q % kbn;
#pragma unroll
            for (int p = 0; p < 4; p++) {
                v[u][p] = make_uint4(0, 0, 0, 0);
                if (q < total) {
                    const u8* s = stage_src(w, tile, b, K, tid + p * THREADS, tiled, rg, ld);
                    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=r"(v[u][p].x), "=r"(v[u][p].y), "=r"(v[u][p].z), "=r"(v[u][p].w)
                                 : "l"(s));
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int p = 0; p < 4; p++) acc ^= v[u][p].x ^ v[u][p].y ^ v[u][p].z ^ v[u][p].w;
    }
    if (acc == never) sink[0] = acc;
}

#define RING(S) \
    extern "C" __global__ void __launch_bounds__(THREADS) ring_s##S(const u8* w, int tiles, int K, int tiled, int rg, int ld, u32 never, u32* sink) { \
        ring_body<S>(w, tiles, K, tiled, rg, ld, never, sink); }
#define LDG(U) \
    extern "C" __global__ void __launch_bounds__(THREADS) ldg_u##U(const u8* w, int tiles, int K, int tiled, int rg, int ld, u32 never, u32* sink) { \
        ldg_body<U>(w, tiles, K, tiled, rg, ld, never, sink); }
RING(4)
RING(8)
RING(16)
LDG(2)
LDG(4)
LDG(8)
