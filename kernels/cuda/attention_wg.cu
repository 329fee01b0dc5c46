// Split-K sparse decode attention on warpgroup MMAs (sm_90a `wgmma`), for 64 heads of 512 dims
// per block: the same partials as attention.cu's `sparse_attn_partial` (o [T][splits][H][d] f32,
// (max, sum) [T][splits][H][2]; `sparse_attn_combine` merges them), from far fewer
// instructions. There, a 32-row KV tile cost each of 16 warps ~1150 instructions (128 of them
// m16n8k16 MMAs, each waiting on its ldmatrix), ~7 µs per tile on the H100 (ncu). Here each
// warpgroup issues a tile's scores as 32 m64n32k16 MMAs and its P·V as 4 m64n256k16 MMAs, both
// read from shared memory by the tensor cores themselves.
//
// Block (split, group of 64 heads, row), two warpgroups. Shared memory, from a 1024-byte
// aligned base, every operand in the 128-byte swizzle (row r's 16-byte piece j of a 64-column
// chunk at r·128 + ((j ^ r % 8) · 16), chunks one after another):
//   q's bf16 part and its remainder (hi + lo, as attention.cu: ~16 mantissa bits), 64 rows
//   (heads) each, 64 KiB apiece; two KV tiles of 32 rows, 32 KiB each; the two warpgroups'
//   score partials; (CSA) the split's top-k entry indices.
// Per tile: warpgroup w scores S_w = Q[:, half w] · K[:, half w]ᵀ (64 × 32, f32), both halves
// go through shared memory, and each warpgroup forms the whole S = S_0 + S_1 (the same order in
// both, so both hold the same bits), runs the online softmax on it, and adds P · V[:, half w]
// into its 64 × 256 accumulator: P (hi + lo bf16, as attention.cu) from registers, V as the
// tile read N-major (transposed) from the same shared rows the scores read K-major.

#define AWG_HG 64        // heads per block (the MMA's M)
#define AWG_D 512        // head dim
#define AWG_TILE 32      // KV rows per tile (the scores' N)
#define AWG_THREADS 256  // two warpgroups
#define AWG_KC (AWG_D / 64)                  // 64-column chunks (one swizzle atom wide)
#define AWG_QBYTES (AWG_HG * AWG_D * 2)      // one part of q
#define AWG_TBYTES (AWG_TILE * AWG_D * 2)    // one KV tile
#define AWG_SLD 40                           // floats per score-partial row (bank spread)
#define AWG_SBYTES (2 * AWG_HG * AWG_SLD * 4)
#define AWG_QB 16        // q float4 loads in flight per thread

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// d (64 × 32, f32) = [d +] A · B: A (64 × 16) and B (16 × 32) K-major in shared memory.
__device__ __forceinline__ void wg_m64n32k16_ss(float (&d)[16], u32 da, u32 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %18, 0;\n"
        "mov.b64 da, {%16, " WG_DESC_HI "};\nmov.b64 db, {%17, " WG_DESC_HI "};\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, da, db, p, 1, 1, 0, 0;\n}\n"
        : WG_F16(d, 0)
        : "r"(da), "r"(db), "r"(accumulate));
}

// d (64 × 256, f32) += A · B: A (64 × 16 bf16) from registers (each warp its 16 rows, as an
// m16n8k16 A fragment), B (16 × 256) N-major in shared memory (transposed).
__device__ __forceinline__ void wg_m64n256k16_rs_acc(float (&d)[128], const u32 (&a)[4], u32 db) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, %133, 0;\nmov.b64 db, {%132, " WG_DESC_HI "};\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, db, p, 1, 1, 1;\n}\n"
        : WG_F16(d, 0), WG_F16(d, 16), WG_F16(d, 32), WG_F16(d, 48), WG_F16(d, 64), WG_F16(d, 80),
          WG_F16(d, 96), WG_F16(d, 112)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(db), "n"(1));
}

#endif

