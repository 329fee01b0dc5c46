// What the sparse attention kernels share (attention.cu, attention_wg.cu; amdahl-kernels
// `ATTENTION_SHARED`): one query row's candidate list — its window rows, then compressed entries
// (all visible for HCA, kind 1; the indexer's top-k for CSA, kind 2) — a split's share of it,
// the address of a candidate's row, q's split into two bf16 parts, and the kernels' parameter list.

// Every sparse attention kernel's parameters, in the order of the launcher's `attn_args`, and
// their names to pass on.
#define SPARSE_ATTN_PARAMS                                                                                \
    const float* __restrict__ q, const u16* __restrict__ kv_step, const u16* __restrict__ ring,          \
        const u16* __restrict__ entries, const int* __restrict__ topk_idx, int topk, int kind, int m,     \
        int W, int maxE, int H, int d, float scale, int chunk, int splits,                                \
        const int* __restrict__ row_seq, const int* __restrict__ row_pos,                                 \
        const int* __restrict__ seq_slot, const int* __restrict__ seq_start,                              \
        const int* __restrict__ seq_row0, float* __restrict__ o_part, float* __restrict__ ml_part
#define SPARSE_ATTN_ARGS                                                                                  \
    q, kv_step, ring, entries, topk_idx, topk, kind, m, W, maxE, H, d, scale, chunk, splits, row_seq,    \
        row_pos, seq_slot, seq_start, seq_row0, o_part, ml_part

// Query row t's candidates: its sequence's cache slot, the first position and row of this
// step's chunk, its position p (and p mod W), its window rows n_win, and split `split`'s
// range [c_begin, c_end) of the list.
struct AttnRows {
    int slot, start, row0, p, n_win, c_begin, c_end;
};

__device__ __forceinline__ AttnRows attn_rows(const int* __restrict__ row_seq, const int* __restrict__ row_pos,
                                              const int* __restrict__ seq_slot, const int* __restrict__ seq_start,
                                              const int* __restrict__ seq_row0, int t, int kind, int m, int W,
                                              int maxE, int topk, int chunk, int split) {
    AttnRows a;
    const int b = row_seq[t];
    a.p = row_pos[t];
    a.slot = seq_slot[b];
    a.start = seq_start[b];
    a.row0 = seq_row0[b];
    a.n_win = min(W, a.p + 1);
    int n_comp = 0;
    if (kind == 1) n_comp = min((a.p + 1) / m, maxE);
    if (kind == 2) n_comp = min(topk, min((a.p + 1) / m, maxE));
    a.c_begin = split * chunk;
    a.c_end = min(a.n_win + n_comp, a.c_begin + chunk);
    return a;
}

// CSA: the split's top-k entry indices into shared memory once, so a tile's gather reads them
// there instead of waiting on a global load per row; then a barrier.
template <int THREADS>
__device__ __forceinline__ void attn_stage_topk(int* tks, const int* __restrict__ topk_idx, int t, int topk,
                                                const AttnRows& a) {
    const int* trow = topk_idx + (i64)t * topk;
    for (int i = threadIdx.x; i < a.c_end - a.c_begin; i += THREADS) {
        const int c = a.c_begin + i;
        tks[i] = c >= a.n_win ? trow[c - a.n_win] : 0;
    }
    __syncthreads();
}

// Candidate c (< c_end) of the list, a d-wide bf16 row: a window row from this step's kv (a
// position of this chunk) or the ring (slot pos mod W, from p_mod_w = p mod W with no division:
// back < n_win <= W wraps once at most), else a compressed entry (CSA: the staged index).
__device__ __forceinline__ const u16* attn_row(int c, const AttnRows& a, int p_mod_w, int kind, int W, int maxE,
                                               int d, const u16* __restrict__ kv_step, const u16* __restrict__ ring,
                                               const u16* __restrict__ entries, const int* tks) {
    if (c < a.n_win) {
        const int back = a.n_win - 1 - c, pos = a.p - back;
        const int r = p_mod_w - back;
        return pos >= a.start ? kv_step + (i64)(a.row0 + pos - a.start) * d
                              : ring + ((i64)a.slot * W + (r < 0 ? r + W : r)) * d;
    }
    const int e = kind == 2 ? tks[c - a.c_begin] : c - a.n_win;
    return entries + ((i64)a.slot * maxE + e) * d;
}

// Four q values as their bf16 part (hi) and the remainder (lo), ~16 mantissa bits together,
// stored as 8 bytes each.
__device__ __forceinline__ void q_split4(const float4& v, void* hi, void* lo) {
    const u32 h01 = pack_bf2(v.x, v.y), h23 = pack_bf2(v.z, v.w);
    *reinterpret_cast<uint2*>(hi) = make_uint2(h01, h23);
    *reinterpret_cast<uint2*>(lo) = make_uint2(pack_bf2(v.x - bf_lo(h01), v.y - bf_hi(h01)),
                                               pack_bf2(v.z - bf_lo(h23), v.w - bf_hi(h23)));
}
