//! DeepSeek-V4 `config.json`, parsed from either spelling: as DeepSeek ships it (legacy keys
//! `compress_ratios`, `num_hash_layers`, `qk_rope_head_dim`, `rope_scaling`) or as transformers
//! 5.17 writes it (`layer_types`, `mlp_layer_types`, `compress_rates`, `rope_parameters`
//! {main, compress}). The result is validated once here; the model trusts it afterwards.
//! Reference: model-spec.md §3.1, transformers `configuration_deepseek_v4.py`.

mod rope;

pub use rope::{RopeConfig, Yarn};

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{EngineError, Result};

/// Attention kind of one layer (model-spec §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    /// Sliding window only ("main" rope table).
    Sliding,
    /// Compressed sparse attention: overlapping compressor (ratio `m`), lightning indexer, top-k.
    Csa { ratio: usize },
    /// Heavily compressed attention: non-overlapping compressor (ratio `m`), all entries visible.
    Hca { ratio: usize },
}

impl AttnKind {
    /// Compression ratio, 0 for sliding-only layers.
    pub fn ratio(self) -> usize {
        match self {
            AttnKind::Sliding => 0,
            AttnKind::Csa { ratio } | AttnKind::Hca { ratio } => ratio,
        }
    }

    /// Whether the layer uses the compress rope table (θ = compress_rope_theta, YaRN).
    pub fn uses_compress_rope(self) -> bool {
        !matches!(self, AttnKind::Sliding)
    }

    pub fn label(self) -> &'static str {
        match self {
            AttnKind::Sliding => "sliding_attention",
            AttnKind::Csa { .. } => "compressed_sparse_attention",
            AttnKind::Hca { .. } => "heavily_compressed_attention",
        }
    }
}

/// Routing of one MoE layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// Experts chosen by a frozen `tid2eid[token]` table.
    HashMoe,
    /// Experts chosen by top-k of (score + correction bias).
    Moe,
}

/// Router score function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoringFunc {
    SqrtSoftplus,
    Sigmoid,
    Softmax,
}

/// A validated DeepSeek-V4 model configuration.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub head_dim: usize,
    /// Rotary dims at the end of each head (and of indexer / compressor vectors).
    pub rope_dim: usize,
    pub q_lora_rank: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub n_routed_experts: usize,
    pub n_shared_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub scoring_func: ScoringFunc,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
    pub swiglu_limit: f32,
    pub sliding_window: usize,
    pub layer_kinds: Vec<AttnKind>,
    pub mlp_kinds: Vec<MlpKind>,
    pub main_rope: RopeConfig,
    pub compress_rope: RopeConfig,
    pub hc_mult: usize,
    pub hc_sinkhorn_iters: usize,
    pub hc_eps: f32,
    pub rms_norm_eps: f32,
    pub index_n_heads: usize,
    pub index_head_dim: usize,
    pub index_topk: usize,
    pub max_position_embeddings: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub tie_word_embeddings: bool,
    pub num_nextn_predict_layers: usize,
    /// The raw `quantization_config` object, interpreted by the quantization layer.
    pub quantization_config: Option<Value>,
}

impl ModelConfig {
    /// Reads and validates `config.json` from a model folder or a file path.
    pub fn from_path(path: &Path) -> Result<Self> {
        let file = if path.is_dir() {
            path.join("config.json")
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&file).map_err(|e| EngineError::io(&file, e))?;
        Self::from_json_str(&text, &file.display().to_string())
    }

    /// Parses `config.json` text; `file` names the source in error messages.
    pub fn from_json_str(text: &str, file: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| EngineError::config(file, "<json>", format!("not valid JSON: {e}")))?;
        let obj = value
            .as_object()
            .ok_or_else(|| EngineError::config(file, "<root>", "expected a JSON object"))?;
        Parser { file, obj }.parse()
    }

    /// Total width of the hyper-connection state per token (hc_mult × hidden).
    pub fn hc_dim(&self) -> usize {
        self.hc_mult * self.hidden_size
    }

    /// Rows of the mHC mixing matrix: pre (hc) + post (hc) + comb (hc²).
    pub fn hc_mix(&self) -> usize {
        (2 + self.hc_mult) * self.hc_mult
    }

    /// Width of the shared expert (DeepSeek: n_shared × moe_intermediate).
    pub fn shared_intermediate_size(&self) -> usize {
        self.n_shared_experts * self.moe_intermediate_size
    }

    /// Rope table used by a layer's attention, compressor and indexer.
    pub fn rope_for(&self, kind: AttnKind) -> &RopeConfig {
        if kind.uses_compress_rope() {
            &self.compress_rope
        } else {
            &self.main_rope
        }
    }
}

