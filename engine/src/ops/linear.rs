//! Linear layers `y = x · Wᵀ` over weights kept in their stored format: dense f32/bf16/f16 or a
//! packed quantized format ([`QuantWeight`]: FP8 block/tensor, NVFP4, MXFP4). The CPU path
//! dequantizes a tile of weight rows at a time into f32 and reuses it for every token, so a
//! checkpoint is never expanded to f32 in memory (only one tile per thread is). An optional
//! observer records the largest input magnitude (calibration of static activation scales).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use half::{bf16, f16};
use rayon::prelude::*;

use crate::checkpoint::{Dtype, TensorRef};
use crate::error::{EngineError, Result};
use crate::quant::{Format, Kind, QuantWeight, act};
use crate::tensor::{Mat, dot};

/// Rows of W dequantized together; sized so a tile of a 4096-wide row stays in L2.
const TILE_ROWS: usize = 16;

/// Stored weight data, row-major `[out, in]`.
#[derive(Debug, Clone)]
pub enum WeightData {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
    F16(Vec<u16>),
    Quant(QuantWeight),
}

impl WeightData {
    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        match self {
            WeightData::F32(v) => v.len() * 4,
            WeightData::Bf16(v) | WeightData::F16(v) => v.len() * 2,
            WeightData::Quant(q) => q.bytes(),
        }
    }

    pub fn format(&self) -> Format {
        match self {
            WeightData::F32(_) => Format::F32,
            WeightData::Bf16(_) => Format::Bf16,
            WeightData::F16(_) => Format::F16,
            WeightData::Quant(q) => q.format(),
        }
    }

    pub fn format_name(&self) -> &'static str {
        self.format().name()
    }
}

/// Largest |x| seen by a linear's forward (f32 bits; non-negative floats order like integers).
#[derive(Debug, Default)]
pub struct AmaxObserver(AtomicU32);

impl AmaxObserver {
    pub fn record(&self, x: &[f32]) {
        let m = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        self.0.fetch_max(m.to_bits(), Ordering::Relaxed);
    }