// QIMG: q holds `q_prep`'s image (per head its bf16 hi part, then its lo part, 2·d bytes each)
// instead of f32 rows: the block copies it into place (`cp.async`, no registers, no
// conversion) alongside the first tile.
template <bool QIMG>
__device__ __forceinline__ void sparse_attn_wg_body(SPARSE_ATTN_PARAMS) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(16) u8 smem_raw[];
    // The swizzle is a function of address bits 4–9: operands start on 1024-byte boundaries.
    u8* base = smem_raw + ((1024 - ((u32)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    u8* qh = base;
    u8* ql = qh + AWG_QBYTES;
    u8* kvs = ql + AWG_QBYTES;
    float* sp = reinterpret_cast<float*>(kvs + 2 * AWG_TBYTES);  // [2][HG][SLD]
    int* tks = reinterpret_cast<int*>(reinterpret_cast<u8*>(sp) + AWG_SBYTES);
    const int sp_i = blockIdx.x, t = blockIdx.z, h0 = blockIdx.y * AWG_HG;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, w4 = warp & 3, g = lane >> 2, tq = lane & 3;
    const AttnRows a = attn_rows(row_seq, row_pos, seq_slot, seq_start, seq_row0, t, kind, m, W, maxE, topk, chunk, sp_i);
    const int c_begin = a.c_begin, c_end = a.c_end;
    const i64 ob = ((i64)t * splits + sp_i) * H;
    if (c_begin >= c_end) {
        for (int h = tid; h < AWG_HG; h += AWG_THREADS) {
            ml_part[(ob + h0 + h) * 2] = NEG_INF;
            ml_part[(ob + h0 + h) * 2 + 1] = 0.f;
        }
        return;
    }
    if (QIMG) {
        // 16-byte piece i: part i / (HG · RP) (hi, lo), head (i / RP) % HG, piece k = i % RP of
        // its row (chunk k / 8, piece k % 8 of the chunk); a warp reads 512 contiguous bytes.
        constexpr int RP = AWG_D * 2 / 16;  // 16-byte pieces per part of a head
        static_assert(RP == 64 && AWG_HG * RP == 4096, "the piece index's shifts and masks");
        const u8* src = reinterpret_cast<const u8*>(q + ((i64)t * H + h0) * AWG_D);
        for (int i = tid; i < 2 * AWG_HG * RP; i += AWG_THREADS) {
            const int part = i >> 12, h = (i >> 6) & (AWG_HG - 1), k = i & 63;
            cp_async16((part ? ql : qh) + (k >> 3) * (AWG_HG * 128) + sw128(h, k & 7),
                       src + (i64)h * (AWG_D * 4) + part * (AWG_D * 2) + k * 16);
        }
    }
    if (kind == 2) attn_stage_topk<AWG_THREADS>(tks, topk_idx, t, topk, a);
    // This thread's part of a tile: row tid / 8, its 16-byte pieces j + 8u (u = 0 … 7: chunk u,
    // piece j = tid % 8 of the chunk), so one row address per thread and tile; a warp's copy
    // instruction reads 4 rows × 128 contiguous bytes.
    const int lrow = tid >> 3, lj = tid & 7;
    const u32 ldst = sw128(lrow, lj);
    const int p_mod_w = a.p % W;
    auto load_tile = [&](int c0, int buf) {
        u8* dst = kvs + buf * AWG_TBYTES + ldst;
        const int c = c0 + lrow;
        if (c < c_end) {
            const u16* row = attn_row(c, a, p_mod_w, kind, W, maxE, AWG_D, kv_step, ring, entries, tks) + lj * 8;
#pragma unroll
            for (int u = 0; u < AWG_KC; u++) cp_async16(dst + u * (AWG_TILE * 128), row + u * 64);
        } else {
#pragma unroll
            for (int u = 0; u < AWG_KC; u++) *reinterpret_cast<uint4*>(dst + u * (AWG_TILE * 128)) = make_uint4(0, 0, 0, 0);
        }
    };
    const int ntiles = (c_end - c_begin + AWG_TILE - 1) / AWG_TILE;
    load_tile(c_begin, 0);
    cp_async_commit();
    // q (f32 [H][d] of row t) → its two bf16 parts, swizzled; AWG_QB float4 loads in flight.
    constexpr int NQ4 = AWG_HG * (AWG_D / 4);
    for (int i0 = tid; !QIMG && i0 < NQ4; i0 += AWG_THREADS * AWG_QB) {
        float4 v[AWG_QB];
#pragma unroll
        for (int u = 0; u < AWG_QB; u++) {
            const int i = i0 + u * AWG_THREADS;
            v[u] = i < NQ4 ? reinterpret_cast<const float4*>(q + ((i64)t * H + h0) * AWG_D)[i]
                           : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < AWG_QB; u++) {
            const int i = i0 + u * AWG_THREADS;
            if (i >= NQ4) continue;
            const int h = i / (AWG_D / 4), c4 = i % (AWG_D / 4);  // float4 c4: chunk c4 / 16
            const u32 off = (c4 >> 4) * (AWG_HG * 128) + sw128(h, (c4 & 15) >> 1) + (c4 & 1) * 8;
            q_split4(v[u], qh + off, ql + off);
        }
    }
    // Descriptors' low words at each operand's start; a k-step, chunk or buffer adds its byte
    // offset / 16 (addresses stay below 2^18: no carry out of the start field).
    const u32 dqh = wg_desc_lo(qh, 16), dql = wg_desc_lo(ql, 16);
    const u32 dkv = wg_desc_lo(kvs, 16), dvv = wg_desc_lo(kvs, AWG_TILE * 128);
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; i++) {
        o[i] = 0.f;
        wg_pin(o[i]);
    }
    float mr[2] = {NEG_INF, NEG_INF}, lr[2] = {0.f, 0.f};  // rows g, g + 8 of this warp's 16
    float* spw = sp + wg * AWG_HG * AWG_SLD;
    const int srow = 16 * w4 + g;
    for (int it = 0; it < ntiles; it++) {
        const int c0 = c_begin + it * AWG_TILE, buf = it & 1;
        cp_async_wait<0>();  // tile it has landed (this thread's pieces)
        fence_async_smem();
        __syncthreads();     // every piece (and, at it = 0, q) is visible to the tensor cores
        // The tile before's P·V ends here (it ran through the barrier): nothing may define the
        // score registers while it is in flight, or ptxas serializes every MMA.
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < 128; i++) wg_pin(o[i]);
        // Scores over this warpgroup's half of d: 16 k-steps × (hi, lo).
        float s[16];
        // This warpgroup's half of d (chunks AWG_KC / 2 · wg …) in q and in tile it's buffer.
        const u32 kb = dkv + ((buf * AWG_TBYTES + wg * (AWG_KC / 2) * (AWG_TILE * 128)) >> 4);
        const u32 qhb = dqh + ((wg * (AWG_KC / 2) * (AWG_HG * 128)) >> 4), qlb = dql + ((wg * (AWG_KC / 2) * (AWG_HG * 128)) >> 4);
#pragma unroll
        for (int i = 0; i < 16; i++) wg_pin(s[i]);  // unset: the first MMA ignores them (scale-d 0)
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < AWG_D / 32; ks++) {
            const int kc = ks / 4, koff = (ks & 3) * 32;
            const u32 db = kb + ((kc * (AWG_TILE * 128) + koff) >> 4), qo = (kc * (AWG_HG * 128) + koff) >> 4;
            wg_m64n32k16_ss(s, qhb + qo, db, ks > 0);
            wg_m64n32k16_ss(s, qlb + qo, db, 1);
        }
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < 16; i++) wg_pin(s[i]);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            *reinterpret_cast<float2*>(spw + srow * AWG_SLD + 8 * i + 2 * tq) = make_float2(s[4 * i], s[4 * i + 1]);
            *reinterpret_cast<float2*>(spw + (srow + 8) * AWG_SLD + 8 * i + 2 * tq) =
                make_float2(s[4 * i + 2], s[4 * i + 3]);
        }
        __syncthreads();  // both partials stored; both warpgroups' P·V done with the other buffer
        if (it + 1 < ntiles) load_tile(c0 + AWG_TILE, buf ^ 1);
        cp_async_commit();
        // S = S_0 + S_1, scaled and masked: value 4i + 2r + e is row g + 8r, column 8i + 2tq + e.
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int off = (srow + 8 * r) * AWG_SLD + 8 * i + 2 * tq;
                const float2 a = *reinterpret_cast<const float2*>(sp + off);
                const float2 bb = *reinterpret_cast<const float2*>(sp + AWG_HG * AWG_SLD + off);
                const int col = c0 + 8 * i + 2 * tq;
                s[4 * i + 2 * r] = col < c_end ? (a.x + bb.x) * scale : NEG_INF;
                s[4 * i + 2 * r + 1] = col + 1 < c_end ? (a.y + bb.y) * scale : NEG_INF;
            }
        // Online softmax of rows g, g + 8 (the 4 lanes of a row group share each row).
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = NEG_INF;
#pragma unroll
            for (int i = 0; i < 4; i++) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(mr[r], mx);
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float& x = s[4 * i + 2 * r + e];
                    x = mn == NEG_INF ? 0.f : __expf(x - mn);
                    sum += x;
                }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            alpha[r] = mr[r] == NEG_INF ? (mn == NEG_INF ? 1.f : 0.f) : __expf(mr[r] - mn);
            lr[r] = lr[r] * alpha[r] + sum;
            mr[r] = mn;
        }
