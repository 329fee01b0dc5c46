//! Random DeepSeek-V4 checkpoints of any shape, written in the official naming with a
//! transformers-style config. Tests use tiny ones to check properties (path consistency,
//! causality, batching) on configurations no fixture covers; the profiler uses real widths.
//! Parameters that transformers initializes to zero (sinks, position biases, correction bias,
//! hash tables) get random values so every path is exercised.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::checkpoint::OwnedTensor;
use crate::checkpoint::safetensors::write_file;
use crate::config::{AttnKind, MlpKind};
use crate::error::{EngineError, Result};
use crate::rng::Rng;

/// Shape of a synthetic model.
#[derive(Debug, Clone)]
pub struct TinySpec {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: Vec<AttnKind>,
    pub mlp: Vec<MlpKind>,
    pub heads: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub q_lora: usize,
    pub o_groups: usize,
    pub o_lora: usize,
    pub experts: usize,
    pub top_k: usize,
    pub moe_inter: usize,
    pub window: usize,
    pub index_heads: usize,
    pub index_dim: usize,
    pub index_topk: usize,
    pub scoring: &'static str,
    pub yarn: bool,
    pub hc_mult: usize,
}

impl Default for TinySpec {
    fn default() -> Self {
        Self {
            vocab: 64,
            hidden: 32,
            layers: vec![
                AttnKind::Sliding,
                AttnKind::Csa { ratio: 4 },
                AttnKind::Hca { ratio: 8 },
            ],
            mlp: vec![MlpKind::HashMoe, MlpKind::Moe, MlpKind::Moe],
            heads: 4,
            head_dim: 16,
            rope_dim: 8,
            q_lora: 16,
            o_groups: 2,
            o_lora: 8,
            experts: 8,
            top_k: 2,
            moe_inter: 16,
            window: 8,
            index_heads: 2,
            index_dim: 16,
            index_topk: 3,
            scoring: "sqrtsoftplus",
            yarn: true,
            hc_mult: 4,
        }
    }
}

fn ratio_of(kinds: &[AttnKind], csa: bool) -> usize {
    kinds
        .iter()
        .find_map(|k| match (k, csa) {
            (AttnKind::Csa { ratio }, true) | (AttnKind::Hca { ratio }, false) => Some(*ratio),
            _ => None,
        })
        .unwrap_or(if csa { 4 } else { 128 })
}

impl TinySpec {
    /// The config.json this model is described by (transformers spelling).
    pub fn config_json(&self) -> serde_json::Value {
        let partial = self.rope_dim as f64 / self.head_dim as f64;
        let mut compress = json!({
            "rope_type": "default", "rope_theta": 160000.0, "partial_rotary_factor": partial,
        });
        if self.yarn {
            compress = json!({
                "rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0,
                "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                "attention_factor": 1.0, "partial_rotary_factor": partial,
            });
        }
        json!({
            "model_type": "deepseek_v4",
            "architectures": ["DeepseekV4ForCausalLM"],
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers.len(),
            "num_attention_heads": self.heads,
            "num_key_value_heads": 1,
            "head_dim": self.head_dim,
            "partial_rotary_factor": partial,
            "q_lora_rank": self.q_lora,
            "o_groups": self.o_groups,
            "o_lora_rank": self.o_lora,
            "n_routed_experts": self.experts,
            "n_shared_experts": 1,
            "num_experts_per_tok": self.top_k,
            "moe_intermediate_size": self.moe_inter,
            "scoring_func": self.scoring,
            "norm_topk_prob": true,
            "routed_scaling_factor": 1.5,
            "swiglu_limit": 10.0,
            "sliding_window": self.window,
            "layer_types": self.layers.iter().map(|k| k.label()).collect::<Vec<_>>(),
            "mlp_layer_types": self.mlp.iter().map(|k| match k {
                MlpKind::HashMoe => "hash_moe",
                MlpKind::Moe => "moe",
            }).collect::<Vec<_>>(),
            "compress_rates": {
                "compressed_sparse_attention": ratio_of(&self.layers, true),
                "heavily_compressed_attention": ratio_of(&self.layers, false),
            },
            "rope_parameters": {
                "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial},
                "compress": compress,
            },
            "hc_mult": self.hc_mult,
            "hc_sinkhorn_iters": 20,
            "hc_eps": 1e-6,
            "rms_norm_eps": 1e-6,
            "index_n_heads": self.index_heads,
            "index_head_dim": self.index_dim,
            "index_topk": self.index_topk,
            "max_position_embeddings": 4096,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "tie_word_embeddings": false,
        })
    }

