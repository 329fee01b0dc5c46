//! E8M0 scales (OCP MX v1.0; safetensors `F8_E8M0`; DeepSeek's UE8M0): one byte b is the power of
//! two 2^(b − 127), from 2⁻¹²⁷ (b = 0) to 2¹²⁷ (b = 254). 0xFF is NaN and is refused as a scale;
//! there is no zero and no sign.

use crate::error::{EngineError, Result};

/// The NaN encoding.
pub const E8M0_NAN: u8 = 0xff;

/// 2^(b − 127) for b < 255, `None` for the NaN byte. Built from the f32 bit pattern so the two
/// extremes are exact (2⁻¹²⁷ is an f32 subnormal).
pub fn decode(b: u8) -> Option<f32> {
    match b {
        E8M0_NAN => None,
        0 => Some(f32::from_bits(1 << 22)),
        _ => Some(f32::from_bits((b as u32) << 23)),
    }
}

/// Decodes a scale byte of `module`, refusing NaN with an error that names the block.
pub fn decode_scale(b: u8, module: &str, tensor: &str, index: usize) -> Result<f32> {
    decode(b).ok_or_else(|| EngineError::Quantization {
        module: module.to_string(),
        message: format!(
            "scale `{tensor}` element {index} is 0xFF, the E8M0 NaN encoding; a NaN scale is refused"
        ),
    })
}

/// The byte for 2^e, e clamped to −127..=127.
pub fn from_exponent(e: i32) -> u8 {
    (e.clamp(-127, 127) + 127) as u8
}

/// The smallest power of two >= `x` (x > 0), as a byte (clamped to the representable range):
/// DeepSeek's `2^ceil(log2 s)` rounding of a scale, which never clips the block's largest value.
pub fn encode_ceil(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    if x.is_infinite() {
        return from_exponent(127);
    }
    // frexp by hand on the exact f64 value: x = f · 2^e with f in [0.5, 1).
    let v = x as f64;
    let mut e = v.log2().ceil() as i32;
    if 2f64.powi(e) < v {
        e += 1;
    }
    if 2f64.powi(e - 1) >= v {
        e -= 1;
    }
    from_exponent(e)
}
