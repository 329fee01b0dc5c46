//! Loading DeepSeek-V4 weights by their official names (model-spec §3.2), checking every shape
//! against the config. Dense weights keep their stored dtype, quantized linears stay packed in
//! the format the checkpoint stores and its quantization config allows (see `quant::load`);
//! small vectors become f32.

use crate::checkpoint::Checkpoint;
use crate::config::{AttnKind, MlpKind, ModelConfig};
use crate::error::{EngineError, Result};
use crate::ops::attention::{Compressor, Indexer};
use crate::ops::linear::Linear;
use crate::ops::mhc::{HyperConnection, HyperHead};
use crate::ops::moe::{Expert, MoeBlock, Router, Selection};
use crate::quant::{Kind, QuantConfig, load::load_linear};

/// Attention weights of one layer.
#[derive(Debug, Clone)]
pub struct AttentionWeights {
    pub kind: AttnKind,
    pub wq_a: Linear,
    pub q_norm: Vec<f32>,
    pub wq_b: Linear,
    pub wkv: Linear,
    pub kv_norm: Vec<f32>,
    /// One `[o_lora, heads_per_group·head_dim]` projection per group.
    pub wo_a: Vec<Linear>,
    pub wo_b: Linear,
    pub sinks: Vec<f32>,
    pub compressor: Option<Compressor>,
    pub indexer: Option<Indexer>,
}

#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub hc_attn: HyperConnection,
    pub hc_ffn: HyperConnection,
    pub attn: AttentionWeights,
    pub moe: MoeBlock,
}

#[derive(Debug, Clone)]
pub struct ModelWeights {
    pub embed: Linear,
    pub head: Linear,
    pub norm: Vec<f32>,
    pub hc_head: HyperHead,
    pub layers: Vec<LayerWeights>,
}

impl ModelWeights {
    /// The storage formats of the routed experts (for the MoE backend choice).
    pub fn expert_formats(&self) -> std::collections::BTreeSet<crate::quant::Format> {
        self.layers
            .iter()
            .flat_map(|l| l.moe.experts.iter())
            .flat_map(|e| [e.w1.data.format(), e.w2.data.format(), e.w3.data.format()])
            .collect()
    }
}

struct Loader<'a> {
    ck: &'a Checkpoint,
    cfg: &'a ModelConfig,
    quant: &'a QuantConfig,
}

