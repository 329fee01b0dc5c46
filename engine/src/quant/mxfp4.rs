//! MXFP4 weights (OCP MX v1.0; model-spec §5.3): E2M1 codes packed `[N, K/2]` (low nibble = even
//! element) and one E8M0 scale per 32 consecutive K elements `[N, K/32]`;
//! `W[n,k] = e2m1 · 2^(scale − 127)`. DeepSeek-V4's FP4 experts (I8 + F8_E8M0 `.scale`) and
//! gpt-oss `_blocks`/`_scales` (U8, `[E, N, K/32, 16]` + `[E, N, K/32]`) are this layout with
//! other names and dtypes. Quantization rounds the scale up, `2^ceil(log2(amax/6))` (DeepSeek's
//! choice; no element is ever clipped), then elements round to nearest even E2M1.

use super::{e2m1, e8m0};
use crate::error::{EngineError, Result};

/// Elements per MX scale.
pub const MX_BLOCK: usize = 32;

/// One MXFP4 weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Mxfp4 {
    pub rows: usize,
    pub cols: usize,
    /// `[rows, cols/2]`.
    pub packed: Vec<u8>,
    /// E8M0 bytes `[rows, cols/32]`.
    pub scales: Vec<u8>,
}

fn qerr(module: &str, message: String) -> EngineError {
    EngineError::Quantization {
        module: module.to_string(),
        message,
    }
}

impl Mxfp4 {
    /// Builds from stored parts, checking lengths and refusing NaN (0xFF) scales.
    pub fn from_parts(
        module: &str,
        rows: usize,
        cols: usize,
        packed: Vec<u8>,
        scales: Vec<u8>,
    ) -> Result<Self> {
        if !cols.is_multiple_of(MX_BLOCK) {
            return Err(qerr(
                module,
                format!("MXFP4 needs in_features divisible by {MX_BLOCK}, got {cols}"),
            ));
        }
        if packed.len() != rows * cols / 2 || scales.len() != rows * cols / MX_BLOCK {
            return Err(qerr(
                module,
                format!(
                    "MXFP4 parts hold {} weight bytes and {} scales, expected {} and {}",
                    packed.len(),
                    scales.len(),
                    rows * cols / 2,
                    rows * cols / MX_BLOCK
                ),
            ));
        }
        for (i, &b) in scales.iter().enumerate() {
            e8m0::decode_scale(b, module, "scale", i)?;
        }
        Ok(Self {
            rows,
            cols,
            packed,
            scales,
        })
    }

    /// Quantizes `w [rows, cols]` with power-of-two scales rounded up.
    pub fn quantize(module: &str, w: &[f32], rows: usize, cols: usize) -> Result<Self> {
        if !cols.is_multiple_of(MX_BLOCK) {
            return Err(qerr(
                module,
                format!("cannot quantize to MXFP4: in_features {cols} is not a multiple of 32"),
            ));
        }
        if let Some(i) = w.iter().position(|v| !v.is_finite()) {
            return Err(qerr(
                module,
                format!("cannot quantize: element {i} is {}", w[i]),
            ));
        }
        let mut scales = Vec::with_capacity(rows * cols / MX_BLOCK);
        let mut codes = Vec::with_capacity(rows * cols);
        for block in w.chunks_exact(MX_BLOCK) {
            let bmax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let s = if bmax == 0.0 {
                e8m0::from_exponent(0)
            } else {
                e8m0::encode_ceil(bmax / e2m1::E2M1_MAX)
            };
            scales.push(s);
            let scale = e8m0::decode(s).unwrap_or(1.0);
            codes.extend(block.iter().map(|&v| e2m1::encode(v / scale)));
        }
        Self::from_parts(module, rows, cols, e2m1::pack(&codes), scales)
    }

    /// Appends rows `start..start+n` dequantized to `out`.
    pub fn dequant_rows(&self, start: usize, n: usize, out: &mut Vec<f32>) {
        let sb = self.cols / MX_BLOCK;
        let bytes = &self.packed[start * self.cols / 2..(start + n) * self.cols / 2];
        let scales = &self.scales[start * sb..(start + n) * sb];
        for (chunk, &s) in bytes.chunks_exact(MX_BLOCK / 2).zip(scales) {
            // Validated at construction: never the NaN byte.
            let s = e8m0::decode(s).unwrap_or(f32::NAN);
            for &b in chunk {
                let [lo, hi] = e2m1::PAIRS[b as usize];
                out.push(lo * s);
                out.push(hi * s);
            }
        }
    }

    pub fn split_rows(&self, parts: usize) -> Vec<Self> {
        let rows = self.rows / parts;
        let (pb, sb) = (rows * self.cols / 2, rows * self.cols / MX_BLOCK);
        (0..parts)
            .map(|g| Self {
                rows,
                cols: self.cols,
                packed: self.packed[g * pb..(g + 1) * pb].to_vec(),
                scales: self.scales[g * sb..(g + 1) * sb].to_vec(),
            })
            .collect()
    }

    pub fn bytes(&self) -> usize {
        self.packed.len() + self.scales.len()
    }
}
