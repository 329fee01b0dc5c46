// Embedding, manifold-constrained hyper-connections (model-spec §3.3 "mHC residual streams"),
// the final hyper-head and row RMSNorm. The residual X is [T, hc·D] f32. One block per token
// for the reductions; the post-mix is elementwise.

#define MAX_MIX 24  // (2 + hc)·hc for hc <= 4

// X[t, i·D + c] = E[token_t, c] for every stream i. fmt: 0 bf16, 1 f32, 2 f16.
extern "C" __global__ void embed_rows(const void* __restrict__ E, int fmt, const int* __restrict__ tokens,
                                      float* __restrict__ X, int D, int hc) {
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
extern "C" __global__ void __launch_bounds__(256) hc_mix_partial(
    const float* __restrict__ X, const int* __restrict__ sel, const float* __restrict__ fn, int W,
    int nmix, float* __restrict__ partial) {
    __shared__ float wpart[8][MAX_MIX + 1];
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
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) v += wpart[w][threadIdx.x];
        partial[((i64)row * parts + part) * (MAX_MIX + 1) + threadIdx.x] = v;
    }
}

// The mixing vector r·(fn · X_t) of row `row` from its partials, into smix[0..nmix): threads
// 0..nmix-1 sum one mixing column each and thread MAX_MIX the squares, all at once.
__device__ void hc_mix_reduce(const float* __restrict__ partial, int row, int parts, int W, int nmix,
                              float norm_eps, float* smix) {
    __shared__ float sraw[MAX_MIX + 1];
    const int c = threadIdx.x;
    if (c < nmix || c == MAX_MIX) {
        const float* p = partial + (i64)row * parts * (MAX_MIX + 1) + c;
        float v = 0.f;
#pragma unroll 8
        for (int q = 0; q < parts; q++) v += p[(i64)q * (MAX_MIX + 1)];
        sraw[c] = v;
    }
    __syncthreads();
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

// pre, post and the Sinkhorn-projected comb of one token from its mixing vector, by warp 0:
// lane i·hc + j holds comb[i][j] (row sums over lanes i·hc.., column sums over lanes j + hc·..).
// Writes post and comb to mb and pre to spre.
__device__ void hc_mixers(const float* smix, const float* __restrict__ base,
                          const float* __restrict__ scale, int hc, int iters, float hc_eps,
                          float* __restrict__ mb, float* spre) {
    const int lane = threadIdx.x & 31;
    if (threadIdx.x >= 32) return;
    if (lane < hc) {
        spre[lane] = sigmoidf_(smix[lane] * scale[0] + base[lane]) + hc_eps;
        mb[lane] = 2.f * sigmoidf_(smix[hc + lane] * scale[1] + base[hc + lane]);
    }
    const bool mine = lane < hc * hc;
    const int i = lane / hc, j = lane % hc;
    const int m = 2 * hc + (mine ? lane : 0);
    float c = smix[m] * scale[2] + base[m];
    const float mx = lanes_max(c, i * hc, 1, hc);
    c = expf(c - mx);
    c = c / lanes_sum(c, i * hc, 1, hc) + hc_eps;
    // Column normalization first, then (row, column) pairs: `iters` column passes in all.
    for (int it = 0; it < (iters > 1 ? iters : 1); it++) {
        if (it > 0) c = c / (lanes_sum(c, i * hc, 1, hc) + hc_eps);
        c = c / (lanes_sum(c, j, hc, hc) + hc_eps);
    }
    if (mine) mb[hc + lane] = c;
}

// Before a sub-layer (after `hc_mix_partial`): mix → pre/post/comb (Sinkhorn), u = Σ pre_i X_i, then the sub-layer's
// weighted RMSNorm. Writes post and comb to mixbuf [T, hc + hc·hc] for `hc_post`, and the
// normalized input as f32 (nullable) and bf16 (nullable). Dynamic smem: D floats.
extern "C" __global__ void __launch_bounds__(256) hc_pre(
    const float* __restrict__ X, const float* __restrict__ partial, int parts, const float* __restrict__ base,
    const float* __restrict__ scale, int hc, int D, int iters, float hc_eps, float norm_eps,
    const float* __restrict__ nw, float* __restrict__ mixbuf, float* __restrict__ u_f32,
    u16* __restrict__ u_bf) {
    extern __shared__ float su[];
    __shared__ float smix[MAX_MIX];
    __shared__ float spre[4];
    __shared__ float scratch[33];
    const int t = blockIdx.x;
    const int W = hc * D, nmix = (2 + hc) * hc;
    const float* Xt = X + (i64)t * W;
    hc_mix_reduce(partial, t, parts, W, nmix, norm_eps, smix);
    hc_mixers(smix, base, scale, hc, iters, hc_eps, mixbuf + (i64)t * (hc + hc * hc), spre);
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
    const float r = 1.f / sqrtf(tot / (float)D + norm_eps);
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float v = nw[c] * (su[c] * r);
        if (u_f32) u_f32[(i64)t * D + c] = v;
        if (u_bf) u_bf[(i64)t * D + c] = f2bf(v);
    }
}

// After a sub-layer: X'_k = post_k · y + Σ_j comb[j][k] · X_j, in place.
extern "C" __global__ void hc_post(float* __restrict__ X, const float* __restrict__ y,
                                   const float* __restrict__ mixbuf, int hc, int D) {
    const int t = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    const float* mb = mixbuf + (i64)t * (hc + hc * hc);
    float* Xt = X + (i64)t * hc * D;
    float old[4];
#pragma unroll
    for (int j = 0; j < 4; j++) old[j] = j < hc ? Xt[j * D + c] : 0.f;
    const float yv = y[(i64)t * D + c];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (k >= hc) break;
        float v = mb[k] * yv;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (j < hc) v += mb[hc + j * hc + k] * old[j];
        Xt[k * D + c] = v;
    }
}

// Final collapse of the rows `sel[r]` of X: pre = sigmoid(mix·scale + base) + eps, y = Σ pre_i X_i,
// then the output RMSNorm, as bf16 [R, D] for the head. Dynamic smem: D floats.
extern "C" __global__ void __launch_bounds__(256) hc_head(
    const float* __restrict__ X, const int* __restrict__ sel, const float* __restrict__ partial, int parts,
    const float* __restrict__ base, float scale, int hc, int D, float hc_eps, float norm_eps,
    const float* __restrict__ nw, u16* __restrict__ out) {
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
