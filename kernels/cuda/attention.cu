// DeepSeek-V4 attention pieces (model-spec §3.3, §3.3b): query/key preparation (per-head
// unweighted RMSNorm, weighted kv norm, interleaved partial RoPE on the trailing dims), the
// streaming KV compressor (online per-channel softmax pooling; overlapping windows for CSA), the
// lightning indexer's scores and a radix top-k, and split-K sparse attention with a sink.
//
// Per-step metadata (device arrays, so graphs replay with new values):
//   row_seq[T], row_pos[T]: sequence index (in this step) and position of each token row;
//   seq_slot[B], seq_start[B], seq_n[B], seq_row0[B]: cache slot, first position, token count and
//   first row of each sequence's chunk.
// Cache (per layer): ring [slots][W][d] bf16 (slot p mod W holds position p), entries
// [slots][maxE][d], indexer keys [slots][maxE][dI] f32, compressor accumulators
// [slots][nacc][3][dim] f32.

#define ATT_HG 16      // heads per block
#define ATT_TILE 32    // candidate rows per shared-memory tile
#define ATT_THREADS 256

// q [T, H·d] f32 in place: unweighted RMSNorm per head, then RoPE at the row's position.
extern "C" __global__ void __launch_bounds__(256) q_prep(
    float* __restrict__ q, int H, int d, float eps, const int* __restrict__ row_pos,
    const float* __restrict__ inv_freq, int rd, float rope_scale) {
    const int t = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int pos = row_pos[t];
    for (int h = warp; h < H; h += nw) {
        float* v = q + ((i64)t * H + h) * d;
        float ss = 0.f;
        for (int c = lane; c < d; c += 32) ss += v[c] * v[c];
        ss = warp_sum(ss);
        const float r = 1.f / sqrtf(ss / (float)d + eps);
        for (int c = lane; c < d; c += 32) v[c] *= r;
        __syncwarp();
        for (int i = lane; i < rd / 2; i += 32) {
            int c0 = d - rd + 2 * i;
            rope_pair(&v[c0], &v[c0 + 1], inv_freq[i], pos, rope_scale, 1.f);
        }
        __syncwarp();
    }
}

// RoPE on the trailing rd dims of every width-wide head of x [T, heads·width] f32, in place.
extern "C" __global__ void rope_heads(float* __restrict__ x, int heads, int width,
                                      const int* __restrict__ row_pos,
                                      const float* __restrict__ inv_freq, int rd, float rope_scale) {
    const int t = blockIdx.x;
    const int pos = row_pos[t];
    const int pairs = rd / 2;
    for (int i = threadIdx.x; i < heads * pairs; i += blockDim.x) {
        int h = i / pairs, pi = i % pairs;
        float* v = x + ((i64)t * heads + h) * width + width - rd + 2 * pi;
        rope_pair(&v[0], &v[1], inv_freq[pi], pos, rope_scale, 1.f);
    }
}

// kv [T, d] f32 → weighted RMSNorm (kv_norm), RoPE → bf16 rows of this step. Dynamic smem: d floats.
extern "C" __global__ void __launch_bounds__(256) kv_prep(
    const float* __restrict__ kv, const float* __restrict__ nw, int d, float eps,
    const int* __restrict__ row_pos, const float* __restrict__ inv_freq, int rd, float rope_scale,
    u16* __restrict__ out) {
    extern __shared__ float sv[];
    __shared__ float scratch[33];
    const int t = blockIdx.x;
    const float* x = kv + (i64)t * d;
    float ss = 0.f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) ss += x[c] * x[c];
    const float tot = block_sum(ss, scratch);
    const float r = 1.f / sqrtf(tot / (float)d + eps);
    for (int c = threadIdx.x; c < d; c += blockDim.x) sv[c] = nw[c] * (x[c] * r);
    __syncthreads();
    const int pos = row_pos[t];
    for (int i = threadIdx.x; i < rd / 2; i += blockDim.x) {
        int c0 = d - rd + 2 * i;
        rope_pair(&sv[c0], &sv[c0 + 1], inv_freq[i], pos, rope_scale, 1.f);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < d; c += blockDim.x) out[(i64)t * d + c] = f2bf(sv[c]);
}

