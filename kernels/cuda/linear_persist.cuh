// The persistent dense linear (`linear_*_nt2_p`, entries in linear.cu), on linear_core.cuh.

// Persistent dense linear at two token groups (FP8 formats, K ≤ 8 warps × 2 superchunks = 1024
// columns; launch/linear.rs `persist_applies`): blocks of 8 warps loop over the 16-row tiles
// blockIdx.x, blockIdx.x + gridDim.x, … of matrix blockIdx.z. Each warp loads its K share of
// the activations once into registers (at 16 tokens twice a tile's weight bytes, which the
// one-tile blocks re-read per tile) and the next tile's weights before the current tile's MMAs,
// cross-warp reduction and store, so a block's loads stay in flight across its tiles (ncu, H100,
// wq_b at b16: 34% of stalls on the first use of the weights, blocks ~5.6K cycles for one round
// of loads; with it 26.9 → 22.0 µs, the default where it applies since the fifteenth session).
template <int FMT>
__device__ void linear_persist_kernel(WDesc d, const u16* __restrict__ x, int ldx, void* y, int ldy,
                                      int M, int N, int K, int out_bf16) {
    constexpr int NT = 2, V = Vec<FMT>::V, SC = 32 * V, P = 2;
    extern __shared__ float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int e = blockIdx.z;
    x += (i64)e * K;
    y = out_bf16 ? (void*)(reinterpret_cast<u16*>(y) + (i64)e * N) : (void*)(reinterpret_cast<float*>(y) + (i64)e * N);
    const float post = post_scale<FMT>(d, e);
    const int nsc = K / SC, per = (nsc + LIN_WARPS - 1) / LIN_WARPS;
    const int c_begin = warp * per, c_end = min(nsc, c_begin + per);
    u32 xv[P][NT][4 * V];
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int k = (c_begin + p) * SC + t * 8 * V;
        const bool live = c_begin + p < c_end;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int m = j * 8 + g;
#pragma unroll
            for (int q = 0; q < V; q++) {
                uint4 v = make_uint4(0, 0, 0, 0);
                if (live && m < M) v = *reinterpret_cast<const uint4*>(x + (i64)m * ldx + k + 8 * q);
                xv[p][j][4 * q] = v.x; xv[p][j][4 * q + 1] = v.y; xv[p][j][4 * q + 2] = v.z; xv[p][j][4 * q + 3] = v.w;
            }
        }
    }
    const int tiles = (N + 15) / 16;
    auto load_w = [&](int tile, u32 (&wa)[P][4 * V], u32 (&wb)[P][4 * V]) {
        const int r0 = min(tile * 16 + g, N - 1), r1 = min(tile * 16 + g + 8, N - 1);
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int k = (c_begin + p) * SC + t * 8 * V;
            if (c_begin + p < c_end) {
                load_wv<FMT, V>(d, e, r0, k, K, wa[p]);
                load_wv<FMT, V>(d, e, r1, k, K, wb[p]);
            } else {
#pragma unroll
                for (int i = 0; i < 4 * V; i++) wa[p][i] = wb[p][i] = 0;
            }
        }
    };
    // One tile from weights (wa, wb), its sum over the warps and its store.
    auto finish = [&](int tile, const u32 (&wa)[P][4 * V], const u32 (&wb)[P][4 * V]) {
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int s = 0; s < 2 * V; s++) {
                const u32 a[4] = {wa[p][2 * s], wb[p][2 * s], wa[p][2 * s + 1], wb[p][2 * s + 1]};
#pragma unroll
                for (int j = 0; j < NT; j++) mma_bf16(acc[j], a, xv[p][j][2 * s], xv[p][j][2 * s + 1]);
            }
        reduce_warps<NT>(acc, red);
        for (int i = threadIdx.x; i < 128 * NT; i += blockDim.x) {
            int row, tok;
            tile_coord(i, &row, &tok);
            const int n = tile * 16 + row, m = tok;
            if (n < N && m < M) {
                const float v = red[i] * post;
                if (out_bf16) reinterpret_cast<u16*>(y)[(i64)m * ldy + n] = f2bf(v);
                else reinterpret_cast<float*>(y)[(i64)m * ldy + n] = v;
            }
        }
        __syncthreads();  // red is free for the next tile
    };
    u32 wa0[P][4 * V], wb0[P][4 * V], wa1[P][4 * V], wb1[P][4 * V];
    int tile = blockIdx.x;
    if (tile < tiles) load_w(tile, wa0, wb0);
    // Two tiles per round, so each weight buffer is a fixed set of registers.
    while (tile < tiles) {
        const int t1 = tile + gridDim.x;
        if (t1 < tiles) load_w(t1, wa1, wb1);
        finish(tile, wa0, wb0);
        if (t1 >= tiles) break;
        const int t2 = t1 + gridDim.x;
        if (t2 < tiles) load_w(t2, wa0, wb0);
        finish(t1, wa1, wb1);
        tile = t2;
    }
}
