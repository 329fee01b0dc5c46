//! Quantization configs, as checkpoints declare them (model-spec §5): `config.json`
//! `quantization_config` with `quant_method` `fp8` (DeepSeek 128×128 blocks), `modelopt`
//! (NVIDIA ModelOpt: `quant_algo`, `ignore`, `quantized_layers`) or `mxfp4` (gpt-oss), the
//! top-level `expert_dtype: "fp4"` (DeepSeek-V4 FP4 experts), and ModelOpt's
//! `hf_quant_config.json`. A DeepSeek `fp8` config and a ModelOpt file may coexist: ModelOpt
//! then overrides the modules it quantizes and the rest keep the DeepSeek base format. Every
//! field is validated here; a malformed config is an error naming the file and the field.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{EngineError, Result};

/// The format a DeepSeek-style (or absent) config gives every linear layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// No quantization: every weight is BF16/F16/F32.
    Dense,
    /// `quant_method: fp8`: FP8 weights carry 128×128 block scales (E8M0 when `scale_fmt` is
    /// `ue8m0`); layers stored in BF16 stay BF16. `exclude` = `modules_to_not_convert`.
    Fp8Block { ue8m0: bool, exclude: Vec<String> },
}

/// A ModelOpt algorithm for one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// W4A4 NVFP4 (weights and a static `input_scale`).
    Nvfp4,
    /// Weight-only NVFP4.
    W4a16Nvfp4,
    /// Per-tensor FP8.
    Fp8,
}

impl Algo {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "NVFP4" => Algo::Nvfp4,
            "W4A16_NVFP4" => Algo::W4a16Nvfp4,
            "FP8" => Algo::Fp8,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Algo::Nvfp4 => "NVFP4",
            Algo::W4a16Nvfp4 => "W4A16_NVFP4",
            Algo::Fp8 => "FP8",
        }
    }
}

/// The ModelOpt part of a config.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOpt {
    /// Where it was read (`hf_quant_config.json` or `config.json quantization_config`).
    pub file: String,
    /// `None` for `MIXED_PRECISION` (per-module algos in `layers`).
    pub algo: Option<Algo>,
    /// `exclude_modules` / `ignore` patterns (fnmatch-style wildcards).
    pub exclude: Vec<String>,
    /// `quantized_layers` of a `MIXED_PRECISION` config: module (or pattern) → algo.
    pub layers: Vec<(String, Algo)>,
    pub kv_cache_quant_algo: Option<String>,
}

/// Everything a checkpoint declares about its quantization.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantConfig {
    pub base: Base,
    /// `expert_dtype: "fp4"`: routed experts are DeepSeek FP4 (MXFP4 layout).
    pub expert_fp4: bool,
    pub modelopt: Option<ModelOpt>,
    /// gpt-oss `quant_method: mxfp4`: routed experts are MXFP4 `_blocks`/`_scales`, except the
    /// `modules_to_not_convert` patterns held here.
    pub mxfp4: Option<Vec<String>>,
}

impl Default for QuantConfig {
    fn default() -> Self {
        Self {
            base: Base::Dense,
            expert_fp4: false,
            modelopt: None,
            mxfp4: None,
        }
    }
}

fn cerr(file: &str, field: &str, message: impl Into<String>) -> EngineError {
    EngineError::config(file, field, message)
}

fn strings(file: &str, field: &str, v: Option<&Value>) -> Result<Vec<String>> {
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_str().map(str::to_string).ok_or_else(|| {
                    cerr(
                        file,
                        &format!("{field}[{i}]"),
                        format!("expected a string, got {s}"),
                    )
                })
            })
            .collect(),
        Some(other) => Err(cerr(
            file,
            field,
            format!("expected a list of module names, got {other}"),
        )),
    }
}

fn opt_str<'a>(file: &str, field: &str, v: Option<&'a Value>) -> Result<Option<&'a str>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(cerr(file, field, format!("expected a string, got {other}"))),
    }
}

fn check_group_size(file: &str, field: &str, v: Option<&Value>, algo: Algo) -> Result<()> {
    if let Some(v) = v.filter(|v| !v.is_null())
        && matches!(algo, Algo::Nvfp4 | Algo::W4a16Nvfp4)
        && v.as_u64() != Some(16)
    {
        return Err(cerr(
            file,
            field,
            format!("NVFP4 uses groups of 16 elements, got {v}"),
        ));
    }
    Ok(())
}

