//! Writing packed weights under their checkpoint conventions (model-spec §5), the inverse of
//! [`super::load`]: DeepSeek FP8 `weight` F8_E4M3 + `scale` F8_E8M0 (V4) or `weight_scale_inv`
//! F32 (V3); ModelOpt FP8 `weight` + scalar `weight_scale` (+ `input_scale`); ModelOpt NVFP4
//! `weight` U8 `[N, K/2]` + `weight_scale` F8_E4M3 `[N, K/16]` + scalar `weight_scale_2` +
//! `input_scale`; DeepSeek FP4 `weight` I8 `[N, K/2]` + `scale` F8_E8M0 `[N, K/32]`. Scalars
//! are written with shape `[]`, as torch saves a 0-d tensor.

use super::fp8::{BlockScales, FP8_BLOCK};
use super::mxfp4::MX_BLOCK;
use super::nvfp4::NVFP4_BLOCK;
use super::weight::QuantWeight;
use crate::checkpoint::{Dtype, OwnedTensor};

fn raw(name: String, dtype: Dtype, shape: Vec<usize>, data: Vec<u8>) -> OwnedTensor {
    OwnedTensor {
        name,
        dtype,
        shape,
        data,
    }
}

fn scalar(name: String, v: f32) -> OwnedTensor {
    raw(name, Dtype::F32, vec![], v.to_le_bytes().to_vec())
}

/// The tensors that store `w` as module `m` (official name without `.weight`).
pub fn tensors(m: &str, w: &QuantWeight) -> Vec<OwnedTensor> {
    let mut out = Vec::new();
    match w {
        QuantWeight::Fp8Block(q) => {
            let (n, k) = (q.rows, q.cols);
            out.push(raw(
                format!("{m}.weight"),
                Dtype::F8E4M3,
                vec![n, k],
                q.codes.clone(),
            ));
            let shape = vec![(n + q.row_phase).div_ceil(FP8_BLOCK), k.div_ceil(FP8_BLOCK)];
            out.push(match &q.scales {
                BlockScales::E8m0(s) => raw(format!("{m}.scale"), Dtype::F8E8M0, shape, s.clone()),
                BlockScales::F32(s) => {
                    OwnedTensor::f32(&format!("{m}.weight_scale_inv"), &shape, s)
                }
            });
        }
        QuantWeight::Fp8Tensor(q) => {
            out.push(raw(
                format!("{m}.weight"),
                Dtype::F8E4M3,
                vec![q.rows, q.cols],
                q.codes.clone(),
            ));
            out.push(scalar(format!("{m}.weight_scale"), q.scale));
            if let Some(s) = q.input_scale {
                out.push(scalar(format!("{m}.input_scale"), s));
            }
        }
        QuantWeight::Nvfp4(q) => {
            out.push(raw(
                format!("{m}.weight"),
                Dtype::U8,
                vec![q.rows, q.cols / 2],
                q.packed.clone(),
            ));
            out.push(raw(
                format!("{m}.weight_scale"),
                Dtype::F8E4M3,
                vec![q.rows, q.cols / NVFP4_BLOCK],
                q.scales.clone(),
            ));
            out.push(scalar(format!("{m}.weight_scale_2"), q.global));
            if let Some(s) = q.input_scale {
                out.push(scalar(format!("{m}.input_scale"), s));
            }
        }
        QuantWeight::Mxfp4(q) => {
            out.push(raw(
                format!("{m}.weight"),
                Dtype::I8,
                vec![q.rows, q.cols / 2],
                q.packed.clone(),
            ));
            out.push(raw(
                format!("{m}.scale"),
                Dtype::F8E8M0,
                vec![q.rows, q.cols / MX_BLOCK],
                q.scales.clone(),
            ));
        }
    }
    out
}
