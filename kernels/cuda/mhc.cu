// Embedding, manifold-constrained hyper-connections (model-spec §3.3 "mHC residual streams"),
// the final hyper-head and row RMSNorm. The residual X is [T, hc·D] f32. One block per token
// for the reductions; the post-mix is elementwise.

#define MAX_MIX 24  // (2 + hc)·hc for hc <= 4
#define MIX_PARTS 128  // most partials per row (amdahl-kernels mhc::MIX_PARTS)
#define POST_COLS 32  // columns per hc_post block and partial (amdahl-kernels mhc::post_parts)
#define POST_TOK 4  // most tokens per hc_post block (amdahl-kernels mhc::POST_TOK)
#define ROWS_COLS 128  // columns per hc_post_rows block, a float4 per lane (amdahl-kernels mhc::ROWS_COLS)
#define ROWS_TOK 8  // tokens per hc_post_rows block, a warp each (amdahl-kernels mhc::ROWS_TOK)
#define PRE_THREADS 1024  // hc_pre block size (amdahl-kernels mhc::PRE_THREADS)
#define PRE_PER 1  // float4 columns per thread loaded ahead in hc_pre (2 spills at 64 registers)

// X[t, i·D + c] = E[token_t, c] for every stream i. fmt: 0 bf16, 1 f32, 2 f16.
extern "C" __global__ void embed_rows(const void* __restrict__ E, int fmt, const int* __restrict__ tokens,
                                      float* __restrict__ X, int D, int hc) {
    pdl_enter();
    const int t = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    const i64 src = (i64)tokens[t] * D + c;
    float v;
    if (fmt == 0) v = bf2f(reinterpret_cast<const u16*>(E)[src]);
    else if (fmt == 1) v = reinterpret_cast<const float*>(E)[src];
    else v = f16_to_f32(reinterpret_cast<const u16*>(E)[src]);
    for (int i = 0; i < hc; i++) X[(i64)t * hc * D + i * D + c] = v;
}

// Partial mixing dot products over one part of a token's streams: block (part, row) writes
// partial[row][part] = (fn[m] · X_row[part range] for m < nmix, Σ x² over the range). `sel`
// (nullable) maps rows to token rows of X. Spreading the 24 × hc·D dot products over many
// blocks keeps small batches from running on one SM.
// Block-sums this thread's mixing dot products and square sum into out[0..MAX_MIX] (one
// partial of the layout [row][part][MAX_MIX + 1]). Every thread of the block must call it.
__device__ void store_mix_partial(const float acc[MAX_MIX], float ss, float* __restrict__ out) {
    __shared__ float wpart[32][MAX_MIX + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < MAX_MIX; m++) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) wpart[warp][m] = v;
    }
    ss = warp_sum(ss);
    if (lane == 0) wpart[warp][MAX_MIX] = ss;
    __syncthreads();
    if (threadIdx.x <= MAX_MIX) {
        float v = 0.f;
        for (int w = 0; w < (int)((blockDim.x + 31) >> 5); w++) v += wpart[w][threadIdx.x];
        out[threadIdx.x] = v;
    }
}

extern "C" __global__ void __launch_bounds__(256) hc_mix_partial(
    const float* __restrict__ X, const int* __restrict__ sel, const float* __restrict__ fn, int W,
    int nmix, float* __restrict__ partial) {
    pdl_enter();
    const int part = blockIdx.x, parts = gridDim.x, row = blockIdx.y;
    const int t = sel ? sel[row] : row;
    const float* Xt = X + (i64)t * W;
    const int per = (W + parts - 1) / parts;
    const int lo = part * per, hi = min(W, lo + per);
    float acc[MAX_MIX];
#pragma unroll
    for (int m = 0; m < MAX_MIX; m++) acc[m] = 0.f;
    float ss = 0.f;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float x = Xt[i];
        ss += x * x;
#pragma unroll
        for (int m = 0; m < MAX_MIX; m++)
            if (m < nmix) acc[m] += x * fn[(i64)m * W + i];
    }
    store_mix_partial(acc, ss, partial + ((i64)row * parts + part) * (MAX_MIX + 1));
}

