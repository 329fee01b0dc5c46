//! The tiled FP4 layout the GPU linear kernels read (`FMT_NVFP4T`, `FMT_MXFP4T` in
//! kernels/cuda/linear_formats.cuh), built at upload from the row-major packed codes and scales.
//! Two changes, both for decode:
//!
//! - **Blocks.** Codes are stored per 16-row × 128-column block (1 KiB), in the order the warps
//!   of the kernels load them: 16-byte slot `((n/8)%2)·32 + (n%8)·4 + (k/32)%4` of block
//!   `(n/16)·(K/128) + k/128` holds row n, columns [32·⌊k/32⌋, +32). One warp load is 512
//!   contiguous bytes instead of 16 rows × 64 bytes at the row stride. Scales follow the same
//!   slots (2 scale bytes per slot for NVFP4, 1 E8M0 byte for MXFP4).
//! - **Bits.** Within each 32-bit word of a slot (8 consecutive columns), the 4 bits of every
//!   code sit where the kernel's decode wants them: the word `W` and `W << 2`, `W << 3`,
//!   `W << 5`, `W << 6`, byte-permuted in pairs ([`READS`]) and masked with `0x81C081C0`, give
//!   the 8 values as 4 bf16 pairs holding value · 2^-126 exactly (sign at bit 15, e1 e0 m at
//!   bits 8..6, an E2M1 code with exponent 0 a bf16 subnormal). That is 8 integer-pipe
//!   operations per 8 weights (the shifts run as IMAD on the FMA pipe) where the row-major
//!   nibbles needed 25 and the first tiled layout (rotates instead of shifts) 11: the integer
//!   pipe was the kernels' bound (ncu: ALU 73.5% busy at 41% of DRAM bandwidth, H200, batch 16;
//!   66.8% at DRAM 66% with 11 ops). No layout does it with w and three shifts (an exhaustive
//!   search: every byte of each source must then be read, which leaves 12 reads of one mask
//!   kind and 4 of the other where the pairs need 8 and 8).
//!
//! - **Scales.** The decode multiplies the codes (value · 2^-126) by scale · 2^100 as a bf16 pair.
//!   NVFP4's E4M3 scales are re-coded so that is `(b << 4) + 0x6C80` of the byte b (exponent field
//!   − 217 in bits 7..3, mantissa in 2..0; E4M3 subnormals normalized): the kernels form the
//!   pair as `b · 0x0010_0010 + 0x6C80_6C80`, one multiply-add on the FMA pipe (`tiled_scale2`),
//!   instead of a 14-operation E4M3 conversion. A zero scale zeroes its block's codes and takes
//!   code 1.
//!   MXFP4 keeps its E8M0 bytes: 2^(b−127) · 2^100 is the bf16 `(b + 100) << 7`, for b in
//!   28..=154 (where the products stay normal).
//!
//! Needs rows % 16 == 0 and cols % 128 == 0 ([`tileable`]) and scales in range; other weights
//! keep the row-major layout.

/// Rows and columns of one block.
pub const TILE_ROWS: usize = 16;
pub const TILE_COLS: usize = 128;

/// Whether a `rows × cols` weight can be stored tiled.
pub fn tileable(rows: usize, cols: usize) -> bool {
    rows > 0 && rows.is_multiple_of(TILE_ROWS) && cols > 0 && cols.is_multiple_of(TILE_COLS)
}

/// The 16-byte slot holding row n, columns [32·⌊k/32⌋, +32) of a tiled `_ × cols` weight.
pub fn slot(n: usize, k: usize, cols: usize) -> usize {
    let block = (n / TILE_ROWS) * (cols / TILE_COLS) + k / TILE_COLS;
    block * 64 + ((n / 8) % 2) * 32 + (n % 8) * 4 + (k / 32) % 4
}

/// How the kernel's decode (`fp4t_word`) builds output pair j: byte b of it is byte `B` of
/// `W << a` for `(a, B) = READS[j][b]`, masked to bits 7, 6 (bytes 0 and 2: the code's e0, m) or
/// 7, 0 (bytes 1 and 3: sign, e1). Each pair's four reads come from two sources, one byte permute.
pub const READS: [[(u32, u32); 4]; 4] = [
    [(5, 0), (5, 2), (3, 0), (3, 1)],
    [(6, 1), (6, 2), (6, 3), (0, 0)],
    [(0, 1), (0, 2), (0, 3), (5, 3)],
    [(2, 2), (2, 1), (3, 3), (2, 3)],
];

