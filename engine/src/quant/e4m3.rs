//! FP8 E4M3FN (the `float8_e4m3fn` of PyTorch and safetensors `F8_E4M3`): sign, 4 exponent bits
//! (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN, so the largest finite value is
//! 0x7E = 448. Exponent field 0 holds subnormals m·2⁻⁹. Encoding rounds to nearest, ties to even,
//! and saturates to ±448 (what `torch.float8_e4m3fn` casts give for in-range scales and what a
//! quantizer needs for out-of-range ones).

/// Largest finite E4M3FN value.
pub const E4M3_MAX: f32 = 448.0;
/// Smallest positive normal value (2⁻⁶).
pub const E4M3_MIN_NORMAL: f32 = 1.0 / 64.0;
/// Smallest positive subnormal value (2⁻⁹).
pub const E4M3_MIN_SUBNORMAL: f32 = 1.0 / 512.0;

/// Value of every byte.
pub static E4M3_VALUES: [f32; 256] = {
    let mut t = [0.0f32; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = decode_const(b as u8);
        b += 1;
    }
    t
};

const fn decode_const(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0x0f) as i32;
    let m = (b & 0x07) as f32;
    if e == 0x0f && (b & 0x07) == 0x07 {
        return f32::NAN;
    }
    let mag = if e == 0 {
        m / 512.0
    } else {
        // (1 + m/8) · 2^(e − 7), built without powi (not const).
        let mut p = 1.0f32;
        let mut k = e - 7;
        while k > 0 {
            p *= 2.0;
            k -= 1;
        }
        while k < 0 {
            p /= 2.0;
            k += 1;
        }
        (1.0 + m / 8.0) * p
    };
    sign * mag
}

/// Value of an E4M3FN byte (NaN for 0x7F / 0xFF).
pub fn decode(b: u8) -> f32 {
    E4M3_VALUES[b as usize]
}

/// Whether the byte is one of the two NaN encodings.
pub fn is_nan(b: u8) -> bool {
    b & 0x7f == 0x7f
}

/// Nearest E4M3FN byte to `x`, ties to even, saturating at ±448; NaN encodes as 0x7F.
pub fn encode(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    // f64 keeps every step below exact: a is an f32, scaling by powers of two is exact.
    let a = (x.abs() as f64).min(E4M3_MAX as f64);
    let mag = if a < E4M3_MIN_NORMAL as f64 {
        // Subnormal grid m·2⁻⁹, m = 0..=8 (8 rolls over into the smallest normal, code 0x08).
        (a * 512.0).round_ties_even() as u8
    } else {
        let e = a.log2().floor() as i32;
        // log2 can be off by one ulp near powers of two: correct e so that 2^e <= a < 2^(e+1).
        let e = if 2f64.powi(e) > a {
            e - 1
        } else if 2f64.powi(e + 1) <= a {
            e + 1
        } else {
            e
        };
        let m = ((a / 2f64.powi(e) - 1.0) * 8.0).round_ties_even() as i32;
        let (e, m) = if m == 8 { (e + 1, 0) } else { (e, m) };
        (((e + 7) as u8) << 3) | m as u8
    };
    sign | mag
}

/// The GPU kernels' FP8 decode (`fp8x4_to_bf16` in kernels/cuda/linear_formats.cuh), op for op.
#[cfg(test)]
mod kernel_decode_tests {
    use super::{decode, is_nan};
    use crate::quant::prmt;

    /// The kernel's three ops per pair: codes 0, 1 and 2, 3 of `c` as bf16 pairs.
    fn kernel(c: u32) -> [u32; 2] {
        [
            (prmt(c, 0, 0x9180) << 4) & 0x87f0_87f0,
            (prmt(c, 0, 0xB3A2) << 4) & 0x87f0_87f0,
        ]
    }

    /// The mirror's selectors and mask are the kernel's.
    #[test]
    fn the_mirror_uses_the_kernels_constants() {
        let src = amdahl_kernels::LINEAR.full_source();
        for op in [
            "prmt.b32 %0, %1, 0, 0x9180;",
            "prmt.b32 %0, %1, 0, 0xB3A2;",
            "(x0 << 4) & 0x87f087f0u",
            "(x1 << 4) & 0x87f087f0u",
        ] {
            assert!(src.contains(op), "linear_formats.cuh lost `{op}`");
        }
    }

    /// Every code in every byte position becomes the bf16 of its value · 2^-120 (bits for bits;
    /// the NaN codes become ±480 · 2^-120, as they did before, and no weight holds them), and a
    /// code's neighbours never leak into its half.
    #[test]
    fn every_code_in_every_position_decodes_exactly() {
        for lo in 0..=255u32 {
            for hi in [0u32, 0x7f, 0x80, 0xff, lo ^ 0x80, (lo * 37 + 11) & 0xff] {
                for (c, pos) in [
                    (lo | (hi << 8) | (hi << 16) | (hi << 24), 0),
                    (hi | (lo << 8) | (hi << 16) | (hi << 24), 1),
                    (hi | (hi << 8) | (lo << 16) | (hi << 24), 2),
                    (hi | (hi << 8) | (hi << 16) | (lo << 24), 3),
                ] {
                    let out = kernel(c);
                    let bits = (out[pos / 2] >> (16 * (pos % 2))) & 0xffff;
                    let want_bits = ((lo & 0x80) << 8) | ((lo & 0x7f) << 4);
                    assert_eq!(
                        bits, want_bits,
                        "code {lo:#04x} at byte {pos} among {hi:#04x}"
                    );
                    if !is_nan(lo as u8) {
                        let got = half::bf16::from_bits(bits as u16).to_f32() * 2f32.powi(120);
                        let want = decode(lo as u8);
                        assert!(
                            got == want && got.is_sign_negative() == want.is_sign_negative(),
                            "code {lo:#04x}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