struct Acc {
    float m, s, a;
};

__device__ __forceinline__ void acc_reset(Acc& x) {
    x.m = NEG_INF;
    x.s = 0.f;
    x.a = 0.f;
}

__device__ __forceinline__ void acc_push(Acc& x, float g, float v) {
    if (g > x.m) {
        float sc = expf(x.m - g);
        x.s = x.s * sc + 1.f;
        x.a = x.a * sc + v;
        x.m = g;
    } else {
        float e = expf(g - x.m);
        x.s += e;
        x.a += e * v;
    }
}

// Softmax-weighted mean of the union of two partial windows.
__device__ __forceinline__ float acc_merge(const Acc& x, const Acc& y) {
    float M = fmaxf(x.m, y.m);
    float ex = x.m == NEG_INF ? 0.f : expf(x.m - M);
    float ey = y.m == NEG_INF ? 0.f : expf(y.m - M);
    return (x.a * ex + y.a * ey) / (x.s * ex + y.s * ey);
}

// Feeds each sequence's new tokens to its compressor, in order; a completed window emits entry
// w = (p+1)/m − 1: the pooled row, RMS-normalized, roped at the window's first position. One
// block per sequence, one thread per channel (blockDim >= dim). Overlapping compressors pool the
// first half (A) of window w−1 with the second half (B) of window w.
extern "C" __global__ void __launch_bounds__(1024) compressor_update(
    const float* __restrict__ ckv, const float* __restrict__ cgate, int width,
    const float* __restrict__ ape, const float* __restrict__ nw, float eps, int dim, int m,
    int overlap, const int* __restrict__ seq_slot, const int* __restrict__ seq_start,
    const int* __restrict__ seq_n, const int* __restrict__ seq_row0, float* __restrict__ state,
    void* __restrict__ entries, int entries_bf16, int maxE, const float* __restrict__ inv_freq,
    int rd, float rope_scale) {
    extern __shared__ float sv[];
    __shared__ float scratch[33];
    const int b = blockIdx.x;
    const int slot = seq_slot[b], start = seq_start[b], n = seq_n[b], row0 = seq_row0[b];
    const int c = threadIdx.x;
    const bool own = c < dim;
    const int nacc = overlap ? 3 : 1;
    float* st = state + (i64)slot * nacc * 3 * dim;
    Acc pa, ca, cb;
    acc_reset(pa);
    acc_reset(ca);
    acc_reset(cb);
    if (own && n > 0) {
        ca.m = st[c]; ca.s = st[dim + c]; ca.a = st[2 * dim + c];
        if (overlap) {
            cb.m = st[3 * dim + c]; cb.s = st[4 * dim + c]; cb.a = st[5 * dim + c];
            pa.m = st[6 * dim + c]; pa.s = st[7 * dim + c]; pa.a = st[8 * dim + c];
        }
    }
    for (int i = 0; i < n; i++) {
        const int p = start + i;
        const i64 r = (i64)(row0 + i) * width;
        const int j = p % m;
        if (j == 0) {
            acc_reset(ca);
            acc_reset(cb);
        }
        if (p == 0) acc_reset(pa);
        if (own) {
            acc_push(ca, cgate[r + c] + ape[j * width + c], ckv[r + c]);
            if (overlap) acc_push(cb, cgate[r + dim + c] + ape[j * width + dim + c], ckv[r + dim + c]);
        }
        if ((p + 1) % m == 0) {
            const int w = (p + 1) / m - 1;
            float v = 0.f;
            if (own) v = overlap ? acc_merge(pa, cb) : acc_merge(ca, ca);
            const float tot = block_sum(own ? v * v : 0.f, scratch);
            const float rs = 1.f / sqrtf(tot / (float)dim + eps);
            if (own) sv[c] = nw[c] * (v * rs);
            __syncthreads();
            for (int q = c; q < rd / 2; q += blockDim.x) {
                int c0 = dim - rd + 2 * q;
                rope_pair(&sv[c0], &sv[c0 + 1], inv_freq[q], p + 1 - m, rope_scale, 1.f);
            }
            __syncthreads();
            if (own && w < maxE) {
                i64 o = ((i64)slot * maxE + w) * dim + c;
                if (entries_bf16) reinterpret_cast<u16*>(entries)[o] = f2bf(sv[c]);
                else reinterpret_cast<float*>(entries)[o] = sv[c];
            }
            if (overlap) pa = ca;
            __syncthreads();
        }
    }
    if (own && n > 0) {
        st[c] = ca.m; st[dim + c] = ca.s; st[2 * dim + c] = ca.a;
        if (overlap) {
            st[3 * dim + c] = cb.m; st[4 * dim + c] = cb.s; st[5 * dim + c] = cb.a;
            st[6 * dim + c] = pa.m; st[7 * dim + c] = pa.s; st[8 * dim + c] = pa.a;
        }
    }
}

