//! FP8 weights (model-spec §5.4). Block-scaled (DeepSeek): E4M3 codes `[N, K]` and one scale per
//! 128×128 block, `[ceil(N/128), ceil(K/128)]`, either E8M0 (V4 `.scale`, rounded up to a power
//! of two: `2^ceil(log2(amax/448))`) or f32 (V3 `weight_scale_inv` = amax/448);
//! `W[n,k] = e4m3(code) · scale[n/128, k/128]`. Per-tensor (ModelOpt `FP8`): one f32
//! `weight_scale` = amax/448. Scales are validated on construction: finite, not negative,
//! E8M0 0xFF refused; after that, dequantization cannot fail.

use super::{e4m3, e8m0};
use crate::error::{EngineError, Result};

/// Block edge of DeepSeek's FP8 weight scaling.
pub const FP8_BLOCK: usize = 128;

/// How a block-scaled FP8 weight stores its scales.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockScales {
    /// Powers of two, one byte each (DeepSeek-V4 `.scale`, F8_E8M0).
    E8m0(Vec<u8>),
    /// f32 multipliers (DeepSeek-V3 `weight_scale_inv`).
    F32(Vec<f32>),
}

/// A DeepSeek block-scaled FP8 weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Block {
    pub rows: usize,
    pub cols: usize,
    /// E4M3 codes `[rows, cols]`.
    pub codes: Vec<u8>,
    /// `[scale_rows, ceil(cols/128)]`.
    pub scales: BlockScales,
    /// Rows of the first scale block that lie before row 0: non-zero only for a row range split
    /// off a larger weight at a boundary that is not a multiple of 128.
    pub row_phase: usize,
}

/// A per-tensor scaled FP8 weight (ModelOpt `FP8`).
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Tensor {
    pub rows: usize,
    pub cols: usize,
    pub codes: Vec<u8>,
    pub scale: f32,
    /// Static activation scale (W8A8 on GPUs); kept, validated, unused by the CPU path.
    pub input_scale: Option<f32>,
}

fn qerr(module: &str, message: String) -> EngineError {
    EngineError::Quantization {
        module: module.to_string(),
        message,
    }
}

/// Checks an f32 scale: finite and not negative (`positive` also refuses zero).
pub(crate) fn check_f32_scale(
    module: &str,
    what: &str,
    index: usize,
    s: f32,
    positive: bool,
) -> Result<()> {
    if !s.is_finite() || s < 0.0 || (positive && s == 0.0) {
        let need = if positive { "> 0" } else { ">= 0" };
        return Err(qerr(
            module,
            format!("{what} element {index} is {s}; a scale must be finite and {need}"),
        ));
    }
    Ok(())
}

fn finite_input(module: &str, w: &[f32]) -> Result<()> {
    match w.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(qerr(
            module,
            format!("cannot quantize: element {i} is {}", w[i]),
        )),
        None => Ok(()),
    }
}

impl Fp8Block {
    /// Number of 128-row scale blocks covering `rows` rows that start `phase` rows into a block.
    pub fn scale_rows_for(rows: usize, phase: usize) -> usize {
        (rows + phase).div_ceil(FP8_BLOCK)
    }

    /// Builds from stored parts, checking lengths and every scale.
    pub fn from_parts(
        module: &str,
        rows: usize,
        cols: usize,
        codes: Vec<u8>,
        scales: BlockScales,
    ) -> Result<Self> {
        let (sr, sc) = (rows.div_ceil(FP8_BLOCK), cols.div_ceil(FP8_BLOCK));
        if codes.len() != rows * cols {
            return Err(qerr(
                module,
                format!(
                    "FP8 weight holds {} bytes, expected {rows}×{cols}",
                    codes.len()
                ),
            ));
        }
        let n = match &scales {
            BlockScales::E8m0(s) => {
                for (i, &b) in s.iter().enumerate() {
                    e8m0::decode_scale(b, module, "scale", i)?;
                }
                s.len()
            }
            BlockScales::F32(s) => {
                for (i, &v) in s.iter().enumerate() {
                    check_f32_scale(module, "weight_scale_inv", i, v, false)?;
                }
                s.len()
            }
        };
        if n != sr * sc {
            return Err(qerr(
                module,
                format!("FP8 block scales hold {n} values, expected [{sr}, {sc}]"),
            ));
        }
        Ok(Self {
            rows,
            cols,
            codes,
            scales,
            row_phase: 0,
        })
    }