    pub fn get(&self) -> f32 {
        f32::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// A linear layer without bias.
#[derive(Debug, Clone)]
pub struct Linear {
    pub out_features: usize,
    pub in_features: usize,
    pub data: WeightData,
    /// Calibration hook; `None` on the serving path.
    pub observer: Option<Arc<AmaxObserver>>,
}

impl Linear {
    /// Builds from a checkpoint tensor that must be `[out, in]`.
    pub fn from_tensor(t: TensorRef<'_>, out: usize, inp: usize) -> Result<Self> {
        t.expect_shape(&[out, inp])?;
        let words = |b: &[u8]| -> Vec<u16> {
            b.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect()
        };
        let data = match t.dtype {
            Dtype::F32 | Dtype::F64 => WeightData::F32(t.to_f32()?),
            Dtype::BF16 => WeightData::Bf16(words(t.bytes)),
            Dtype::F16 => WeightData::F16(words(t.bytes)),
            other => {
                return Err(EngineError::UnsupportedDtype {
                    name: t.name.to_string(),
                    dtype: other.to_string(),
                    message: "dense linear weights must be F32, BF16 or F16 (quantized formats \
                              need their scale tensors)"
                        .into(),
                });
            }
        };
        Ok(Self {
            out_features: out,
            in_features: inp,
            data,
            observer: None,
        })
    }

    /// Wraps a packed quantized weight.
    pub fn from_quant(w: QuantWeight) -> Self {
        Self {
            out_features: w.rows(),
            in_features: w.cols(),
            data: WeightData::Quant(w),
            observer: None,
        }
    }

    /// Wraps f32 values `[out, in]`.
    pub fn from_f32(out: usize, inp: usize, w: Vec<f32>) -> Self {
        debug_assert_eq!(w.len(), out * inp);
        Self {
            out_features: out,
            in_features: inp,
            data: WeightData::F32(w),
            observer: None,
        }
    }

    /// Splits the rows into `parts` equal consecutive blocks (the grouped output projection
    /// stores its groups stacked along the output dim).
    pub fn split_rows(self, parts: usize) -> Vec<Linear> {
        let rows = self.out_features / parts.max(1);
        let k = self.in_features;
        let step = (rows * k).max(1);
        let datas: Vec<WeightData> = match &self.data {
            WeightData::F32(w) => w
                .chunks(step)
                .map(|c| WeightData::F32(c.to_vec()))
                .collect(),
            WeightData::Bf16(w) => w
                .chunks(step)
                .map(|c| WeightData::Bf16(c.to_vec()))
                .collect(),
            WeightData::F16(w) => w
                .chunks(step)
                .map(|c| WeightData::F16(c.to_vec()))
                .collect(),
            WeightData::Quant(q) => q
                .split_rows(parts)
                .into_iter()
                .map(WeightData::Quant)
                .collect(),
        };
        datas
            .into_iter()
            .map(|data| Linear {
                out_features: rows,
                in_features: k,
                data,
                observer: self.observer.clone(),
            })
            .collect()
    }

    /// Dequantizes rows `start..start+n` into `buf` (len `n * in`).
    fn rows_f32(&self, start: usize, n: usize, buf: &mut Vec<f32>) {
        let k = self.in_features;
        let range = start * k..(start + n) * k;
        buf.clear();
        match &self.data {
            WeightData::F32(w) => buf.extend_from_slice(&w[range]),
            WeightData::Bf16(w) => {
                buf.extend(w[range].iter().map(|&b| bf16::from_bits(b).to_f32()))
            }
            WeightData::F16(w) => buf.extend(w[range].iter().map(|&b| f16::from_bits(b).to_f32())),
            WeightData::Quant(q) => q.dequant_rows(start, n, buf),
        }
    }

    /// Analytic work of `forward` over `tokens` rows: weight bytes (as stored) plus f32
    /// activations in and out, and 2·out·in·tokens FLOPs.
    pub fn work(&self, tokens: usize) -> (u64, u64) {
        let (n, k, t) = (
            self.out_features as u64,
            self.in_features as u64,
            tokens as u64,
        );
        let bytes = self.data.bytes() as u64 + 4 * t * (n + k);
        (bytes, 2 * n * k * t)
    }

    /// Row `r` of W as f32 (embedding lookups).
    pub fn row(&self, r: usize) -> Vec<f32> {
        let mut buf = Vec::with_capacity(self.in_features);
        self.rows_f32(r, 1, &mut buf);
        buf
    }

    /// `x [T, in] → [T, out]`.
    pub fn forward(&self, x: &Mat) -> Mat {
        debug_assert_eq!(x.cols, self.in_features);
        let (t, n, k) = (x.rows, self.out_features, self.in_features);
        let mut out = Mat::zeros(t, n);
        if t == 0 {
            return out;
        }
        if let Some(o) = &self.observer {
            o.record(&x.data);
        }
        // FP8 weights with the reference's FP8 activations on (quant/act.rs): the GEMM's
        // operands are the activations quantized per token in groups of 128 columns.
        let quantized;
        let x = if act::fp8_act()
            && matches!(self.data.format().kind(), Kind::Fp8Block | Kind::Fp8Tensor)
        {
            let mut q = x.clone();
            for ti in 0..t {
                act::quantize_groups(q.row_mut(ti));
            }
            quantized = q;
            &quantized
        } else {
            x
        };
        let tiles: Vec<(usize, Vec<f32>)> = (0..n.div_ceil(TILE_ROWS))
            .into_par_iter()
            .map_init(Vec::new, |buf, tile| {
                let start = tile * TILE_ROWS;
                let rows = TILE_ROWS.min(n - start);
                let w: &[f32] = match &self.data {
                    WeightData::F32(w) => &w[start * k..(start + rows) * k],
                    _ => {
                        self.rows_f32(start, rows, buf);
                        buf
                    }
                };
                let mut block = vec![0.0f32; t * rows];
                for ti in 0..t {
                    let xr = x.row(ti);
                    for r in 0..rows {
                        block[ti * rows + r] = dot(xr, &w[r * k..(r + 1) * k]);
                    }
                }
                (start, block)
            })
            .collect();
        for (start, block) in tiles {
            let rows = block.len() / t;
            for ti in 0..t {
                out.row_mut(ti)[start..start + rows]
                    .copy_from_slice(&block[ti * rows..(ti + 1) * rows]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_matches_naive_for_every_storage() {
        let (n, k, t) = (37, 19, 5);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let x = Mat::from_vec(t, k, (0..t * k).map(|i| (i as f32 * 0.13).sin()).collect());
        let bf: Vec<u16> = w.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        let hf: Vec<u16> = w.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        let round_bf: Vec<f32> = bf.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
        let round_hf: Vec<f32> = hf.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
        for (data, wref) in [
            (WeightData::F32(w.clone()), &w),
            (WeightData::Bf16(bf), &round_bf),
            (WeightData::F16(hf), &round_hf),
        ] {
            let lin = Linear {
                out_features: n,
                in_features: k,
                data,
                observer: None,
            };
            let y = lin.forward(&x);
            for ti in 0..t {
                for r in 0..n {
                    let naive: f32 = (0..k).map(|j| x.row(ti)[j] * wref[r * k + j]).sum();
                    assert!(
                        (y.row(ti)[r] - naive).abs() < 1e-5,
                        "{} {ti} {r}",
                        lin.data.format_name()
                    );
                }
            }
        }
    }
}
