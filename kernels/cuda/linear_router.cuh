// The f32-input router linear (`linear_f32x_*` entries in linear.cu).

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
