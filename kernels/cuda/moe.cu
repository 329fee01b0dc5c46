// MoE routing (model-spec §3.3 "MoE"): scores s = f(router logits) with f ∈ {sqrt∘softplus (0),
// sigmoid (1), softmax (2)}; hash layers read tid2eid, others take the top-k of s + bias (bias
// only selects; ties to the lower index). Weights = chosen scores, normalized when asked, times
// the routed scaling factor. Then a deterministic counting-sort plan groups the (token, slot)
// assignments by expert for the grouped expert kernels (linear.cu, linear_stream.cu), and the combine sums each
// token's k expert rows plus the shared expert.

#define ROUTE_MAXE 384
#define ROUTE_MAXK 16

// Expert e's entry of a warp's per-lane score array s (lane e % 32 holds it at e / 32), to
// every lane.
__device__ __forceinline__ float route_score_of(const float* s, int e, int lane) {
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < ROUTE_MAXE / 32; i++)
        if (lane + 32 * i == e) v = s[i];
    return __shfl_sync(0xffffffffu, v, e & 31);
}

// Token t's experts and weights, by one warp.
__device__ __forceinline__ void route_token(const float* __restrict__ logits, int E, int t, int scoring,
                                            const float* __restrict__ bias, const int* __restrict__ tid2eid,
                                            const int* __restrict__ tokens, int k, float scaling,
                                            int norm_topk, int* __restrict__ ids, float* __restrict__ wts) {
    const int lane = threadIdx.x & 31;
    const float* l = logits + (i64)t * E;
    float s[ROUTE_MAXE / 32];
    float mx = NEG_INF;
#pragma unroll
    for (int i = 0; i < ROUTE_MAXE / 32; i++) {
        int e = lane + 32 * i;
        float v = e < E ? l[e] : NEG_INF;
        s[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = warp_max(mx);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < ROUTE_MAXE / 32; i++) {
        int e = lane + 32 * i;
        float v = s[i];
        if (e < E) {
            if (scoring == 0) v = sqrtf(v > 20.f ? v : log1pf(expf(v)));
            else if (scoring == 1) v = 1.f / (1.f + expf(-v));
            else { v = expf(v - mx); sum += v; }
        }
        s[i] = v;
    }
    if (scoring == 2) {
        sum = warp_sum(sum);
#pragma unroll
        for (int i = 0; i < ROUTE_MAXE / 32; i++) s[i] /= sum;
    }
    // Lane j < k ends holding the j-th choice: its expert and unbiased score (no per-token
    // arrays indexed by j, which would live in local memory). wsum adds the scores in j order.
    int my_e = 0;
    float my_w = 0.f, wsum = 0.f;
    if (tid2eid != nullptr) {
        const int e_l = lane < k ? tid2eid[(i64)tokens[t] * k + lane] : 0;
        for (int j = 0; j < k; j++) {
            const int e = __shfl_sync(0xffffffffu, e_l, j);
            const float v = route_score_of(s, e, lane);
            if (lane == j) {
                my_e = e;
                my_w = v;
            }
            wsum += v;
        }
    } else {
        float key[ROUTE_MAXE / 32];
#pragma unroll
        for (int i = 0; i < ROUTE_MAXE / 32; i++) {
            int e = lane + 32 * i;
            key[i] = e < E ? s[i] + (bias ? bias[e] : 0.f) : NEG_INF;
        }
        for (int j = 0; j < k; j++) {
            float bv = NEG_INF;
            int be = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < ROUTE_MAXE / 32; i++) {
                int e = lane + 32 * i;
                if (e < E && (key[i] > bv || (key[i] == bv && e < be))) {
                    bv = key[i];
                    be = e;
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oe = __shfl_xor_sync(0xffffffffu, be, o);
                if (ov > bv || (ov == bv && oe < be)) {
                    bv = ov;
                    be = oe;
                }
            }
            const float v = route_score_of(s, be, lane);
            if (lane == j) {
                my_e = be;
                my_w = v;
            }
            wsum += v;
#pragma unroll
            for (int i = 0; i < ROUTE_MAXE / 32; i++)
                if (lane + 32 * i == be) key[i] = NEG_INF;
        }
    }
    if (lane < k) {
        float v = my_w;
        if (norm_topk) v /= (wsum + 1e-20f);
        ids[(i64)t * k + lane] = my_e;
        wts[(i64)t * k + lane] = v * scaling;
    }
}

// One warp per token.
extern "C" __global__ void moe_route(const float* __restrict__ logits, int E, int T, int scoring,
                                     const float* __restrict__ bias, const int* __restrict__ tid2eid,
                                     const int* __restrict__ tokens, int k, float scaling,
                                     int norm_topk, int* __restrict__ ids, float* __restrict__ wts) {
    pdl_enter();
    const int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (t >= T) return;
    route_token(logits, E, t, scoring, bias, tid2eid, tokens, k, scaling, norm_topk, ids, wts);
}

// The plan's counts, after the caller stored the n assignments' experts in sid (shared): each
// expert's offset into cnt[0..E) and offsets, and the active list, by two block scans (thread e
// holds expert e; blockDim >= E) instead of one thread walking the experts. scan: 33 ints.
__device__ void plan_counts(const int* sid, int n, int E, int* cnt, int* scan,
                            int* __restrict__ offsets, int* __restrict__ act_list) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int a = threadIdx.x; a < n; a += blockDim.x) atomicAdd(&cnt[sid[a]], 1);
    __syncthreads();
    const int c = threadIdx.x < E ? cnt[threadIdx.x] : 0;
    // Both prefix sums in one scan: the counts above 10 bits, the active flags below (E <= 384
    // < 2^10; n < 2^21, far beyond the shared memory the assignments take).
    int packed;
    const int both = block_exclusive_scan((c << 10) | (c > 0 ? 1 : 0), scan, &packed);
    const int off = both >> 10, ai = both & 1023;
    const int total = packed >> 10, n_act = packed & 1023;
    if (threadIdx.x < E) {
        cnt[threadIdx.x] = off;
        offsets[threadIdx.x] = off;
        if (c > 0) act_list[1 + ai] = threadIdx.x;
    }
    if (threadIdx.x == 0) {
        offsets[E] = total;
        act_list[0] = n_act;
    }
    __syncthreads();
}

