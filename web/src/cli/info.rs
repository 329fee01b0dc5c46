//! `amdahl info`: a checkpoint's architecture, parameters, bytes by format, per-layer
//! quantization, cache bytes per token, and the MoE backends that could run it.

use std::path::PathBuf;

use amdahl_engine::config::{AttnKind, MlpKind};
use amdahl_engine::model::deepseek_v4::info::{CacheBytes, ModelInfo, survey};
use amdahl_engine::ops::moe::backends::{self, Choice, Device};
use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Also evaluate MoE backends for these GPUs (e.g. sm_90, sm_100, sm_120).
    #[arg(long, value_delimiter = ',')]
    gpu: Vec<String>,
    /// Check one MoE backend choice (auto, dequant, fp8, native-fp4, bf16, cpu) on every device
    /// shown; fails if a device cannot run it.
    #[arg(long)]
    moe_backend: Option<String>,
}

fn human(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

fn architecture(i: &ModelInfo) -> Vec<String> {
    let c = &i.cfg;
    let count = |f: &dyn Fn(&AttnKind) -> bool| c.layer_kinds.iter().filter(|k| f(k)).count();
    let ratios: std::collections::BTreeSet<usize> = c
        .layer_kinds
        .iter()
        .map(|k| k.ratio())
        .filter(|&r| r > 0)
        .collect();
    vec![
        format!(
            "DeepSeek-V4: {} layers ({} sliding, {} CSA, {} HCA; compress ratios {:?}), hidden {}, vocab {}",
            c.num_layers,
            count(&|k| matches!(k, AttnKind::Sliding)),
            count(&|k| matches!(k, AttnKind::Csa { .. })),
            count(&|k| matches!(k, AttnKind::Hca { .. })),
            ratios,
            c.hidden_size,
            c.vocab_size
        ),
        format!(
            "attention: {} heads × {} (rope {}), one shared K=V head, q_lora {}, {} output groups × {}, window {}, indexer {} heads × {} top-{}",
            c.num_heads,
            c.head_dim,
            c.rope_dim,
            c.q_lora_rank,
            c.o_groups,
            c.o_lora_rank,
            c.sliding_window,
            c.index_n_heads,
            c.index_head_dim,
            c.index_topk
        ),
        format!(
            "moe: {} routed experts (top {}) × {} + {} shared, {} hash-routed layers, hyper-connections × {}",
            c.n_routed_experts,
            c.num_experts_per_tok,
            c.moe_intermediate_size,
            c.n_shared_experts,
            c.mlp_kinds
                .iter()
                .filter(|k| **k == MlpKind::HashMoe)
                .count(),
            c.hc_mult
        ),
    ]
}

fn cache_line(c: &CacheBytes) -> String {
    format!(
        "{:.2} B/token + {} per sequence",
        c.per_token,
        human(c.fixed)
    )
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = super::model_dir(a.model)?;
    let i = survey(&dir).with_context(|| format!("surveying {}", dir.display()))?;
    println!("model: {}", dir.display());
    for line in architecture(&i) {
        println!("  {line}");
    }
    println!(
        "parameters: {} total, {} active per token",
        i.params, i.active_params
    );
    println!("quantization: {}", i.quant.summary());
    println!("bytes by format:");
    for (k, b) in &i.bytes_by_format {
        println!(
            "  {k:<40} {:>12}  {:5.1}%",
            human(*b as f64),
            100.0 * *b as f64 / i.total_bytes.max(1) as f64
        );
    }
    println!("  {:<40} {:>12}", "total", human(i.total_bytes as f64));
    println!("per-layer quantization (part: format × modules):");
    for (l, lq) in i.layers.iter().enumerate() {
        let parts: Vec<String> = lq
            .parts
            .iter()
            .map(|(part, fmts)| {
                let f: Vec<String> = fmts.iter().map(|(f, n)| format!("{f}×{n}")).collect();
                format!("{part}: {}", f.join(" "))
            })
            .collect();
        let mlp = if lq.mlp == MlpKind::HashMoe {
            "hash"
        } else {
            "topk"
        };
        println!(
            "  layer {l:>3} {:<28} {mlp:<4} | {}",
            lq.attn.label(),
            parts.join(" | ")
        );
    }
    println!("kv cache:");
    println!(
        "  ours (CPU, f32 rows)                   {}",
        cache_line(&i.kv.cpu)
    );
    println!(
        "  FlashMLA layout ({} B rows, FP4 index) {}",
        i.kv.flashmla_row,
        cache_line(&i.kv.flashmla)
    );
    let fmts: Vec<&str> = i.expert_formats.iter().map(|f| f.name()).collect();
    println!(
        "MoE backends (routed experts stored as {}):",
        fmts.join(", ")
    );
    let mut devices = vec![("this machine", Device::Cpu)];
    for g in &a.gpu {
        devices.push(("--gpu", Device::parse(g)?));
    }
    let mut failed = None;
    for (label, d) in devices {
        let auto = backends::choose(Choice::Auto, &i.expert_formats, d).ok();
        println!(
            "  {d} ({label}){}",
            if label == "this machine" {
                ": this build runs the CPU backend (no CUDA device layer yet)"
            } else {
                ""
            }
        );
        for (b, r) in i.backends(d) {
            let mark = if Some(b) == auto { " (auto)" } else { "" };
            match r {
                Ok(()) => println!("    {:<11} yes{mark}", b.name()),
                Err(why) => println!("    {:<11} no: {why}", b.name()),
            }
        }
        if let Some(req) = &a.moe_backend {
            match backends::choose(Choice::parse(req)?, &i.expert_formats, d) {
                Ok(b) => println!("    --moe-backend {req} → {}", b.name()),
                Err(e) => {
                    println!("    --moe-backend {req} → refused");
                    failed = Some(e);
                }
            }
        }
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(())
}