struct Parser<'a> {
    file: &'a str,
    obj: &'a Map<String, Value>,
}

impl Parser<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> EngineError {
        EngineError::config(self.file, field, message)
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    fn usize_opt(&self, field: &str) -> Result<Option<usize>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
                self.err(field, format!("expected a non-negative integer, got {v}"))
            }),
        }
    }

    fn usize_or(&self, field: &str, default: usize) -> Result<usize> {
        Ok(self.usize_opt(field)?.unwrap_or(default))
    }

    fn f64_opt(&self, field: &str) -> Result<Option<f64>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected a number, got {v}"))),
        }
    }

    fn f64_or(&self, field: &str, default: f64) -> Result<f64> {
        Ok(self.f64_opt(field)?.unwrap_or(default))
    }

    fn bool_or(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(field, format!("expected true or false, got {v}"))),
        }
    }

    fn positive(&self, field: &str, value: usize) -> Result<usize> {
        if value == 0 {
            return Err(self.err(field, "must be > 0"));
        }
        Ok(value)
    }

    fn parse(&self) -> Result<ModelConfig> {
        if let Some(mt) = self.get("model_type") {
            let mt = mt.as_str().unwrap_or_default();
            if mt != "deepseek_v4" {
                return Err(self.err(
                    "model_type",
                    format!("`{mt}` is not supported; amdahl serves `deepseek_v4` models"),
                ));
            }
        }
        let vocab_size = self.positive("vocab_size", self.usize_or("vocab_size", 129_280)?)?;
        let hidden_size = self.positive("hidden_size", self.usize_or("hidden_size", 4096)?)?;
        let num_layers =
            self.positive("num_hidden_layers", self.usize_or("num_hidden_layers", 43)?)?;
        let num_heads = self.positive(
            "num_attention_heads",
            self.usize_or("num_attention_heads", 64)?,
        )?;
        let kv_heads = self.usize_or("num_key_value_heads", 1)?;
        if kv_heads != 1 {
            return Err(self.err(
                "num_key_value_heads",
                format!("DeepSeek-V4 uses one shared K=V head; got {kv_heads}"),
            ));
        }
        let head_dim = self.positive("head_dim", self.usize_or("head_dim", 512)?)?;
        let rope_dim = self.rope_dim(head_dim)?;
        let q_lora_rank = self.positive("q_lora_rank", self.usize_or("q_lora_rank", 1024)?)?;
        let o_groups = self.positive("o_groups", self.usize_or("o_groups", 8)?)?;
        if num_heads % o_groups != 0 {
            return Err(self.err(
                "o_groups",
                format!("{o_groups} does not divide num_attention_heads = {num_heads}"),
            ));
        }
        let o_lora_rank = self.positive("o_lora_rank", self.usize_or("o_lora_rank", 1024)?)?;
        let n_routed_experts =
            self.positive("n_routed_experts", self.usize_or("n_routed_experts", 256)?)?;
        let n_shared_experts = self.usize_or("n_shared_experts", 1)?;
        let num_experts_per_tok = self.positive(
            "num_experts_per_tok",
            self.usize_or("num_experts_per_tok", 6)?,
        )?;
        if num_experts_per_tok > n_routed_experts {
            return Err(self.err(
                "num_experts_per_tok",
                format!("{num_experts_per_tok} exceeds n_routed_experts = {n_routed_experts}"),
            ));
        }
        let moe_intermediate_size = self.positive(
            "moe_intermediate_size",
            self.usize_or("moe_intermediate_size", 2048)?,
        )?;
        let scoring_func = match self.get("scoring_func").and_then(Value::as_str) {
            None | Some("sqrtsoftplus") => ScoringFunc::SqrtSoftplus,
            Some("sigmoid") => ScoringFunc::Sigmoid,
            Some("softmax") => ScoringFunc::Softmax,
            Some(other) => {
                return Err(self.err(
                    "scoring_func",
                    format!("`{other}` is not one of sqrtsoftplus, sigmoid, softmax"),
                ));
            }
        };
        if let Some(method) = self.get("topk_method").and_then(Value::as_str)
            && method != "noaux_tc"
            && method != "greedy"
        {
            return Err(self.err(
                "topk_method",
                format!("`{method}` is not supported (noaux_tc or greedy)"),
            ));
        }
        let (layer_kinds, mlp_kinds) = self.layer_schedule(num_layers)?;
        let sliding_window =
            self.positive("sliding_window", self.usize_or("sliding_window", 128)?)?;
        let (main_rope, compress_rope) = rope::parse(self, rope_dim)?;
        let hc_mult = self.positive("hc_mult", self.usize_or("hc_mult", 4)?)?;
        let hc_sinkhorn_iters =
            self.positive("hc_sinkhorn_iters", self.usize_or("hc_sinkhorn_iters", 20)?)?;
        let index_head_dim =
            self.positive("index_head_dim", self.usize_or("index_head_dim", 128)?)?;
        if rope_dim > index_head_dim {
            return Err(self.err(
                "index_head_dim",
                format!("{index_head_dim} is smaller than the rope dims ({rope_dim})"),
            ));
        }
        let eos_token_ids = match self.get("eos_token_id") {
            None => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_u64().map(|n| n as u32))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.err("eos_token_id", "expected integers"))?,
            Some(v) => vec![
                v.as_u64()
                    .ok_or_else(|| self.err("eos_token_id", "expected an integer"))?
                    as u32,
            ],
        };
        Ok(ModelConfig {
            vocab_size,
            hidden_size,
            num_layers,
            num_heads,
            head_dim,
            rope_dim,
            q_lora_rank,
            o_groups,
            o_lora_rank,
            n_routed_experts,
            n_shared_experts,
            num_experts_per_tok,
            moe_intermediate_size,
            scoring_func,
            norm_topk_prob: self.bool_or("norm_topk_prob", true)?,
            routed_scaling_factor: self.f64_or("routed_scaling_factor", 1.5)? as f32,
            swiglu_limit: self.f64_or("swiglu_limit", 10.0)? as f32,
            sliding_window,
            layer_kinds,
            mlp_kinds,
            main_rope,
            compress_rope,
            hc_mult,
            hc_sinkhorn_iters,
            hc_eps: self.f64_or("hc_eps", 1e-6)? as f32,
            rms_norm_eps: self.f64_or("rms_norm_eps", 1e-6)? as f32,
            index_n_heads: self.positive("index_n_heads", self.usize_or("index_n_heads", 64)?)?,
            index_head_dim,
            index_topk: self.positive("index_topk", self.usize_or("index_topk", 512)?)?,
            max_position_embeddings: self.usize_or("max_position_embeddings", 1_048_576)?,
            bos_token_id: self.usize_opt("bos_token_id")?.map(|n| n as u32),
            eos_token_ids,
            tie_word_embeddings: self.bool_or("tie_word_embeddings", false)?,
            num_nextn_predict_layers: self.usize_or("num_nextn_predict_layers", 0)?,
            quantization_config: self.get("quantization_config").cloned(),
        })
    }

    /// Rope dims: legacy `qk_rope_head_dim`, else `partial_rotary_factor` × head_dim (top level or
    /// inside `rope_parameters.main`), else 64/512 of head_dim as transformers defaults.
    fn rope_dim(&self, head_dim: usize) -> Result<usize> {
        let from_factor = |field: &str, f: f64| -> Result<usize> {
            if !(f > 0.0 && f <= 1.0) {
                return Err(self.err(field, format!("{f} is not in (0, 1]")));
            }
            Ok((head_dim as f64 * f) as usize)
        };
        let dim = if let Some(d) = self.usize_opt("qk_rope_head_dim")? {
            d
        } else if let Some(f) = self.f64_opt("partial_rotary_factor")? {
            from_factor("partial_rotary_factor", f)?
        } else if let Some(f) = self
            .get("rope_parameters")
            .and_then(|rp| rp.get("main"))
            .and_then(|m| m.get("partial_rotary_factor"))
            .and_then(Value::as_f64)
        {
            from_factor("rope_parameters.main.partial_rotary_factor", f)?
        } else {
            head_dim * 64 / 512
        };
        let field = "qk_rope_head_dim";
        if dim == 0 || dim % 2 != 0 {
            return Err(self.err(field, format!("rope dims must be even and > 0, got {dim}")));
        }
        if dim > head_dim {
            return Err(self.err(field, format!("{dim} exceeds head_dim = {head_dim}")));
        }
        Ok(dim)
    }

    fn layer_schedule(&self, n: usize) -> Result<(Vec<AttnKind>, Vec<MlpKind>)> {
        let mut csa_rate = 4;
        let mut hca_rate = 128;
        if let Some(rates) = self.get("compress_rates") {
            let rates = rates
                .as_object()
                .ok_or_else(|| self.err("compress_rates", "expected an object"))?;
            for (key, v) in rates {
                let r = v.as_u64().filter(|&r| r > 0).ok_or_else(|| {
                    self.err(&format!("compress_rates.{key}"), "expected an integer > 0")
                })? as usize;
                match key.as_str() {
                    "compressed_sparse_attention" => csa_rate = r,
                    "heavily_compressed_attention" => hca_rate = r,
                    other => {
                        return Err(
                            self.err("compress_rates", format!("unknown layer type `{other}`"))
                        );
                    }
                }
            }
        }
        if let Some(r) = self.usize_opt("compress_rate_csa")? {
            csa_rate = self.positive("compress_rate_csa", r)?;
        }
        if let Some(r) = self.usize_opt("compress_rate_hca")? {
            hca_rate = self.positive("compress_rate_hca", r)?;
        }

        let attn: Vec<AttnKind> = if let Some(types) = self.get("layer_types") {
            let types = types
                .as_array()
                .ok_or_else(|| self.err("layer_types", "expected a list of strings"))?;
            if types.len() < n {
                return Err(self.err(
                    "layer_types",
                    format!("has {} entries for num_hidden_layers = {n}", types.len()),
                ));
            }
            types[..n]
                .iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some("sliding_attention") => Ok(AttnKind::Sliding),
                    Some("compressed_sparse_attention") => Ok(AttnKind::Csa { ratio: csa_rate }),
                    Some("heavily_compressed_attention") => Ok(AttnKind::Hca { ratio: hca_rate }),
                    _ => Err(self.err(
                        &format!("layer_types[{i}]"),
                        format!(
                            "{t} is not one of sliding_attention, compressed_sparse_attention, \
                             heavily_compressed_attention"
                        ),
                    )),
                })
                .collect::<Result<_>>()?
        } else if let Some(ratios) = self.get("compress_ratios") {
            let ratios = ratios
                .as_array()
                .ok_or_else(|| self.err("compress_ratios", "expected a list of integers"))?;
            // DeepSeek ships one more entry than layers (the MTP layer); extra entries are ignored.
            if ratios.len() < n {
                return Err(self.err(
                    "compress_ratios",
                    format!("has {} entries for num_hidden_layers = {n}", ratios.len()),
                ));
            }
            ratios[..n]
                .iter()
                .enumerate()
                .map(|(i, r)| match r.as_u64() {
                    Some(0) => Ok(AttnKind::Sliding),
                    Some(4) => Ok(AttnKind::Csa { ratio: 4 }),
                    Some(r) if r > 1 => Ok(AttnKind::Hca { ratio: r as usize }),
                    _ => Err(self.err(
                        &format!("compress_ratios[{i}]"),
                        format!("{r} is not 0 (sliding), 4 (CSA) or an HCA ratio > 1"),
                    )),
                })
                .collect::<Result<_>>()?
        } else {
            // transformers' default: 2 HCA layers, then CSA / HCA interleaved.
            (0..n)
                .map(|i| {
                    if i < 2 || (i - 2) % 2 == 0 {
                        AttnKind::Hca { ratio: hca_rate }
                    } else {
                        AttnKind::Csa { ratio: csa_rate }
                    }
                })
                .collect()
        };

        let mlp: Vec<MlpKind> = if let Some(types) = self.get("mlp_layer_types") {
            let types = types
                .as_array()
                .ok_or_else(|| self.err("mlp_layer_types", "expected a list of strings"))?;
            if types.len() < n {
                return Err(self.err(
                    "mlp_layer_types",
                    format!("has {} entries for num_hidden_layers = {n}", types.len()),
                ));
            }
            types[..n]
                .iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some("hash_moe") => Ok(MlpKind::HashMoe),
                    Some("moe") => Ok(MlpKind::Moe),
                    _ => Err(self.err(
                        &format!("mlp_layer_types[{i}]"),
                        format!("{t} is not one of hash_moe, moe"),
                    )),
                })
                .collect::<Result<_>>()?
        } else {
            let n_hash = self.usize_or("num_hash_layers", 3)?;
            (0..n)
                .map(|i| {
                    if i < n_hash {
                        MlpKind::HashMoe
                    } else {
                        MlpKind::Moe
                    }
                })
                .collect()
        };
        for (i, kind) in attn.iter().enumerate() {
            if let AttnKind::Csa { ratio } | AttnKind::Hca { ratio } = kind
                && *ratio < 2
            {
                return Err(self.err(
                    &format!("layer {i} compress rate"),
                    format!("{ratio} must be >= 2"),
                ));
            }
        }
        Ok((attn, mlp))
    }
}

#[cfg(test)]
mod tests;
