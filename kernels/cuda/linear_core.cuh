// The register linears' shared core (compiled before linear.cu; amdahl-kernels `LINEAR`): the
// superchunk MMA loop over a warp's share of K, the cross-warp reduction of a tile and its
// output coordinates, and the stored bytes of a row (the L2 prefetches' ranges).

#define LIN_WARPS 8

// Accumulates the 16-row tile at n0 for up to 8·NT tokens over this warp's share (of 8) of the
// superchunks [sc_lo, sc_hi) of K (sc_hi past the end: to the end).
// xr[j]: row pointer (bf16) of token j·8 + g of the group, or null.
template <int FMT, int NT, int DUAL>
__device__ __forceinline__ void mma_core(const WDesc& d0, const WDesc& d1, int e, int n0, int N,
                                         int K, int sc_lo, int sc_hi, const u16* const xr[NT],
                                         float acc0[NT][4], float acc1[NT][4]) {
    constexpr int V = Vec<FMT>::V;
    constexpr int SC = 32 * V;
    constexpr int U = (NT >= 4) ? 1 : (DUAL ? (V >= 2 ? 1 : 2) : (V == 4 ? 2 : 4 / V));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    const int hi = min((K + SC - 1) / SC, sc_hi);
    const int per = (hi - sc_lo + LIN_WARPS - 1) / LIN_WARPS;
    const int c_begin = sc_lo + warp * per, c_end = min(hi, c_begin + per);
    for (int c0 = c_begin; c0 < c_end; c0 += U) {
        u32 wa[U][4 * V], wb[U][4 * V], va[U][4 * V], vb[U][4 * V];
        u32 xv[U][NT][4 * V];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = (c0 + u) * SC + t * 8 * V;
            const bool live = c0 + u < c_end;
            // 16-byte loads need 16-byte-aligned rows: K % 16 (fp8) or K % 32 (fp4).
            const bool vec_ok = (V == 1) || (K % (8 * V) == 0);
            if (live && vec_ok && k + 8 * V <= K) {
                load_wv<FMT, V>(d0, e, r0, k, K, wa[u]);
                load_wv<FMT, V>(d0, e, r1, k, K, wb[u]);
                if (DUAL) {
                    load_wv<FMT, V>(d1, e, r0, k, K, va[u]);
                    load_wv<FMT, V>(d1, e, r1, k, K, vb[u]);
                }
            } else {
                // Tail (or no work): 8-element groups, zeros past K.
#pragma unroll
                for (int q = 0; q < V; q++) {
                    const int kq = k + 8 * q;
                    const bool in = live && kq < K;
#pragma unroll
                    for (int i = 0; i < 4; i++) wa[u][4 * q + i] = wb[u][4 * q + i] = va[u][4 * q + i] = vb[u][4 * q + i] = 0;
                    if (in) {
                        load_w8<FMT>(d0, e, r0, kq, K, &wa[u][4 * q]);
                        load_w8<FMT>(d0, e, r1, kq, K, &wb[u][4 * q]);
                        if (DUAL) {
                            load_w8<FMT>(d1, e, r0, kq, K, &va[u][4 * q]);
                            load_w8<FMT>(d1, e, r1, kq, K, &vb[u][4 * q]);
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int q = 0; q < V; q++) {
                    const int kq = k + 8 * q;
                    if (live && kq < K && xr[j] != nullptr) {
                        const uint4 v = *reinterpret_cast<const uint4*>(xr[j] + kq);
                        xv[u][j][4 * q] = v.x; xv[u][j][4 * q + 1] = v.y; xv[u][j][4 * q + 2] = v.z; xv[u][j][4 * q + 3] = v.w;
                    } else {
                        xv[u][j][4 * q] = xv[u][j][4 * q + 1] = xv[u][j][4 * q + 2] = xv[u][j][4 * q + 3] = 0;
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int s = 0; s < 2 * V; s++) {
                const u32 a[4] = {wa[u][2 * s], wb[u][2 * s], wa[u][2 * s + 1], wb[u][2 * s + 1]};
#pragma unroll
                for (int j = 0; j < NT; j++) mma_bf16(acc0[j], a, xv[u][j][2 * s], xv[u][j][2 * s + 1]);
                if (DUAL) {
                    const u32 b[4] = {va[u][2 * s], vb[u][2 * s], va[u][2 * s + 1], vb[u][2 * s + 1]};
#pragma unroll
                    for (int j = 0; j < NT; j++) mma_bf16(acc1[j], b, xv[u][j][2 * s], xv[u][j][2 * s + 1]);
                }
            }
        }
    }
}

// Sums the warps' partial tiles into red[0..128·NT) (index j·128 + lane·4 + r), in place.
template <int NT>
__device__ __forceinline__ void reduce_warps(float acc[NT][4], float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) red[warp * 128 * NT + j * 128 + lane * 4 + r] = acc[j][r];
    __syncthreads();
    for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < LIN_WARPS; w++) s += red[w * 128 * NT + i];
        red[i] = s;
    }
    __syncthreads();
}

// Output coordinates of reduced element i: weight row offset (0..15) and token (0..8·NT).
__device__ __forceinline__ void tile_coord(int i, int* row, int* tok) {
    const int j = i >> 7, lane = (i >> 2) & 31, r = i & 3;
    *row = (lane >> 2) + ((r & 2) ? 8 : 0);
    *tok = j * 8 + 2 * (lane & 3) + (r & 1);
}

// Bytes per stored row of a row-major dense format (0: not prefetched: tiled FP4, f32).
template <int FMT>
__device__ __forceinline__ i64 row_bytes(int K) {
    if (IS_TILED(FMT) || FMT == FMT_F32) return 0;
    return FMT == FMT_BF16 || FMT == FMT_F16 ? 2 * (i64)K : IS_FP4(FMT) ? K / 2 : K;
}