#pragma unroll
        for (int i = 0; i < 32; i++) {
            o[4 * i] *= alpha[0];
            o[4 * i + 1] *= alpha[0];
            o[4 * i + 2] *= alpha[1];
            o[4 * i + 3] *= alpha[1];
        }
        // P as A fragments of k-steps kk (rows 16kk .. 16kk + 15 of the tile): n-blocks 2kk, 2kk + 1.
        u32 pa[2][4], pl[2][4];
#pragma unroll
        for (int kk = 0; kk < 2; kk++)
#pragma unroll
            for (int f = 0; f < 4; f++) {
                const int i = 4 * (2 * kk + (f >> 1)) + 2 * (f & 1);
                pa[kk][f] = pack_bf2(s[i], s[i + 1]);
                pl[kk][f] = pack_bf2(s[i] - bf_lo(pa[kk][f]), s[i + 1] - bf_hi(pa[kk][f]));
            }
        // O[:, half wg] += P · V: V's columns 256·wg … as 4 swizzle atoms LBO = one chunk apart,
        // its rows in groups of 8 SBO = 1024 bytes apart.
#pragma unroll
        for (int i = 0; i < 128; i++) wg_pin(o[i]);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            const u32 dv = dvv + ((buf * AWG_TBYTES + wg * (AWG_KC / 2) * (AWG_TILE * 128) + kk * 2048) >> 4);
            wg_m64n256k16_rs_acc(o, pa[kk], dv);
            wg_m64n256k16_rs_acc(o, pl[kk], dv);
        }
        wg_commit();
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; i++) wg_pin(o[i]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int h = h0 + srow + 8 * r;
        float* orow = o_part + (ob + h) * AWG_D + wg * (AWG_D / 2) + 2 * tq;
#pragma unroll
        for (int i = 0; i < 32; i++)
            *reinterpret_cast<float2*>(orow + 8 * i) = make_float2(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
        if (wg == 0 && tq == 0) {
            ml_part[(ob + h) * 2] = mr[r];
            ml_part[(ob + h) * 2 + 1] = lr[r];
        }
    }
#else
    __trap();  // launched only on sm_90 (compiled as sm_90a)
#endif
}

extern "C" __global__ void __launch_bounds__(AWG_THREADS, 1) sparse_attn_wg(SPARSE_ATTN_PARAMS) {
    pdl_enter();
    sparse_attn_wg_body<false>(SPARSE_ATTN_ARGS);
}
// The same on q's image (`q_prep` with image = 1).
extern "C" __global__ void __launch_bounds__(AWG_THREADS, 1) sparse_attn_wg_qi(SPARSE_ATTN_PARAMS) {
    pdl_enter();
    sparse_attn_wg_body<true>(SPARSE_ATTN_ARGS);
}
