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