#define IDX_MAXH 64

// Lightning-indexer scores of query row blockIdx.y against its visible keys:
// I(s) = Σ_h max(q_h·k_s, 0) · dI^-½ · w_h · HI^-½. Dynamic smem: HI·dI + HI floats.
extern "C" __global__ void __launch_bounds__(256) indexer_scores(
    const float* __restrict__ q, const float* __restrict__ wts, const float* __restrict__ keys,
    int HI, int dI, int m, int maxE, const int* __restrict__ row_seq,
    const int* __restrict__ row_pos, const int* __restrict__ seq_slot, float* __restrict__ scores) {
    extern __shared__ float sq[];
    float* sw = sq + HI * dI;
    const int t = blockIdx.y;
    for (int i = threadIdx.x; i < HI * dI; i += blockDim.x) sq[i] = q[(i64)t * HI * dI + i];
    for (int i = threadIdx.x; i < HI; i += blockDim.x) sw[i] = wts[(i64)t * HI + i];
    __syncthreads();
    const int n_vis = min((row_pos[t] + 1) / m, maxE);
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_vis) return;
    const float* k = keys + ((i64)seq_slot[row_seq[t]] * maxE + s) * dI;
    float acc[IDX_MAXH];
#pragma unroll
    for (int h = 0; h < IDX_MAXH; h++) acc[h] = 0.f;
    for (int c0 = 0; c0 < dI; c0 += 8) {
        float kk[8];
#pragma unroll
        for (int i = 0; i < 8; i++) kk[i] = (c0 + i < dI) ? k[c0 + i] : 0.f;
#pragma unroll
        for (int h = 0; h < IDX_MAXH; h++) {
            if (h < HI) {
                const float* qh = sq + h * dI + c0;
                float a = acc[h];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (c0 + i < dI) a += qh[i] * kk[i];
                acc[h] = a;
            }
        }
    }
    const float qs = rsqrtf((float)dI), ws = rsqrtf((float)HI);
    float tot = 0.f;
#pragma unroll
    for (int h = 0; h < IDX_MAXH; h++)
        if (h < HI) tot += fmaxf(acc[h], 0.f) * qs * (sw[h] * ws);
    scores[(i64)t * maxE + s] = tot;
}

