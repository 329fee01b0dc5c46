//! Reading one linear module from a checkpoint in whatever format it is stored, recognized by
//! the weight's dtype and its companion tensors (model-spec §5):
//! - F8_E4M3 `weight` + `scale` (F8_E8M0 or F32) or `weight_scale_inv` (F32), one per 128×128
//!   block → FP8 block-scaled; + an f32 scalar `weight_scale` → ModelOpt FP8 per-tensor;
//! - U8/I8 `weight [N, K/2]` + F8_E4M3 `weight_scale [N, K/16]` + f32 `weight_scale_2`
//!   (+ `input_scale`) → NVFP4;
//! - U8/I8 `weight [N, K/2]` + `scale [N, K/32]` (F8_E8M0 or U8) → MXFP4 (DeepSeek FP4 experts
//!   and gpt-oss `_blocks`/`_scales`, which the checkpoint exposes per expert under these names).
//!
//! The format found must be one the quantization config allows for the module; every shape
//! mismatch is an error naming the module, the expected and the found shape.

use super::config::QuantConfig;
use super::fp8::{BlockScales, FP8_BLOCK, Fp8Block, Fp8Tensor};
use super::mxfp4::{MX_BLOCK, Mxfp4};
use super::nvfp4::{NVFP4_BLOCK, Nvfp4};
use super::weight::{Format, QuantWeight};
use crate::checkpoint::{Checkpoint, Dtype, TensorRef};
use crate::error::{EngineError, Result};
use crate::ops::linear::Linear;

/// Companion tensor suffixes of quantized weights.
pub const SCALE_SUFFIXES: &[&str] = &[
    "scale",
    "weight_scale",
    "weight_scale_2",
    "weight_scale_inv",
    "input_scale",
];

/// A module's tensors, recognized and shape-checked but not yet copied.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    pub format: Format,
    pub weight: TensorRef<'a>,
    pub scale: Option<TensorRef<'a>>,
    pub scale_2: Option<TensorRef<'a>>,
    pub input_scale: Option<TensorRef<'a>>,
}

impl Probe<'_> {
    /// Bytes of every tensor the module stores.
    pub fn bytes(&self) -> usize {
        [
            Some(self.weight),
            self.scale,
            self.scale_2,
            self.input_scale,
        ]
        .iter()
        .flatten()
        .map(|t| t.bytes.len())
        .sum()
    }
}

fn qerr(module: &str, message: String) -> EngineError {
    EngineError::Quantization {
        module: module.to_string(),
        message,
    }
}

fn shape_err(module: &str, t: &TensorRef<'_>, expected: &[usize], what: &str) -> EngineError {
    qerr(
        module,
        format!(
            "`{}` has shape {:?}, expected {expected:?} ({what})",
            t.name, t.shape
        ),
    )
}

fn want_shape(module: &str, t: &TensorRef<'_>, expected: &[usize], what: &str) -> Result<()> {
    if t.shape != expected {
        return Err(shape_err(module, t, expected, what));
    }
    Ok(())
}

fn want_dtype(module: &str, t: &TensorRef<'_>, ok: &[Dtype], what: &str) -> Result<()> {
    if !ok.contains(&t.dtype) {
        let names: Vec<&str> = ok.iter().map(|d| d.name()).collect();
        return Err(qerr(
            module,
            format!(
                "`{}` is {}, expected {} ({what})",
                t.name,
                t.dtype,
                names.join(" or ")
            ),
        ));
    }
    Ok(())
}

/// An f32 scalar stored as `[]` or `[1]`.
fn scalar(module: &str, t: &TensorRef<'_>) -> Result<f32> {
    want_dtype(module, t, &[Dtype::F32], "a per-tensor scale")?;
    if t.numel() != 1 || t.shape.len() > 1 {
        return Err(shape_err(module, t, &[], "a per-tensor scalar"));
    }
    Ok(t.to_f32()?[0])
}