// Groups assignments a = t·k + j by expert: offsets [E+1], tok_of / wt_of in (expert, token)
// order, slot_of[a] = the position of assignment a, and the active experts act_list = [count,
// ids ascending...] the expert kernels iterate over. One block of >= E threads; deterministic.
extern "C" __global__ void __launch_bounds__(1024) moe_plan(
    const int* __restrict__ ids, const float* __restrict__ wts, int n, int k, int E,
    int* __restrict__ offsets, int* __restrict__ tok_of, float* __restrict__ wt_of,
    int* __restrict__ slot_of, int* __restrict__ act_list) {
    pdl_enter();
    __shared__ int cnt[ROUTE_MAXE + 1];
    extern __shared__ int sid[];  // the assignments' experts, n ints
    __shared__ int scan[33];
    for (int a = threadIdx.x; a < n; a += blockDim.x) sid[a] = ids[a];
    plan_counts(sid, n, E, cnt, scan, offsets, act_list);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int pos = cnt[e];
        for (int a = 0; a < n; a++) {
            if (sid[a] == e) {
                tok_of[pos] = a / k;
                wt_of[pos] = wts[a];
                slot_of[a] = pos;
                pos++;
            }
        }
    }
}

// The plan of moe_plan by one block of 1024 threads (ROUTE_MAXE <= 1024), from assignments
// another block of this grid wrote (read through L2: `__ldcg`). The scatter is one warp's walk
// over the assignments in chunks of 32: lanes of a chunk with the same expert rank themselves by
// `__match_any_sync`, so each expert's entries stay in assignment order (as moe_plan's) in
// n / 32 steps rather than a walk over all n per expert; the weights come into shared memory
// with the experts, by every thread, so the walk waits on no global load. `sm`: 2n + E + 34
// ints of shared memory.
__device__ void plan_block(const int* ids, const float* wts, int n, int k, int E,
                           int* __restrict__ offsets, int* __restrict__ tok_of,
                           float* __restrict__ wt_of, int* __restrict__ slot_of,
                           int* __restrict__ act_list, int* sm) {
    int* sid = sm;                                 // n: the assignments' experts
    float* swt = reinterpret_cast<float*>(sm + n);  // n: their weights
    int* cnt = sm + 2 * n;                         // E: counts, then each expert's next position
    int* scan = cnt + E + 1;                       // 33: block scan scratch
    for (int a = threadIdx.x; a < n; a += blockDim.x) {
        sid[a] = __ldcg(ids + a);
        swt[a] = __ldcg(wts + a);
    }
    plan_counts(sid, n, E, cnt, scan, offsets, act_list);
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        for (int a0 = 0; a0 < n; a0 += 32) {
            const int a = a0 + lane;
            const int e = a < n ? sid[a] : -1;
            const u32 peers = __match_any_sync(0xffffffffu, e);
            if (a < n) {
                const int pos = cnt[e] + __popc(peers & ((1u << lane) - 1u));
                tok_of[pos] = a / k;
                wt_of[pos] = swt[a];
                slot_of[a] = pos;
            }
            __syncwarp();
            if (a < n && lane == __ffs(peers) - 1) cnt[e] += __popc(peers);
            __syncwarp();
        }
    }
}

