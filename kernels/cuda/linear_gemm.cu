// Tiled GEMM for many tokens (decode batches beyond 32, prefill chunks).
//
// The decode kernels of linear.cu give a block 16 weight rows and read x straight from L2 for
// each of them: at 64 tokens the LM head re-reads x (512 KB) per 16 rows, 4 GB of L2 traffic for 1 GB of weights,
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
    pdl_enter();
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
    pdl_enter();
    const i64 n = (i64)M * I;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 m = i / I, j = i % I;
        act[i] = f2bf(swiglu(h[m * 2 * I + j], h[m * 2 * I + I + j], limit));
    }
}

#define GEMM_ENTRY(NAME, FMT)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, GEMM_MIN_BLOCKS(FMT, 64)) gemm_##NAME##_m64(       \
        WDesc d, const u16* x, int ldx, int xe, void* y, int ldy, int M, int N, int K, int out_bf16,     \
        int splits, float* ws) { pdl_enter();                                                            \
        gemm_kernel<FMT, 64>(d, x, ldx, xe, y, ldy, M, N, K, out_bf16, splits, ws);                      \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, GEMM_MIN_BLOCKS(FMT, 128)) gemm_##NAME##_m128(       \
        WDesc d, const u16* x, int ldx, int xe, void* y, int ldy, int M, int N, int K, int out_bf16,     \
        int splits, float* ws) { pdl_enter();                                                            \
        gemm_kernel<FMT, 128>(d, x, ldx, xe, y, ldy, M, N, K, out_bf16, splits, ws);                     \
    }

GEMM_ENTRY(bf16, FMT_BF16)
GEMM_ENTRY(fp8b_e8m0, FMT_FP8B_E8M0)
GEMM_ENTRY(fp8b_f32, FMT_FP8B_F32)
GEMM_ENTRY(fp8t, FMT_FP8T)