// The mixing vector r·(fn · X_t) of row `row` from its `parts` (<= MIX_PARTS) partials, into
// smix[0..nmix): every partial is loaded at once (one memory round trip), then a warp sums each
// mixing column (and the squares, column MAX_MIX).
__device__ void hc_mix_reduce(const float* __restrict__ partial, int row, int parts, int W, int nmix,
                              float norm_eps, float* smix) {
    __shared__ float sp[MIX_PARTS * (MAX_MIX + 1)];
    __shared__ float sraw[MAX_MIX + 1];
    const int n = parts * (MAX_MIX + 1);
    const float* p = partial + (i64)row * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sp[i] = p[i];
    __syncthreads();
    const int lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    for (int c = threadIdx.x >> 5; c <= MAX_MIX; c += nw) {
        if (c >= nmix && c != MAX_MIX) continue;
        float v = 0.f;
        for (int q = lane; q < parts; q += 32) v += sp[q * (MAX_MIX + 1) + c];
        v = warp_sum(v);
        if (lane == 0) sraw[c] = v;
    }
    __syncthreads();
    const int c = threadIdx.x;
    if (c < nmix) smix[c] = sraw[c] * (1.f / sqrtf(sraw[MAX_MIX] / (float)W + norm_eps));
    __syncthreads();
}

// Sum of v over the lanes src(0..n) (n <= 4), every lane of the warp taking part.
__device__ __forceinline__ float lanes_sum(float v, int first, int stride, int n) {
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float o = __shfl_sync(0xffffffffu, v, (first + q * stride) & 31);
        if (q < n) s += o;
    }
    return s;
}

__device__ __forceinline__ float lanes_max(float v, int first, int stride, int n) {
    float m = NEG_INF;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float o = __shfl_sync(0xffffffffu, v, (first + q * stride) & 31);
        if (q < n) m = fmaxf(m, o);
    }
    return m;
}

// pre and post of one token from its mixing vector, by warp 0, and comb's logits (the Sinkhorn
// is `hc_sinkhorn`'s, off the sub-layer's path). Writes post and the logits to mb, pre to spre.
__device__ void hc_mixers(const float* smix, const float* __restrict__ base,
                          const float* __restrict__ scale, int hc, float hc_eps,
                          float* __restrict__ mb, float* spre) {
    const int lane = threadIdx.x & 31;
    if (threadIdx.x >= 32) return;
    if (lane < hc) {
        spre[lane] = sigmoidf_(smix[lane] * scale[0] + base[lane]) + hc_eps;
        mb[lane] = 2.f * sigmoidf_(smix[hc + lane] * scale[1] + base[hc + lane]);
    }
    if (lane < hc * hc) mb[hc + lane] = smix[2 * hc + lane] * scale[2] + base[2 * hc + lane];
}

// The Sinkhorn projection of each token's comb, in place in mixbuf [T, hc + hc·hc] (its logits
// from `hc_pre`), a warp per token: lane i·hc + j holds comb[i][j] (row sums over lanes i·hc..,
// column sums over lanes j + hc·..). Only `hc_post` reads comb, so this runs on the side stream
// next to the sub-layer: in `hc_pre` the block's other 31 warps waited it out at a barrier
// (58% of their cycles, ncu, H100, b16).
extern "C" __global__ void __launch_bounds__(256) hc_sinkhorn(float* __restrict__ mixbuf, int hc, int T,
                                                             int iters, float hc_eps) {
    pdl_enter();
    const int lane = threadIdx.x & 31, t = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (t >= T) return;
    float* mb = mixbuf + (i64)t * (hc + hc * hc);
    const bool mine = lane < hc * hc;
    const int i = lane / hc, j = lane % hc;
    float c = mine ? mb[hc + lane] : 0.f;
    const float mx = lanes_max(c, i * hc, 1, hc);
    c = expf(c - mx);
    c = c / lanes_sum(c, i * hc, 1, hc) + hc_eps;
    // Column normalization first, then (row, column) pairs: `iters` column passes in all. The
    // divisions are a reciprocal and a multiply (`__fdividef`, within 2 ulp for these sums).
    for (int it = 0; it < (iters > 1 ? iters : 1); it++) {
        if (it > 0) c = __fdividef(c, lanes_sum(c, i * hc, 1, hc) + hc_eps);
        c = __fdividef(c, lanes_sum(c, j, hc, hc) + hc_eps);
    }
    if (mine) mb[hc + lane] = c;
}