    /// Quantizes `w [rows, cols]` per 128×128 block (blocks at the edges are partial: the
    /// zero padding of DeepSeek's converter never changes a block's amax).
    pub fn quantize(module: &str, w: &[f32], rows: usize, cols: usize, e8m0: bool) -> Result<Self> {
        finite_input(module, w)?;
        let (sr, sc) = (rows.div_ceil(FP8_BLOCK), cols.div_ceil(FP8_BLOCK));
        let mut amax = vec![0.0f32; sr * sc];
        for r in 0..rows {
            for (c, v) in w[r * cols..(r + 1) * cols].iter().enumerate() {
                let a = &mut amax[(r / FP8_BLOCK) * sc + c / FP8_BLOCK];
                *a = a.max(v.abs());
            }
        }
        let scale_f32: Vec<f32> = amax
            .iter()
            .map(|&a| {
                if a == 0.0 {
                    1.0
                } else if e8m0 {
                    e8m0::decode(e8m0::encode_ceil(a / e4m3::E4M3_MAX)).unwrap_or(1.0)
                } else {
                    a / e4m3::E4M3_MAX
                }
            })
            .collect();
        let mut codes = vec![0u8; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                let s = scale_f32[(r / FP8_BLOCK) * sc + c / FP8_BLOCK];
                codes[r * cols + c] = e4m3::encode(w[r * cols + c] / s);
            }
        }
        let scales = if e8m0 {
            BlockScales::E8m0(
                amax.iter()
                    .zip(&scale_f32)
                    .map(|(&a, &s)| {
                        if a == 0.0 {
                            e8m0::from_exponent(0)
                        } else {
                            e8m0::encode_ceil(s)
                        }
                    })
                    .collect(),
            )
        } else {
            BlockScales::F32(scale_f32)
        };
        Self::from_parts(module, rows, cols, codes, scales)
    }

    /// Scale of block (block row `br`, block column `bc`) as f32.
    fn scale(&self, br: usize, bc: usize) -> f32 {
        let sc = self.cols.div_ceil(FP8_BLOCK);
        match &self.scales {
            // Validated at construction; NaN cannot be stored.
            BlockScales::E8m0(s) => e8m0::decode(s[br * sc + bc]).unwrap_or(f32::NAN),
            BlockScales::F32(s) => s[br * sc + bc],
        }
    }

    /// Appends rows `start..start+n` dequantized to `out`.
    pub fn dequant_rows(&self, start: usize, n: usize, out: &mut Vec<f32>) {
        let k = self.cols;
        for r in start..start + n {
            let br = (r + self.row_phase) / FP8_BLOCK;
            let row = &self.codes[r * k..(r + 1) * k];
            for (bc, chunk) in row.chunks(FP8_BLOCK).enumerate() {
                let s = self.scale(br, bc);
                out.extend(chunk.iter().map(|&c| e4m3::decode(c) * s));
            }
        }
    }

    /// Splits into `parts` equal row ranges, copying the codes and the scale rows each covers.
    pub fn split_rows(&self, parts: usize) -> Vec<Self> {
        let rows = self.rows / parts;
        let sc = self.cols.div_ceil(FP8_BLOCK);
        (0..parts)
            .map(|g| {
                let first = g * rows + self.row_phase;
                let (b0, b1) = (first / FP8_BLOCK, (first + rows).div_ceil(FP8_BLOCK));
                let scales = match &self.scales {
                    BlockScales::E8m0(s) => BlockScales::E8m0(s[b0 * sc..b1 * sc].to_vec()),
                    BlockScales::F32(s) => BlockScales::F32(s[b0 * sc..b1 * sc].to_vec()),
                };
                Self {
                    rows,
                    cols: self.cols,
                    codes: self.codes[g * rows * self.cols..(g + 1) * rows * self.cols].to_vec(),
                    scales,
                    row_phase: first % FP8_BLOCK,
                }
            })
            .collect()
    }

    pub fn bytes(&self) -> usize {
        self.codes.len()
            + match &self.scales {
                BlockScales::E8m0(s) => s.len(),
                BlockScales::F32(s) => 4 * s.len(),
            }
    }
}

impl Fp8Tensor {
    /// Builds from stored parts, checking the length and the scales.
    pub fn from_parts(
        module: &str,
        rows: usize,
        cols: usize,
        codes: Vec<u8>,
        scale: f32,
        input_scale: Option<f32>,
    ) -> Result<Self> {
        if codes.len() != rows * cols {
            return Err(qerr(
                module,
                format!(
                    "FP8 weight holds {} bytes, expected {rows}×{cols}",
                    codes.len()
                ),
            ));
        }
        check_f32_scale(module, "weight_scale", 0, scale, false)?;
        if let Some(s) = input_scale {
            check_f32_scale(module, "input_scale", 0, s, true)?;
        }
        Ok(Self {
            rows,
            cols,
            codes,
            scale,
            input_scale,
        })
    }

    /// Quantizes with one scale amax/448 (1 for an all-zero tensor).
    pub fn quantize(
        module: &str,
        w: &[f32],
        rows: usize,
        cols: usize,
        input_scale: Option<f32>,
    ) -> Result<Self> {
        finite_input(module, w)?;
        let amax = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = if amax == 0.0 {
            1.0
        } else {
            amax / e4m3::E4M3_MAX
        };
        let codes = w.iter().map(|&v| e4m3::encode(v / scale)).collect();
        Self::from_parts(module, rows, cols, codes, scale, input_scale)
    }

    pub fn dequant_rows(&self, start: usize, n: usize, out: &mut Vec<f32>) {
        let range = start * self.cols..(start + n) * self.cols;
        out.extend(
            self.codes[range]
                .iter()
                .map(|&c| e4m3::decode(c) * self.scale),
        );
    }

    pub fn split_rows(&self, parts: usize) -> Vec<Self> {
        let rows = self.rows / parts;
        (0..parts)
            .map(|g| Self {
                rows,
                cols: self.cols,
                codes: self.codes[g * rows * self.cols..(g + 1) * rows * self.cols].to_vec(),
                scale: self.scale,
                input_scale: self.input_scale,
            })
            .collect()
    }

    pub fn bytes(&self) -> usize {
        self.codes.len() + 4 + self.input_scale.map_or(0, |_| 4)
    }
}
