//! A ModelOpt MIXED_PRECISION checkpoint over a DeepSeek FP8 base — routed experts NVFP4, shared
//! experts ModelOpt FP8, attention FP8 blocks, and excluded layers (layer 1's experts and layer
//! 2's attention) left dense — loads, resolves wildcard and transformers-spelled patterns, and
//! generates exactly what its dequantized twin generates.

use serde_json::{Value, json};

use super::*;
use crate::model::deepseek_v4::modules::linear_modules;
use crate::model::deepseek_v4::quantize::{Target, dequantize_dir};
use crate::quant::{Format, Role};

fn mixed_plan(cfg: &crate::config::ModelConfig) -> Plan {
    let mut plan = Plan::default();
    for m in linear_modules(cfg) {
        let layer = m.layer.unwrap_or(usize::MAX);
        let t = match m.role() {
            Role::RoutedExpert if layer != 1 => Some(Target::Nvfp4),
            Role::SharedExpert => Some(Target::Fp8Tensor),
            Role::Attention if layer != 2 => Some(Target::Fp8Block { e8m0: true }),
            _ => None,
        };
        if let Some(t) = t {
            plan.targets.insert(m.name, t);
        }
    }
    plan
}

fn write_hf_quant(dir: &Path, quantization: Value) {
    let v = json!({"producer": {"name": "modelopt", "version": "0.23.0"}, "quantization": quantization});
    std::fs::write(dir.join("hf_quant_config.json"), v.to_string()).unwrap();
}

fn format_of(m: &mut DeepseekV4, module: &str) -> Format {
    let mut f = None;
    m.weights.for_each_linear(&mut |name, lin| {
        if name == module {
            f = Some(lin.data.format());
        }
    });
    f.unwrap()
}

#[test]
fn mixed_precision_with_excluded_layers_loads_and_generates() {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    let s = spec();
    s.write(&dense, 8).unwrap();
    let cfg = crate::config::ModelConfig::from_path(&dense).unwrap();
    let out = root.path().join("mixed");
    quantize_dir(&dense, &out, &mixed_plan(&cfg), &opts()).unwrap();
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("hf_quant_config.json")).unwrap())
            .unwrap();
    assert_eq!(written["quantization"]["quant_algo"], "MIXED_PRECISION");
    assert_eq!(
        written["quantization"]["quantized_layers"]["layers.0.ffn.experts.3.w2"]["quant_algo"],
        "NVFP4"
    );
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["quantization_config"]["quant_method"], "fp8");

    // Rewrite the declaration with wildcards in both spellings, as exporters write them.
    write_hf_quant(
        &out,
        json!({"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": null,
            "exclude_modules": ["lm_head", "model.layers.*.self_attn*", "layers.*.ffn.gate",
                "model.layers.1.mlp.experts.*"],
            "quantized_layers": {
                "model.layers.0.mlp.experts.*": {"quant_algo": "NVFP4", "group_size": 16},
                "layers.2.ffn.experts.*": {"quant_algo": "NVFP4", "group_size": 16},
                "model.layers.*.mlp.shared_experts.*": {"quant_algo": "FP8"}}}),
    );
    let mut m = DeepseekV4::load(&out).unwrap();
    assert_eq!(
        format_of(&mut m, "layers.0.ffn.experts.4.w1"),
        Format::Nvfp4
    );
    assert_eq!(format_of(&mut m, "layers.1.ffn.experts.4.w1"), Format::F32);
    assert_eq!(
        format_of(&mut m, "layers.1.ffn.shared_experts.w2"),
        Format::Fp8Tensor
    );
    assert_eq!(
        format_of(&mut m, "layers.0.attn.wq_a"),
        Format::Fp8BlockE8m0
    );
    assert_eq!(format_of(&mut m, "layers.2.attn.wq_a"), Format::F32);
    assert_eq!(format_of(&mut m, "head"), Format::F32);

    let twin_dir = root.path().join("twin");
    dequantize_dir(&out, &twin_dir, 1 << 20).unwrap();
    let twin = DeepseekV4::load(&twin_dir).unwrap();
    let prompt = tokens(s.vocab, 12, 9);
    let generated = m.generate_greedy(&prompt, 10).unwrap();
    assert!(!generated.is_empty());
    assert_eq!(generated, twin.generate_greedy(&prompt, 10).unwrap());
    let same = distance(&logits(&m, &prompt), &logits(&twin, &prompt));
    assert!(same.rel_max <= 1e-6, "{same:?}");

    // Declaring layer 1's (dense) experts NVFP4 is refused, naming the module and both sides.
    write_hf_quant(
        &out,
        json!({"quant_algo": "MIXED_PRECISION",
            "exclude_modules": ["model.layers.*.self_attn*", "lm_head", "layers.*.ffn.gate"],
            "quantized_layers": {"model.layers.*.mlp.experts.*": "NVFP4",
                "model.layers.*.mlp.shared_experts.*": "FP8"}}),
    );
    let err = DeepseekV4::load(&out).unwrap_err().to_string();
    assert!(
        err.contains("layers.1.ffn.experts.0.w1")
            && err.contains("stored as f32")
            && err.contains("NVFP4"),
        "{err}"
    );
}
