// DeepSeek-V4 attention pieces (model-spec §3.3, §3.3b): query/key preparation (per-head
// unweighted RMSNorm, weighted kv norm, interleaved partial RoPE on the trailing dims), the
// streaming KV compressor (online per-channel softmax pooling; overlapping windows for CSA), the
// split-K sparse attention with a sink (the lightning indexer's scores and top-k: indexer.cu).
//
// Per-step metadata (device arrays, so graphs replay with new values):
//   row_seq[T], row_pos[T]: sequence index (in this step) and position of each token row;
//   seq_slot[B], seq_start[B], seq_n[B], seq_row0[B]: cache slot, first position, token count and
//   first row of each sequence's chunk.
// Cache (per layer): ring [slots][W][d] bf16 (slot p mod W holds position p), entries
// [slots][maxE][d], indexer keys [slots][maxE][dI] f32, compressor accumulators
// [slots][nacc][3][dim] f32.

#define ATT_HG 64      // heads per block of the sparse attention (16 warps: 4 head tiles × 4)
#define ATT_TILE 32    // candidate rows per shared-memory tile
#define ATT_THREADS 512
#define ATT_MAXD 512   // largest head dim (o accumulators per warp: ATT_MAXD / 32 n-tiles)
#define ATT_PAD 8      // bf16 padding per shared row (ldmatrix without bank conflicts)
#define ATT_NBUF 2     // KV tiles in flight (cp.async ring; 2 leaves room for q's two parts)
#define ATT_SLD 40     // floats per score row in shared memory (padded against bank conflicts)
#define ATT_QB 8       // q float4 loads in flight per thread

// RoPE of the (even, odd) pairs of float4 column c4 that fall in the trailing rd dims of a
// d-wide head ((d - rd) even).
__device__ __forceinline__ void rope4(float4& v, int c4, int d, int rd, const float* __restrict__ inv_freq,
                                      int pos, float rope_scale) {
    const int c = 4 * c4 - (d - rd);
    if (c >= 0) rope_pair(&v.x, &v.y, inv_freq[c / 2], pos, rope_scale, 1.f);
    if (c + 2 >= 0) rope_pair(&v.z, &v.w, inv_freq[c / 2 + 1], pos, rope_scale, 1.f);
}

// q [T, H·d] f32 in place: unweighted RMSNorm per head, then RoPE at the row's position. One
// warp per head (block (head group of 8, row)); a head of d <= 512, d % 4 == 0 is held in
// registers as float4s, so it is read and written once with all loads in flight.
// image = 1 (d % 4 == 0, d <= 512; for `sparse_attn_wg_qi`): each head's 4·d bytes are
// rewritten as its two bf16 parts instead (hi: d bf16, then lo: d bf16; `q_split4`), so the
// attention copies them without converting. In place is safe: a head's image lies in its own
// f32 span, and every lane's loads of it complete before the warp's sum, before any store.
extern "C" __global__ void __launch_bounds__(256) q_prep(
    float* __restrict__ q, int H, int d, float eps, const int* __restrict__ row_pos,
    const float* __restrict__ inv_freq, int rd, float rope_scale, int image) {
    pdl_enter();
    const int t = blockIdx.y;
    const int lane = threadIdx.x & 31, h = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (h >= H) return;
    const int pos = row_pos[t];
    float* v = q + ((i64)t * H + h) * d;
    if (d % 4 == 0 && d <= 512) {
        const int d4 = d >> 2;
        float4* v4 = reinterpret_cast<float4*>(v);
        float4 r[4];
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c4 = lane + 32 * i;
            r[i] = c4 < d4 ? v4[c4] : make_float4(0.f, 0.f, 0.f, 0.f);
            ss += r[i].x * r[i].x + r[i].y * r[i].y + r[i].z * r[i].z + r[i].w * r[i].w;
        }
        const float s = 1.f / sqrtf(warp_sum(ss) / (float)d + eps);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c4 = lane + 32 * i;
            if (c4 >= d4) continue;
            r[i].x *= s; r[i].y *= s; r[i].z *= s; r[i].w *= s;
            rope4(r[i], c4, d, rd, inv_freq, pos, rope_scale);
            if (image) q_split4(r[i], reinterpret_cast<u8*>(v) + 8 * c4, reinterpret_cast<u8*>(v) + 2 * d + 8 * c4);
            else v4[c4] = r[i];
        }
        return;
    }
    float ss = 0.f;
    for (int c = lane; c < d; c += 32) ss += v[c] * v[c];
    const float s = 1.f / sqrtf(warp_sum(ss) / (float)d + eps);
    for (int c = lane; c < d; c += 32) v[c] *= s;
    __syncwarp();
    for (int i = lane; i < rd / 2; i += 32) {
        const int c0 = d - rd + 2 * i;
        rope_pair(&v[c0], &v[c0 + 1], inv_freq[i], pos, rope_scale, 1.f);
    }
}