// The post-mix of one column: v_k = post_k · y + Σ_j comb[j][k] · old_j (zeros past hc).
__device__ __forceinline__ void hc_post_mix(const float post[4], const float comb[4][4], const float old[4],
                                            float yv, float v[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float a = post[k] * yv;
#pragma unroll
        for (int j = 0; j < 4; j++) a += comb[j][k] * old[j];
        v[k] = a;
    }
}

// Component e (0..3: x, y, z, w) of a float4; e known at compile time where unrolled.
__device__ __forceinline__ float f4_at(const float4& v, int e) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; }
__device__ __forceinline__ void f4_set(float4& v, int e, float x) {
    if (e == 0) v.x = x;
    else if (e == 1) v.y = x;
    else if (e == 2) v.z = x;
    else v.w = x;
}

// w ⊙ (u · r) at float4 column c4 into the f32 and/or bf16 row (either nullable).
__device__ __forceinline__ void store_norm4(float4 u, float4 w, float r, int c4, float* uf, u16* ub) {
    const float4 v = make_float4(w.x * (u.x * r), w.y * (u.y * r), w.z * (u.z * r), w.w * (u.w * r));
    if (uf) reinterpret_cast<float4*>(uf)[c4] = v;
    if (ub) reinterpret_cast<uint2*>(ub)[c4] = make_uint2(pack_bf2(v.x, v.y), pack_bf2(v.z, v.w));
}

// Before a sub-layer (after the mixing partials: `hc_mix_partial` or the previous `hc_post`):
// mix → pre, post and comb's logits, u = Σ pre_i X_i, then the sub-layer's weighted RMSNorm.
// Writes post and the logits to mixbuf [T, hc + hc·hc] (`hc_sinkhorn` makes comb of them for
// `hc_post`), and the normalized input as f32
// (nullable) and bf16 (nullable). One block of PRE_THREADS per token: the first float4 column
// of every stream and the norm weights are loaded before the mixing reduction, so a
// token costs about three memory round trips. D % 4 == 0 (checked at launch). Dynamic smem:
// D floats.
extern "C" __global__ void __launch_bounds__(PRE_THREADS) hc_pre(
    const float* __restrict__ X, const float* __restrict__ partial, int parts, const float* __restrict__ base,
    const float* __restrict__ scale, int hc, int D, float hc_eps, float norm_eps,
    const float* __restrict__ nw, float* __restrict__ mixbuf, float* __restrict__ u_f32,
    u16* __restrict__ u_bf) {
    pdl_enter();
    extern __shared__ float su[];
    __shared__ float smix[MAX_MIX];
    __shared__ float spre[4];
    __shared__ float scratch[33];
    const int t = blockIdx.x;
    const int W = hc * D, nmix = (2 + hc) * hc, D4 = D >> 2;
    const float4* X4 = reinterpret_cast<const float4*>(X + (i64)t * W);
    const float4* nw4 = reinterpret_cast<const float4*>(nw);
    float4 xs[PRE_PER][4], ws[PRE_PER];
#pragma unroll
    for (int p = 0; p < PRE_PER; p++) {
        const int c4 = threadIdx.x + p * blockDim.x;
        if (c4 < D4) {
            ws[p] = nw4[c4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (i < hc) xs[p][i] = X4[i * D4 + c4];
        }
    }
    hc_mix_reduce(partial, t, parts, W, nmix, norm_eps, smix);
    hc_mixers(smix, base, scale, hc, hc_eps, mixbuf + (i64)t * (hc + hc * hc), spre);
    __syncthreads();
    float pre[4];
#pragma unroll
    for (int i = 0; i < 4; i++) pre[i] = i < hc ? spre[i] : 0.f;
    float ss = 0.f;
    float4* su4 = reinterpret_cast<float4*>(su);
    for (int c0 = 0; c0 < D4; c0 += PRE_PER * blockDim.x) {
#pragma unroll
        for (int p = 0; p < PRE_PER; p++) {
            const int c4 = c0 + threadIdx.x + p * blockDim.x;
            if (c4 >= D4) continue;
            if (c0 > 0) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (i < hc) xs[p][i] = X4[i * D4 + c4];
            }
            float4 u = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (i >= hc) break;
                u.x += pre[i] * xs[p][i].x;
                u.y += pre[i] * xs[p][i].y;
                u.z += pre[i] * xs[p][i].z;
                u.w += pre[i] * xs[p][i].w;
            }
            su4[c4] = u;
            ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
        }
    }
    const float r = 1.f / sqrtf(block_sum(ss, scratch) / (float)D + norm_eps);
    float* uf = u_f32 ? u_f32 + (i64)t * D : nullptr;
    u16* ub = u_bf ? u_bf + (i64)t * D : nullptr;
