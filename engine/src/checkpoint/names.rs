//! Tensor-name normalization. Checkpoints spell DeepSeek-V4 tensors three ways: the official
//! DeepSeek names (`layers.3.attn.wq_a.weight`), transformers' module names
//! (`model.layers.3.self_attn.q_a_proj.weight`, fused `mlp.experts.gate_up_proj`), and the hybrid
//! transformers' `save_pretrained` writes. Everything is mapped to the official spelling, which is
//! the one the model asks for. Renames mirror the inverse of transformers' `conversion_mapping`
//! for `deepseek_v4` (model-spec §3.2).

/// Whole-name renames (after an optional `model.` prefix is dropped).
const LEAVES: &[(&str, &str)] = &[
    ("embed_tokens.weight", "embed.weight"),
    ("lm_head.weight", "head.weight"),
    ("hc_head.hc_fn", "hc_head_fn"),
    ("hc_head.hc_base", "hc_head_base"),
    ("hc_head.hc_scale", "hc_head_scale"),
    ("hc_head.fn", "hc_head_fn"),
    ("hc_head.base", "hc_head_base"),
    ("hc_head.scale", "hc_head_scale"),
];

/// Infix renames, applied in order. Each pattern is unique to one spelling, so applying them to
/// an already-official name changes nothing.
const INFIXES: &[(&str, &str)] = &[
    (".self_attn.", ".attn."),
    (".mlp.", ".ffn."),
    (".input_layernorm.", ".attn_norm."),
    (".post_attention_layernorm.", ".ffn_norm."),
    (
        ".compressor.indexer.scorer.weights_proj.",
        ".indexer.weights_proj.",
    ),
    (".compressor.indexer.q_b_proj.", ".indexer.wq_b."),
    (".compressor.indexer.", ".indexer.compressor."),
    (".kv_norm.", ".norm."),
    (".q_a_proj.", ".wq_a."),
    (".q_b_proj.", ".wq_b."),
    (".kv_proj.", ".wkv."),
    (".o_a_proj.", ".wo_a."),
    (".o_b_proj.", ".wo_b."),
    (".q_a_norm.", ".q_norm."),
];

/// Suffix renames (the name ends with the pattern).
const SUFFIXES: &[(&str, &str)] = &[
    (".attn_hc.fn", ".hc_attn_fn"),
    (".attn_hc.base", ".hc_attn_base"),
    (".attn_hc.scale", ".hc_attn_scale"),
    (".ffn_hc.fn", ".hc_ffn_fn"),
    (".ffn_hc.base", ".hc_ffn_base"),
    (".ffn_hc.scale", ".hc_ffn_scale"),
    (".sinks", ".attn_sink"),
    (".position_bias", ".ape"),
    (".gate.e_score_correction_bias", ".gate.bias"),
];

/// Maps any accepted spelling to the official DeepSeek name.
pub fn canonical_name(name: &str) -> String {
    let name = name.strip_prefix("model.").unwrap_or(name);
    if let Some((_, to)) = LEAVES.iter().find(|(from, _)| *from == name) {
        return (*to).to_string();
    }
    let mut n = format!(".{name}");
    for (from, to) in INFIXES {
        if n.contains(from) {
            n = n.replace(from, to);
        }
    }
    for (from, to) in SUFFIXES {
        if let Some(stem) = n.strip_suffix(from) {
            n = format!("{stem}{to}");
        }
    }
    // gate/up/down projections: expert weights use w1/w3/w2; the compressor gate is `wgate`.
    if n.contains("experts.") {
        n = n
            .replace(".gate_proj.", ".w1.")
            .replace(".up_proj.", ".w3.")
            .replace(".down_proj.", ".w2.");
    } else {
        n = n.replace(".gate_proj.", ".wgate.");
    }
    n[1..].to_string()
}

/// A fused expert tensor in transformers' in-memory layout, to be split per expert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedExperts {
    /// `experts.gate_up_proj` [E, 2I, D]: rows 0..I are w1 (gate), rows I..2I are w3 (up).
    GateUp,
    /// `experts.down_proj` [E, D, I]: w2.
    Down,
}

/// Recognizes `….experts.gate_up_proj` / `….experts.down_proj` (no per-expert index) and returns
/// the canonical prefix `layers.L.ffn.experts`.
pub fn fused_experts(canonical: &str) -> Option<(String, FusedExperts)> {
    if let Some(prefix) = canonical.strip_suffix(".gate_up_proj") {
        return prefix
            .ends_with(".experts")
            .then(|| (prefix.to_string(), FusedExperts::GateUp));
    }
    // `down_proj` of a fused tensor was already rewritten to `w2` by the expert rule, but
    // without a trailing `.weight` it was not: match the raw form.
    if let Some(prefix) = canonical.strip_suffix(".down_proj") {
        return prefix
            .ends_with(".experts")
            .then(|| (prefix.to_string(), FusedExperts::Down));
    }
    None
}