// Top min(topk, n_vis) of a row's indexer scores (ties to the lower index) by radix select on
// order-preserving keys, written in index order; the rest of the row is -1. One block per row.
extern "C" __global__ void __launch_bounds__(1024) topk_select(
    const float* __restrict__ scores, int maxE, int m, int topk, const int* __restrict__ row_pos,
    int* __restrict__ out) {
    __shared__ int hist[256];
    __shared__ int sh[4];  // prefix, remaining
    __shared__ int scan_scratch[33];
    const int t = blockIdx.x;
    const int n = min((row_pos[t] + 1) / m, maxE);
    const int k = min(topk, n);
    const float* s = scores + (i64)t * maxE;
    int* o = out + (i64)t * topk;
    for (int i = threadIdx.x + k; i < topk; i += blockDim.x) o[i] = -1;
    if (k == n) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = i;
        return;
    }
    u32 prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            u32 key = float_key(s[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int cum = 0, bin = 0;
            for (int bb = 255; bb >= 0; bb--) {
                if (cum + hist[bb] >= remaining) {
                    bin = bb;
                    break;
                }
                cum += hist[bb];
            }
            sh[0] = (int)(prefix | ((u32)bin << shift));
            sh[1] = remaining - cum;
        }
        __syncthreads();
        prefix = (u32)sh[0];
        remaining = sh[1];
        mask |= 255u << shift;
        __syncthreads();
    }
    // prefix = the k-th largest key; take every larger key and the first `remaining` equal ones.
    const int n_gt = k - remaining;
    int base_gt = 0, base_eq = 0;
    for (int c0 = 0; c0 < n; c0 += blockDim.x) {
        int i = c0 + threadIdx.x;
        u32 key = i < n ? float_key(s[i]) : 0u;
        int gt = (i < n && key > prefix) ? 1 : 0;
        int eq = (i < n && key == prefix) ? 1 : 0;
        int tot_gt, tot_eq;
        int rg = block_exclusive_scan(gt, scan_scratch, &tot_gt);
        int re = block_exclusive_scan(eq, scan_scratch, &tot_eq);
        if (gt) o[base_gt + rg] = i;
        if (eq && base_eq + re < remaining) o[n_gt + base_eq + re] = i;
        base_gt += tot_gt;
        base_eq += tot_eq;
    }
}

__device__ __forceinline__ const u16* cand_row(int c, int n_win, int p, int start, int row0,
                                               int slot, const u16* kv_step, const u16* ring,
                                               const u16* entries, const int* topk_row, int kind,
                                               int W, int d, int maxE) {
    if (c < n_win) {
        int pos = p - n_win + 1 + c;
        if (pos >= start) return kv_step + (i64)(row0 + pos - start) * d;
        return ring + ((i64)slot * W + pos % W) * d;
    }
    int j = c - n_win;
    int e = kind == 2 ? topk_row[j] : j;
    return entries + ((i64)slot * maxE + e) * d;
}