#pragma unroll
    for (int p = 0; p < PRE_PER; p++) {
        const int c4 = threadIdx.x + p * blockDim.x;
        if (c4 < D4) store_norm4(su4[c4], ws[p], r, c4, uf, ub);
    }
    for (int c4 = threadIdx.x + PRE_PER * blockDim.x; c4 < D4; c4 += blockDim.x) store_norm4(su4[c4], nw4[c4], r, c4, uf, ub);
}

// After a sub-layer: X'_k = post_k · y + Σ_j comb[j][k] · X_j, in place. Block (part, yb)
// takes tokens [yb·tpb, yb·tpb + tpb) ∩ [0, T) (tpb <= POST_TOK). With `fn_next` (the next
// site's mixing weights, nullable) it also writes the mixing partial of its columns of X'
// (POST_COLS at a time, the layout of `hc_mix_partial`) for each of its tokens, so the next
// `hc_pre` needs no pass of its own over X: warp w forms mix rows 3w..3w+2 from mixing weights
// it loads once for all the block's tokens (at 64 tokens and tpb 4, 16 blocks per column range
// read them instead of 64). Every warp recomputes X' for the block's columns; after a barrier warp w
// stores token w's (and its square sum), so a 4096-wide row spreads over 128 blocks and no
// block-wide reduction is needed.
extern "C" __global__ void __launch_bounds__(256) hc_post(float* __restrict__ X, const float* __restrict__ y,
                                                        const float* __restrict__ mixbuf, int hc, int D, int T,
                                                        int tpb, const float* __restrict__ fn_next,
                                                        float* __restrict__ partial) {
    pdl_enter();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int W = hc * D, nmix = (2 + hc) * hc;
    const int t0 = blockIdx.y * tpb, nt = min(tpb, T - t0);
    // One token's post-mix of column c (zeros past D).
    auto mixed = [&](int tok, int c, float v[4]) {
        const float* mb = mixbuf + (i64)tok * (hc + hc * hc);
        const float* Xt = X + (i64)tok * W;
        float post[4], comb[4][4], old[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            post[j] = j < hc ? mb[j] : 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) comb[j][k] = j < hc && k < hc ? mb[hc + j * hc + k] : 0.f;
            old[j] = c < D && j < hc ? Xt[j * D + c] : 0.f;
        }
        hc_post_mix(post, comb, old, c < D ? y[(i64)tok * D + c] : 0.f, v);
    };
    if (!fn_next) {
        for (int i = 0; i < nt; i++) {
            float* Xt = X + (i64)(t0 + i) * W;
            for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < D; c += gridDim.x * blockDim.x) {
                float v[4];
                mixed(t0 + i, c, v);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (k < hc) Xt[k * D + c] = v[k];
            }
        }
        return;
    }
    constexpr int QW = MAX_MIX / 8;  // mix rows per warp
    float acc[POST_TOK][QW], ss = 0.f;
#pragma unroll
    for (int i = 0; i < POST_TOK; i++)
#pragma unroll
        for (int q = 0; q < QW; q++) acc[i][q] = 0.f;
    for (int base = blockIdx.x * POST_COLS; base < D; base += gridDim.x * POST_COLS) {
        const int c = base + lane;
        const bool in = c < D;
        float fw[QW][4];
#pragma unroll
        for (int q = 0; q < QW; q++) {
            const int m = warp * QW + q;
#pragma unroll
            for (int k = 0; k < 4; k++) fw[q][k] = in && m < nmix && k < hc ? fn_next[(i64)m * W + k * D + c] : 0.f;
        }
        float v[POST_TOK][4];
#pragma unroll
        for (int i = 0; i < POST_TOK; i++)
            if (i < nt) mixed(t0 + i, c, v[i]);
        __syncthreads();  // every warp has read X before any overwrites it
#pragma unroll
        for (int i = 0; i < POST_TOK; i++) {
            if (i >= nt) break;
            if (in && warp == i) {
                float* Xt = X + (i64)(t0 + i) * W;
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (k < hc) {
                        Xt[k * D + c] = v[i][k];
                        ss += v[i][k] * v[i][k];
                    }
            }
#pragma unroll
            for (int q = 0; q < QW; q++)
#pragma unroll
                for (int k = 0; k < 4; k++) acc[i][q] += v[i][k] * fw[q][k];
        }
    }
