//! `quantize` / `dequantize` end to end on tiny random models: every format round-trips through
//! the loader, a quantized model's logits equal its dequantized twin's, mixed-precision
//! checkpoints load and generate, and damaged checkpoints are refused precisely.

mod errors;
mod mixed;
mod roundtrip;

use std::path::Path;

use super::super::synthetic::TinySpec;
use super::super::{DeepseekV4, LogitRows, SeqInput};
use super::{Plan, QuantizeFormat, QuantizeOptions, quantize_dir};
use crate::checkpoint::{Checkpoint, OwnedTensor};
use crate::profile::StageClock;
use crate::rng::Rng;
use crate::tensor::Mat;

/// A tiny model whose every quantized in_features is a multiple of 32 (FP4 blocks), except
/// wo_b's 16 (NVFP4's block), so every format applies.
fn spec() -> TinySpec {
    TinySpec {
        q_lora: 32,
        moe_inter: 32,
        o_lora: 8,
        ..TinySpec::default()
    }
}

fn opts() -> QuantizeOptions {
    QuantizeOptions {
        calib_tokens: 24,
        seed: 3,
        shard_bytes: 1 << 20,
    }
}

fn quantize(dense: &Path, out: &Path, format: QuantizeFormat, experts_only: bool) {
    let cfg = crate::config::ModelConfig::from_path(dense).unwrap();
    let plan = Plan::for_format(&cfg, format, experts_only);
    quantize_dir(dense, out, &plan, &opts()).unwrap();
}

fn tokens(vocab: usize, n: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(vocab) as u32).collect()
}

/// Logits of every position of one sequence, in one pass.
fn logits(m: &DeepseekV4, ids: &[u32]) -> Mat {
    let mut st = m.new_state();
    let mut batch = [SeqInput {
        tokens: ids,
        state: &mut st,
        logits: LogitRows::All,
    }];
    m.forward(&mut batch, &mut StageClock::default())
        .unwrap()
        .remove(0)
}

/// Every tensor of a checkpoint, owned (to damage and rewrite).
fn owned(dir: &Path) -> Vec<OwnedTensor> {
    let ck = Checkpoint::open(dir).unwrap();
    ck.names()
        .into_iter()
        .map(|n| {
            let t = ck.get(n).unwrap();
            OwnedTensor {
                name: n.to_string(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                data: t.bytes.to_vec(),
            }
        })
        .collect()
}

/// Replaces the checkpoint's weights with `tensors` (one file).
fn rewrite(dir: &Path, tensors: &[OwnedTensor]) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".safetensors") || name == "model.safetensors.index.json" {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    crate::checkpoint::safetensors::write_file(
        &dir.join("model.safetensors"),
        tensors,
        &Default::default(),
    )
    .unwrap();
}

/// Distances between two logit matrices: relative L2, max |Δ| / max |ref|, top-1 agreement.
#[derive(Debug, Clone, Copy)]
struct Distance {
    rel_l2: f64,
    rel_max: f64,
    top1: f64,
}

fn distance(got: &Mat, reference: &Mat) -> Distance {
    let (mut num, mut den, mut dmax, mut rmax) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (a, b) in got.data.iter().zip(&reference.data) {
        let d = (*a as f64) - (*b as f64);
        num += d * d;
        den += (*b as f64) * (*b as f64);
        dmax = dmax.max(d.abs());
        rmax = rmax.max((*b as f64).abs());
    }
    let argmax = |r: &[f32]| crate::ops::sampling::argmax(r);
    let agree = (0..got.rows)
        .filter(|&r| argmax(got.row(r)) == argmax(reference.row(r)))
        .count();
    Distance {
        rel_l2: (num / den).sqrt(),
        rel_max: dmax / rmax,
        top1: agree as f64 / got.rows as f64,
    }
}