/// Recognizes gpt-oss MXFP4 fused experts, `….experts.{gate_up,down}_proj_{blocks,scales}`
/// (`[E, rows, K/32, 16]` U8 codes and `[E, rows, K/32]` U8 scales), and returns the canonical
/// prefix, the fused kind and the per-expert tensor leaf they become (`weight` or `scale`).
pub fn fused_mxfp4(canonical: &str) -> Option<(String, FusedExperts, &'static str)> {
    let (stem, leaf) = if let Some(s) = canonical.strip_suffix("_blocks") {
        (s, "weight")
    } else if let Some(s) = canonical.strip_suffix("_scales") {
        (s, "scale")
    } else {
        return None;
    };
    fused_experts(stem).map(|(prefix, kind)| (prefix, kind, leaf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_spellings_meet() {
        let cases = [
            ("model.embed_tokens.weight", "embed.weight"),
            ("embed.weight", "embed.weight"),
            ("lm_head.weight", "head.weight"),
            ("model.norm.weight", "norm.weight"),
            ("model.hc_head.hc_fn", "hc_head_fn"),
            ("hc_head_scale", "hc_head_scale"),
            (
                "model.layers.2.self_attn.q_a_proj.weight",
                "layers.2.attn.wq_a.weight",
            ),
            ("layers.2.attn.wq_a.weight", "layers.2.attn.wq_a.weight"),
            (
                "model.layers.2.self_attn.q_a_norm.weight",
                "layers.2.attn.q_norm.weight",
            ),
            (
                "model.layers.2.self_attn.kv_norm.weight",
                "layers.2.attn.norm.weight",
            ),
            (
                "model.layers.2.attn.norm.weight",
                "layers.2.attn.norm.weight",
            ),
            ("model.layers.2.self_attn.sinks", "layers.2.attn.attn_sink"),
            (
                "model.layers.2.self_attn.o_a_proj.weight",
                "layers.2.attn.wo_a.weight",
            ),
            (
                "model.layers.2.self_attn.compressor.gate_proj.weight",
                "layers.2.attn.compressor.wgate.weight",
            ),
            (
                "model.layers.2.self_attn.compressor.position_bias",
                "layers.2.attn.compressor.ape",
            ),
            (
                "model.layers.2.self_attn.compressor.indexer.kv_proj.weight",
                "layers.2.attn.indexer.compressor.wkv.weight",
            ),
            (
                "model.layers.2.self_attn.compressor.indexer.kv_norm.weight",
                "layers.2.attn.indexer.compressor.norm.weight",
            ),
            (
                "model.layers.2.self_attn.compressor.indexer.q_b_proj.weight",
                "layers.2.attn.indexer.wq_b.weight",
            ),
            (
                "model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight",
                "layers.2.attn.indexer.weights_proj.weight",
            ),
            ("model.layers.0.attn_hc.fn", "layers.0.hc_attn_fn"),
            ("model.layers.0.ffn_hc.scale", "layers.0.hc_ffn_scale"),
            ("layers.0.hc_ffn_base", "layers.0.hc_ffn_base"),
            (
                "model.layers.0.input_layernorm.weight",
                "layers.0.attn_norm.weight",
            ),
            (
                "model.layers.0.post_attention_layernorm.weight",
                "layers.0.ffn_norm.weight",
            ),
            (
                "model.layers.4.mlp.gate.e_score_correction_bias",
                "layers.4.ffn.gate.bias",
            ),
            (
                "model.layers.0.mlp.gate.tid2eid",
                "layers.0.ffn.gate.tid2eid",
            ),
            (
                "model.layers.0.mlp.shared_experts.gate_proj.weight",
                "layers.0.ffn.shared_experts.w1.weight",
            ),
            (
                "model.layers.0.mlp.experts.5.up_proj.weight",
                "layers.0.ffn.experts.5.w3.weight",
            ),
            (
                "layers.0.ffn.experts.5.w2.weight",
                "layers.0.ffn.experts.5.w2.weight",
            ),
            (
                "model.layers.0.mlp.experts.gate_up_proj",
                "layers.0.ffn.experts.gate_up_proj",
            ),
        ];
        for (from, to) in cases {
            assert_eq!(canonical_name(from), to, "{from}");
        }
    }

    #[test]
    fn fused_expert_tensors_are_recognized() {
        assert_eq!(
            fused_experts("layers.1.ffn.experts.gate_up_proj"),
            Some(("layers.1.ffn.experts".to_string(), FusedExperts::GateUp))
        );
        assert_eq!(
            fused_experts(&canonical_name("model.layers.1.mlp.experts.down_proj")),
            Some(("layers.1.ffn.experts".to_string(), FusedExperts::Down))
        );
        assert_eq!(fused_experts("layers.1.ffn.shared_experts.w2.weight"), None);
        assert_eq!(
            fused_mxfp4(&canonical_name(
                "model.layers.1.mlp.experts.gate_up_proj_blocks"
            )),
            Some((
                "layers.1.ffn.experts".to_string(),
                FusedExperts::GateUp,
                "weight"
            ))
        );
        assert_eq!(
            fused_mxfp4("layers.1.ffn.experts.down_proj_scales"),
            Some((
                "layers.1.ffn.experts".to_string(),
                FusedExperts::Down,
                "scale"
            ))
        );
        assert_eq!(fused_mxfp4("layers.1.ffn.experts.down_proj"), None);
    }
}
