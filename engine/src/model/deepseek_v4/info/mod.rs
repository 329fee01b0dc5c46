//! `amdahl info`: what a DeepSeek-V4 checkpoint is, read from its config and safetensors headers
//! without loading weights — architecture, parameters, bytes by storage format, per-layer
//! quantization (validated against the quantization config, like the loader does), cache bytes
//! per token, and which MoE backends could run its experts on a device.
//!
//! Cache accounting (model-spec §3.3b, §3.4), per layer of compression ratio m (0 = sliding):
//! every layer keeps a ring of `window` raw rows; m > 0 layers add one compressed row per m
//! tokens, CSA layers also one indexer key per m tokens. Ours (CPU) stores every row as f32
//! (`head_dim`·4 B, indexer `index_head_dim`·4 B). The FlashMLA layout stores a row as FP8 nope
//! dims + BF16 rope dims + one UE8M0 scale per 64 nope dims padded to 8 B (584 B for V4's
//! 448 + 64), and indexer keys as FP4 + one E8M0 scale per 32 dims (68 B for 128 dims).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::checkpoint::{Checkpoint, Dtype};
use crate::config::{AttnKind, MlpKind, ModelConfig};
use crate::error::Result;
use crate::ops::moe::backends::{self, Device, MoeBackend};
use crate::quant::load::{SCALE_SUFFIXES, probe_checked};
use crate::quant::{Format, QuantConfig, Role};

use super::modules::linear_modules;

/// Cache bytes of one sequence: growth per token and the per-sequence part that does not grow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheBytes {
    pub per_token: f64,
    /// Rings of raw rows, plus (CPU) the compressors' partial windows at their largest.
    pub fixed: f64,
}

/// Cache accounting in our CPU format and in the FlashMLA layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvBytes {
    pub cpu: CacheBytes,
    pub flashmla: CacheBytes,
    /// Bytes of one FlashMLA KV row (584 for V4).
    pub flashmla_row: usize,
}

/// Formats found in one layer, per part of the layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerQuant {
    pub attn: AttnKind,
    pub mlp: MlpKind,
    /// Part (attention, compressor, router, experts, shared) → format → module count.
    pub parts: BTreeMap<&'static str, BTreeMap<Format, usize>>,
}

/// Everything `amdahl info` reports.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub cfg: ModelConfig,
    pub quant: QuantConfig,
    /// Logical parameters (FP4 codes count as one each; scales are not parameters).
    pub params: u64,
    /// Parameters a token touches: everything but the routed experts it does not pick.
    pub active_params: u64,
    /// Linear weights (with their scales) per format, then other tensors per dtype.
    pub bytes_by_format: BTreeMap<String, u64>,
    pub total_bytes: u64,
    pub layers: Vec<LayerQuant>,
    pub expert_formats: BTreeSet<Format>,
    pub kv: KvBytes,
}

fn part_of(role: Role) -> &'static str {
    match role {
        Role::Attention => "attention",
        Role::Compressor => "compressor",
        Role::Router => "router",
        Role::RoutedExpert => "experts",
        Role::SharedExpert => "shared",
        Role::Embedding | Role::Head | Role::Other => "other",
    }
}

/// Cache bytes from the config alone.
pub fn kv_bytes(c: &ModelConfig) -> KvBytes {
    let (hd, ih, w) = (c.head_dim, c.index_head_dim, c.sliding_window);
    let nope = hd - c.rope_dim;
    let row = nope + 2 * c.rope_dim + nope.div_ceil(64).next_multiple_of(8);
    let index_row = ih / 2 + ih / 32;
    let mut cpu = CacheBytes {
        per_token: 0.0,
        fixed: 0.0,
    };
    let mut fm = CacheBytes {
        per_token: 0.0,
        fixed: 0.0,
    };
    for kind in &c.layer_kinds {
        cpu.fixed += (4 * w * hd) as f64;
        fm.fixed += (row * w) as f64;
        let m = kind.ratio();
        if m == 0 {
            continue;
        }
        let csa = matches!(kind, AttnKind::Csa { .. });
        cpu.per_token += (4 * hd) as f64 / m as f64;
        fm.per_token += row as f64 / m as f64;
        // Partial window: kv + gate rows of width (2×dim when overlapping), plus the previous
        // window's first half (kv + gate, m × dim each) for overlapping compressors.
        let width = if csa { 2 * hd } else { hd };
        cpu.fixed += (4 * 2 * m * width) as f64 + if csa { (4 * 2 * m * hd) as f64 } else { 0.0 };
        if csa {
            cpu.per_token += (4 * ih) as f64 / m as f64;
            cpu.fixed += (4 * 2 * m * 2 * ih + 4 * 2 * m * ih) as f64;
            fm.per_token += index_row as f64 / m as f64;
        }
    }
    KvBytes {
        cpu,
        flashmla: fm,
        flashmla_row: row,
    }
}

