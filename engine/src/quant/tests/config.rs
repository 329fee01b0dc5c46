//! Quantization config detection, per-module resolution with wildcards, and precise errors for
//! malformed configs.

use serde_json::json;

use crate::checkpoint::names::canonical_name;
use crate::quant::config::{Algo, Base, QuantConfig};
use crate::quant::resolve::{glob, hf_spelling, pattern_matches};
use crate::quant::{Kind, Role};

fn qc(config: serde_json::Value, hf: Option<serde_json::Value>) -> QuantConfig {
    QuantConfig::from_json(Some(&config), hf.as_ref()).unwrap()
}

fn err(config: serde_json::Value, hf: Option<serde_json::Value>) -> String {
    QuantConfig::from_json(Some(&config), hf.as_ref())
        .unwrap_err()
        .to_string()
}

#[test]
fn glob_matches_like_fnmatch() {
    assert!(glob("lm_head", "lm_head"));
    assert!(!glob("lm_head", "lm_head2"));
    assert!(glob(
        "model.layers.*.self_attn*",
        "model.layers.30.self_attn.q_a_proj"
    ));
    assert!(glob("*experts*", "layers.1.ffn.experts.3.w1"));
    assert!(glob("layers.?.attn.*", "layers.7.attn.wkv"));
    assert!(!glob("layers.?.attn.*", "layers.17.attn.wkv"));
    assert!(glob("*", ""));
    assert!(!glob("a*b", "acbd"));
}

#[test]
fn hf_spelling_inverts_canonical_names() {
    let modules = [
        "layers.3.attn.wq_a",
        "layers.3.attn.wq_b",
        "layers.3.attn.wkv",
        "layers.3.attn.wo_a",
        "layers.3.attn.wo_b",
        "layers.3.attn.compressor.wkv",
        "layers.3.attn.compressor.wgate",
        "layers.3.attn.indexer.wq_b",
        "layers.3.attn.indexer.weights_proj",
        "layers.3.attn.indexer.compressor.wkv",
        "layers.3.attn.indexer.compressor.wgate",
        "layers.3.ffn.gate",
        "layers.3.ffn.experts.12.w1",
        "layers.3.ffn.experts.12.w2",
        "layers.3.ffn.experts.12.w3",
        "layers.3.ffn.shared_experts.w1",
        "embed",
        "head",
    ];
    for m in modules {
        let hf = hf_spelling(m);
        assert_eq!(
            canonical_name(&format!("{hf}.weight")),
            format!("{m}.weight"),
            "{hf}"
        );
    }
    assert_eq!(
        hf_spelling("layers.3.ffn.experts.12.w1"),
        "model.layers.3.mlp.experts.12.gate_proj"
    );
    assert!(pattern_matches("lm_head", "head"));
    assert!(pattern_matches(
        "model.layers.30.self_attn*",
        "layers.30.attn.wo_b"
    ));
    assert!(pattern_matches("layers.30.attn*", "layers.30.attn.wo_b"));
    assert!(!pattern_matches(
        "model.layers.3.self_attn*",
        "layers.30.attn.wo_b"
    ));
}

#[test]
fn roles_by_official_name() {
    assert_eq!(Role::of("embed"), Role::Embedding);
    assert_eq!(Role::of("head"), Role::Head);
    assert_eq!(Role::of("layers.0.ffn.gate"), Role::Router);
    assert_eq!(Role::of("layers.0.ffn.experts.1.w2"), Role::RoutedExpert);
    assert_eq!(
        Role::of("layers.0.ffn.shared_experts.w2"),
        Role::SharedExpert
    );
    assert_eq!(Role::of("layers.0.attn.indexer.wq_b"), Role::Attention);
    assert_eq!(
        Role::of("layers.0.attn.indexer.weights_proj"),
        Role::Compressor
    );
    assert_eq!(Role::of("layers.0.attn.compressor.wkv"), Role::Compressor);
    assert_eq!(Role::of("mtp.0.e_proj"), Role::Other);
}