impl Loader<'_> {
    fn vec(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.ck.get_shaped(name, shape)?.to_f32()
    }

    fn linear(&self, prefix: &str, out: usize, inp: usize) -> Result<Linear> {
        load_linear(self.ck, self.quant, prefix, out, inp)
    }

    fn hc(&self, prefix: &str) -> Result<HyperConnection> {
        let c = self.cfg;
        let mix = c.hc_mix();
        Ok(HyperConnection {
            fn_w: self.vec(&format!("{prefix}_fn"), &[mix, c.hc_dim()])?,
            base: self.vec(&format!("{prefix}_base"), &[mix])?,
            scale: self.vec(&format!("{prefix}_scale"), &[3])?,
            hc: c.hc_mult,
            sinkhorn_iters: c.hc_sinkhorn_iters,
            hc_eps: c.hc_eps,
            norm_eps: c.rms_norm_eps,
        })
    }

    fn compressor(
        &self,
        prefix: &str,
        ratio: usize,
        dim: usize,
        overlap: bool,
    ) -> Result<Compressor> {
        let c = self.cfg;
        let width = if overlap { 2 * dim } else { dim };
        Ok(Compressor {
            wkv: self.linear(&format!("{prefix}.wkv"), width, c.hidden_size)?,
            wgate: self.linear(&format!("{prefix}.wgate"), width, c.hidden_size)?,
            ape: self.vec(&format!("{prefix}.ape"), &[ratio, width])?,
            norm: self.vec(&format!("{prefix}.norm.weight"), &[dim])?,
            ratio,
            dim,
            overlap,
            eps: c.rms_norm_eps,
        })
    }

    fn attention(&self, l: usize, kind: AttnKind) -> Result<AttentionWeights> {
        let c = self.cfg;
        let p = format!("layers.{l}.attn");
        let (h, hd, d) = (c.num_heads, c.head_dim, c.hidden_size);
        let group_in = h * hd / c.o_groups;
        let (compressor, indexer) = match kind {
            AttnKind::Sliding => (None, None),
            AttnKind::Hca { ratio } => (
                Some(self.compressor(&format!("{p}.compressor"), ratio, hd, false)?),
                None,
            ),
            AttnKind::Csa { ratio } => {
                let ix = Indexer {
                    compressor: self.compressor(
                        &format!("{p}.indexer.compressor"),
                        ratio,
                        c.index_head_dim,
                        true,
                    )?,
                    wq_b: self.linear(
                        &format!("{p}.indexer.wq_b"),
                        c.index_n_heads * c.index_head_dim,
                        c.q_lora_rank,
                    )?,
                    weights_proj: self.linear(
                        &format!("{p}.indexer.weights_proj"),
                        c.index_n_heads,
                        d,
                    )?,
                    heads: c.index_n_heads,
                    dim: c.index_head_dim,
                    topk: c.index_topk,
                };
                (
                    Some(self.compressor(&format!("{p}.compressor"), ratio, hd, true)?),
                    Some(ix),
                )
            }
        };
        Ok(AttentionWeights {
            kind,
            wq_a: self.linear(&format!("{p}.wq_a"), c.q_lora_rank, d)?,
            q_norm: self.vec(&format!("{p}.q_norm.weight"), &[c.q_lora_rank])?,
            wq_b: self.linear(&format!("{p}.wq_b"), h * hd, c.q_lora_rank)?,
            wkv: self.linear(&format!("{p}.wkv"), hd, d)?,
            kv_norm: self.vec(&format!("{p}.norm.weight"), &[hd])?,
            wo_a: self
                .linear(&format!("{p}.wo_a"), c.o_groups * c.o_lora_rank, group_in)?
                .split_rows(c.o_groups),
            wo_b: self.linear(&format!("{p}.wo_b"), d, c.o_groups * c.o_lora_rank)?,
            sinks: self.vec(&format!("{p}.attn_sink"), &[h])?,
            compressor,
            indexer,
        })
    }

    fn expert(&self, prefix: &str, inter: usize) -> Result<Expert> {
        let d = self.cfg.hidden_size;
        let w1 = self.linear(&format!("{prefix}.w1"), inter, d)?;
        let w3 = self.linear(&format!("{prefix}.w3"), inter, d)?;
        // Engines fuse gate and up into one GEMM with one set of global scales.
        let (f1, f3) = (w1.data.format(), w3.data.format());
        if f1 != f3 && (f1.kind() != Kind::Dense || f3.kind() != Kind::Dense) {
            return Err(EngineError::Quantization {
                module: prefix.to_string(),
                message: format!(
                    "w1 (gate) is {f1} but w3 (up) is {f3}; the fused gate/up pair must share \
                     one format"
                ),
            });
        }
        Ok(Expert {
            w1,
            w2: self.linear(&format!("{prefix}.w2"), d, inter)?,
            w3,
            limit: self.cfg.swiglu_limit,
        })
    }

    fn moe(&self, l: usize, kind: MlpKind) -> Result<MoeBlock> {
        let c = self.cfg;
        let p = format!("layers.{l}.ffn");
        let (e, k) = (c.n_routed_experts, c.num_experts_per_tok);
        let selection = match kind {
            MlpKind::Moe => Selection::TopK {
                bias: self.vec(&format!("{p}.gate.bias"), &[e])?,
            },
            MlpKind::HashMoe => {
                let name = format!("{p}.gate.tid2eid");
                let ids = self.ck.get_shaped(&name, &[c.vocab_size, k])?.to_i64()?;
                if let Some(bad) = ids.iter().find(|&&x| x < 0 || x as usize >= e) {
                    return Err(EngineError::BadTensor {
                        name,
                        message: format!("expert id {bad} is outside 0..{e}"),
                    });
                }
                Selection::Hash {
                    tid2eid: ids.iter().map(|&x| x as u32).collect(),
                    vocab: c.vocab_size,
                }
            }
        };
        let router = Router {
            weight: self.linear(&format!("{p}.gate"), e, c.hidden_size)?,
            selection,
            scoring: c.scoring_func,
            top_k: k,
            routed_scaling_factor: c.routed_scaling_factor,
            norm_topk_prob: c.norm_topk_prob,
        };
        let experts = (0..e)
            .map(|x| self.expert(&format!("{p}.experts.{x}"), c.moe_intermediate_size))
            .collect::<Result<Vec<_>>>()?;
        let shared = if c.n_shared_experts > 0 {
            Some(self.expert(&format!("{p}.shared_experts"), c.shared_intermediate_size())?)
        } else {
            None
        };
        Ok(MoeBlock {
            router,
            experts,
            shared,
        })
    }
}

