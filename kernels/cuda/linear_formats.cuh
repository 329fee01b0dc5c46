// Weight formats of the linear kernels (linear.cu, linear_stream.cu, linear_gemm.cu): format
// codes, the weight descriptor, and the loads and in-register decodes that turn stored codes into
// bf16 MMA operands.
//
// Dequantization in registers is kept to a few integer ops per weight: FP4 codes become exact
// bf16 values by byte permutes and are scaled by their block scale with one bf16x2 FMA; FP8
// codes are placed into bf16 bit fields (the value times 2^-120) and scaled by (block scale ·
// 2^100). What a format leaves out of the MMA operand (the NVFP4 / per-tensor global scale, the
// 2^20 of the FP8 placement) is its `post_scale`, applied to the f32 accumulators.
//
// The tiled FP4 formats (NVFP4T, MXFP4T; engine/src/quant/fp4_tiles.rs) are what upload makes of
// FP4 weights with rows % 16 == 0 and K % 128 == 0: 16×128 blocks stored in this load order (a
// warp load is 512 contiguous bytes), each code's bits placed so `fp4t_word` unpacks 8 of them in
// 8 integer ops (and 4 shifts on the FMA pipe), scales re-coded so their bf16 (·2^100) is 2 ops.
// The row-major FP4 decode was the integer pipe's bound (ncu, H200 batch 16: ALU 73.5% busy at 41% of DRAM bandwidth).

#define FMT_BF16 0
#define FMT_F32 1
#define FMT_F16 2
#define FMT_FP8B_E8M0 3
#define FMT_FP8B_F32 4
#define FMT_FP8T 5
#define FMT_NVFP4 6
#define FMT_MXFP4 7
#define FMT_NVFP4T 8
#define FMT_MXFP4T 9

// FP4 formats, and the tiled ones (engine/src/quant/fp4_tiles.rs: 16×128 blocks in load order,
// codes bit-placed for `fp4t_word`; rows % 16 == 0, K % 128 == 0).
#define IS_FP4(F) ((F) == FMT_NVFP4 || (F) == FMT_MXFP4 || (F) == FMT_NVFP4T || (F) == FMT_MXFP4T)
#define IS_TILED(F) ((F) == FMT_NVFP4T || (F) == FMT_MXFP4T)
#define IS_FP8(F) ((F) == FMT_FP8B_E8M0 || (F) == FMT_FP8B_F32 || (F) == FMT_FP8T)

struct WDesc {
    const u8* w;      // codes or values, [E][N][K] in the format's packing
    const u8* s;      // block scales
    const float* g;   // per-expert global scale (FP8 per-tensor scale, NVFP4 scale_2)
    i64 w_stride;     // bytes per expert
    i64 s_stride;     // bytes per expert
    int s_ld;         // scales per row
    int row_phase;    // FP8 block: rows of the first scale block before row 0
};

// 8 E2M1 codes (a u32, low nibble first) to 4 packed bf16 pairs, exactly, by byte permutes:
// the magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} as bf16 have high bytes {00,3f,3f,3f,40,40,40,40}
// and low bytes {00,00,80,c0,00,40,80,c0}; each pair's two sign bits are gathered by one more
// permute from the even and odd codes' sign bits (moved to bit 7 of their byte).
__device__ __forceinline__ void fp4x8_to_bf16(u32 v, u32 out[4]) {
    const u32 mags = v & 0x77777777u;
    const u32 se = (v << 4) & 0x80808080u, so = v & 0x80808080u;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const u32 sel = mags >> (16 * h);
        const u32 hi = __byte_perm(0x3f3f3f00u, 0x40404040u, sel);
        const u32 lo = __byte_perm(0xc0800000u, 0xc0804000u, sel);
        const u32 b0 = 2 * h, b1 = 2 * h + 1;
        const u32 s0 = __byte_perm(se, so, ((4 + b0) << 12) | (b0 << 8) | (b0 << 4) | b0);
        const u32 s1 = __byte_perm(se, so, ((4 + b1) << 12) | (b1 << 8) | (b1 << 4) | b1);
        out[2 * h] = __byte_perm(lo, hi, 0x5140) | (s0 & 0x80008000u);
        out[2 * h + 1] = __byte_perm(lo, hi, 0x7362) | (s1 & 0x80008000u);
    }
}