// RoPE on the trailing rd dims of every width-wide head of x [T, heads·width] f32, in place: block
// (pair group, row), a thread per (head, pair) — one block per row walked its 2048 pairs (the
// indexer's 64 heads × 32) 8 deep, ~10 µs at one token (ncu, H100).
extern "C" __global__ void rope_heads(float* __restrict__ x, int heads, int width,
                                      const int* __restrict__ row_pos,
                                      const float* __restrict__ inv_freq, int rd, float rope_scale) {
    pdl_enter();
    const int t = blockIdx.y;
    const int pairs = rd / 2;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= heads * pairs) return;
    const int h = i / pairs, pi = i % pairs;
    float* v = x + ((i64)t * heads + h) * width + width - rd + 2 * pi;
    rope_pair(&v[0], &v[1], inv_freq[pi], row_pos[t], rope_scale, 1.f);
}

// kv [T, d] f32 → weighted RMSNorm (kv_norm), RoPE → bf16 rows of this step. Dynamic smem: d floats.
extern "C" __global__ void __launch_bounds__(256) kv_prep(
    const float* __restrict__ kv, const float* __restrict__ nw, int d, float eps,
    const int* __restrict__ row_pos, const float* __restrict__ inv_freq, int rd, float rope_scale,
    u16* __restrict__ out) {
    pdl_enter();
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
    pdl_enter();
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

// Split-K sparse attention on tensor cores: block (split, group of HG heads, row) attends
// its heads of one query row over candidates [split·chunk, (split+1)·chunk) of its list (window
// rows, then compressed entries: all visible for HCA (kind 1), the indexer's top-k for CSA
// (kind 2)). K = V rows are shared by every head (MQA), so each 32-row tile is gathered once into
// shared memory (cp.async, a ring of ATT_NBUF tiles) for all HG heads: S = Q·Kᵀ and O += P·V are
// m16n8k16 bf16 MMAs with f32 accumulation. q is held as two bf16 parts (hi + lo, ~16 mantissa
// bits: bf16 q alone moved whole-model logits of the tiny test models past their bound, since a
// score's error grows with its size), and so is P for P·V (bf16 P, as in FlashAttention, did too).
// The 16 warps: HG / 16 head tiles of WPT = 256 / HG warps each; warp j of a head tile computes
// S's candidate n-tile j % 4 (8 rows) over the (j / 4)-th of KQ = WPT / 4 parts of d (the parts
// summed in shared memory), and O's 8-column tiles j, j + WPT, ... of d. HG = 64 (4 warps per head
// tile) shares each KV tile among the most heads; HG = 16 (`_h16`, for grids that would leave
// most SMs idle: batch 1) gives each warp a quarter of the instructions, in 4× the blocks: a
// block at batch 1 is a chain of dependent instructions, not bytes. Needs d % 16 == 0, d <= ATT_MAXD.
// Writes un-normalized partials:
// o [T][splits][H][d] and (max, sum) [T][splits][H][2]; an empty split writes max = -inf.
template <int HG>
__device__ __forceinline__ void sparse_attn_body(
    const float* __restrict__ q, const u16* __restrict__ kv_step, const u16* __restrict__ ring,
    const u16* __restrict__ entries, const int* __restrict__ topk_idx, int topk, int kind, int m,
    int W, int maxE, int H, int d, float scale, int chunk, int splits,
    const int* __restrict__ row_seq, const int* __restrict__ row_pos,
    const int* __restrict__ seq_slot, const int* __restrict__ seq_start,
    const int* __restrict__ seq_row0, float* __restrict__ o_part, float* __restrict__ ml_part) {
    constexpr int WPT = 16 / (HG / 16), KQ = WPT / 4, NO = ATT_MAXD / 8 / WPT;
    extern __shared__ __align__(16) u8 smem_raw[];
    const int ld = d + ATT_PAD;  // bf16 per shared row: rows 16 bytes apart in the banks
    u16* qs = reinterpret_cast<u16*>(smem_raw);                  // [HG][ld] q's bf16 part
    u16* ql = qs + HG * ld;                                      // [HG][ld] q - bf16(q)
    u16* kvs = ql + HG * ld;                                             // [NBUF][TILE][ld]
    float* S = reinterpret_cast<float*>(kvs + ATT_NBUF * ATT_TILE * ld);  // [KQ][HG][ATT_SLD]
    // then (CSA) the split's top-k entry indices, chunk ints (the launcher sizes both)
    const int sp = blockIdx.x, t = blockIdx.z, h0 = blockIdx.y * HG;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tq = lane & 3, mh = warp / WPT, j = warp % WPT, wq = j & 3, kp = j >> 2;
    const AttnRows a = attn_rows(row_seq, row_pos, seq_slot, seq_start, seq_row0, t, kind, m, W, maxE, topk, chunk, sp);
    const int c_begin = a.c_begin, c_end = a.c_end;
    const i64 ob = ((i64)t * splits + sp) * H;
    if (c_begin >= c_end) {
        for (int h = tid; h < HG && h0 + h < H; h += blockDim.x) {
            ml_part[(ob + h0 + h) * 2] = NEG_INF;
            ml_part[(ob + h0 + h) * 2 + 1] = 0.f;
        }
        return;
    }
    // CSA: this split's top-k entry indices, after S.
    int* tks = reinterpret_cast<int*>(S + ATT_HG * ATT_SLD);
    if (kind == 2) attn_stage_topk<ATT_THREADS>(tks, topk_idx, t, topk, a);
    // This thread's 16-byte pieces of a tile (row, piece), fixed across tiles: the divisions once.
    const int vpr = d / 8;  // 16-byte pieces per row
    const int p_mod_w = a.p % W;
    constexpr int LPT = ATT_TILE * (ATT_MAXD / 8) / ATT_THREADS;
    int ljr[LPT], lv[LPT];
#pragma unroll
    for (int u = 0; u < LPT; u++) {
        const int i = tid + u * ATT_THREADS;
        ljr[u] = i < ATT_TILE * vpr ? i / vpr : ATT_TILE;
        lv[u] = i % vpr;
    }
    auto load_tile = [&](int c0, int buf) {
#pragma unroll
        for (int u = 0; u < LPT; u++) {
            if (ljr[u] >= ATT_TILE) continue;
            const int c = c0 + ljr[u];
            u16* dst = kvs + (buf * ATT_TILE + ljr[u]) * ld + lv[u] * 8;
            if (c < c_end) {
                const u16* row = attn_row(c, a, p_mod_w, kind, W, maxE, d, kv_step, ring, entries, tks);
                cp_async16(dst, row + lv[u] * 8);
            } else {
                *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    // Prologue: tiles 0 .. NBUF-2 in flight (one commit group each, empty past the end).
    const int ntiles = (c_end - c_begin + ATT_TILE - 1) / ATT_TILE;
#pragma unroll
    for (int i = 0; i < ATT_NBUF - 1; i++) {
        if (i < ntiles) load_tile(c_begin + i * ATT_TILE, i);
        cp_async_commit();
    }
    // q (f32, [H][d] of row t) in batches of ATT_QB float4 loads per thread, all in flight at
    // once: a load-convert-store loop waited out one L2 round trip per piece.
    const int nq4 = HG * (d / 4);
    for (int i0 = tid; i0 < nq4; i0 += ATT_THREADS * ATT_QB) {
        float4 v[ATT_QB];
#pragma unroll
        for (int u = 0; u < ATT_QB; u++) {
            const int i = i0 + u * ATT_THREADS, h = i / (d / 4), c4 = i % (d / 4);
            v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i < nq4 && h0 + h < H) v[u] = reinterpret_cast<const float4*>(q + ((i64)t * H + h0 + h) * d)[c4];
        }
#pragma unroll
        for (int u = 0; u < ATT_QB; u++) {
            const int i = i0 + u * ATT_THREADS, h = i / (d / 4), c4 = i % (d / 4);
            if (i >= nq4) continue;
            q_split4(v[u], reinterpret_cast<uint2*>(qs + h * ld) + c4, reinterpret_cast<uint2*>(ql + h * ld) + c4);
        }
    }
    const int nd = (d / 8 - j + WPT - 1) / WPT;  // this warp's 8-wide column tiles of O: j + WPT·n
    // Its part of d for S, in 16-column steps: [k_lo, k_hi).
    const int k_lo = 16 * (kp * (d / 16) / KQ), k_hi = 16 * ((kp + 1) * (d / 16) / KQ);
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float mr[2] = {NEG_INF, NEG_INF}, lr[2] = {0.f, 0.f};  // rows g, g+8 of head tile mh
    for (int it = 0; it < ntiles; it++) {
        const int c0 = c_begin + it * ATT_TILE;
        __syncthreads();  // tile it-1's readers are done with its buffer and with S
        const int ahead = it + ATT_NBUF - 1;
        if (ahead < ntiles) load_tile(c_begin + ahead * ATT_TILE, ahead % ATT_NBUF);
        cp_async_commit();
        cp_async_wait<ATT_NBUF - 1>();  // tile it has landed
        __syncthreads();
        const u16* kt = kvs + (it % ATT_NBUF) * ATT_TILE * ld;
        // S tile (16 heads × 8 candidates) over this warp's part of d, in two accumulator chains.
        float sc[4] = {0.f, 0.f, 0.f, 0.f}, sc2[4] = {0.f, 0.f, 0.f, 0.f};
        const int qoff = (mh * 16 + (lane & 15)) * ld + (lane >> 4) * 8;
        const u16 *qa = qs + qoff, *la = ql + qoff;
        const u16* kb = kt + (wq * 8 + (lane & 7)) * ld + (lane >> 3) * 8;
        int k = k_lo;
        for (; k + 32 <= k_hi; k += 32) {
            u32 a0[4], a1[4], bb[4];
            ldsm_x4(bb, kb + k);
            ldsm_x4(a0, qa + k);
            ldsm_x4(a1, qa + k + 16);
            mma_bf16(sc, a0, bb[0], bb[1]);
            mma_bf16(sc2, a1, bb[2], bb[3]);
            ldsm_x4(a0, la + k);
            ldsm_x4(a1, la + k + 16);
            mma_bf16(sc, a0, bb[0], bb[1]);
            mma_bf16(sc2, a1, bb[2], bb[3]);
        }
        if (k < k_hi) {  // 16 columns left
            u32 a0[4], a1[4], bb[2];
            ldsm_x2(bb, kb + k);
            ldsm_x4(a0, qa + k);
            ldsm_x4(a1, la + k);
            mma_bf16(sc, a0, bb[0], bb[1]);
            mma_bf16(sc2, a1, bb[0], bb[1]);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int col = wq * 8 + 2 * tq + (r & 1);
            S[(kp * HG + mh * 16 + g + (r >> 1) * 8) * ATT_SLD + col] = c0 + col < c_end ? (sc[r] + sc2[r]) * scale : NEG_INF;
        }
        __syncthreads();
        // Online softmax of rows g, g+8 over the tile (the 4 lanes of a row group share it; the
        // 4 warps of a head tile compute the same values), then P as the A fragments of P·V.
        float pv[2][8];
        u32 pa[2][4], pl[2][4];  // P's bf16 part and its remainder, as A fragments
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float* srow = S + (mh * 16 + g + 8 * r) * ATT_SLD;
            float mx = NEG_INF;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int col = (i >> 2) * 16 + ((i >> 1) & 1) * 8 + 2 * tq + (i & 1);
                float v = srow[col];
#pragma unroll
                for (int p = 1; p < KQ; p++) v += srow[p * HG * ATT_SLD + col];
                pv[r][i] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(mr[r], mx);
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                pv[r][i] = mn == NEG_INF ? 0.f : __expf(pv[r][i] - mn);
                sum += pv[r][i];
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float alpha = mr[r] == NEG_INF ? (mn == NEG_INF ? 1.f : 0.f) : __expf(mr[r] - mn);
            lr[r] = lr[r] * alpha + sum;
            mr[r] = mn;
#pragma unroll
            for (int n = 0; n < NO; n++) {
                o[n][2 * r] *= alpha;
                o[n][2 * r + 1] *= alpha;
            }
        }
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
#pragma unroll
            for (int f = 0; f < 4; f++) {
                const float x = pv[f & 1][4 * kk + (f >> 1) * 2], y = pv[f & 1][4 * kk + (f >> 1) * 2 + 1];
                pa[kk][f] = pack_bf2(x, y);
                pl[kk][f] = pack_bf2(x - bf_lo(pa[kk][f]), y - bf_hi(pa[kk][f]));
            }
        }
        // O (16 heads × this warp's column tiles) += P · V over the tile's 32 rows: one
        // transposed ldmatrix gives a column tile's B fragments for both 16-row halves.
        const u16* vb = kt + lane * ld + j * 8;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            if (n >= nd) break;
            u32 bb[4];
            ldsm_x4_t(bb, vb + n * 8 * WPT);
            mma_bf16(o[n], pa[0], bb[0], bb[1]);
            mma_bf16(o[n], pa[1], bb[2], bb[3]);
            mma_bf16(o[n], pl[0], bb[0], bb[1]);
            mma_bf16(o[n], pl[1], bb[2], bb[3]);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int h = h0 + mh * 16 + g + 8 * r;
        if (h >= H) continue;
        float* orow = o_part + (ob + h) * d + j * 8 + 2 * tq;
#pragma unroll
        for (int n = 0; n < NO; n++)
            if (n < nd) *reinterpret_cast<float2*>(orow + n * 8 * WPT) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
        if (j == 0 && tq == 0) {
            ml_part[(ob + h) * 2] = mr[r];
            ml_part[(ob + h) * 2 + 1] = lr[r];
        }
    }
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS, 1) sparse_attn_partial(SPARSE_ATTN_PARAMS) {
    pdl_enter();
    sparse_attn_body<ATT_HG>(SPARSE_ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATT_THREADS, 1) sparse_attn_partial_h16(SPARSE_ATTN_PARAMS) {
    pdl_enter();
    sparse_attn_body<16>(SPARSE_ATTN_ARGS);
}

// Merges the splits of each head with the sink in the denominator, rotates the rope dims back by
// the query position, writes bf16 [T, H·d]. Block (head, row), one thread per channel pair. The
// splits' weights exp(m_s − M) are formed once into shared memory (splits <= ATT_MAX_SPLITS,
// checked at launch), so the channel loop is independent loads; an empty split (m_s = −inf,
// output never written) is masked by select, not skipped, so its loads can be issued early.
#define ATT_MAX_SPLITS 256
extern "C" __global__ void __launch_bounds__(256) sparse_attn_combine(
    const float* __restrict__ o_part, const float* __restrict__ ml_part,
    const float* __restrict__ sinks, int H, int d, int splits, const int* __restrict__ row_pos,
    const float* __restrict__ inv_freq, int rd, float rope_scale, u16* __restrict__ out) {
    pdl_enter();
    __shared__ float sw[ATT_MAX_SPLITS];
    __shared__ float scratch[33];
    const int h = blockIdx.x, t = blockIdx.y;
    const int pos = row_pos[t];
    const int pairs = d / 2;
    const float sink = sinks[h];
    float mx = NEG_INF;
    for (int s = threadIdx.x; s < splits; s += blockDim.x)
        mx = fmaxf(mx, ml_part[(((i64)t * splits + s) * H + h) * 2]);
    const float M = fmaxf(sink, block_max(mx, scratch));
    float lsum = 0.f;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        const i64 base = ((i64)t * splits + s) * H + h;
        const float ms = ml_part[base * 2];
        const float e = ms == NEG_INF ? 0.f : expf(ms - M);
        sw[s] = e;
        if (e != 0.f) lsum += ml_part[base * 2 + 1] * e;
    }
    const float inv = 1.f / (expf(sink - M) + block_sum(lsum, scratch));
    for (int c2 = threadIdx.x; c2 < pairs; c2 += blockDim.x) {
        float v0 = 0.f, v1 = 0.f;
#pragma unroll 8
        for (int s = 0; s < splits; s++) {
            const float e = sw[s];
            const float2 o = reinterpret_cast<const float2*>(o_part + (((i64)t * splits + s) * H + h) * d)[c2];
            v0 += e != 0.f ? o.x * e : 0.f;
            v1 += e != 0.f ? o.y * e : 0.f;
        }
        v0 *= inv;
        v1 *= inv;
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
    pdl_enter();
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