#[test]
fn deepseek_v4_release_config() {
    let q = qc(
        json!({"expert_dtype": "fp4", "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128], "activation_scheme": "dynamic"}}),
        None,
    );
    assert_eq!(
        q.base,
        Base::Fp8Block {
            ue8m0: true,
            exclude: vec![]
        }
    );
    assert!(q.expert_fp4);
    assert_eq!(
        q.expect("layers.2.ffn.experts.0.w1").allowed,
        vec![Kind::Mxfp4]
    );
    assert_eq!(
        q.expect("layers.2.ffn.shared_experts.w1").allowed,
        vec![Kind::Fp8Block, Kind::Dense]
    );
    assert_eq!(
        q.expect("layers.2.attn.compressor.wkv").allowed,
        vec![Kind::Fp8Block, Kind::Dense]
    );
    assert_eq!(q.expect("embed").allowed, vec![Kind::Dense]);
    // No config at all: dense everywhere.
    assert_eq!(
        QuantConfig::from_json(None, None).unwrap(),
        QuantConfig::default()
    );
    assert_eq!(
        QuantConfig::default().expect("layers.0.attn.wq_a").allowed,
        vec![Kind::Dense]
    );
}

#[test]
fn modelopt_nvfp4_with_wildcard_excludes() {
    let hf = json!({"producer": {"name": "modelopt", "version": "0.23.0"}, "quantization": {
        "quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16,
        "exclude_modules": ["lm_head", "model.layers.1.self_attn*"]}});
    let q = qc(json!({}), Some(hf));
    let mo = q.modelopt.as_ref().unwrap();
    assert_eq!(mo.algo, Some(Algo::Nvfp4));
    let e = q.expect("layers.0.attn.wq_a");
    assert_eq!(
        (e.allowed.clone(), e.input_scale_required),
        (vec![Kind::Nvfp4], true)
    );
    let e = q.expect("layers.1.attn.wq_a");
    assert_eq!(e.allowed, vec![Kind::Dense]);
    assert!(e.why.contains("model.layers.1.self_attn*"), "{}", e.why);
    assert_eq!(q.expect("head").allowed, vec![Kind::Dense]);
    // Routers are not linears to ModelOpt: never quantized even when not excluded.
    assert_eq!(q.expect("layers.0.ffn.gate").allowed, vec![Kind::Dense]);
    // The same config inline in config.json, with `ignore`.
    let inline = qc(
        json!({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
            "group_size": 16, "ignore": ["lm_head", "model.layers.1.self_attn*"]}}),
        None,
    );
    assert_eq!(
        inline.expect("layers.1.attn.wq_a").allowed,
        vec![Kind::Dense]
    );
    assert_eq!(
        inline.expect("layers.0.attn.wq_a").allowed,
        vec![Kind::Nvfp4]
    );
}

#[test]
fn mixed_precision_resolves_per_module_over_a_deepseek_base() {
    let hf = json!({"quantization": {"quant_algo": "MIXED_PRECISION",
        "exclude_modules": ["layers.0.ffn.experts.3.*"],
        "quantized_layers": {
            "model.layers.0.mlp.experts.1.gate_proj": {"quant_algo": "NVFP4", "group_size": 16},
            "layers.0.ffn.experts.*": {"quant_algo": "W4A16_NVFP4"},
            "layers.0.ffn.shared_experts.w1": "FP8"}}});
    let q = qc(
        json!({"quantization_config": {"quant_method": "fp8", "scale_fmt": "ue8m0"}}),
        Some(hf),
    );
    let e = q.expect("layers.0.ffn.experts.1.w1");
    assert_eq!(
        (e.allowed, e.input_scale_required),
        (vec![Kind::Nvfp4], true)
    );
    let e = q.expect("layers.0.ffn.experts.2.w2");
    assert_eq!(
        (e.allowed, e.input_scale_required),
        (vec![Kind::Nvfp4], false)
    );
    assert_eq!(
        q.expect("layers.0.ffn.shared_experts.w1").allowed,
        vec![Kind::Fp8Tensor]
    );
    // Excluded and unlisted modules keep the DeepSeek base format.
    assert_eq!(
        q.expect("layers.0.ffn.experts.3.w1").allowed,
        vec![Kind::Fp8Block, Kind::Dense]
    );
    assert_eq!(
        q.expect("layers.0.attn.wq_a").allowed,
        vec![Kind::Fp8Block, Kind::Dense]
    );
}

#[test]
fn gpt_oss_mxfp4_covers_routed_experts_only() {
    let q = qc(
        json!({"quantization_config": {"quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.1.mlp.experts*"]}}),
        None,
    );
    assert_eq!(
        q.expect("layers.0.ffn.experts.0.w2").allowed,
        vec![Kind::Mxfp4]
    );
    assert_eq!(
        q.expect("layers.1.ffn.experts.0.w2").allowed,
        vec![Kind::Dense]
    );
    assert_eq!(q.expect("layers.0.attn.wq_a").allowed, vec![Kind::Dense]);
}

#[test]
fn malformed_configs_name_the_file_and_field() {
    let cases = [
        (
            json!({"quantization_config": {"quant_method": "awq"}}),
            None,
            "quant_method",
        ),
        (json!({"quantization_config": {}}), None, "quant_method"),
        (
            json!({"quantization_config": "fp8"}),
            None,
            "quantization_config",
        ),
        (
            json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}}),
            None,
            "weight_block_size",
        ),
        (
            json!({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}}),
            None,
            "fmt",
        ),
        (
            json!({"quantization_config": {"quant_method": "fp8", "scale_fmt": "e4m3"}}),
            None,
            "scale_fmt",
        ),
        (json!({"expert_dtype": "fp2"}), None, "expert_dtype"),
        (json!({}), Some(json!({"producer": {}})), "quantization"),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "INT4_AWQ"}})),
            "quant_algo",
        ),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "NVFP4", "group_size": 32}})),
            "group_size",
        ),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "NVFP4", "exclude_modules": "lm_head"}})),
            "exclude_modules",
        ),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "NVFP4", "exclude_modules": [3]}})),
            "exclude_modules[0]",
        ),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "MIXED_PRECISION"}})),
            "quantized_layers",
        ),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "MIXED_PRECISION",
                "quantized_layers": {"layers.0.attn.wq_a": {"quant_algo": "INT8"}}}})),
            "quantized_layers.layers.0.attn.wq_a.quant_algo",
        ),
        (
            json!({}),
            Some(json!({"quantization": {"quant_algo": "MIXED_PRECISION",
                "quantized_layers": {"layers.0.attn.wq_a": 4}}})),
            "quantized_layers.layers.0.attn.wq_a",
        ),
        (
            json!({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}),
            Some(json!({"quantization": {"quant_algo": "NVFP4"}})),
            "disagrees",
        ),
    ];
    for (config, hf, needle) in cases {
        let msg = err(config.clone(), hf);
        assert!(msg.contains(needle), "{config}: `{msg}` lacks `{needle}`");
    }
}