// The 8 codes of one word of the tiled layout as 4 bf16 pairs holding value · 2^-126 exactly:
// 4 left shifts, 4 byte permutes, 4 masks (the layout puts each code's bits where these land;
// fp4_tiles.rs `READS`). Left shifts compile to IMAD.SHL on the FMA pipe, so the integer pipe
// (the FP4 kernels' bound) runs 8 ops per 8 codes; the rotates of the previous layout were 3
// more SHF on it (tools/sass.py counts them).
__device__ __forceinline__ void fp4t_word(u32 w, u32 out[4]) {
    const u32 l2 = w << 2, l3 = w << 3, l5 = w << 5, l6 = w << 6;
    out[0] = __byte_perm(l5, l3, 0x5420) & 0x81C081C0u;
    out[1] = __byte_perm(l6, w, 0x4321) & 0x81C081C0u;
    out[2] = __byte_perm(w, l5, 0x7321) & 0x81C081C0u;
    out[3] = __byte_perm(l2, l3, 0x3712) & 0x81C081C0u;
}

// 16-byte slot of row n, columns [k, k+32) (k % 32 == 0) in the tiled layout.
__device__ __forceinline__ i64 tile_slot(int n, int k, int K) {
    const i64 blk = (i64)(n >> 4) * (K >> 7) + (k >> 7);
    return blk * 64 + ((n >> 3) & 1) * 32 + (n & 7) * 4 + ((k >> 5) & 3);
}

// a · b on bf16 pairs (exact whenever the product fits bf16; the −0 addend keeps signs).
__device__ __forceinline__ u32 bf2_mul(u32 a, u32 b) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// 4 E4M3 codes (a u32) to 2 bf16 pairs holding value · 2^-120, exactly (subnormal codes become
// bf16 subnormals): the 7 magnitude bits move to bf16 bits 10..4, the sign to bit 15. One
// permute puts each code in the low byte of its half and its sign, replicated (the selector
// nibble's bit 3), in the high byte; one shift by 4 then has the sign's copies on bits 15..11
// and the magnitude on 10..4, and one mask keeps bits 15 and 10..4 (the low half's spill into
// the high half's bits 3..0 is masked too): 3 ops per pair, not 5 (engine/src/quant/e4m3.rs
// mirrors them op for op over every code).
__device__ __forceinline__ void fp8x4_to_bf16(u32 c, u32 out[2]) {
    u32 x0, x1;
    asm("prmt.b32 %0, %1, 0, 0x9180;" : "=r"(x0) : "r"(c));
    asm("prmt.b32 %0, %1, 0, 0xB3A2;" : "=r"(x1) : "r"(c));
    out[0] = (x0 << 4) & 0x87f087f0u;
    out[1] = (x1 << 4) & 0x87f087f0u;
}

// Two E4M3 scales (low byte first) as bf16 pairs broadcast to both halves, exact.
__device__ __forceinline__ void e4m3x2_bcast(u32 s2, u32* lo, u32* hi) {
    u32 p[2];
    fp8x4_to_bf16(s2, p);
    const float f0 = bf_lo(p[0]) * 1.329227995784916e36f;  // 2^120
    const float f1 = bf_hi(p[0]) * 1.329227995784916e36f;
    *lo = __byte_perm(__float_as_uint(f0), 0u, 0x3232);
    *hi = __byte_perm(__float_as_uint(f1), 0u, 0x3232);
}

__device__ __forceinline__ u32 bf2_bcast(u32 bits16) { return bits16 | (bits16 << 16); }

// What the MMA operand of a format leaves out, applied to the accumulators of expert e.
template <int FMT>
__device__ __forceinline__ float post_scale(const WDesc& d, int e) {
    if (FMT == FMT_NVFP4) return d.g[e];
    if (FMT == FMT_NVFP4T) return d.g[e] * 67108864.f;  // 2^26: codes 2^-126, scales 2^100
    if (FMT == FMT_MXFP4T) return 67108864.f;
    if (FMT == FMT_FP8T) return d.g[e] * 1048576.f;  // 2^20
    if (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32) return 1048576.f;
    return 1.f;
}

