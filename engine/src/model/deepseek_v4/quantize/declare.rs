//! The config files that declare a quantized checkpoint, derived from its plan (model-spec §5):
//! - FP8 blocks → `config.json` `quantization_config` {quant_method fp8, fmt e4m3,
//!   scale_fmt ue8m0 (E8M0 scales only), weight_block_size [128, 128], activation_scheme dynamic};
//! - DeepSeek FP4 experts → `config.json` `expert_dtype: "fp4"`;
//! - gpt-oss experts → `config.json` `quantization_config` {quant_method mxfp4,
//!   modules_to_not_convert};
//! - NVFP4 / ModelOpt FP8 → `hf_quant_config.json` {producer, quantization {quant_algo NVFP4 |
//!   FP8 | MIXED_PRECISION (+ quantized_layers), group_size 16, kv_cache_quant_algo null,
//!   exclude_modules}}, mirrored into `config.json` `quantization_config` {quant_method modelopt,
//!   …, ignore} when no DeepSeek FP8 config already occupies that key.
//!
//! Excluded modules are listed by exact official name: every linear the plan leaves alone.

use serde_json::{Map, Value, json};

use crate::config::ModelConfig;
use crate::quant::Role;

use super::super::modules::linear_modules;
use super::plan::{Plan, Target};

/// Rewrites `config` (the input config.json) for the plan; returns the hf_quant_config.json to
/// write, if any.
pub fn declare(cfg: &ModelConfig, plan: &Plan, config: &mut Map<String, Value>) -> Option<Value> {
    config.remove("quantization_config");
    config.remove("expert_dtype");
    if let Some(&Target::Fp8Block { e8m0 }) = plan
        .targets
        .values()
        .find(|t| matches!(t, Target::Fp8Block { .. }))
    {
        let mut q = json!({
            "quant_method": "fp8",
            "fmt": "e4m3",
            "weight_block_size": [128, 128],
            "activation_scheme": "dynamic",
        });
        if e8m0 {
            q["scale_fmt"] = json!("ue8m0");
        }
        config.insert("quantization_config".into(), q);
    }
    if plan.has(|t| t == Target::Mxfp4Native) {
        config.insert("expert_dtype".into(), json!("fp4"));
    }
    if plan.has(|t| t == Target::Mxfp4Fused) {
        config.insert(
            "quantization_config".into(),
            json!({
                "quant_method": "mxfp4",
                "modules_to_not_convert": [
                    "embed", "head", "layers.*.attn.*", "layers.*.ffn.gate",
                    "layers.*.ffn.shared_experts.*",
                ],
            }),
        );
    }
    let nv = plan.has(|t| t == Target::Nvfp4);
    let fp8t = plan.has(|t| t == Target::Fp8Tensor);
    if !nv && !fp8t {
        return None;
    }
    let modelopt = |t: &Target| matches!(t, Target::Nvfp4 | Target::Fp8Tensor);
    let exclude: Vec<String> = linear_modules(cfg)
        .into_iter()
        .filter(|m| m.role() != Role::Embedding)
        .filter(|m| !plan.targets.get(&m.name).is_some_and(modelopt))
        .map(|m| m.name)
        .collect();
    let mut q = json!({
        "quant_algo": if nv && fp8t { "MIXED_PRECISION" } else if nv { "NVFP4" } else { "FP8" },
        "kv_cache_quant_algo": null,
        "exclude_modules": exclude,
    });
    if nv {
        q["group_size"] = json!(16);
    }
    if nv && fp8t {
        let layers: Map<String, Value> = plan
            .targets
            .iter()
            .filter_map(|(m, t)| match t {
                Target::Nvfp4 => {
                    Some((m.clone(), json!({"quant_algo": "NVFP4", "group_size": 16})))
                }
                Target::Fp8Tensor => Some((m.clone(), json!({"quant_algo": "FP8"}))),
                _ => None,
            })
            .collect();
        q["quantized_layers"] = Value::Object(layers);
    }
    if !config.contains_key("quantization_config") {
        let mut inline = q.clone();
        if let Some(o) = inline.as_object_mut() {
            let ex = o.remove("exclude_modules").unwrap_or(Value::Null);
            o.insert("ignore".into(), ex);
            let kv = o.remove("kv_cache_quant_algo").unwrap_or(Value::Null);
            o.insert("kv_cache_scheme".into(), kv);
            o.insert("quant_method".into(), json!("modelopt"));
        }
        config.insert("quantization_config".into(), inline);
    }
    Some(json!({
        "producer": {"name": "amdahl", "version": env!("CARGO_PKG_VERSION")},
        "quantization": q,
    }))
}
