//! DeepSeek-V4 (model-spec §3; paper "DeepSeek-V4", reference semantics of DeepSeek's
//! `inference/model.py` as quoted in the spec; parity reference HF transformers 5.17
//! `deepseek_v4`). The forward pass takes a batch of sequence chunks, each advancing its own
//! [`SeqState`]; a whole prompt, a prompt fed in chunks and token-by-token decode all go through
//! the same code, so they agree by construction.

mod attention;
pub mod info;
pub mod modules;
pub mod quantize;
pub mod synthetic;
pub mod weights;

use std::path::Path;

use rayon::prelude::*;

use crate::checkpoint::Checkpoint;
use crate::config::{AttnKind, ModelConfig};
use crate::error::{EngineError, Result};
use crate::kv_cache::{LayerCache, SeqState};
use crate::ops::norm::rms_norm_rows;
use crate::ops::rope::RopeTable;
use crate::parallel::{Ep, Shard};
use crate::profile::{Stage, StageClock};
use crate::tensor::Mat;
use attention::SeqSpan;
pub use weights::ModelWeights;

/// Numerics of the forward pass (ARCHITECTURE.md "Numerics modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Numerics {
    /// transformers' math: no simulated FP8 KV / FP4 indexer keys, no Hadamard. Used for
    /// parity tests. (DeepSeek's inference numerics are a separate, later mode.)
    #[default]
    Reference,
}

/// Which logits a sequence wants from a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    None,
    Last,
    All,
}

/// One sequence's part of a step: its next tokens and its state.
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    pub state: &'a mut SeqState,
    pub logits: LogitRows,
}

/// A loaded DeepSeek-V4 model.
#[derive(Debug)]
pub struct DeepseekV4 {
    pub cfg: ModelConfig,
    pub weights: ModelWeights,
    pub numerics: Numerics,
    rope_main: RopeTable,
    rope_compress: RopeTable,
}