// 8 weights of row n at column k (k % 8 == 0, k < K) as f32 (exact for every format). DOM:
// in the MMA operand's domain instead (the value divided by the format's post_scale).
template <int FMT, bool DOM = false>
__device__ __forceinline__ void load_w8f(const WDesc& d, int e, int n, int k, int K, float out[8]) {
    if (FMT == FMT_BF16 || FMT == FMT_F16) {
        const uint4 v = *reinterpret_cast<const uint4*>(d.w + e * d.w_stride + ((i64)n * K + k) * 2);
        u32 h[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (FMT == FMT_BF16) {
                out[2 * i] = bf_lo(h[i]);
                out[2 * i + 1] = bf_hi(h[i]);
            } else {
                out[2 * i] = f16_to_f32((u16)(h[i] & 0xffff));
                out[2 * i + 1] = f16_to_f32((u16)(h[i] >> 16));
            }
        }
    } else if (FMT == FMT_F32) {
        const float4* p = reinterpret_cast<const float4*>(d.w + e * d.w_stride + ((i64)n * K + k) * 4);
        float4 a = p[0], b = p[1];
        out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
        out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
    } else if (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32 || FMT == FMT_FP8T) {
        const uint2 v = *reinterpret_cast<const uint2*>(d.w + e * d.w_stride + (i64)n * K + k);
        float sc;
        if (FMT == FMT_FP8T) {
            sc = DOM ? 1.f : d.g[e];
        } else {
            i64 si = (i64)((n + d.row_phase) >> 7) * d.s_ld + (k >> 7);
            if (FMT == FMT_FP8B_E8M0) sc = e8m0_to_f32(d.s[e * d.s_stride + si]);
            else sc = reinterpret_cast<const float*>(d.s + e * d.s_stride)[si];
        }
        if (DOM) sc *= 9.5367431640625e-07f;  // 2^-20
#pragma unroll
        for (int i = 0; i < 8; i++) {
            u32 word = i < 4 ? v.x : v.y;
            out[i] = e4m3_to_f32((u8)((word >> (8 * (i & 3))) & 0xff)) * sc;
        }
    } else {  // FP4: 8 codes in one word, tiled or row-major (low nibble = even element)
        u32 p[4];
        float sc;
        if (IS_TILED(FMT)) {
            // Codes are value · 2^-126 and the scale code is scale · 2^100: their product is
            // the MMA domain (value / 2^26).
            const i64 slot = tile_slot(n, k & ~31, K);
            fp4t_word(*reinterpret_cast<const u32*>(d.w + e * d.w_stride + slot * 16 + ((k >> 3) & 3) * 4), p);
            const u32 b = FMT == FMT_NVFP4T ? d.s[e * d.s_stride + slot * 2 + ((k >> 4) & 1)] : d.s[e * d.s_stride + slot];
            sc = __uint_as_float((FMT == FMT_NVFP4T ? (b << 4) + 0x6C80u : (b + 100u) << 7) << 16);
        } else {
            fp4x8_to_bf16(*reinterpret_cast<const u32*>(d.w + e * d.w_stride + ((i64)n * K + k) / 2), p);
            const u8 b = d.s[e * d.s_stride + (i64)n * d.s_ld + (k >> (FMT == FMT_NVFP4 ? 4 : 5))];
            sc = FMT == FMT_NVFP4 ? e4m3_to_f32(b) : e8m0_to_f32(b);
        }
        if (!DOM) sc *= post_scale<FMT>(d, e);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            out[2 * i] = bf_lo(p[i]) * sc;
            out[2 * i + 1] = bf_hi(p[i]) * sc;
        }
    }
}