// Split-K sparse attention: block (split, head group, row) attends ATT_HG heads of one query row
// over candidates [split·chunk, (split+1)·chunk) of its list (window rows, then compressed
// entries: all visible for HCA (kind 1), the indexer's top-k for CSA (kind 2)), loading each KV
// tile once into shared memory for all heads of the group. Writes un-normalized partials:
// o [T][splits][H][d] and (max, sum) [T][splits][H][2]; an empty split writes max = -inf.
extern "C" __global__ void __launch_bounds__(ATT_THREADS) sparse_attn_partial(
    const float* __restrict__ q, const u16* __restrict__ kv_step, const u16* __restrict__ ring,
    const u16* __restrict__ entries, const int* __restrict__ topk_idx, int topk, int kind, int m,
    int W, int maxE, int H, int d, float scale, int chunk, int splits,
    const int* __restrict__ row_seq, const int* __restrict__ row_pos,
    const int* __restrict__ seq_slot, const int* __restrict__ seq_start,
    const int* __restrict__ seq_row0, float* __restrict__ o_part, float* __restrict__ ml_part) {
    extern __shared__ float smem[];
    float* qs = smem;                                         // [ATT_HG][d]
    u16* kvs = reinterpret_cast<u16*>(qs + ATT_HG * d);       // [ATT_TILE][d]
    float* S = reinterpret_cast<float*>(kvs + ATT_TILE * d);  // [ATT_HG][ATT_TILE]
    float* alpha = S + ATT_HG * ATT_TILE;                     // [ATT_HG]
    float* mrun = alpha + ATT_HG;
    float* lrun = mrun + ATT_HG;
    const int sp = blockIdx.x, hg = blockIdx.y, t = blockIdx.z;
    const int h0 = hg * ATT_HG;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int b = row_seq[t], p = row_pos[t];
    const int slot = seq_slot[b], start = seq_start[b], row0 = seq_row0[b];
    const int n_win = min(W, p + 1);
    int n_comp = 0;
    if (kind == 1) n_comp = min((p + 1) / m, maxE);
    if (kind == 2) n_comp = min(topk, min((p + 1) / m, maxE));
    const int total = n_win + n_comp;
    const int c_begin = sp * chunk, c_end = min(total, c_begin + chunk);
    const i64 ob = ((i64)t * splits + sp) * H;
    if (c_begin >= c_end) {
        for (int h = tid; h < ATT_HG && h0 + h < H; h += blockDim.x) {
            ml_part[(ob + h0 + h) * 2] = NEG_INF;
            ml_part[(ob + h0 + h) * 2 + 1] = 0.f;
        }
        return;
    }
    const int* trow = kind == 2 ? topk_idx + (i64)t * topk : nullptr;
    for (int i = tid; i < ATT_HG * d; i += blockDim.x) {
        int h = i / d;
        qs[i] = (h0 + h < H) ? q[((i64)t * H + h0 + h) * d + (i % d)] : 0.f;
    }
    if (tid < ATT_HG) {
        mrun[tid] = NEG_INF;
        lrun[tid] = 0.f;
    }
    const int pairs = d / 2;
    float acc[ATT_HG][2];
#pragma unroll
    for (int h = 0; h < ATT_HG; h++) acc[h][0] = acc[h][1] = 0.f;
    const int vec_per_row = d / 8;  // uint4 per row
    for (int c0 = c_begin; c0 < c_end; c0 += ATT_TILE) {
        __syncthreads();
        for (int i = tid; i < ATT_TILE * vec_per_row; i += blockDim.x) {
            int jr = i / vec_per_row, v = i % vec_per_row;
            int c = c0 + jr;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (c < c_end) {
                const u16* row = cand_row(c, n_win, p, start, row0, slot, kv_step, ring, entries,
                                          trow, kind, W, d, maxE);
                val = reinterpret_cast<const uint4*>(row)[v];
            }
            reinterpret_cast<uint4*>(kvs + jr * d)[v] = val;
        }
        __syncthreads();
        // Scores: warp w takes tile rows 4w..4w+3 for every head of the group.
        {
            float sacc[4][ATT_HG];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int h = 0; h < ATT_HG; h++) sacc[r][h] = 0.f;
            for (int c2 = lane; c2 < pairs; c2 += 32) {
                float kl[4], kh[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    u32 kp = reinterpret_cast<const u32*>(kvs + (warp * 4 + r) * d)[c2];
                    kl[r] = bf_lo(kp);
                    kh[r] = bf_hi(kp);
                }
#pragma unroll
                for (int h = 0; h < ATT_HG; h++) {
                    float2 qp = reinterpret_cast<const float2*>(qs + h * d)[c2];
#pragma unroll
                    for (int r = 0; r < 4; r++) sacc[r][h] += qp.x * kl[r] + qp.y * kh[r];
                }
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int h = 0; h < ATT_HG; h++) {
                    float v = warp_sum(sacc[r][h]);
                    if (lane == ((r * ATT_HG + h) & 31)) {
                        int jr = warp * 4 + r;
                        S[h * ATT_TILE + jr] = (c0 + jr < c_end) ? v * scale : NEG_INF;
                    }
                }
        }
        __syncthreads();
        // Online softmax: warp w updates heads 2w, 2w+1; lane = tile row.
        for (int h = warp; h < ATT_HG; h += blockDim.x >> 5) {
            float s = S[h * ATT_TILE + lane];
            float mt = warp_max(s);
            float mo = mrun[h];
            float mn = fmaxf(mo, mt);
            float pv = (mn == NEG_INF || s == NEG_INF) ? 0.f : expf(s - mn);
            float ps = warp_sum(pv);
            S[h * ATT_TILE + lane] = pv;
            __syncwarp();
            if (lane == 0) {
                float a = (mo == NEG_INF) ? 0.f : expf(mo - mn);
                if (mn == NEG_INF) a = 1.f;
                alpha[h] = a;
                lrun[h] = lrun[h] * a + ps;
                mrun[h] = mn;
            }
        }
        __syncthreads();
        // PV: thread owns channels 2·tid, 2·tid+1 for every head of the group.
        if (tid < pairs) {
#pragma unroll
            for (int h = 0; h < ATT_HG; h++) {
                float a = alpha[h];
                acc[h][0] *= a;
                acc[h][1] *= a;
            }
            for (int jr = 0; jr < ATT_TILE; jr++) {
                u32 kp = reinterpret_cast<const u32*>(kvs + jr * d)[tid];
                float lo = bf_lo(kp), hi = bf_hi(kp);
#pragma unroll
                for (int h = 0; h < ATT_HG; h++) {
                    float pw = S[h * ATT_TILE + jr];
                    acc[h][0] += pw * lo;
                    acc[h][1] += pw * hi;
                }
            }
        }
    }
    __syncthreads();
    if (tid < pairs) {
#pragma unroll
        for (int h = 0; h < ATT_HG; h++) {
            if (h0 + h < H) {
                float* o = o_part + (ob + h0 + h) * d;
                o[2 * tid] = acc[h][0];
                o[2 * tid + 1] = acc[h][1];
            }
        }
    }
    for (int h = tid; h < ATT_HG && h0 + h < H; h += blockDim.x) {
        ml_part[(ob + h0 + h) * 2] = mrun[h];
        ml_part[(ob + h0 + h) * 2 + 1] = lrun[h];
    }
}

