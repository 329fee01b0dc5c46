//! `amdahl quantize`: converts a dense DeepSeek-V4 checkpoint into one quantized format — names,
//! dtypes, scale rounding and declaring configs as model-spec §5 gives them — and the inverse,
//! dequantizing any supported checkpoint into a dense f32 twin. Tensors are converted one at a
//! time and written in shards; only the calibration pass (for static activation scales) loads
//! the model.

mod calibrate;
mod declare;
mod plan;
mod shards;

pub use plan::{Plan, QuantizeFormat, Target};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::checkpoint::{Checkpoint, Dtype, OwnedTensor};
use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::quant::load::{SCALE_SUFFIXES, load, probe_checked};
use crate::quant::mxfp4::MX_BLOCK;
use crate::quant::{
    Format, Fp8Block, Fp8Tensor, Mxfp4, Nvfp4, QuantConfig, QuantWeight, e2m1, e4m3, store,
};
use shards::Shards;

use super::modules::linear_modules;

/// Knobs of a conversion.
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    /// Random tokens run through the dense model to calibrate static activation scales.
    pub calib_tokens: usize,
    pub seed: u64,
    /// Largest shard written, in bytes.
    pub shard_bytes: usize,
}

impl Default for QuantizeOptions {
    fn default() -> Self {
        Self {
            calib_tokens: 64,
            seed: 0,
            shard_bytes: 4 << 30,
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone, Default)]
pub struct QuantizeSummary {
    /// Modules converted, per target.
    pub converted: BTreeMap<String, usize>,
    pub bytes_in: usize,
    pub bytes_out: usize,
    pub files: Vec<PathBuf>,
}

fn read_config(dir: &Path) -> Result<Map<String, Value>> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| EngineError::io(&path, e))?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(EngineError::config(
            "config.json",
            "<root>",
            "expected a JSON object",
        )),
    }
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| EngineError::InvalidInput(format!("serializing {}: {e}", path.display())))?;
    std::fs::write(path, text + "\n").map_err(|e| EngineError::io(path, e))
}

/// Copies tokenizer and generation files (everything but weights and quantization configs).
fn copy_side_files(input: &Path, output: &Path) -> Result<()> {
    let skip = [
        "config.json",
        "hf_quant_config.json",
        "model.safetensors.index.json",
    ];
    let rd = std::fs::read_dir(input).map_err(|e| EngineError::io(input, e))?;
    for entry in rd.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if !path.is_file() || name.ends_with(".safetensors") || skip.contains(&name.as_str()) {
            continue;
        }
        std::fs::copy(&path, output.join(&name)).map_err(|e| EngineError::io(&path, e))?;
    }
    Ok(())
}

fn prepare_output(input: &Path, output: &Path) -> Result<()> {
    if input.canonicalize().ok() == output.canonicalize().ok() {
        return Err(EngineError::InvalidInput(
            "--out must differ from --in".into(),
        ));
    }
    std::fs::create_dir_all(output).map_err(|e| EngineError::io(output, e))?;
    let rd = std::fs::read_dir(output).map_err(|e| EngineError::io(output, e))?;
    if let Some(f) = rd
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
    {
        return Err(EngineError::InvalidInput(format!(
            "output folder {} already holds {}; use an empty folder",
            output.display(),
            f.file_name().to_string_lossy()
        )));
    }
    Ok(())
}

/// One quantized routed expert of a gpt-oss fused layer: (w1, w3, w2).
type FusedExpert = [Option<Mxfp4>; 3];

/// The four gpt-oss tensors of one layer's experts, in expert order.
fn fused_tensors(prefix: &str, experts: &[FusedExpert]) -> Result<Vec<OwnedTensor>> {
    let missing = || EngineError::Quantization {
        module: prefix.to_string(),
        message: "an expert lacks w1, w2 or w3; gpt-oss fusion needs all three".into(),
    };
    let e = experts.len();
    let mut out = Vec::new();
    for (name, parts) in [("gate_up_proj", &[0usize, 1][..]), ("down_proj", &[2][..])] {
        let (mut blocks, mut scales) = (Vec::new(), Vec::new());
        let (mut rows, mut cols) = (0, 0);
        for ex in experts {
            rows = 0;
            for &p in parts {
                let q = ex[p].as_ref().ok_or_else(missing)?;
                blocks.extend_from_slice(&q.packed);
                scales.extend_from_slice(&q.scales);
                rows += q.rows;
                cols = q.cols;
            }
        }
        let nb = cols / MX_BLOCK;
        out.push(OwnedTensor {
            name: format!("{prefix}.{name}_blocks"),
            dtype: Dtype::U8,
            shape: vec![e, rows, nb, MX_BLOCK / 2],
            data: blocks,
        });
        out.push(OwnedTensor {
            name: format!("{prefix}.{name}_scales"),
            dtype: Dtype::U8,
            shape: vec![e, rows, nb],
            data: scales,
        });
    }
    Ok(out)
}

