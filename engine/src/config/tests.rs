use super::*;

const FLASH_LEGACY: &str = r#"{
  "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
  "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64,
  "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024,
  "o_groups": 8, "o_lora_rank": 1024, "n_routed_experts": 256, "n_shared_experts": 1,
  "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "scoring_func": "sqrtsoftplus",
  "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
  "swiglu_limit": 10.0, "num_hash_layers": 3, "sliding_window": 128,
  "compress_rope_theta": 160000, "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                   "beta_fast": 32, "beta_slow": 1},
  "compress_ratios": COMPRESS_RATIOS,
  "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "hc_mult": 4,
  "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
  "max_position_embeddings": 1048576, "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                          "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
}"#;

/// DeepSeek's 44-entry list: layers 0-1 sliding, then CSA/HCA alternating, then the MTP layer.
fn flash_legacy() -> String {
    let mut ratios = vec![0u64, 0];
    ratios.extend((2..43).map(|l| if l % 2 == 0 { 4 } else { 128 }));
    ratios.push(0);
    FLASH_LEGACY.replace("COMPRESS_RATIOS", &serde_json::to_string(&ratios).unwrap())
}

fn parse(text: &str) -> Result<ModelConfig> {
    ModelConfig::from_json_str(text, "config.json")
}

fn with(base: &str, key: &str, value: serde_json::Value) -> String {
    let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
    v[key] = value;
    v.to_string()
}

fn field_of(err: EngineError) -> String {
    match err {
        EngineError::Config { field, .. } => field,
        other => panic!("expected a config error, got {other}"),
    }
}

#[test]
fn legacy_flash_config_gives_the_published_schedule() {
    let c = parse(&flash_legacy()).unwrap();
    assert_eq!(c.num_layers, 43);
    assert_eq!(c.rope_dim, 64);
    assert_eq!(c.layer_kinds.len(), 43);
    assert_eq!(c.layer_kinds[0], AttnKind::Sliding);
    assert_eq!(c.layer_kinds[1], AttnKind::Sliding);
    assert_eq!(c.layer_kinds[2], AttnKind::Csa { ratio: 4 });
    assert_eq!(c.layer_kinds[3], AttnKind::Hca { ratio: 128 });
    assert_eq!(c.layer_kinds[42], AttnKind::Csa { ratio: 4 });
    assert_eq!(
        &c.mlp_kinds[..4],
        &[
            MlpKind::HashMoe,
            MlpKind::HashMoe,
            MlpKind::HashMoe,
            MlpKind::Moe
        ]
    );
    assert_eq!(c.main_rope.yarn, None);
    assert_eq!(c.main_rope.theta, 10000.0);
    let y = c.compress_rope.yarn.clone().unwrap();
    assert_eq!(c.compress_rope.theta, 160000.0);
    assert_eq!(y.factor, 16.0);
    assert_eq!(c.compress_rope.attention_factor, 1.0);
    assert!(c.quantization_config.is_some());
}

#[test]
fn transformers_spelling_parses_to_the_same_model() {
    let legacy = parse(&flash_legacy()).unwrap();
    let kinds: Vec<&str> = legacy.layer_kinds.iter().map(|k| k.label()).collect();
    let mlp: Vec<&str> = legacy
        .mlp_kinds
        .iter()
        .map(|k| {
            if *k == MlpKind::HashMoe {
                "hash_moe"
            } else {
                "moe"
            }
        })
        .collect();
    let tf = serde_json::json!({
        "model_type": "deepseek_v4", "num_hidden_layers": 43, "head_dim": 512,
        "partial_rotary_factor": 0.125, "layer_types": kinds, "mlp_layer_types": mlp,
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0,
                         "original_max_position_embeddings": 65536, "beta_fast": 32,
                         "beta_slow": 1, "attention_factor": 1.0, "partial_rotary_factor": 0.125}
        }
    });
    let c = parse(&tf.to_string()).unwrap();
    assert_eq!(c.layer_kinds, legacy.layer_kinds);
    assert_eq!(c.mlp_kinds, legacy.mlp_kinds);
    assert_eq!(c.rope_dim, 64);
    assert_eq!(c.main_rope, legacy.main_rope);
    assert_eq!(c.compress_rope, legacy.compress_rope);
}

#[test]
fn yarn_frequencies_follow_the_ramp() {
    let c = parse(&flash_legacy()).unwrap();
    let plain = RopeConfig {
        yarn: None,
        ..c.compress_rope.clone()
    }
    .inv_freq(64);
    let yarn = c.compress_rope.inv_freq(64);
    // High-frequency pairs (short wavelengths) are kept; the lowest are divided by the factor.
    assert!((yarn[0] - plain[0]).abs() < 1e-15);
    assert!((yarn[31] - plain[31] / 16.0).abs() < 1e-15 * plain[31].abs().max(1.0));
    assert!(yarn.iter().zip(&plain).all(|(y, p)| y <= p));
}

#[test]
fn bad_configs_name_the_field() {
    let bad = with(&flash_legacy(), "num_key_value_heads", 8.into());
    assert_eq!(field_of(parse(&bad).unwrap_err()), "num_key_value_heads");
    let bad = with(
        &flash_legacy(),
        "compress_ratios",
        serde_json::json!([0, 4]),
    );
    assert_eq!(field_of(parse(&bad).unwrap_err()), "compress_ratios");
    let bad = with(&flash_legacy(), "scoring_func", "relu".into());
    assert_eq!(field_of(parse(&bad).unwrap_err()), "scoring_func");
    let bad = with(&flash_legacy(), "hidden_size", "big".into());
    assert_eq!(field_of(parse(&bad).unwrap_err()), "hidden_size");
    let bad = with(&flash_legacy(), "o_groups", 7.into());
    assert_eq!(field_of(parse(&bad).unwrap_err()), "o_groups");
    let bad = with(&flash_legacy(), "model_type", "llama".into());
    assert_eq!(field_of(parse(&bad).unwrap_err()), "model_type");
    let bad = with(&flash_legacy(), "num_experts_per_tok", 300.into());
    assert_eq!(field_of(parse(&bad).unwrap_err()), "num_experts_per_tok");
    let bad = with(
        &flash_legacy(),
        "layer_types",
        serde_json::json!(["sliding_attention"]),
    );
    assert_eq!(field_of(parse(&bad).unwrap_err()), "layer_types");
    let mut v: serde_json::Value = serde_json::from_str(&flash_legacy()).unwrap();
    v["rope_scaling"]["type"] = "longrope".into();
    assert_eq!(
        field_of(parse(&v.to_string()).unwrap_err()),
        "rope_scaling.rope_type"
    );
    assert!(matches!(parse("[1,2]"), Err(EngineError::Config { .. })));
    assert!(matches!(
        parse("{not json"),
        Err(EngineError::Config { .. })
    ));
}
