// Token sampling on the device, one block per sequence row of logits [B, V] f32. Banned ids
// (EOS / stop ids before min_tokens) are excluded first. Greedy = argmax (ties to the lower id).
// Otherwise: logits / temperature; top-k keeps values >= the k-th largest (radix select over
// order-preserving keys); top-p keeps the smallest high-probability set whose mass reaches p
// (a threshold found by the same radix select, weighted by probability); the draw u ∈ [0, 1)
// comes from the request's seeded generator on the host, and the token is the first id, in id
// order, whose running kept mass exceeds u · (kept mass). Same seed ⇒ same tokens.

#define SAMPLE_THREADS 1024
#define MAX_BANNED 32

__device__ __forceinline__ bool is_banned(int i, const int* ban) {
    for (int j = 0; j < MAX_BANNED; j++) {
        int b = ban[j];
        if (b < 0) break;
        if (b == i) return true;
    }
    return false;
}

// Largest key threshold such that Σ weight(v ≥ threshold) ≥ target, over allowed values.
// weight: 1 (counts) when `pmax` is NaN-free flag off, else exp(v − vmax).
__device__ u32 radix_threshold(const float* __restrict__ l, int V, const int* ban, float inv_t,
                               float target, int by_mass, float vmax, float* sbins, u32 floor_key) {
    __shared__ u32 sh_prefix;
    __shared__ float sh_above;
    u32 prefix = 0, mask = 0;
    float above = 0.f;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) sbins[i] = 0.f;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            if (is_banned(i, ban)) continue;
            float v = l[i] * inv_t;
            u32 key = float_key(v);
            if (key < floor_key) continue;
            if ((key & mask) == prefix)
                atomicAdd(&sbins[(key >> shift) & 255], by_mass ? expf(v - vmax) : 1.f);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float cum = above;
            int bin = 0;
            for (int bb = 255; bb >= 0; bb--) {
                if (cum + sbins[bb] >= target) {
                    bin = bb;
                    break;
                }
                cum += sbins[bb];
            }
            sh_prefix = prefix | ((u32)bin << shift);
            sh_above = cum;
        }
        __syncthreads();
        prefix = sh_prefix;
        above = sh_above;
        mask |= 255u << shift;
        __syncthreads();
    }
    return prefix;
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_rows(
    const float* __restrict__ logits, int V, const float* __restrict__ temperature,
    const int* __restrict__ top_k, const float* __restrict__ top_p, const float* __restrict__ u,
    const int* __restrict__ banned, int* __restrict__ out) {
    pdl_enter();
    __shared__ float scratch[33];
    __shared__ float sbins[256];
    __shared__ int sidx[32];
    __shared__ float sval[32];
    const int b = blockIdx.x;
    const float* l = logits + (i64)b * V;
    const int* ban = banned + b * MAX_BANNED;
    const float temp = temperature[b];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Argmax over allowed ids (greedy result, and the max for the softmax).
    float bv = NEG_INF;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        if (is_banned(i, ban)) continue;
        float v = l[i];
        if (v > bv || (v == bv && i < bi)) {
            bv = v;
            bi = i;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
    }
    if (lane == 0) {
        sval[warp] = bv;
        sidx[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = NEG_INF;
        int ix = 0x7fffffff;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            if (sval[w] > v || (sval[w] == v && sidx[w] < ix)) {
                v = sval[w];
                ix = sidx[w];
            }
        sval[0] = v;
        sidx[0] = ix;
    }
    __syncthreads();
    const float lmax = sval[0];
    const int amax = sidx[0];
    __syncthreads();
    if (temp <= 0.f || top_k[b] == 1 || amax == 0x7fffffff) {
        if (threadIdx.x == 0) out[b] = amax == 0x7fffffff ? 0 : amax;
        return;
    }
    const float inv_t = 1.f / temp;
    const float vmax = lmax * inv_t;
    u32 floor_key = 0;
    if (top_k[b] > 0 && top_k[b] < V)
        floor_key = radix_threshold(l, V, ban, inv_t, (float)top_k[b], 0, vmax, sbins, 0);
    // Kept mass after top-k.
    float z = 0.f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        if (is_banned(i, ban)) continue;
        float v = l[i] * inv_t;
        if (float_key(v) >= floor_key) z += expf(v - vmax);
    }
    z = block_sum(z, scratch);
    if (top_p[b] < 1.f) {
        floor_key = radix_threshold(l, V, ban, inv_t, top_p[b] * z, 1, vmax, sbins, floor_key);
        float z2 = 0.f;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            if (is_banned(i, ban)) continue;
            float v = l[i] * inv_t;
            if (float_key(v) >= floor_key) z2 += expf(v - vmax);
        }
        z = block_sum(z2, scratch);
    }
    // Inverse CDF in id order: chunks of blockDim ids, block-wide running sums.
    const float target = u[b] * z;
    float run = 0.f;
    __shared__ int found;
    if (threadIdx.x == 0) found = 0x7fffffff;
    __syncthreads();
    int last_kept = -1;
    for (int c0 = 0; c0 < V; c0 += blockDim.x) {
        int i = c0 + threadIdx.x;
        float pmass = 0.f;
        if (i < V && !is_banned(i, ban)) {
            float v = l[i] * inv_t;
            if (float_key(v) >= floor_key) pmass = expf(v - vmax);
        }
        // Inclusive scan of pmass over the block.
        float x = pmass;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            float y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        __syncthreads();
        if (lane == 31) scratch[warp] = x;
        __syncthreads();
        float wbase = 0.f;
        for (int w = 0; w < warp; w++) wbase += scratch[w];
        float tot = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += scratch[w];
        float incl = run + wbase + x;
        if (pmass > 0.f && incl > target && incl - pmass <= target) atomicMin(&found, i);
        if (pmass > 0.f) last_kept = i;
        __syncthreads();
        if (found != 0x7fffffff) break;
        run += tot;
    }
    // Rounding can leave the target just past the last kept id: take that id.
    __shared__ int lastk;
    if (threadIdx.x == 0) lastk = -1;
    __syncthreads();
    if (last_kept >= 0) atomicMax(&lastk, last_kept);
    __syncthreads();
    if (threadIdx.x == 0) out[b] = found != 0x7fffffff ? found : (lastk >= 0 ? lastk : amax);
}