/// Recognizes the format of `module` (official name, without `.weight`) of shape `[out, inp]`
/// and checks the shape of every tensor it stores.
pub fn probe<'a>(ck: &'a Checkpoint, module: &str, out: usize, inp: usize) -> Result<Probe<'a>> {
    let weight = ck.get(&format!("{module}.weight"))?;
    let opt = |s: &str| -> Result<Option<TensorRef<'a>>> {
        let name = format!("{module}.{s}");
        if ck.contains(&name) {
            ck.get(&name).map(Some)
        } else {
            Ok(None)
        }
    };
    let (scale, ws, ws2, wsi, inps) = (
        opt("scale")?,
        opt("weight_scale")?,
        opt("weight_scale_2")?,
        opt("weight_scale_inv")?,
        opt("input_scale")?,
    );
    let mut p = Probe {
        format: Format::F32,
        weight,
        scale: None,
        scale_2: None,
        input_scale: inps,
    };
    let dense_shape = [out, inp];
    match weight.dtype {
        Dtype::F32 | Dtype::F64 | Dtype::BF16 | Dtype::F16 => {
            want_shape(module, &weight, &dense_shape, "a dense [out, in] weight")?;
            if let Some(extra) = [scale, ws, ws2, wsi, inps].iter().flatten().next() {
                return Err(qerr(
                    module,
                    format!(
                        "the weight is {} but `{}` is present; scale tensors belong to \
                         quantized weights",
                        weight.dtype, extra.name
                    ),
                ));
            }
            p.format = match weight.dtype {
                Dtype::BF16 => Format::Bf16,
                Dtype::F16 => Format::F16,
                _ => Format::F32,
            };
        }
        Dtype::F8E4M3 => {
            want_shape(module, &weight, &dense_shape, "an FP8 [out, in] weight")?;
            let blocks = [out.div_ceil(FP8_BLOCK), inp.div_ceil(FP8_BLOCK)];
            let what = "one scale per 128×128 block";
            if let Some(s) = scale.or(wsi) {
                want_dtype(module, &s, &[Dtype::F8E8M0, Dtype::F32], what)?;
                want_shape(module, &s, &blocks, what)?;
                p.format = if s.dtype == Dtype::F8E8M0 {
                    Format::Fp8BlockE8m0
                } else {
                    Format::Fp8BlockF32
                };
                p.scale = Some(s);
            } else if let Some(s) = ws {
                scalar(module, &s)?;
                p.format = Format::Fp8Tensor;
                p.scale = Some(s);
            } else {
                return Err(qerr(
                    module,
                    format!(
                        "FP8 weight without a scale: none of `{module}.scale`, \
                         `{module}.weight_scale_inv`, `{module}.weight_scale` exists"
                    ),
                ));
            }
        }
        Dtype::U8 | Dtype::I8 => {
            if !inp.is_multiple_of(2) {
                return Err(qerr(
                    module,
                    format!("packed FP4 needs an even in_features, got {inp}"),
                ));
            }
            want_shape(module, &weight, &[out, inp / 2], "two FP4 codes per byte")?;
            if let Some(s) = ws {
                let what = "one E4M3 scale per 16 inputs, linear layout";
                want_dtype(module, &s, &[Dtype::F8E4M3], what)?;
                want_shape(module, &s, &[out, inp / NVFP4_BLOCK], what)?;
                let s2 = ws2.ok_or_else(|| {
                    qerr(
                        module,
                        format!("NVFP4 weight without `{module}.weight_scale_2`"),
                    )
                })?;
                scalar(module, &s2)?;
                p.format = Format::Nvfp4;
                p.scale = Some(s);
                p.scale_2 = Some(s2);
            } else if let Some(s) = scale {
                let what = "one E8M0 scale per 32 inputs";
                want_dtype(module, &s, &[Dtype::F8E8M0, Dtype::U8], what)?;
                want_shape(module, &s, &[out, inp / MX_BLOCK], what)?;
                p.format = Format::Mxfp4;
                p.scale = Some(s);
            } else {
                return Err(qerr(
                    module,
                    format!(
                        "packed FP4 weight without scales: neither `{module}.weight_scale` \
                         (NVFP4) nor `{module}.scale` (MXFP4) exists"
                    ),
                ));
            }
        }
        other => {
            return Err(EngineError::UnsupportedDtype {
                name: weight.name.to_string(),
                dtype: other.to_string(),
                message: "linear weights are F32/BF16/F16, F8_E4M3 or packed FP4 (U8/I8)".into(),
            });
        }
    }
    if let Some(t) = &p.input_scale {
        scalar(module, t)?;
    }
    Ok(p)
}