#pragma unroll
    for (int i = 0; i < POST_TOK; i++) {
        if (i >= nt) break;
        float* out = partial + ((i64)(t0 + i) * gridDim.x + blockIdx.x) * (MAX_MIX + 1);
#pragma unroll
        for (int q = 0; q < QW; q++) {
            const float v = warp_sum(acc[i][q]);
            if (lane == 0 && warp * QW + q < nmix) out[warp * QW + q] = v;
        }
        if (warp == i) {
            const float s2 = warp_sum(ss);
            if (lane == 0) out[MAX_MIX] = s2;
        }
    }
}

// The sums over a warp's lanes of 32 values a[0..32) per lane, lane i ending with value i's
// total in a[0]: at each of 5 levels a lane keeps the half of its values named by its bit,
// adds its partner's copy of that half and sends the other (31 shuffles, not 5 per value).
__device__ __forceinline__ void warp_sum32(float (&a)[32]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < 5; s++) {
        const int o = 16 >> s;
        const bool up = lane & o;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            if (i >= o) break;
            const float send = up ? a[i] : a[i + o];
            const float keep = up ? a[i + o] : a[i];
            a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
}

// The next site's mixing weights of this hc_post_rows block's columns into shared memory: float4
// row r < rows (row m·hc + k: mix row m, stream k) of D4, columns blockIdx.x·32 + lane. Blocks
// of 256 threads.
__device__ __forceinline__ void rows_stage_fn(const float* __restrict__ fn_next, int D4, int rows) {
    extern __shared__ float4 sfn[];
    if (!fn_next) return;
    const float4* fn4 = reinterpret_cast<const float4*>(fn_next);
    // At most MAX_MIX · 4 rows of 32: 12 float4 per thread of 256, all loaded before any store.
    constexpr int PER = MAX_MIX * 4 * 32 / 256;
    float4 v[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = threadIdx.x + u * 256, cc = blockIdx.x * (ROWS_COLS / 4) + (i & 31);
        v[u] = i < rows * 32 && cc < D4 ? __ldg(fn4 + (i64)(i >> 5) * D4 + cc) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = threadIdx.x + u * 256;
        if (i < rows * 32) sfn[i] = v[u];
    }
}

// `hc_post` for many tokens: block (column group, token group) takes ROWS_COLS columns (a float4
// per lane) of ROWS_TOK tokens (a warp each), so each X' value is computed by one thread (in
// `hc_post` every warp of a block recomputes all of them: ncu, H100, 64 tokens: 37 µs per launch
// for a 3.5 µs floor). With `fn_next`, the next site's mixing weights of the block's columns
// ([nmix][hc][ROWS_COLS] floats, 48 KiB at hc 4) are staged in shared memory first — before
// `pdl_enter()`: weights, which no kernel writes, so the loads overlap the previous kernel —
// and each warp forms its token's nmix dot products and square sum from them, reduced by
// `warp_sum32`: D / ROWS_COLS partials per token, the layout of `hc_mix_partial`. D % 4 == 0.
extern "C" __global__ void __launch_bounds__(256) hc_post_rows(
    float* __restrict__ X, const float* __restrict__ y, const float* __restrict__ mixbuf, int hc, int D, int T,
    const float* __restrict__ fn_next, float* __restrict__ partial) {
    rows_stage_fn(fn_next, D >> 2, (2 + hc) * hc * hc);
    pdl_enter();
    extern __shared__ float4 sfn[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D4 = D >> 2, nmix = (2 + hc) * hc;
    const int c4 = blockIdx.x * (ROWS_COLS / 4) + lane;
    const int t = blockIdx.y * ROWS_TOK + warp;
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t < T && c4 < D4) {
        const float* mb = mixbuf + (i64)t * (hc + hc * hc);
        float4* X4 = reinterpret_cast<float4*>(X + (i64)t * hc * D);
        const float4 yv = reinterpret_cast<const float4*>(y + (i64)t * D)[c4];
        float4 old[4];
        float post[4], comb[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            old[j] = j < hc ? X4[j * D4 + c4] : make_float4(0.f, 0.f, 0.f, 0.f);
            post[j] = j < hc ? mb[j] : 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) comb[j][k] = j < hc && k < hc ? mb[hc + j * hc + k] : 0.f;
        }
        // hc_post_mix per component of the float4 columns.
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float o[4], r[4];
#pragma unroll
            for (int j = 0; j < 4; j++) o[j] = f4_at(old[j], e);
            hc_post_mix(post, comb, o, f4_at(yv, e), r);
#pragma unroll
            for (int k = 0; k < 4; k++) f4_set(v[k], e, r[k]);
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (k < hc) X4[k * D4 + c4] = v[k];
    }
    if (!fn_next) return;
    __syncthreads();  // the staged weights
    if (t >= T) return;
    float a[32];