/// Parses a ModelOpt `quantization` object (from either file).
fn parse_modelopt(file: &str, prefix: &str, q: &Map<String, Value>) -> Result<Option<ModelOpt>> {
    let f = |name: &str| format!("{prefix}{name}");
    let algo_s = opt_str(file, &f("quant_algo"), q.get("quant_algo"))?;
    let kv = match q.get("kv_cache_quant_algo").or(q.get("kv_cache_scheme")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    let Some(algo_s) = algo_s else {
        // Only KV-cache quantization (or nothing): weights are untouched.
        return Ok(None);
    };
    let exclude = match (q.get("exclude_modules"), q.get("ignore")) {
        (Some(v), _) if !v.is_null() => strings(file, &f("exclude_modules"), Some(v))?,
        (_, v) => strings(file, &f("ignore"), v)?,
    };
    let mut layers = Vec::new();
    let algo = if algo_s == "MIXED_PRECISION" {
        let field = f("quantized_layers");
        let map = q
            .get("quantized_layers")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                cerr(
                    file,
                    &field,
                    "MIXED_PRECISION needs a `quantized_layers` object of module → algo",
                )
            })?;
        for (module, spec) in map {
            let at = format!("{field}.{module}");
            let (name, group) = match spec {
                Value::String(s) => (s.as_str(), None),
                Value::Object(o) => (
                    opt_str(file, &format!("{at}.quant_algo"), o.get("quant_algo"))?
                        .ok_or_else(|| cerr(file, &format!("{at}.quant_algo"), "missing"))?,
                    o.get("group_size"),
                ),
                other => {
                    return Err(cerr(
                        file,
                        &at,
                        format!("expected {{\"quant_algo\": …}} or an algo name, got {other}"),
                    ));
                }
            };
            let algo = Algo::parse(name).ok_or_else(|| {
                cerr(
                    file,
                    &format!("{at}.quant_algo"),
                    format!("`{name}` is not supported per module (NVFP4, W4A16_NVFP4, FP8)"),
                )
            })?;
            check_group_size(file, &format!("{at}.group_size"), group, algo)?;
            layers.push((module.clone(), algo));
        }
        None
    } else {
        let algo = Algo::parse(algo_s).ok_or_else(|| {
            cerr(
                file,
                &f("quant_algo"),
                format!("`{algo_s}` is not supported (NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION)"),
            )
        })?;
        check_group_size(file, &f("group_size"), q.get("group_size"), algo)?;
        Some(algo)
    };
    Ok(Some(ModelOpt {
        file: file.to_string(),
        algo,
        exclude,
        layers,
        kv_cache_quant_algo: kv,
    }))
}

