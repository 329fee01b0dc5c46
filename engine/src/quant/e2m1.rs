//! FP4 E2M1 elements (model-spec §5.1): sign bit 3, exponent bits 2–1 (bias 1), mantissa bit 0.
//! Codes 0–7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8–15 their negatives (8 = −0). No Inf/NaN.
//! Two codes per byte along K: element 2j in the low nibble, 2j+1 in the high nibble (NVFP4,
//! MXFP4 and DeepSeek FP4 agree). Encoding rounds to nearest, ties to the even code, and
//! saturates at ±6 — the rounding ModelOpt's and DeepSeek's quantizers use.

/// Value of each 4-bit code.
pub const E2M1_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Largest magnitude an E2M1 element can hold.
pub const E2M1_MAX: f32 = 6.0;

/// The value of a 4-bit code (only the low 4 bits are read).
pub fn decode(code: u8) -> f32 {
    E2M1_VALUES[(code & 0x0f) as usize]
}

/// Nearest code to `x` (ties to the even code, saturating at ±6; NaN encodes as +0).
pub fn encode(x: f32) -> u8 {
    let a = x.abs();
    // Midpoints between neighbours; `<=` at a midpoint picks the lower code when it is the even
    // one (0, 1.0, 2.0, 4.0 have mantissa bit 0), `<` picks the upper one otherwise.
    let mag = if a.is_nan() || a <= 0.25 {
        0
    } else if a < 0.75 {
        1
    } else if a <= 1.25 {
        2
    } else if a < 1.75 {
        3
    } else if a <= 2.5 {
        4
    } else if a < 3.5 {
        5
    } else if a <= 5.0 {
        6
    } else {
        7
    };
    if x.is_sign_negative() && !x.is_nan() {
        mag | 8
    } else {
        mag
    }
}

/// Packs codes (even count) two per byte, low nibble first.
pub fn pack(codes: &[u8]) -> Vec<u8> {
    codes
        .chunks_exact(2)
        .map(|p| (p[0] & 0x0f) | ((p[1] & 0x0f) << 4))
        .collect()
}

/// Unpacks bytes into codes, low nibble first.
pub fn unpack(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().flat_map(|&b| [b & 0x0f, b >> 4]).collect()
}

/// Both values of every byte: `PAIRS[b] = [low, high]`. Dequantizing a byte is one lookup.
pub static PAIRS: [[f32; 2]; 256] = {
    let mut t = [[0.0f32; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [E2M1_VALUES[b & 0x0f], E2M1_VALUES[b >> 4]];
        b += 1;
    }
    t
};