/// Bit positions in its 32-bit word of element e (0..8) of the word's 8 columns: the code's
/// (mantissa, exponent bit 0, exponent bit 1, sign). Element 2j + h is half h of output pair j:
/// bytes 2h (m, e0 at bits 6, 7) and 2h + 1 (e1, sign at bits 0, 7) of [`READS`]`[j]`.
pub const fn bit_positions(e: usize) -> [u32; 4] {
    let (j, h) = (e / 2, e % 2);
    let (a, b) = READS[j][2 * h];
    let (a1, b1) = READS[j][2 * h + 1];
    [8 * b + 6 - a, 8 * b + 7 - a, 8 * b1 - a1, 8 * b1 + 7 - a1]
}

/// Packs 8 E2M1 codes (low 4 bits of each) into one word of the tiled layout.
pub fn pack_word(codes: [u8; 8]) -> u32 {
    let mut w = 0u32;
    for (e, &c) in codes.iter().enumerate() {
        for (b, pos) in bit_positions(e).iter().enumerate() {
            w |= (((c >> b) & 1) as u32) << pos;
        }
    }
    w
}

/// The 8 codes of a tiled word (inverse of [`pack_word`]).
pub fn unpack_word(w: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (e, o) in out.iter_mut().enumerate() {
        for (b, pos) in bit_positions(e).iter().enumerate() {
            *o |= (((w >> pos) & 1) as u8) << b;
        }
    }
    out
}

/// The FP4 format being tiled: its scale block and how its scale bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp4 {
    /// E4M3 per 16 columns, re-coded by [`nvfp4_scale_code`].
    Nvfp4,
    /// E8M0 per 32 columns, kept.
    Mxfp4,
}

impl Fp4 {
    fn block(self) -> usize {
        match self {
            Fp4::Nvfp4 => 16,
            Fp4::Mxfp4 => 32,
        }
    }
}

/// The bf16 bits of scale · 2^100 of a scale byte as the kernels decode it.
pub fn scale_bf16(fmt: Fp4, code: u8) -> u16 {
    match fmt {
        Fp4::Nvfp4 => ((code as u16) << 4) + 0x6C80,
        Fp4::Mxfp4 => (code as u16 + 100) << 7,
    }
}

/// The tiled NVFP4 scale code of an E4M3 scale: `Some(0)` for a zero scale (its block's codes
/// are zeroed), `None` for a negative or NaN one (which the layout cannot hold).
pub fn nvfp4_scale_code(e4m3: u8) -> Option<u8> {
    let v = super::e4m3::decode(e4m3);
    if v == 0.0 {
        return Some(0);
    }
    if v.is_nan() || v < 0.0 {
        return None;
    }
    // Every positive E4M3 value (2^-9 ..= 448, ≤ 4 significant bits) is exact in bf16.
    let b = ((v * 2f32.powi(100)).to_bits() >> 16) as u16;
    let (field, mant) = (b >> 7, (b >> 4) & 7);
    debug_assert!(b & 0xf == 0 && (218..=235).contains(&field));
    Some((((field - 217) << 3) | mant) as u8)
}