    /// Random weights, official names, f32.
    pub fn tensors(&self, seed: u64) -> Vec<OwnedTensor> {
        let mut rng = Rng::new(seed);
        let mut out = Vec::new();
        let mut tables = Vec::new();
        let mut add = |rng: &mut Rng, name: String, shape: &[usize], kind: Init| {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|_| match kind {
                    Init::Normal(s) => rng.normal() * s,
                    Init::AroundOne(s) => 1.0 + rng.normal() * s,
                })
                .collect();
            out.push(OwnedTensor::f32(&name, shape, &v));
        };
        use Init::{AroundOne, Normal};
        let (d, hc) = (self.hidden, self.hc_mult);
        let mix = (2 + hc) * hc;
        let w = |fan_in: usize| Normal(1.0 / (fan_in as f32).sqrt());
        add(
            &mut rng,
            "embed.weight".into(),
            &[self.vocab, d],
            Normal(1.0),
        );
        add(&mut rng, "head.weight".into(), &[self.vocab, d], w(d));
        add(&mut rng, "norm.weight".into(), &[d], AroundOne(0.1));
        add(&mut rng, "hc_head_fn".into(), &[hc, hc * d], Normal(0.1));
        add(&mut rng, "hc_head_base".into(), &[hc], Normal(0.5));
        add(&mut rng, "hc_head_scale".into(), &[1], AroundOne(0.2));
        for (l, kind) in self.layers.iter().enumerate() {
            let p = format!("layers.{l}");
            add(
                &mut rng,
                format!("{p}.attn_norm.weight"),
                &[d],
                AroundOne(0.1),
            );
            add(
                &mut rng,
                format!("{p}.ffn_norm.weight"),
                &[d],
                AroundOne(0.1),
            );
            for site in ["hc_attn", "hc_ffn"] {
                add(
                    &mut rng,
                    format!("{p}.{site}_fn"),
                    &[mix, hc * d],
                    Normal(0.1),
                );
                add(&mut rng, format!("{p}.{site}_base"), &[mix], Normal(0.5));
                add(&mut rng, format!("{p}.{site}_scale"), &[3], AroundOne(0.2));
            }
            let a = format!("{p}.attn");
            let (h, hd) = (self.heads, self.head_dim);
            add(
                &mut rng,
                format!("{a}.wq_a.weight"),
                &[self.q_lora, d],
                w(d),
            );
            add(
                &mut rng,
                format!("{a}.q_norm.weight"),
                &[self.q_lora],
                AroundOne(0.1),
            );
            add(
                &mut rng,
                format!("{a}.wq_b.weight"),
                &[h * hd, self.q_lora],
                w(self.q_lora),
            );
            add(&mut rng, format!("{a}.wkv.weight"), &[hd, d], w(d));
            add(&mut rng, format!("{a}.norm.weight"), &[hd], AroundOne(0.1));
            let gi = h * hd / self.o_groups;
            add(
                &mut rng,
                format!("{a}.wo_a.weight"),
                &[self.o_groups * self.o_lora, gi],
                w(gi),
            );
            let ol = self.o_groups * self.o_lora;
            add(&mut rng, format!("{a}.wo_b.weight"), &[d, ol], w(ol));
            add(&mut rng, format!("{a}.attn_sink"), &[h], Normal(1.0));
            let mut compressor =
                |rng: &mut Rng, prefix: String, ratio: usize, dim: usize, overlap: bool| {
                    let width = if overlap { 2 * dim } else { dim };
                    add(rng, format!("{prefix}.wkv.weight"), &[width, d], w(d));
                    add(rng, format!("{prefix}.wgate.weight"), &[width, d], w(d));
                    add(rng, format!("{prefix}.ape"), &[ratio, width], Normal(0.5));
                    add(rng, format!("{prefix}.norm.weight"), &[dim], AroundOne(0.1));
                };
            match *kind {
                AttnKind::Sliding => {}
                AttnKind::Hca { ratio } => {
                    compressor(&mut rng, format!("{a}.compressor"), ratio, hd, false)
                }
                AttnKind::Csa { ratio } => {
                    compressor(&mut rng, format!("{a}.compressor"), ratio, hd, true);
                    compressor(
                        &mut rng,
                        format!("{a}.indexer.compressor"),
                        ratio,
                        self.index_dim,
                        true,
                    );
                }
            }
            if let AttnKind::Csa { .. } = kind {
                let (ih, idim) = (self.index_heads, self.index_dim);
                add(
                    &mut rng,
                    format!("{a}.indexer.wq_b.weight"),
                    &[ih * idim, self.q_lora],
                    w(self.q_lora),
                );
                add(
                    &mut rng,
                    format!("{a}.indexer.weights_proj.weight"),
                    &[ih, d],
                    w(d),
                );
            }
            let f = format!("{p}.ffn");
            add(
                &mut rng,
                format!("{f}.gate.weight"),
                &[self.experts, d],
                w(d),
            );
            match self.mlp[l] {
                MlpKind::Moe => add(
                    &mut rng,
                    format!("{f}.gate.bias"),
                    &[self.experts],
                    Normal(0.3),
                ),
                MlpKind::HashMoe => {
                    let mut ids = Vec::with_capacity(self.vocab * self.top_k);
                    for _ in 0..self.vocab {
                        let mut pool: Vec<i64> = (0..self.experts as i64).collect();
                        for j in 0..self.top_k {
                            let pick = j + rng.below(pool.len() - j);
                            pool.swap(j, pick);
                            ids.push(pool[j]);
                        }
                    }
                    tables.push(OwnedTensor::i64(
                        &format!("{f}.gate.tid2eid"),
                        &[self.vocab, self.top_k],
                        &ids,
                    ));
                }
            }
            for e in 0..self.experts {
                let x = format!("{f}.experts.{e}");
                add(
                    &mut rng,
                    format!("{x}.w1.weight"),
                    &[self.moe_inter, d],
                    w(d),
                );
                add(
                    &mut rng,
                    format!("{x}.w3.weight"),
                    &[self.moe_inter, d],
                    w(d),
                );
                add(
                    &mut rng,
                    format!("{x}.w2.weight"),
                    &[d, self.moe_inter],
                    w(self.moe_inter),
                );
            }
            let s = format!("{f}.shared_experts");
            add(
                &mut rng,
                format!("{s}.w1.weight"),
                &[self.moe_inter, d],
                w(d),
            );
            add(
                &mut rng,
                format!("{s}.w3.weight"),
                &[self.moe_inter, d],
                w(d),
            );
            add(
                &mut rng,
                format!("{s}.w2.weight"),
                &[d, self.moe_inter],
                w(self.moe_inter),
            );
        }
        out.extend(tables);
        out
    }

    /// Writes `config.json` and `model.safetensors` into `dir`.
    pub fn write(&self, dir: &Path, seed: u64) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        let cfg = dir.join("config.json");
        let text = serde_json::to_string_pretty(&self.config_json())
            .map_err(|e| EngineError::InvalidInput(e.to_string()))?;
        std::fs::write(&cfg, text).map_err(|e| EngineError::io(&cfg, e))?;
        write_file(
            &dir.join("model.safetensors"),
            &self.tensors(seed),
            &BTreeMap::new(),
        )
    }
}

#[derive(Clone, Copy)]
enum Init {
    Normal(f32),
    AroundOne(f32),
}