/// Converts the dense checkpoint in `input` into `output` following `plan`.
pub fn quantize_dir(
    input: &Path,
    output: &Path,
    plan: &Plan,
    opts: &QuantizeOptions,
) -> Result<QuantizeSummary> {
    let cfg = ModelConfig::from_path(input)?;
    plan.validate(&cfg)?;
    if QuantConfig::from_dir(input)? != QuantConfig::default() {
        return Err(EngineError::InvalidInput(format!(
            "{} is already quantized (it has a quantization config); quantize takes a dense \
             checkpoint (dequantize it first with --format f32)",
            input.display()
        )));
    }
    prepare_output(input, output)?;
    let ck = Checkpoint::open(input)?;
    let static_scaled: BTreeSet<String> = plan
        .targets
        .iter()
        .filter(|(_, t)| matches!(t, Target::Nvfp4 | Target::Fp8Tensor))
        .map(|(m, _)| m.clone())
        .collect();
    let amax = if static_scaled.is_empty() {
        BTreeMap::new()
    } else {
        calibrate::input_amax(input, &static_scaled, opts.calib_tokens, opts.seed)?
    };
    let mut summary = QuantizeSummary::default();
    let mut shards = Shards::new(output, opts.shard_bytes);
    let mut fused: BTreeMap<String, BTreeMap<usize, FusedExpert>> = BTreeMap::new();
    for name in ck.names() {
        let t = ck.get(name)?;
        summary.bytes_in += t.bytes.len();
        let module = name.strip_suffix(".weight");
        let Some((m, &target)) = module.and_then(|m| plan.targets.get_key_value(m)) else {
            shards.push(OwnedTensor {
                name: name.to_string(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                data: t.bytes.to_vec(),
            })?;
            continue;
        };
        let [rows, cols] = t.shape[..] else {
            return Err(EngineError::BadTensor {
                name: name.to_string(),
                message: format!("a linear weight must be 2-D, found {:?}", t.shape),
            });
        };
        if !matches!(t.dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16 | Dtype::F64) {
            return Err(EngineError::UnsupportedDtype {
                name: name.to_string(),
                dtype: t.dtype.to_string(),
                message: "quantize takes dense weights".into(),
            });
        }
        let w = t.to_f32()?;
        let act = amax.get(m).copied().unwrap_or(0.0);
        let act_scale = |fmax: f32| Some(if act > 0.0 { act / fmax } else { 1.0 });
        let q = match target {
            Target::Fp8Block { e8m0 } => {
                QuantWeight::Fp8Block(Fp8Block::quantize(m, &w, rows, cols, e8m0)?)
            }
            Target::Fp8Tensor => QuantWeight::Fp8Tensor(Fp8Tensor::quantize(
                m,
                &w,
                rows,
                cols,
                act_scale(e4m3::E4M3_MAX),
            )?),
            Target::Nvfp4 => QuantWeight::Nvfp4(Nvfp4::quantize(
                m,
                &w,
                rows,
                cols,
                act_scale(e2m1::E2M1_MAX * e4m3::E4M3_MAX),
            )?),
            Target::Mxfp4Native => QuantWeight::Mxfp4(Mxfp4::quantize(m, &w, rows, cols)?),
            Target::Mxfp4Fused => {
                let q = Mxfp4::quantize(m, &w, rows, cols)?;
                let (prefix, rest) =
                    m.split_once(".experts.")
                        .ok_or_else(|| EngineError::Quantization {
                            module: m.to_string(),
                            message: "not a routed expert".into(),
                        })?;
                let (idx, proj) = rest.split_once('.').unwrap_or((rest, ""));
                let idx: usize = idx.parse().map_err(|_| EngineError::Quantization {
                    module: m.to_string(),
                    message: "expert index is not a number".into(),
                })?;
                let slot = match proj {
                    "w1" => 0,
                    "w3" => 1,
                    _ => 2,
                };
                fused
                    .entry(format!("{prefix}.experts"))
                    .or_default()
                    .entry(idx)
                    .or_default()[slot] = Some(q);
                *summary
                    .converted
                    .entry(target.label().to_string())
                    .or_default() += 1;
                continue;
            }
        };
        *summary
            .converted
            .entry(target.label().to_string())
            .or_default() += 1;
        for t in store::tensors(m, &q) {
            shards.push(t)?;
        }
    }
    for (prefix, experts) in fused {
        let list: Vec<FusedExpert> = experts.into_values().collect();
        for t in fused_tensors(&prefix, &list)? {
            shards.push(t)?;
        }
    }
    let (files, bytes) = shards.finish()?;
    summary.files = files;
    summary.bytes_out = bytes;
    let mut config = read_config(input)?;
    if let Some(hf) = declare::declare(&cfg, plan, &mut config) {
        write_json(&output.join("hf_quant_config.json"), &hf)?;
    }
    write_json(&output.join("config.json"), &Value::Object(config))?;
    copy_side_files(input, output)?;
    Ok(summary)
}

/// The dtype a dense twin's linears are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseDtype {
    /// Exactly the values the CPU forward computes with.
    F32,
    /// Quantized modules rounded to nearest-even bf16 (dense modules keep their dtype): exact
    /// for formats whose scales are powers of two (E8M0: DeepSeek FP8/FP4, MXFP4), whose
    /// dequantized values have at most 4 significant bits; NVFP4 and f32-scaled FP8 values are
    /// rounded.
    Bf16,
}