/// Tiles one `rows × cols` FP4 weight: `packed` row-major `[rows][cols/2]` (element 2j in the
/// low nibble), `scales` row-major `[rows][cols/block]` bytes. Returns the tiled codes and
/// scales (the same sizes), or `None` where the shape is not [`tileable`] or a scale is out of
/// the layout's range.
pub fn tile(
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    fmt: Fp4,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let block = fmt.block();
    if !tileable(rows, cols)
        || packed.len() != rows * cols / 2
        || scales.len() != rows * cols / block
    {
        return None;
    }
    // Scale codes first; a zero NVFP4 scale zeroes the codes of its block.
    let mut codes_of = packed.to_vec();
    let mut coded = scales.to_vec();
    for (i, c) in coded.iter_mut().enumerate() {
        *c = match fmt {
            Fp4::Nvfp4 => match nvfp4_scale_code(*c)? {
                0 => {
                    let (n, kb) = (i / (cols / 16), i % (cols / 16));
                    codes_of[n * cols / 2 + kb * 8..n * cols / 2 + kb * 8 + 8].fill(0);
                    1
                }
                x => x,
            },
            Fp4::Mxfp4 if (28..=154).contains(c) => *c,
            Fp4::Mxfp4 => return None,
        };
    }
    let (packed, scales) = (&codes_of, &coded);
    let per_slot = 32 / block;
    let mut w = vec![0u8; packed.len()];
    let mut s = vec![0u8; scales.len()];
    for n in 0..rows {
        let row = &packed[n * cols / 2..(n + 1) * cols / 2];
        for k32 in (0..cols).step_by(32) {
            let at = slot(n, k32, cols);
            for q in 0..4 {
                let mut codes = [0u8; 8];
                for (e, c) in codes.iter_mut().enumerate() {
                    let k = k32 + 8 * q + e;
                    *c = (row[k / 2] >> (4 * (k % 2))) & 0x0f;
                }
                w[at * 16 + 4 * q..at * 16 + 4 * q + 4]
                    .copy_from_slice(&pack_word(codes).to_le_bytes());
            }
            let src = n * (cols / block) + k32 / block;
            s[at * per_slot..(at + 1) * per_slot].copy_from_slice(&scales[src..src + per_slot]);
        }
    }
    Some((w, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{e2m1, e4m3, prmt};
    use crate::rng::Rng;

    /// The kernel's decode (`fp4t_word` in linear_formats.cuh), op for op: 4 bf16 pairs.
    fn kernel_decode(w: u32) -> [u32; 4] {
        let (l2, l3, l5, l6) = (w << 2, w << 3, w << 5, w << 6);
        const M: u32 = 0x81C0_81C0;
        [
            prmt(l5, l3, 0x5420) & M,
            prmt(l6, w, 0x4321) & M,
            prmt(w, l5, 0x7321) & M,
            prmt(l2, l3, 0x3712) & M,
        ]
    }

    fn bf16(bits: u32) -> f32 {
        half::bf16::from_bits(bits as u16).to_f32()
    }

    #[test]
    fn the_bit_positions_partition_the_word() {
        let mut seen = 0u64;
        for e in 0..8 {
            for p in bit_positions(e) {
                assert_eq!(seen >> p & 1, 0, "bit {p} used twice");
                seen |= 1 << p;
            }
        }
        assert_eq!(seen, 0xffff_ffff);
    }

    /// Every code in every position decodes to its value · 2^-126 through the kernel's ops.
    #[test]
    fn the_kernel_decode_gives_every_code_exactly() {
        let mut rng = Rng::new(7);
        let mut cases: Vec<[u8; 8]> = (0..16u8).map(|c| [c; 8]).collect();
        cases.extend((0..16u8).map(|c| std::array::from_fn(|e| (c + e as u8) % 16)));
        cases.extend((0..2000).map(|_| std::array::from_fn(|_| (rng.next_u64() % 16) as u8)));
        for codes in cases {
            let w = pack_word(codes);
            assert_eq!(unpack_word(w), codes);
            let out = kernel_decode(w);
            for (e, &c) in codes.iter().enumerate() {
                let pair = out[e / 2] >> (16 * (e % 2));
                let got = bf16(pair & 0xffff) * 2f32.powi(126);
                let want = e2m1::decode(c);
                assert!(
                    got == want && got.is_sign_negative() == want.is_sign_negative(),
                    "code {c:#x} at element {e}: {got} vs {want}"
                );
            }
        }
    }

    /// Every valid NVFP4 scale byte, and every MXFP4 one in range, decodes (the kernels' two
    /// operations) to exactly scale · 2^100.
    #[test]
    fn scale_codes_decode_to_the_scale_times_2_100() {
        let up = 2f32.powi(100);
        for b in 0..=255u8 {
            let v = e4m3::decode(b);
            match nvfp4_scale_code(b) {
                Some(0) => assert_eq!(v, 0.0, "byte {b:#x}"),
                Some(c) => {
                    let got = half::bf16::from_bits(scale_bf16(Fp4::Nvfp4, c)).to_f32();
                    assert_eq!(got, v * up, "E4M3 byte {b:#x}");
                }
                None => assert!(v.is_nan() || v < 0.0, "byte {b:#x} = {v} refused"),
            }
        }
        for b in 28..=154u8 {
            let got = half::bf16::from_bits(scale_bf16(Fp4::Mxfp4, b)).to_f32();
            assert_eq!(
                Some(got),
                crate::quant::e8m0::decode(b).map(|x| x * up),
                "E8M0 byte {b}"
            );
        }
    }

    /// The kernels form a scale's bf16 pair by one multiply-add of the byte (`tiled_scale2`):
    /// both halves are [`scale_bf16`] of it, for every byte (no carry crosses the halves), and
    /// the kernel source holds the same constants.
    #[test]
    fn the_kernels_multiply_add_gives_the_scale_pair() {
        let src = amdahl_kernels::LINEAR.full_source();
        for (fmt, mul, add, text) in [
            (
                Fp4::Nvfp4,
                0x0010_0010u32,
                0x6C80_6C80u32,
                "b * 0x00100010u + 0x6C806C80u",
            ),
            (
                Fp4::Mxfp4,
                0x0080_0080,
                0x3200_3200,
                "b * 0x00800080u + 0x32003200u",
            ),
        ] {
            assert!(src.contains(text), "linear_formats.cuh lost `{text}`");
            for b in 0..=255u32 {
                let pair = b * mul + add;
                let want = u32::from(scale_bf16(fmt, b as u8));
                assert_eq!(pair, want | (want << 16), "{fmt:?} byte {b:#x}");
            }
        }
    }

    #[test]
    fn out_of_range_scales_and_shapes_are_refused() {
        let packed = vec![0u8; 16 * 128 / 2];
        assert!(tile(&packed, &[0x38; 16 * 8], 16, 128, Fp4::Nvfp4).is_some());
        assert!(
            tile(&packed, &[0xb8; 16 * 8], 16, 128, Fp4::Nvfp4).is_none(),
            "negative"
        );
        assert!(
            tile(&packed, &[0x7f; 16 * 8], 16, 128, Fp4::Nvfp4).is_none(),
            "NaN"
        );
        assert!(tile(&packed, &[120; 16 * 4], 16, 128, Fp4::Mxfp4).is_some());
        assert!(tile(&packed, &[200; 16 * 4], 16, 128, Fp4::Mxfp4).is_none());
        assert!(tile(&packed[..8 * 64], &[120; 8 * 4], 8, 128, Fp4::Mxfp4).is_none());
    }

    #[test]
    fn tiling_moves_every_code_and_scale_to_its_slot() {
        let (rows, cols) = (32usize, 256usize);
        let mut rng = Rng::new(3);
        let packed: Vec<u8> = (0..rows * cols / 2).map(|_| rng.next_u64() as u8).collect();
        for fmt in [Fp4::Nvfp4, Fp4::Mxfp4] {
            let block = fmt.block();
            // Valid scales of either kind, one NVFP4 block with a zero scale.
            let mut scales: Vec<u8> = (0..rows * cols / block)
                .map(|_| 100 + (rng.next_u64() % 20) as u8)
                .collect();
            if fmt == Fp4::Nvfp4 {
                scales[5] = 0;
            }
            let (w, s) = tile(&packed, &scales, rows, cols, fmt).unwrap();
            for n in 0..rows {
                for k in 0..cols {
                    let at = slot(n, k, cols);
                    let q = (k % 32) / 8;
                    let word = u32::from_le_bytes(
                        w[at * 16 + 4 * q..at * 16 + 4 * q + 4].try_into().unwrap(),
                    );
                    let src = scales[n * (cols / block) + k / block];
                    let zeroed = fmt == Fp4::Nvfp4 && src == 0;
                    let code = (packed[n * cols / 2 + k / 2] >> (4 * (k % 2))) & 0x0f;
                    let want = if zeroed { 0 } else { code };
                    assert_eq!(unpack_word(word)[k % 8], want, "row {n} col {k}");
                    let per = 32 / block;
                    let want_s = match fmt {
                        Fp4::Nvfp4 if zeroed => 1,
                        Fp4::Nvfp4 => nvfp4_scale_code(src).unwrap(),
                        Fp4::Mxfp4 => src,
                    };
                    assert_eq!(
                        s[at * per + (k % 32) / block],
                        want_s,
                        "scale of row {n} col {k}"
                    );
                }
            }
        }
        assert!(tileable(2048, 4096) && !tileable(200, 160) && !tileable(16, 64));
    }
}
