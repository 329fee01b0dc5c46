// What the linear modules (linear.cu, linear_stream.cu, linear_gemm.cu) share beyond the weight
// formats: the split-K workspace's size, V4's clamped SwiGLU, and the decode kernels' superchunk
// MMA on raw weights (linear.cu's warp kernels and the streamed ones).

// The split-K workspace (gpu/mod.rs SPLIT_COUNTERS, SPLIT_PARTIAL_BYTES / 4): tile counters, floats.
#define SPLIT_TILES 4096
#define SPLIT_PARTS 1048576

// The clamped SwiGLU of V4's experts on the f32 gate and up values.
__device__ __forceinline__ float swiglu(float gate, float up, float limit) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return g / (1.f + expf(-g)) * u;
}

// One superchunk of a 16-row tile on the tensor cores: the raw weights of rows g (A) and g + 8
// (B) decoded word by word into MMA operands against NT token groups' activations xv.
template <int FMT, int V, int NT>
__device__ __forceinline__ void mma_raw(const RawW& A, const RawW& B, const u32 (*xv)[4 * V],
                                        float (*acc)[4]) {
    u32 sa0, sa1, sb0, sb1;
    raw_scales<FMT>(A, &sa0, &sa1);
    raw_scales<FMT>(B, &sb0, &sb1);
    u32 pa_prev = 0, pb_prev = 0;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        u32 pa[V], pb[V];
        decode_word<FMT, V>(A, sa0, sa1, w, pa);
        decode_word<FMT, V>(B, sb0, sb1, w, pb);
        if (V >= 2) {
#pragma unroll
            for (int j = 0; j < V; j += 2) {
                const int st = (w * V + j) / 2;
                const u32 a[4] = {pa[j], pb[j], pa[(j + 1) % V], pb[(j + 1) % V]};
#pragma unroll
                for (int m = 0; m < NT; m++) mma_bf16(acc[m], a, xv[m][2 * st], xv[m][2 * st + 1]);
            }
        } else if (w & 1) {
            const u32 a[4] = {pa_prev, pb_prev, pa[0], pb[0]};
#pragma unroll
            for (int m = 0; m < NT; m++) mma_bf16(acc[m], a, xv[m][w - 1], xv[m][w]);
        } else {
            pa_prev = pa[0];
            pb_prev = pb[0];
        }
    }
}
