// The lightning indexer of CSA layers (model-spec §4): per query row, scores of the visible
// compressed keys I(s) = Σ_h max(q_h·k_s, 0) · dI^-½ · w_h · HI^-½, then the top-k of them.
// Metadata as in attention.cu (row_seq, row_pos, seq_slot); keys [slots][maxE][dI] f32.
// Two kernel sets (`AMDAHL_INDEXER=rows|tiles`, launch/attention.rs): the row kernels, and the
// tiled ones (key tiles in shared memory, a warp-scan top-k), opt-in until measured.

#define IDX_MAXH 64

// Lightning-indexer scores, row kernels (`AMDAHL_INDEXER=rows`, the default until the tiled
// ones below are measured): query row blockIdx.y against its visible keys,
// I(s) = Σ_h max(q_h·k_s, 0) · dI^-½ · w_h · HI^-½, a thread per key, every head in registers.
// Dynamic smem: HI·dI + HI floats.
extern "C" __global__ void __launch_bounds__(256) indexer_scores(
    const float* __restrict__ q, const float* __restrict__ wts, const float* __restrict__ keys,
    int HI, int dI, int m, int maxE, const int* __restrict__ row_seq,
    const int* __restrict__ row_pos, const int* __restrict__ seq_slot, float* __restrict__ scores) {
    pdl_enter();
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

#define IXM_TK 64    // keys per tile of indexer_scores_mma (a warp per 8)
#define IXM_DI 128   // index_head_dim it takes
#define IXM_LD 136   // bf16 per shared row: 128 + 8 (ldmatrix rows 16 bytes apart in the banks)
#define IXM_HEADS 64 // most heads (4 tiles of 16)

// f32 values v as bf16 pairs hi = bf16(v), lo = bf16(v − hi): hi + lo holds ~16 of v's 24
// mantissa bits.
__device__ __forceinline__ void split_bf2(float a, float b, u32* hi, u32* lo) {
    *hi = pack_bf2(a, b);
    *lo = pack_bf2(a - bf_lo(*hi), b - bf_hi(*hi));
}

// The 64 × 128 f32 keys of a tile (rows past nk zero): 8 float4 per thread of 256.
__device__ __forceinline__ void ixm_load_tile(const float* kb, int s0, int nk, float4 (&v)[8]) {
#pragma unroll
    for (int u = 0; u < 8; u++) {
        const int i = threadIdx.x + 256 * u, r = i >> 5, c4 = i & 31;
        v[u] = r < nk ? reinterpret_cast<const float4*>(kb + (i64)(s0 + r) * IXM_DI)[c4] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// The indexer scores on tensor cores: block (tile group, row) takes the 64-key tiles blockIdx.x,
// blockIdx.x + gridDim.x, … of its row's visible keys. Query and keys are split into bf16
// high and low parts in shared memory and each q·k is hi·hi + hi·lo + lo·hi on m16n8k16 MMAs
// (f32 accumulate; the dropped lo·lo and the parts' rounding leave ~2^-17 relative error, far
// below the reference's own FP4 fake-quant of q and k, model-spec §3.3). Warp w computes keys
// 8w..8w+7 for every head tile, then Σ_h relu(q_h·k)·w_h over its lanes; the next tile's keys
// load into registers while this one is computed. The FMA kernels (`indexer_scores_k1/k4`)
// ran at ~27% of the FP32 pipe, 5× their bytes' time at 64 rows (ncu, H100). Needs dI = 128,
// HI <= 64 and HI % 16 == 0; 256 threads; dynamic smem IXM_SMEM bytes (launch/attention.rs).
extern "C" __global__ void __launch_bounds__(256) indexer_scores_mma(
    const float* __restrict__ q, const float* __restrict__ wts, const float* __restrict__ keys,
    int HI, int dI, int m, int maxE, const int* __restrict__ row_seq,
    const int* __restrict__ row_pos, const int* __restrict__ seq_slot, float* __restrict__ scores) {
    pdl_enter();
    extern __shared__ __align__(16) u16 ixm[];
    __shared__ float sw[IXM_HEADS];
    u16* qh = ixm;                       // [64][IXM_LD]
    u16* ql = qh + IXM_HEADS * IXM_LD;
    u16* kh = ql + IXM_HEADS * IXM_LD;   // [IXM_TK][IXM_LD]
    u16* kl = kh + IXM_TK * IXM_LD;
    const int t = blockIdx.y;
    const int n_vis = min((row_pos[t] + 1) / m, maxE);
    if ((int)blockIdx.x * IXM_TK >= n_vis) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int ht = HI / 16;
    const float* kb = keys + (i64)seq_slot[row_seq[t]] * maxE * IXM_DI;
    float4 nxt[8];
    {
        const int s0 = blockIdx.x * IXM_TK;
        ixm_load_tile(kb, s0, min(IXM_TK, n_vis - s0), nxt);
    }
    // The query's parts (heads past HI zero) and the head weights with both scales folded in.
    const float4* q4 = reinterpret_cast<const float4*>(q + (i64)t * HI * IXM_DI);
    for (int i = threadIdx.x; i < IXM_HEADS * 32; i += 256) {
        const int h = i >> 5, c4 = i & 31;
        const float4 v = h < HI ? q4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        u32 h01, l01, h23, l23;
        split_bf2(v.x, v.y, &h01, &l01);
        split_bf2(v.z, v.w, &h23, &l23);
        *reinterpret_cast<uint2*>(qh + h * IXM_LD + 4 * c4) = make_uint2(h01, h23);
        *reinterpret_cast<uint2*>(ql + h * IXM_LD + 4 * c4) = make_uint2(l01, l23);
    }
    if (threadIdx.x < IXM_HEADS)
        sw[threadIdx.x] = threadIdx.x < HI ? wts[(i64)t * HI + threadIdx.x] * rsqrtf((float)IXM_DI) * rsqrtf((float)HI) : 0.f;
    for (int tile = blockIdx.x; tile * IXM_TK < n_vis; tile += gridDim.x) {
        const int s0 = tile * IXM_TK;
        __syncthreads();  // the previous tile's keys are read (and, the first time, q is in)
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = threadIdx.x + 256 * u, r = i >> 5, c4 = i & 31;
            u32 h01, l01, h23, l23;
            split_bf2(nxt[u].x, nxt[u].y, &h01, &l01);
            split_bf2(nxt[u].z, nxt[u].w, &h23, &l23);
            *reinterpret_cast<uint2*>(kh + r * IXM_LD + 4 * c4) = make_uint2(h01, h23);
            *reinterpret_cast<uint2*>(kl + r * IXM_LD + 4 * c4) = make_uint2(l01, l23);
        }
        __syncthreads();
        const int s1 = s0 + gridDim.x * IXM_TK;
        if (s1 < n_vis) ixm_load_tile(kb, s1, min(IXM_TK, n_vis - s1), nxt);
        float acc[IXM_HEADS / 16][4];
#pragma unroll
        for (int mh = 0; mh < IXM_HEADS / 16; mh++) acc[mh][0] = acc[mh][1] = acc[mh][2] = acc[mh][3] = 0.f;
        const int boff = (warp * 8 + (lane & 7)) * IXM_LD + (lane >> 3) * 8;
        const int aoff = (lane & 15) * IXM_LD + (lane >> 4) * 8;
#pragma unroll
        for (int k = 0; k < IXM_DI; k += 32) {
            u32 bh[4], bl[4];
            ldsm_x4(bh, kh + boff + k);
            ldsm_x4(bl, kl + boff + k);
#pragma unroll
            for (int mh = 0; mh < IXM_HEADS / 16; mh++) {
                if (mh >= ht) break;
                u32 a0[4], a1[4];
                const u16* qa = qh + mh * 16 * IXM_LD + aoff + k;
                const u16* la = ql + mh * 16 * IXM_LD + aoff + k;
                ldsm_x4(a0, qa);
                ldsm_x4(a1, qa + 16);
                mma_bf16(acc[mh], a0, bh[0], bh[1]);
                mma_bf16(acc[mh], a1, bh[2], bh[3]);
                mma_bf16(acc[mh], a0, bl[0], bl[1]);
                mma_bf16(acc[mh], a1, bl[2], bl[3]);
                ldsm_x4(a0, la);
                ldsm_x4(a1, la + 16);
                mma_bf16(acc[mh], a0, bh[0], bh[1]);
                mma_bf16(acc[mh], a1, bh[2], bh[3]);
            }
        }
        // acc[mh]: heads mh·16 + g (0, 1) and + 8 (2, 3), keys 8·warp + 2·tq (+1).
        float p0 = 0.f, p1 = 0.f;
#pragma unroll
        for (int mh = 0; mh < IXM_HEADS / 16; mh++) {
            const float w0 = sw[mh * 16 + g], w1 = sw[mh * 16 + g + 8];
            p0 += fmaxf(acc[mh][0], 0.f) * w0 + fmaxf(acc[mh][2], 0.f) * w1;
            p1 += fmaxf(acc[mh][1], 0.f) * w0 + fmaxf(acc[mh][3], 0.f) * w1;
        }
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            p0 += __shfl_xor_sync(0xffffffffu, p0, o);
            p1 += __shfl_xor_sync(0xffffffffu, p1, o);
        }
        const int s = s0 + warp * 8 + 2 * tq;
        if (g == 0 && s < n_vis) scores[(i64)t * maxE + s] = p0;
        if (g == 0 && s + 1 < n_vis) scores[(i64)t * maxE + s + 1] = p1;
    }
}

// Top min(topk, n_vis) of a row's indexer scores (ties to the lower index) by radix select on
// order-preserving keys, written in index order; the rest of the row is -1. One block per row;
// thread 0 walks each pass's histogram (`AMDAHL_INDEXER=rows`).
extern "C" __global__ void __launch_bounds__(1024) topk_select(
    const float* __restrict__ scores, int maxE, int m, int topk, const int* __restrict__ row_pos,
    int* __restrict__ out) {
    pdl_enter();
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

#define IDX_HW 8

// Lightning-indexer scores of query row blockIdx.y against its visible keys:
// I(s) = Σ_h max(q_h·k_s, 0) · dI^-½ · w_h · HI^-½, in f32. The block holds the row's query (all
// heads, zero-padded to whole groups of IDX_HW) in shared memory and walks the 32·KPL-key tiles
// blockIdx.x, blockIdx.x + gridDim.x, … of the visible keys. Each tile is staged in shared memory
// (rows padded to dI + 4 floats: conflict-free 16-byte reads); warp w takes head groups w, w + 8, …
// and lane l keys l + 32j, so each 16-byte key read feeds IDX_HW heads and each (broadcast) query
// read KPL keys. The warps' head sums meet in shared memory and are added in warp order.
// Needs dI % 4 == 0 and 256 threads. Dynamic smem: indexer_smem() floats (launch/attention.rs).
template <int KPL>
__device__ __forceinline__ void indexer_scores_body(
    const float* __restrict__ q, const float* __restrict__ wts, const float* __restrict__ keys,
    int HI, int dI, int m, int maxE, const int* __restrict__ row_seq,
    const int* __restrict__ row_pos, const int* __restrict__ seq_slot, float* __restrict__ scores) {
    constexpr int TK = 32 * KPL, NW = 8;
    extern __shared__ float4 idx_smem[];
    const int t = blockIdx.y;
    const int n_vis = min((row_pos[t] + 1) / m, maxE);
    if ((int)blockIdx.x * TK >= n_vis) return;
    const int HG = (HI + IDX_HW - 1) / IDX_HW, HIp = HG * IDX_HW, ld = dI + 4, d4 = dI / 4;
    float* sq = (float*)idx_smem;
    float* sw = sq + HIp * dI;
    float* sk = sw + HIp;
    float* red = sk + TK * ld;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4* q4 = (const float4*)(q + (i64)t * HI * dI);
    for (int i = threadIdx.x; i < HIp * d4; i += blockDim.x)
        ((float4*)sq)[i] = i < HI * d4 ? q4[i] : zero;
    const float qs = rsqrtf((float)dI), ws = rsqrtf((float)HI);
    for (int i = threadIdx.x; i < HIp; i += blockDim.x) sw[i] = i < HI ? wts[(i64)t * HI + i] * ws : 0.f;
    const float* kb = keys + (i64)seq_slot[row_seq[t]] * maxE * dI;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int tile = blockIdx.x; tile * TK < n_vis; tile += gridDim.x) {
        const int s0 = tile * TK, nk = min(TK, n_vis - s0);
        __syncthreads();  // the query is in; the last tile's keys and sums are read
        for (int i = threadIdx.x; i < TK * d4; i += blockDim.x) {
            const int r = i / d4, c = i - r * d4;
            const float4 v = r < nk ? ((const float4*)(kb + (i64)(s0 + r) * dI))[c] : zero;
            *(float4*)(sk + r * ld + c * 4) = v;
        }
        __syncthreads();
        float part[KPL];
#pragma unroll
        for (int j = 0; j < KPL; j++) part[j] = 0.f;
        for (int hg = warp; hg < HG; hg += NW) {
            float acc[IDX_HW][KPL];
#pragma unroll
            for (int h = 0; h < IDX_HW; h++)
#pragma unroll
                for (int j = 0; j < KPL; j++) acc[h][j] = 0.f;
            const float* qh = sq + hg * IDX_HW * dI;
            for (int c = 0; c < dI; c += 4) {
                float4 kv[KPL];
#pragma unroll
                for (int j = 0; j < KPL; j++) kv[j] = *(const float4*)(sk + (lane + 32 * j) * ld + c);
#pragma unroll
                for (int h = 0; h < IDX_HW; h++) {
                    const float4 qv = *(const float4*)(qh + h * dI + c);
#pragma unroll
                    for (int j = 0; j < KPL; j++) {
                        float a = acc[h][j];
                        a = fmaf(qv.x, kv[j].x, a);
                        a = fmaf(qv.y, kv[j].y, a);
                        a = fmaf(qv.z, kv[j].z, a);
                        acc[h][j] = fmaf(qv.w, kv[j].w, a);
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < IDX_HW; h++)
#pragma unroll
                for (int j = 0; j < KPL; j++)
                    part[j] += fmaxf(acc[h][j], 0.f) * qs * sw[hg * IDX_HW + h];
        }
#pragma unroll
        for (int j = 0; j < KPL; j++) red[warp * TK + lane + 32 * j] = part[j];
        __syncthreads();
        for (int r = threadIdx.x; r < nk; r += blockDim.x) {
            float tot = 0.f;
#pragma unroll
            for (int w = 0; w < NW; w++) tot += red[w * TK + r];
            scores[(i64)t * maxE + s0 + r] = tot;
        }
    }
}

// Few rows (batch 1): 32-key tiles, to spread a row's keys over more SMs.
extern "C" __global__ void __launch_bounds__(256) indexer_scores_k1(
    const float* __restrict__ q, const float* __restrict__ wts, const float* __restrict__ keys,
    int HI, int dI, int m, int maxE, const int* __restrict__ row_seq,
    const int* __restrict__ row_pos, const int* __restrict__ seq_slot, float* __restrict__ scores) {
    pdl_enter();
    indexer_scores_body<1>(q, wts, keys, HI, dI, m, maxE, row_seq, row_pos, seq_slot, scores);
}

// Many rows: 128-key tiles, four keys per lane (each query read feeds four keys).
extern "C" __global__ void __launch_bounds__(256) indexer_scores_k4(
    const float* __restrict__ q, const float* __restrict__ wts, const float* __restrict__ keys,
    int HI, int dI, int m, int maxE, const int* __restrict__ row_seq,
    const int* __restrict__ row_pos, const int* __restrict__ seq_slot, float* __restrict__ scores) {
    pdl_enter();
    indexer_scores_body<4>(q, wts, keys, HI, dI, m, maxE, row_seq, row_pos, seq_slot, scores);
}

// Top min(topk, n_vis) of a row's indexer scores (ties to the lower index) by radix select on
// order-preserving keys, written in index order; the rest of the row is -1. One block per row.
// Each of the four 8-bit passes: a histogram of the keys that match the digits so far (lanes
// with the same bin add once: `__match_any_sync`, so a crowded bin is not 32 serial atomics),
// then warp 0 finds the bin holding the k-th largest key by a scan over its 8 bins per lane.
extern "C" __global__ void __launch_bounds__(1024) topk_select_warp(
    const float* __restrict__ scores, int maxE, int m, int topk, const int* __restrict__ row_pos,
    int* __restrict__ out) {
    pdl_enter();
    __shared__ int hist[256];
    __shared__ int sh[2];  // prefix, remaining
    __shared__ int scan_scratch[33];
    const int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31;
    const int n = min((row_pos[t] + 1) / m, maxE);
    const int k = min(topk, n);
    const float* s = scores + (i64)t * maxE;
    int* o = out + (i64)t * topk;
    for (int i = tid + k; i < topk; i += blockDim.x) o[i] = -1;
    if (k == n) {
        for (int i = tid; i < n; i += blockDim.x) o[i] = i;
        return;
    }
    u32 prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int c0 = tid - lane; c0 < n; c0 += blockDim.x) {  // whole warps: match needs them
            const int i = c0 + lane;
            const u32 key = i < n ? float_key(s[i]) : 0u;
            const u32 bin = (i < n && (key & mask) == prefix) ? (key >> shift) & 255u : 256u;
            const u32 peers = __match_any_sync(0xffffffffu, bin);
            if (bin < 256u && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        if (tid < 32) {
            // Lane l holds bins 255 − 8l … 248 − 8l (descending); `above`: keys in higher bins.
            int c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                c[j] = hist[255 - 8 * lane - j];
                sum += c[j];
            }
            int incl = sum;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, incl, off);
                if (lane >= off) incl += y;
            }
            const int above = incl - sum;
            if (above < remaining && incl >= remaining) {
                int cum = above, bin = -1;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (bin < 0) {
                        if (cum + c[j] >= remaining) bin = 255 - 8 * lane - j;
                        else cum += c[j];
                    }
                }
                sh[0] = (int)(prefix | ((u32)bin << shift));
                sh[1] = remaining - cum;
            }
        }
        __syncthreads();
        prefix = (u32)sh[0];
        remaining = sh[1];
        mask |= 255u << shift;
    }
    // prefix = the k-th largest key; take every larger key and the first `remaining` equal ones.
    // One scan per chunk counts both (larger in the low 16 bits, equal in the high: ≤ 1024 each).
    const int n_gt = k - remaining;
    int base_gt = 0, base_eq = 0;
    for (int c0 = 0; c0 < n; c0 += blockDim.x) {
        const int i = c0 + tid;
        const u32 key = i < n ? float_key(s[i]) : 0u;
        const int gt = (i < n && key > prefix) ? 1 : 0;
        const int eq = (i < n && key == prefix) ? 1 : 0;
        int tot;
        const int r = block_exclusive_scan(gt | (eq << 16), scan_scratch, &tot);
        if (gt) o[base_gt + (r & 0xffff)] = i;
        if (eq && base_eq + (r >> 16) < remaining) o[n_gt + base_eq + (r >> 16)] = i;
        base_gt += tot & 0xffff;
        base_eq += tot >> 16;
    }
}