// The same 8 weights as 4 packed bf16 pairs in the MMA domain (the tail path of K).
template <int FMT>
__device__ __forceinline__ void load_w8(const WDesc& d, int e, int n, int k, int K, u32 out[4]) {
    if (FMT == FMT_BF16) {
        const uint4 v = *reinterpret_cast<const uint4*>(d.w + e * d.w_stride + ((i64)n * K + k) * 2);
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else {
        float f[8];
        load_w8f<FMT, true>(d, e, n, k, K, f);
#pragma unroll
        for (int i = 0; i < 4; i++) out[i] = pack_bf2(f[2 * i], f[2 * i + 1]);
    }
}

// 16 bytes of weights per row per thread: elements per load group.
template <int FMT>
struct Vec {
    static constexpr int V = IS_FP4(FMT) ? 4
                           : (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32 || FMT == FMT_FP8T) ? 2 : 1;
};

// One thread's raw weights of one row at one k: 16 bytes of codes (32 for f32) and the bits of
// the block scale(s) they need. Loaded first, decoded just before the MMAs, so a warp keeps
// several superchunks of loads in flight on few registers.
struct RawW {
    uint4 q, q2;
    u32 s;
};

template <int FMT>
__device__ __forceinline__ RawW load_raw(const WDesc& d, int e, int n, int k, int K) {
    RawW r;
    r.s = 0;
    r.q2 = make_uint4(0, 0, 0, 0);
    const u8* base = d.w + e * d.w_stride;
    if (IS_TILED(FMT)) {
        const i64 slot = tile_slot(n, k, K);
        r.q = *reinterpret_cast<const uint4*>(base + slot * 16);
        const u8* sp = d.s + e * d.s_stride;
        if (FMT == FMT_NVFP4T) r.s = *reinterpret_cast<const u16*>(sp + slot * 2);
        else r.s = sp[slot];
    } else if (FMT == FMT_NVFP4 || FMT == FMT_MXFP4) {
        r.q = *reinterpret_cast<const uint4*>(base + ((i64)n * K + k) / 2);
        const u8* sp = d.s + e * d.s_stride + (i64)n * d.s_ld;
        if (FMT == FMT_NVFP4) r.s = *reinterpret_cast<const u16*>(sp + (k >> 4));  // k % 32 == 0
        else r.s = sp[k >> 5];
    } else if (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32 || FMT == FMT_FP8T) {
        r.q = *reinterpret_cast<const uint4*>(base + (i64)n * K + k);
        if (FMT != FMT_FP8T) {
            const i64 si = (i64)((n + d.row_phase) >> 7) * d.s_ld + (k >> 7);
            if (FMT == FMT_FP8B_E8M0) r.s = d.s[e * d.s_stride + si];
            else r.s = reinterpret_cast<const u32*>(d.s + e * d.s_stride)[si];
        }
    } else if (FMT == FMT_F32) {
        const uint4* p = reinterpret_cast<const uint4*>(base + ((i64)n * K + k) * 4);
        r.q = p[0];
        r.q2 = p[1];
    } else {
        r.q = *reinterpret_cast<const uint4*>(base + ((i64)n * K + k) * 2);
    }
    return r;
}

// A tiled FP4 scale byte b (a register of its own, < 256) as the bf16 pair, both halves, of the
// block's scale · 2^100: NVFP4 is the bf16 (b << 4) + 0x6C80 (fp4_tiles.rs `scale_bf16`), MXFP4
// 2^(b-127) · 2^100 the bf16 (b + 100) << 7. A multiply-add puts b in both halves and adds the
// offset (no carry crosses the halves): one IMAD on the FMA pipe instead of a byte permute and
// a shift-add on the integer pipe, the FP4 kernels' bound.
template <int FMT>
__device__ __forceinline__ u32 tiled_scale2(u32 b) {
    return FMT == FMT_NVFP4T ? b * 0x00100010u + 0x6C806C80u : b * 0x00800080u + 0x32003200u;
}

// Word-at-a-time decoding for the warp kernels (short live ranges): the scales of one raw
// load, then word w (of 4) of its codes as V bf16 pairs (f32: floats 2w, 2w+1).
template <int FMT>
__device__ __forceinline__ void raw_scales(const RawW& r, u32* s0, u32* s1) {
    *s0 = *s1 = 0;
    if (FMT == FMT_NVFP4) e4m3x2_bcast(r.s, s0, s1);
    else if (FMT == FMT_MXFP4) *s0 = *s1 = bf2_bcast(r.s ? (r.s << 7) : 0x0040u);  // 2^(b-127)
    else if (FMT == FMT_NVFP4T) {  // two scale bytes per slot
        *s0 = tiled_scale2<FMT>(r.s & 0xFFu);
        *s1 = tiled_scale2<FMT>(r.s >> 8);
    } else if (FMT == FMT_MXFP4T) {  // one scale byte (loaded as a byte)
        *s0 = *s1 = tiled_scale2<FMT>(r.s);
    }
    else if (FMT == FMT_FP8T) *s0 = 0x71807180u;
    else if (FMT == FMT_FP8B_E8M0) *s0 = bf2_bcast((r.s + 100u) << 7);
    else if (FMT == FMT_FP8B_F32) *s0 = bf2_bcast(f2bf(__uint_as_float(r.s) * 1.2676506002282294e30f));
}

// One slot of a tiled FP4 weight: its codes and scale bytes.
template <int FMT>
__device__ __forceinline__ RawW load_tiled(const u8* q, const u8* sp) {
    RawW r;
    r.q = *reinterpret_cast<const uint4*>(q);
    r.q2 = make_uint4(0, 0, 0, 0);
    r.s = FMT == FMT_NVFP4T ? *reinterpret_cast<const u16*>(sp) : *sp;
    return r;
}

// The raw weights as 4V bf16 pairs in the MMA domain.
template <int FMT, int V>
__device__ __forceinline__ void decode_raw(const RawW& r, u32 out[4 * V]) {
    const u32 c[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    if (IS_FP4(FMT)) {
        u32 s0, s1;
        raw_scales<FMT>(r, &s0, &s1);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 p[4];
            if (IS_TILED(FMT)) fp4t_word(c[i], p);
            else fp4x8_to_bf16(c[i], p);
#pragma unroll
            for (int j = 0; j < 4; j++) out[(4 * i + j) % (4 * V)] = bf2_mul(p[j], i < 2 ? s0 : s1);
        }
    } else if (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32 || FMT == FMT_FP8T) {
        u32 sc;
        if (FMT == FMT_FP8T) sc = 0x71807180u;  // 2^100
        else if (FMT == FMT_FP8B_E8M0) sc = bf2_bcast((r.s + 100u) << 7);  // 2^(b-127) · 2^100
        else sc = bf2_bcast(f2bf(__uint_as_float(r.s) * 1.2676506002282294e30f));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 p[2];
            fp8x4_to_bf16(c[i], p);
            out[(2 * i) % (4 * V)] = bf2_mul(p[0], sc);
            out[(2 * i + 1) % (4 * V)] = bf2_mul(p[1], sc);
        }
    } else if (FMT == FMT_F32) {
        const u32 c2[4] = {r.q2.x, r.q2.y, r.q2.z, r.q2.w};
        out[0] = pack_bf2(__uint_as_float(c[0]), __uint_as_float(c[1]));
        out[1 % (4 * V)] = pack_bf2(__uint_as_float(c[2]), __uint_as_float(c[3]));
        out[2 % (4 * V)] = pack_bf2(__uint_as_float(c2[0]), __uint_as_float(c2[1]));
        out[3 % (4 * V)] = pack_bf2(__uint_as_float(c2[2]), __uint_as_float(c2[3]));
    } else if (FMT == FMT_F16) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            out[i % (4 * V)] = pack_bf2(f16_to_f32((u16)(c[i] & 0xffff)), f16_to_f32((u16)(c[i] >> 16)));
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) out[i % (4 * V)] = c[i];
    }
}