/// Probes `module` and checks the format against what `qc` allows for it.
pub fn probe_checked<'a>(
    ck: &'a Checkpoint,
    qc: &QuantConfig,
    module: &str,
    out: usize,
    inp: usize,
) -> Result<Probe<'a>> {
    let p = probe(ck, module, out, inp)?;
    let e = qc.expect(module);
    if !e.allowed.contains(&p.format.kind()) {
        let allowed: Vec<&str> = e.allowed.iter().map(|k| k.name()).collect();
        return Err(qerr(
            module,
            format!(
                "stored as {}, but {} allows only {}",
                p.format,
                e.why,
                allowed.join(" or ")
            ),
        ));
    }
    if e.input_scale_required && p.input_scale.is_none() {
        return Err(qerr(
            module,
            format!(
                "{} (W4A4) requires the activation scale `{module}.input_scale`",
                e.why
            ),
        ));
    }
    Ok(p)
}

/// Copies a probed module into a [`Linear`], keeping quantized data packed.
pub fn load(module: &str, p: &Probe<'_>, out: usize, inp: usize) -> Result<Linear> {
    let input_scale = p.input_scale.map(|t| scalar(module, &t)).transpose()?;
    let bytes = |t: Option<TensorRef<'_>>| t.map(|t| t.bytes.to_vec()).unwrap_or_default();
    let codes = p.weight.bytes.to_vec();
    let q = match p.format {
        Format::F32 | Format::Bf16 | Format::F16 => {
            return Linear::from_tensor(p.weight, out, inp);
        }
        Format::Fp8BlockE8m0 => QuantWeight::Fp8Block(Fp8Block::from_parts(
            module,
            out,
            inp,
            codes,
            BlockScales::E8m0(bytes(p.scale)),
        )?),
        Format::Fp8BlockF32 => {
            let s = p.scale.map(|t| t.to_f32()).transpose()?.unwrap_or_default();
            QuantWeight::Fp8Block(Fp8Block::from_parts(
                module,
                out,
                inp,
                codes,
                BlockScales::F32(s),
            )?)
        }
        Format::Fp8Tensor => {
            let s = p
                .scale
                .map(|t| scalar(module, &t))
                .transpose()?
                .unwrap_or(0.0);
            QuantWeight::Fp8Tensor(Fp8Tensor::from_parts(
                module,
                out,
                inp,
                codes,
                s,
                input_scale,
            )?)
        }
        Format::Nvfp4 => {
            let s2 = p
                .scale_2
                .map(|t| scalar(module, &t))
                .transpose()?
                .unwrap_or(0.0);
            QuantWeight::Nvfp4(Nvfp4::from_parts(
                module,
                out,
                inp,
                codes,
                bytes(p.scale),
                s2,
                input_scale,
            )?)
        }
        Format::Mxfp4 => {
            QuantWeight::Mxfp4(Mxfp4::from_parts(module, out, inp, codes, bytes(p.scale))?)
        }
    };
    Ok(Linear::from_quant(q))
}

/// Probes, checks against the config and loads one linear module.
pub fn load_linear(
    ck: &Checkpoint,
    qc: &QuantConfig,
    module: &str,
    out: usize,
    inp: usize,
) -> Result<Linear> {
    let p = probe_checked(ck, qc, module, out, inp)?;
    load(module, &p, out, inp)
}