// Merges the splits of each head with the sink in the denominator, rotates the rope dims back by
// the query position, writes bf16 [T, H·d]. Block (head, row), one thread per channel pair.
extern "C" __global__ void __launch_bounds__(256) sparse_attn_combine(
    const float* __restrict__ o_part, const float* __restrict__ ml_part,
    const float* __restrict__ sinks, int H, int d, int splits, const int* __restrict__ row_pos,
    const float* __restrict__ inv_freq, int rd, float rope_scale, u16* __restrict__ out) {
    const int h = blockIdx.x, t = blockIdx.y;
    const int pos = row_pos[t];
    const int pairs = d / 2;
    float M = sinks[h];
    for (int s = 0; s < splits; s++) M = fmaxf(M, ml_part[(((i64)t * splits + s) * H + h) * 2]);
    for (int c2 = threadIdx.x; c2 < pairs; c2 += blockDim.x) {
        float den = expf(sinks[h] - M), v0 = 0.f, v1 = 0.f;
        for (int s = 0; s < splits; s++) {
            const i64 base = ((i64)t * splits + s) * H + h;
            const float ms = ml_part[base * 2];
            if (ms == NEG_INF) continue;
            const float e = expf(ms - M);
            den += ml_part[base * 2 + 1] * e;
            const float2 o = reinterpret_cast<const float2*>(o_part + base * d)[c2];
            v0 += o.x * e;
            v1 += o.y * e;
        }
        v0 /= den;
        v1 /= den;
        const int c0 = 2 * c2;
        if (c0 >= d - rd) {
            int pi = (c0 - (d - rd)) / 2;
            rope_pair(&v0, &v1, inv_freq[pi], pos, rope_scale, -1.f);
        }
        reinterpret_cast<u32*>(out + ((i64)t * H + h) * d)[c2] = pack_bf2(v0, v1);
    }
}

// Keeps the last W raw rows of each sequence's chunk in its ring.
extern "C" __global__ void ring_store(const u16* __restrict__ kv_step, u16* __restrict__ ring,
                                      int W, int d, const int* __restrict__ seq_slot,
                                      const int* __restrict__ seq_start,
                                      const int* __restrict__ seq_n,
                                      const int* __restrict__ seq_row0) {
    const int b = blockIdx.x;
    const int slot = seq_slot[b], start = seq_start[b], n = seq_n[b], row0 = seq_row0[b];
    const int end = start + n;
    const int first = max(start, end - W);
    for (int pos = first; pos < end; pos++) {
        const u16* src = kv_step + (i64)(row0 + pos - start) * d;
        u16* dst = ring + ((i64)slot * W + pos % W) * d;
        for (int c = threadIdx.x; c < d; c += blockDim.x) dst[c] = src[c];
    }
}