impl QuantConfig {
    /// Reads `config.json` and `hf_quant_config.json` from a model folder (either may be
    /// absent: no config means a dense checkpoint).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let read = |name: &str| -> Result<Option<Value>> {
            let path = dir.join(name);
            if !path.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&path).map_err(|e| EngineError::io(&path, e))?;
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| cerr(name, "<json>", format!("not valid JSON: {e}")))
        };
        Self::from_json(
            read("config.json")?.as_ref(),
            read("hf_quant_config.json")?.as_ref(),
        )
    }

    /// Interprets the parsed `config.json` and `hf_quant_config.json`.
    pub fn from_json(config: Option<&Value>, hf_quant: Option<&Value>) -> Result<Self> {
        let mut qc = QuantConfig::default();
        let cfile = "config.json";
        if let Some(cfg) = config {
            match opt_str(cfile, "expert_dtype", cfg.get("expert_dtype"))? {
                None | Some("bf16") | Some("fp8") => {}
                Some("fp4") => qc.expert_fp4 = true,
                Some(other) => {
                    return Err(cerr(
                        cfile,
                        "expert_dtype",
                        format!("`{other}` is not one of fp4, fp8, bf16"),
                    ));
                }
            }
            if let Some(q) = cfg.get("quantization_config").filter(|v| !v.is_null()) {
                qc.read_quantization_config(q)?;
            }
        }
        if let Some(h) = hf_quant {
            let file = "hf_quant_config.json";
            let q = h
                .get("quantization")
                .and_then(Value::as_object)
                .ok_or_else(|| cerr(file, "quantization", "missing or not an object"))?;
            let mo = parse_modelopt(file, "quantization.", q)?;
            match (&qc.modelopt, mo) {
                (Some(a), Some(b)) if a.algo != b.algo || a.layers != b.layers => {
                    return Err(cerr(
                        file,
                        "quantization.quant_algo",
                        format!(
                            "disagrees with config.json quantization_config ({} vs {})",
                            b.algo.map_or("MIXED_PRECISION", Algo::name),
                            a.algo.map_or("MIXED_PRECISION", Algo::name)
                        ),
                    ));
                }
                (Some(_), _) => {}
                (None, mo) => qc.modelopt = mo,
            }
        }
        if qc.mxfp4.is_some() && qc.expert_fp4 {
            return Err(cerr(
                cfile,
                "expert_dtype",
                "`fp4` (DeepSeek experts) conflicts with quant_method `mxfp4` (gpt-oss experts)",
            ));
        }
        Ok(qc)
    }

    fn read_quantization_config(&mut self, q: &Value) -> Result<()> {
        let file = "config.json";
        let field = |n: &str| format!("quantization_config.{n}");
        let obj = q
            .as_object()
            .ok_or_else(|| cerr(file, "quantization_config", "expected an object"))?;
        let method = opt_str(file, &field("quant_method"), obj.get("quant_method"))?
            .ok_or_else(|| cerr(file, &field("quant_method"), "missing"))?;
        match method {
            "fp8" => {
                if let Some(fmt) = opt_str(file, &field("fmt"), obj.get("fmt"))?
                    && fmt != "e4m3"
                {
                    return Err(cerr(file, &field("fmt"), format!("`{fmt}` is not e4m3")));
                }
                if let Some(b) = obj.get("weight_block_size").filter(|v| !v.is_null()) {
                    let ok = b
                        .as_array()
                        .is_some_and(|a| a.len() == 2 && a.iter().all(|x| x.as_u64() == Some(128)));
                    if !ok {
                        return Err(cerr(
                            file,
                            &field("weight_block_size"),
                            format!("expected [128, 128], got {b}"),
                        ));
                    }
                }
                let ue8m0 = match opt_str(file, &field("scale_fmt"), obj.get("scale_fmt"))? {
                    None => false,
                    Some("ue8m0") => true,
                    Some(other) => {
                        return Err(cerr(
                            file,
                            &field("scale_fmt"),
                            format!("`{other}` is not ue8m0 (omit it for f32 scales)"),
                        ));
                    }
                };
                let exclude = strings(
                    file,
                    &field("modules_to_not_convert"),
                    obj.get("modules_to_not_convert"),
                )?;
                self.base = Base::Fp8Block { ue8m0, exclude };
            }
            "modelopt" => {
                self.modelopt = parse_modelopt(file, "quantization_config.", obj)?;
            }
            "mxfp4" => {
                self.mxfp4 = Some(strings(
                    file,
                    &field("modules_to_not_convert"),
                    obj.get("modules_to_not_convert"),
                )?);
            }
            other => {
                return Err(cerr(
                    file,
                    &field("quant_method"),
                    format!("`{other}` is not supported (fp8, modelopt, mxfp4)"),
                ));
            }
        }
        Ok(())
    }
}

impl QuantConfig {
    /// One line describing what the configs declare.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match &self.base {
            Base::Dense => {}
            Base::Fp8Block { ue8m0, exclude } => parts.push(format!(
                "quant_method fp8 (128×128 blocks, {} scales{})",
                if *ue8m0 { "ue8m0" } else { "f32" },
                if exclude.is_empty() {
                    String::new()
                } else {
                    format!(", {} excluded patterns", exclude.len())
                }
            )),
        }
        if self.expert_fp4 {
            parts.push("expert_dtype fp4".into());
        }
        if let Some(ex) = &self.mxfp4 {
            parts.push(format!(
                "quant_method mxfp4 (routed experts; {} excluded patterns)",
                ex.len()
            ));
        }
        if let Some(mo) = &self.modelopt {
            parts.push(format!(
                "ModelOpt {} from {} ({} excluded patterns{}{})",
                mo.algo.map_or("MIXED_PRECISION", Algo::name),
                mo.file,
                mo.exclude.len(),
                if mo.layers.is_empty() {
                    String::new()
                } else {
                    format!(", {} quantized_layers entries", mo.layers.len())
                },
                mo.kv_cache_quant_algo
                    .as_ref()
                    .map(|k| format!(", kv cache {k}"))
                    .unwrap_or_default()
            ));
        }
        if parts.is_empty() {
            "none (dense)".into()
        } else {
            parts.join("; ")
        }
    }
}