/// Writes a dense f32 twin of any checkpoint we can load: every linear dequantized exactly as
/// the CPU forward does, every other tensor copied, quantization configs dropped.
pub fn dequantize_dir(input: &Path, output: &Path, shard_bytes: usize) -> Result<QuantizeSummary> {
    dequantize_dir_as(input, output, shard_bytes, DenseDtype::F32)
}

/// [`dequantize_dir`] with the linears written in `dtype`.
pub fn dequantize_dir_as(
    input: &Path,
    output: &Path,
    shard_bytes: usize,
    dtype: DenseDtype,
) -> Result<QuantizeSummary> {
    let cfg = ModelConfig::from_path(input)?;
    let qc = QuantConfig::from_dir(input)?;
    prepare_output(input, output)?;
    let ck = Checkpoint::open(input)?;
    let mut summary = QuantizeSummary::default();
    let mut shards = Shards::new(output, shard_bytes);
    let mut done: BTreeSet<String> = BTreeSet::new();
    for m in linear_modules(&cfg) {
        if !ck.contains(&format!("{}.weight", m.name)) {
            continue;
        }
        let p = probe_checked(&ck, &qc, &m.name, m.out, m.inp)?;
        summary.bytes_in += p.bytes();
        let lin = load(&m.name, &p, m.out, m.inp)?;
        let mut w = Vec::with_capacity(m.out * m.inp);
        for r in 0..m.out {
            w.extend_from_slice(&lin.row(r));
        }
        *summary.converted.entry(p.format.to_string()).or_default() += 1;
        let name = format!("{}.weight", m.name);
        let stored_dense = matches!(p.format, Format::F32 | Format::Bf16 | Format::F16);
        shards.push(match dtype {
            DenseDtype::F32 => OwnedTensor::f32(&name, &[m.out, m.inp], &w),
            // A module that was not quantized keeps its stored dtype: only quantized modules
            // are rounded to bf16.
            DenseDtype::Bf16 if stored_dense => OwnedTensor {
                name,
                dtype: p.weight.dtype,
                shape: p.weight.shape.to_vec(),
                data: p.weight.bytes.to_vec(),
            },
            DenseDtype::Bf16 => OwnedTensor {
                name,
                dtype: Dtype::BF16,
                shape: vec![m.out, m.inp],
                data: w
                    .iter()
                    .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
                    .collect(),
            },
        })?;
        done.insert(format!("{}.weight", m.name));
        for s in SCALE_SUFFIXES {
            done.insert(format!("{}.{s}", m.name));
        }
    }
    for name in ck.names() {
        if done.contains(name) {
            continue;
        }
        let t = ck.get(name)?;
        summary.bytes_in += t.bytes.len();
        shards.push(OwnedTensor {
            name: name.to_string(),
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            data: t.bytes.to_vec(),
        })?;
    }
    let (files, bytes) = shards.finish()?;
    summary.files = files;
    summary.bytes_out = bytes;
    let mut config = read_config(input)?;
    config.remove("quantization_config");
    config.remove("expert_dtype");
    write_json(&output.join("config.json"), &Value::Object(config))?;
    copy_side_files(input, output)?;
    Ok(summary)
}

#[cfg(test)]
mod tests;
