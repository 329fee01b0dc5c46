//! NVIDIA ModelOpt NVFP4 weights (model-spec §5.2): E2M1 codes packed `[N, K/2]` (low nibble =
//! even element), one E4M3 scale per 16 consecutive K elements `[N, K/16]` stored linear
//! (row-major, unswizzled), one f32 per-tensor `weight_scale_2` = amax/(6·448), and the static
//! activation scale `input_scale` (same convention). `W[n,k] = e2m1 · f32(scale[n,k/16]) · scale_2`
//! evaluated left to right. Quantization follows ModelOpt: block scale = (block amax / 6) /
//! scale_2 cast to E4M3 (round to nearest even; a block whose scale is 0 gets 1), elements =
//! x / (scale · scale_2) rounded to E2M1.

use super::fp8::check_f32_scale;
use super::{e2m1, e4m3};
use crate::error::{EngineError, Result};

/// Elements per NVFP4 scale.
pub const NVFP4_BLOCK: usize = 16;

/// One NVFP4 weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4 {
    pub rows: usize,
    pub cols: usize,
    /// `[rows, cols/2]`, two E2M1 codes per byte.
    pub packed: Vec<u8>,
    /// E4M3 bytes `[rows, cols/16]`.
    pub scales: Vec<u8>,
    /// `weight_scale_2`.
    pub global: f32,
    /// `input_scale` (W4A4 activation global scale); kept and validated, unused on the CPU
    /// (which runs W4A16).
    pub input_scale: Option<f32>,
}

fn qerr(module: &str, message: String) -> EngineError {
    EngineError::Quantization {
        module: module.to_string(),
        message,
    }
}

impl Nvfp4 {
    /// Builds from stored parts: lengths, every block scale (finite E4M3, not negative) and the
    /// f32 scalars (finite, > 0) are checked.
    pub fn from_parts(
        module: &str,
        rows: usize,
        cols: usize,
        packed: Vec<u8>,
        scales: Vec<u8>,
        global: f32,
        input_scale: Option<f32>,
    ) -> Result<Self> {
        if !cols.is_multiple_of(NVFP4_BLOCK) {
            return Err(qerr(
                module,
                format!("NVFP4 needs in_features divisible by {NVFP4_BLOCK}, got {cols}"),
            ));
        }
        if packed.len() != rows * cols / 2 || scales.len() != rows * cols / NVFP4_BLOCK {
            return Err(qerr(
                module,
                format!(
                    "NVFP4 parts hold {} weight bytes and {} scales, expected {} and {}",
                    packed.len(),
                    scales.len(),
                    rows * cols / 2,
                    rows * cols / NVFP4_BLOCK
                ),
            ));
        }
        for (i, &b) in scales.iter().enumerate() {
            if e4m3::is_nan(b) || b & 0x80 != 0 && b != 0x80 {
                return Err(qerr(
                    module,
                    format!(
                        "weight_scale element {i} (row {}, block {}) is byte {b:#04x} = {}; block \
                         scales must be finite and not negative",
                        i / (cols / NVFP4_BLOCK),
                        i % (cols / NVFP4_BLOCK),
                        e4m3::decode(b)
                    ),
                ));
            }
        }
        check_f32_scale(module, "weight_scale_2", 0, global, true)?;
        if let Some(s) = input_scale {
            check_f32_scale(module, "input_scale", 0, s, true)?;
        }
        Ok(Self {
            rows,
            cols,
            packed,
            scales,
            global,
            input_scale,
        })
    }

    /// Quantizes `w [rows, cols]` the ModelOpt way.
    pub fn quantize(
        module: &str,
        w: &[f32],
        rows: usize,
        cols: usize,
        input_scale: Option<f32>,
    ) -> Result<Self> {
        if !cols.is_multiple_of(NVFP4_BLOCK) {
            return Err(qerr(
                module,
                format!("cannot quantize to NVFP4: in_features {cols} is not a multiple of 16"),
            ));
        }
        if let Some(i) = w.iter().position(|v| !v.is_finite()) {
            return Err(qerr(
                module,
                format!("cannot quantize: element {i} is {}", w[i]),
            ));
        }
        let amax = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let global = if amax == 0.0 {
            1.0
        } else {
            amax / (e2m1::E2M1_MAX * e4m3::E4M3_MAX)
        };
        let mut scales = Vec::with_capacity(rows * cols / NVFP4_BLOCK);
        let mut codes = Vec::with_capacity(rows * cols);
        for block in w.chunks_exact(NVFP4_BLOCK) {
            let bmax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let mut s = e4m3::encode(bmax / e2m1::E2M1_MAX / global);
            if e4m3::decode(s) == 0.0 {
                s = e4m3::encode(1.0);
            }
            scales.push(s);
            let denom = e4m3::decode(s) * global;
            codes.extend(block.iter().map(|&v| e2m1::encode(v / denom)));
        }
        Self::from_parts(
            module,
            rows,
            cols,
            e2m1::pack(&codes),
            scales,
            global,
            input_scale,
        )
    }

    /// Appends rows `start..start+n` dequantized to `out`.
    pub fn dequant_rows(&self, start: usize, n: usize, out: &mut Vec<f32>) {
        let half = NVFP4_BLOCK / 2;
        let sb = self.cols / NVFP4_BLOCK;
        let bytes = &self.packed[start * self.cols / 2..(start + n) * self.cols / 2];
        let scales = &self.scales[start * sb..(start + n) * sb];
        for (chunk, &s) in bytes.chunks_exact(half).zip(scales) {
            let s = e4m3::decode(s);
            for &b in chunk {
                let [lo, hi] = e2m1::PAIRS[b as usize];
                out.push(lo * s * self.global);
                out.push(hi * s * self.global);
            }
        }
    }

    pub fn split_rows(&self, parts: usize) -> Vec<Self> {
        let rows = self.rows / parts;
        let (pb, sb) = (rows * self.cols / 2, rows * self.cols / NVFP4_BLOCK);
        (0..parts)
            .map(|g| Self {
                rows,
                cols: self.cols,
                packed: self.packed[g * pb..(g + 1) * pb].to_vec(),
                scales: self.scales[g * sb..(g + 1) * sb].to_vec(),
                global: self.global,
                input_scale: self.input_scale,
            })
            .collect()
    }

    pub fn bytes(&self) -> usize {
        self.packed.len() + self.scales.len() + 4 + self.input_scale.map_or(0, |_| 4)
    }
}