#pragma unroll
    for (int i = 0; i < 32; i++) a[i] = 0.f;
#pragma unroll
    for (int m = 0; m < MAX_MIX; m++) {
        if (m >= nmix) break;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k >= hc) break;
            const float4 f = sfn[(m * hc + k) * 32 + lane];
            a[m] += v[k].x * f.x + v[k].y * f.y + v[k].z * f.z + v[k].w * f.w;
        }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) a[MAX_MIX] += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    warp_sum32(a);
    if (lane < nmix || lane == MAX_MIX)
        partial[((i64)t * gridDim.x + blockIdx.x) * (MAX_MIX + 1) + lane] = a[0];
}

// Final collapse of the rows `sel[r]` of X: pre = sigmoid(mix·scale + base) + eps, y = Σ pre_i X_i,
// then the output RMSNorm, as bf16 [R, D] for the head. Dynamic smem: D floats.
extern "C" __global__ void __launch_bounds__(256) hc_head(
    const float* __restrict__ X, const int* __restrict__ sel, const float* __restrict__ partial, int parts,
    const float* __restrict__ base, float scale, int hc, int D, float hc_eps, float norm_eps,
    const float* __restrict__ nw, u16* __restrict__ out) {
    pdl_enter();
    extern __shared__ float su[];
    __shared__ float smix[MAX_MIX];
    __shared__ float spre[4];
    __shared__ float scratch[33];
    const int r = blockIdx.x;
    const int W = hc * D;
    const float* Xt = X + (i64)sel[r] * W;
    hc_mix_reduce(partial, r, parts, W, hc, norm_eps, smix);
    if (threadIdx.x < hc) spre[threadIdx.x] = sigmoidf_(smix[threadIdx.x] * scale + base[threadIdx.x]) + hc_eps;
    __syncthreads();
    float ss = 0.f;
    // Unrolled so the loads of several columns are in flight at once (one block per token).
#pragma unroll 4
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float u = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (i < hc) u += spre[i] * Xt[i * D + c];
        su[c] = u;
        ss += u * u;
    }
    const float tot = block_sum(ss, scratch);
    const float rs = 1.f / sqrtf(tot / (float)D + norm_eps);
    for (int c = threadIdx.x; c < D; c += blockDim.x) out[(i64)r * D + c] = f2bf(nw[c] * (su[c] * rs));
}

// Weighted RMSNorm of rows of x (f32, row stride ldx, width D) into f32 and/or bf16 outputs
// (row stride D). One block per row.
extern "C" __global__ void __launch_bounds__(256) norm_rows(
    const float* __restrict__ x, int ldx, const float* __restrict__ w, int D, float eps,
    float* __restrict__ out_f32, u16* __restrict__ out_bf) {
    pdl_enter();
    __shared__ float scratch[33];
    const int t = blockIdx.x;
    const float* xr = x + (i64)t * ldx;
    float ss = 0.f;
    for (int c = threadIdx.x; c < D; c += blockDim.x) ss += xr[c] * xr[c];
    const float tot = block_sum(ss, scratch);
    const float r = 1.f / sqrtf(tot / (float)D + eps);
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float v = w[c] * (xr[c] * r);
        if (out_f32) out_f32[(i64)t * D + c] = v;
        if (out_bf) out_bf[(i64)t * D + c] = f2bf(v);
    }
}