impl DeepseekV4 {
    /// Loads `config.json` and the checkpoint from a model folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let cfg = ModelConfig::from_path(dir)?;
        let ck = Checkpoint::open(dir)?;
        Self::from_checkpoint(cfg, &ck)
    }

    pub fn from_checkpoint(cfg: ModelConfig, ck: &Checkpoint) -> Result<Self> {
        let weights = ModelWeights::load(ck, &cfg)?;
        Ok(Self {
            rope_main: RopeTable::new(&cfg.main_rope, cfg.rope_dim),
            rope_compress: RopeTable::new(&cfg.compress_rope, cfg.rope_dim),
            cfg,
            weights,
            numerics: Numerics::Reference,
        })
    }

    /// Keeps only the routed experts `shard` owns (the others become empty placeholders, so an
    /// expert-parallel worker holds 1/N of the expert weights).
    pub fn retain_experts(&mut self, shard: Shard) {
        for l in &mut self.weights.layers {
            for (e, ex) in l.moe.experts.iter_mut().enumerate() {
                if !shard.owns(e) {
                    for w in [&mut ex.w1, &mut ex.w2, &mut ex.w3] {
                        w.data = crate::ops::linear::WeightData::F32(Vec::new());
                    }
                }
            }
        }
    }

    /// A fresh, empty state for a new sequence.
    pub fn new_state(&self) -> SeqState {
        let c = &self.cfg;
        let layers = c
            .layer_kinds
            .iter()
            .map(|k| LayerCache {
                ring: vec![0.0; c.sliding_window * c.head_dim],
                compressor: (!matches!(k, AttnKind::Sliding)).then(Default::default),
                indexer: matches!(k, AttnKind::Csa { .. }).then(Default::default),
            })
            .collect();
        SeqState { pos: 0, layers }
    }

    /// Runs one step over every sequence's next tokens. Returns, per sequence, the logits rows
    /// it asked for (`[0|1|n, vocab]`).
    pub fn forward(&self, batch: &mut [SeqInput<'_>], clock: &mut StageClock) -> Result<Vec<Mat>> {
        self.forward_ep(batch, clock, None)
    }

    /// [`forward`](Self::forward) as one of several expert-parallel workers: each MoE layer
    /// computes this worker's experts and all-reduces the shares (charged to the `comm` stage
    /// with the bytes each rank sends and receives). Every worker returns the same logits.
    pub fn forward_ep(
        &self,
        batch: &mut [SeqInput<'_>],
        clock: &mut StageClock,
        ep: Option<Ep<'_>>,
    ) -> Result<Vec<Mat>> {
        let shard = ep.map_or(Shard::SOLE, |e| e.shard);
        let c = &self.cfg;
        let (d, hc) = (c.hidden_size, c.hc_mult);
        let mut tokens: Vec<u32> = Vec::new();
        let mut ranges = Vec::with_capacity(batch.len());
        for item in batch.iter() {
            if item.state.layers.len() != c.num_layers {
                return Err(EngineError::Cache(
                    "sequence state does not belong to this model".into(),
                ));
            }
            if let Some(bad) = item.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(EngineError::InvalidInput(format!(
                    "token id {bad} is outside the vocabulary (size {})",
                    c.vocab_size
                )));
            }
            let start = tokens.len();
            tokens.extend_from_slice(item.tokens);
            ranges.push(start..tokens.len());
        }
        let t = tokens.len();

        // Embedding, copied into every hyper-connection stream.
        let mut x = Mat::zeros(t, hc * d);
        x.data
            .par_chunks_mut(hc * d)
            .zip(&tokens)
            .for_each(|(row, &tok)| {
                let e = self.weights.embed.row(tok as usize);
                for s in row.chunks_exact_mut(d) {
                    s.copy_from_slice(&e);
                }
            });

        for (l, lw) in self.weights.layers.iter().enumerate() {
            let table = if c.layer_kinds[l].uses_compress_rope() {
                &self.rope_compress
            } else {
                &self.rope_main
            };
            let (mix, mut u) = clock.time(Stage::Mhc, || lw.hc_attn.pre(&x));
            let (hb, hf) = lw.hc_attn.work(t);
            clock.charge(Stage::Mhc, 2 * hb, 2 * hf);
            clock.time(Stage::AttnProj, || {
                rms_norm_rows(&mut u.data, &lw.attn_norm, c.rms_norm_eps)
            });
            let mut spans: Vec<SeqSpan<'_>> = batch
                .iter_mut()
                .zip(&ranges)
                .map(|(item, r)| SeqSpan {
                    rows: r.clone(),
                    start: item.state.pos,
                    cache: &mut item.state.layers[l],
                })
                .collect();
            let a = attention::forward(&lw.attn, c, table, &u, &mut spans, clock);
            clock.time(Stage::Mhc, || lw.hc_attn.post(&mix, &mut x, &a));

            let (mix, mut v) = clock.time(Stage::Mhc, || lw.hc_ffn.pre(&x));
            let t0 = std::time::Instant::now();
            rms_norm_rows(&mut v.data, &lw.ffn_norm, c.rms_norm_eps);
            let mut m = lw.moe.forward_shard(&v, &tokens, clock, shard)?;
            clock.add(Stage::Moe, t0.elapsed());
            if let Some(ep) = ep.filter(|e| e.comm.world() > 1) {
                clock.time(Stage::Comm, || {
                    ep.comm.all_reduce_sum(ep.shard.rank, &mut m.data)
                });
                // Ring all-reduce traffic per rank: 2·(N−1)/N of the buffer, sent and received.
                let n = ep.comm.world() as u64;
                let bytes = 4 * m.data.len() as u64;
                clock.charge(
                    Stage::Comm,
                    2 * 2 * (n - 1) * bytes / n,
                    m.data.len() as u64,
                );
            }
            clock.time(Stage::Mhc, || lw.hc_ffn.post(&mix, &mut x, &m));
        }

        for (item, r) in batch.iter_mut().zip(&ranges) {
            item.state.pos += r.len();
        }

        let mut head_work = (0u64, 0u64);
        let logits = clock.time(Stage::Head, || {
            let mut out = Vec::with_capacity(batch.len());
            for (item, r) in batch.iter().zip(&ranges) {
                let rows: Vec<usize> = match item.logits {
                    LogitRows::None => vec![],
                    LogitRows::Last => r.clone().last().into_iter().collect(),
                    LogitRows::All => r.clone().collect(),
                };
                if rows.is_empty() {
                    out.push(Mat::zeros(0, c.vocab_size));
                    continue;
                }
                let mut y = self.weights.hc_head.collapse(&x.gather_rows(&rows));
                rms_norm_rows(&mut y.data, &self.weights.norm, c.rms_norm_eps);
                out.push(self.weights.head.forward(&y));
                let (b, f) = self.weights.head.work(rows.len());
                head_work = (head_work.0 + b, head_work.1 + f);
            }
            out
        });
        clock.charge(Stage::Head, head_work.0, head_work.1);
        Ok(logits)
    }
}

#[cfg(test)]
mod tests;

impl DeepseekV4 {
    /// Greedy decoding without sampling: prefill `prompt`, then append the argmax token until
    /// `max_tokens` tokens were produced or an EOS id appears (the EOS is included).
    pub fn generate_greedy(&self, prompt: &[u32], max_tokens: usize) -> Result<Vec<u32>> {
        if prompt.is_empty() {
            return Err(EngineError::InvalidInput("the prompt is empty".into()));
        }
        let mut state = self.new_state();
        let mut clock = StageClock::default();
        let mut out = Vec::with_capacity(max_tokens);
        let mut next: Vec<u32> = prompt.to_vec();
        while out.len() < max_tokens {
            let mut batch = [SeqInput {
                tokens: &next,
                state: &mut state,
                logits: LogitRows::Last,
            }];
            let logits = self.forward(&mut batch, &mut clock)?;
            let tok = crate::ops::sampling::argmax(logits[0].row(0));
            out.push(tok);
            if self.cfg.eos_token_ids.contains(&tok) {
                break;
            }
            next = vec![tok];
        }
        Ok(out)
    }
}