fn is_scale(name: &str) -> bool {
    SCALE_SUFFIXES
        .iter()
        .any(|s| name.ends_with(&format!(".{s}")))
}

/// Surveys the model folder `dir`.
pub fn survey(dir: &Path) -> Result<ModelInfo> {
    let cfg = ModelConfig::from_path(dir)?;
    let quant = QuantConfig::from_dir(dir)?;
    let ck = Checkpoint::open(dir)?;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut bytes_by_format: BTreeMap<String, u64> = BTreeMap::new();
    let mut layers: Vec<LayerQuant> = cfg
        .layer_kinds
        .iter()
        .zip(&cfg.mlp_kinds)
        .map(|(&attn, &mlp)| LayerQuant {
            attn,
            mlp,
            parts: BTreeMap::new(),
        })
        .collect();
    let (mut params, mut expert_params) = (0u64, 0u64);
    let mut expert_formats = BTreeSet::new();
    for m in linear_modules(&cfg) {
        if m.name == "head" && !ck.contains("head.weight") && cfg.tie_word_embeddings {
            continue;
        }
        let p = probe_checked(&ck, &quant, &m.name, m.out, m.inp)?;
        seen.insert(format!("{}.weight", m.name));
        for s in SCALE_SUFFIXES {
            seen.insert(format!("{}.{s}", m.name));
        }
        *bytes_by_format
            .entry(format!("linear {}", p.format))
            .or_default() += p.bytes() as u64;
        params += m.params() as u64;
        let role = m.role();
        if role == Role::RoutedExpert {
            expert_params += m.params() as u64;
            expert_formats.insert(p.format);
        }
        if let Some(l) = m.layer {
            *layers[l]
                .parts
                .entry(part_of(role))
                .or_default()
                .entry(p.format)
                .or_default() += 1;
        }
    }
    for name in ck.names() {
        if seen.contains(name) {
            continue;
        }
        let t = ck.get(name)?;
        let key = if name.starts_with("mtp.") {
            format!("mtp (not loaded) {}", t.dtype)
        } else if is_scale(name) {
            format!("scales of other modules {}", t.dtype)
        } else {
            if !matches!(t.dtype, Dtype::I64 | Dtype::I32) {
                params += t.numel() as u64;
            }
            format!("other {}", t.dtype)
        };
        *bytes_by_format.entry(key).or_default() += t.bytes.len() as u64;
    }
    let total_bytes = bytes_by_format.values().sum();
    // Every layer has the same experts, so a token touches k/E of the routed parameters.
    let picked =
        expert_params * cfg.num_experts_per_tok as u64 / (cfg.n_routed_experts as u64).max(1);
    Ok(ModelInfo {
        kv: kv_bytes(&cfg),
        active_params: params - expert_params + picked,
        cfg,
        quant,
        params,
        bytes_by_format,
        total_bytes,
        layers,
        expert_formats,
    })
}

impl ModelInfo {
    /// Every MoE backend with whether it can run this checkpoint's experts on `device`.
    pub fn backends(&self, device: Device) -> Vec<(MoeBackend, std::result::Result<(), String>)> {
        backends::evaluate(&self.expert_formats, device)
    }
}

#[cfg(test)]
mod tests;