// moe_route and moe_plan in one launch (the default; `AMDAHL_ROUTE_PLAN=separate` takes the
// two): a warp per token, blockDim / 32 tokens per block (blockDim >= E, for the plan's
// scans); the last block to finish (counted in `done`, which it resets for the next launch)
// makes the plan. A grid of one block (up to 32 tokens) skips the fences and the count: its
// barrier already shows it its own assignments. Dynamic smem: 2·T·k + E + 34 ints.
extern "C" __global__ void __launch_bounds__(1024) moe_route_plan(
    const float* __restrict__ logits, int E, int T, int scoring, const float* __restrict__ bias,
    const int* __restrict__ tid2eid, const int* __restrict__ tokens, int k, float scaling,
    int norm_topk, int* ids, float* wts, int* __restrict__ offsets, int* __restrict__ tok_of,
    float* __restrict__ wt_of, int* __restrict__ slot_of, int* __restrict__ act_list,
    unsigned* __restrict__ done) {
    pdl_enter();
    extern __shared__ int plan_sm[];
    __shared__ int last;
    const int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (t < T) route_token(logits, E, t, scoring, bias, tid2eid, tokens, k, scaling, norm_topk, ids, wts);
    if (gridDim.x == 1) {
        __syncthreads();
        plan_block(ids, wts, T * k, k, E, offsets, tok_of, wt_of, slot_of, act_list, plan_sm);
        return;
    }
    __threadfence();  // this block's assignments before its arrival
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();  // every block's assignments, after their arrivals
    plan_block(ids, wts, T * k, k, E, offsets, tok_of, wt_of, slot_of, act_list, plan_sm);
    if (threadIdx.x == 0) *done = 0u;
}

// The plan of a dense expert every token goes through with weight 1 (the shared expert).
extern "C" __global__ void plan_identity(int T, int* __restrict__ offsets, int* __restrict__ tok_of,
                                         float* __restrict__ wt_of, int* __restrict__ act_list) {
    pdl_enter();
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T; t += gridDim.x * blockDim.x) {
        tok_of[t] = t;
        wt_of[t] = 1.f;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        offsets[0] = 0;
        offsets[1] = T;
        act_list[0] = T > 0 ? 1 : 0;
        act_list[1] = 0;
    }
}

// out[t] = Σ_j y[slot_of[t·k + j]] (+ shared[t]).
extern "C" __global__ void moe_combine(const float* __restrict__ y, const int* __restrict__ slot_of,
                                       int k, const float* __restrict__ shared, int D,
                                       float* __restrict__ out) {
    pdl_enter();
    const int t = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    float v = shared ? shared[(i64)t * D + c] : 0.f;
    for (int j = 0; j < k; j++) v += y[(i64)slot_of[t * k + j] * D + c];
    out[(i64)t * D + c] = v;
}