template <int FMT, int V>
__device__ __forceinline__ void decode_word(const RawW& r, u32 s0, u32 s1, int w, u32 out[V]) {
    const u32 c = w == 0 ? r.q.x : w == 1 ? r.q.y : w == 2 ? r.q.z : r.q.w;
    if (IS_FP4(FMT)) {
        u32 p[4];
        if (IS_TILED(FMT)) fp4t_word(c, p);
        else fp4x8_to_bf16(c, p);
#pragma unroll
        for (int j = 0; j < 4; j++) out[j % V] = bf2_mul(p[j], w < 2 ? s0 : s1);
    } else if (FMT == FMT_FP8B_E8M0 || FMT == FMT_FP8B_F32 || FMT == FMT_FP8T) {
        u32 p[2];
        fp8x4_to_bf16(c, p);
        out[0] = bf2_mul(p[0], s0);
        out[1 % V] = bf2_mul(p[1], s0);
    } else if (FMT == FMT_F32) {
        const uint4 h = w < 2 ? r.q : r.q2;
        const u32 lo = (w & 1) ? h.z : h.x, hi = (w & 1) ? h.w : h.y;
        out[0] = pack_bf2(__uint_as_float(lo), __uint_as_float(hi));
    } else if (FMT == FMT_F16) {
        out[0] = pack_bf2(f16_to_f32((u16)(c & 0xffff)), f16_to_f32((u16)(c >> 16)));
    } else {
        out[0] = c;
    }
}

// 8V weights of row n at column k (all < K) as 4V packed bf16 pairs in the MMA domain.
template <int FMT, int V>
__device__ __forceinline__ void load_wv(const WDesc& d, int e, int n, int k, int K, u32 out[4 * V]) {
    decode_raw<FMT, V>(load_raw<FMT>(d, e, n, k, K), out);
}