impl ModelWeights {
    /// Loads with the quantization config found next to the checkpoint (`config.json`,
    /// `hf_quant_config.json`).
    pub fn load(ck: &Checkpoint, cfg: &ModelConfig) -> Result<Self> {
        Self::load_with(ck, cfg, &QuantConfig::from_dir(ck.dir())?)
    }

    pub fn load_with(ck: &Checkpoint, cfg: &ModelConfig, quant: &QuantConfig) -> Result<Self> {
        let ld = Loader { ck, cfg, quant };
        let (v, d) = (cfg.vocab_size, cfg.hidden_size);
        let embed = ld.linear("embed", v, d)?;
        let head = if ck.contains("head.weight") || !cfg.tie_word_embeddings {
            ld.linear("head", v, d)?
        } else {
            embed.clone()
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            tracing::debug!(layer = l, of = cfg.num_layers, "loading layer");
            layers.push(LayerWeights {
                attn_norm: ld.vec(&format!("layers.{l}.attn_norm.weight"), &[d])?,
                ffn_norm: ld.vec(&format!("layers.{l}.ffn_norm.weight"), &[d])?,
                hc_attn: ld.hc(&format!("layers.{l}.hc_attn"))?,
                hc_ffn: ld.hc(&format!("layers.{l}.hc_ffn"))?,
                attn: ld.attention(l, cfg.layer_kinds[l])?,
                moe: ld.moe(l, cfg.mlp_kinds[l])?,
            });
        }
        let hc = cfg.hc_mult;
        Ok(ModelWeights {
            embed,
            head,
            norm: ld.vec("norm.weight", &[d])?,
            hc_head: HyperHead {
                fn_w: ld.vec("hc_head_fn", &[hc, cfg.hc_dim()])?,
                base: ld.vec("hc_head_base", &[hc])?,
                scale: ld.vec("hc_head_scale", &[1])?[0],
                hc,
                hc_eps: cfg.hc_eps,
                norm_eps: cfg.rms_norm_eps,
            },
            layers,
        })
    }
}

impl ModelWeights {
    /// Visits every linear layer with its official module name (the groups of the split
    /// `wo_a` share one name). Calibration attaches observers through it.
    pub fn for_each_linear(&mut self, f: &mut dyn FnMut(&str, &mut Linear)) {
        f("embed", &mut self.embed);
        f("head", &mut self.head);
        for (l, lw) in self.layers.iter_mut().enumerate() {
            let a = format!("layers.{l}.attn");
            let at = &mut lw.attn;
            f(&format!("{a}.wq_a"), &mut at.wq_a);
            f(&format!("{a}.wq_b"), &mut at.wq_b);
            f(&format!("{a}.wkv"), &mut at.wkv);
            for g in &mut at.wo_a {
                f(&format!("{a}.wo_a"), g);
            }
            f(&format!("{a}.wo_b"), &mut at.wo_b);
            if let Some(c) = &mut at.compressor {
                f(&format!("{a}.compressor.wkv"), &mut c.wkv);
                f(&format!("{a}.compressor.wgate"), &mut c.wgate);
            }
            if let Some(ix) = &mut at.indexer {
                f(&format!("{a}.indexer.wq_b"), &mut ix.wq_b);
                f(&format!("{a}.indexer.weights_proj"), &mut ix.weights_proj);
                f(
                    &format!("{a}.indexer.compressor.wkv"),
                    &mut ix.compressor.wkv,
                );
                f(
                    &format!("{a}.indexer.compressor.wgate"),
                    &mut ix.compressor.wgate,
                );
            }
            let p = format!("layers.{l}.ffn");
            f(&format!("{p}.gate"), &mut lw.moe.router.weight);
            for (e, ex) in lw.moe.experts.iter_mut().enumerate() {
                f(&format!("{p}.experts.{e}.w1"), &mut ex.w1);
                f(&format!("{p}.experts.{e}.w3"), &mut ex.w3);
                f(&format!("{p}.experts.{e}.w2"), &mut ex.w2);
            }
            if let Some(s) = &mut lw.moe.shared {
                f(&format!("{p}.shared_experts.w1"), &mut s.w1);
                f(&format!("{p}.shared_experts.w3"), &mut s.w3);
                f(&format!("{p}.shared_experts.w2"), &mut s.w2);
            }
        }
    }
}
