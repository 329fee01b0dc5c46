//! `amdahl profile`: decode steps of a dummy-weight DeepSeek-V4-Flash (real widths, random
//! weights generated on the GPU) at several batch sizes, replayed as CUDA graphs; prints per
//! batch the per-layer decode time, each stage's device time, bytes, achieved bandwidth against
//! the copy bandwidth measured in the same run, launch sizes against the SMs, and the Amdahl
//! projections.

use std::path::PathBuf;

use amdahl_engine::device::profiling::{ExpertFormat, ProfileOptions, ProfileReport};
use amdahl_engine::profile::Stage;
use amdahl_engine::profile::report::Report;
use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dummy model to build on the device (random weights, real widths): `v4-flash`.
    #[arg(long, default_value = "v4-flash")]
    dummy: String,
    /// Layers of the model (V4-Flash has 43; 4 fit in seconds).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Batch sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    batch: Vec<usize>,
    /// Tokens already in every sequence's cache.
    #[arg(long, default_value_t = 8192)]
    ctx: usize,
    /// Routed-expert format: nvfp4, mxfp4, fp8, bf16.
    #[arg(long, default_value = "nvfp4")]
    expert_format: String,
    /// Device (cuda:N).
    #[arg(long, default_value = "cuda:0")]
    device: String,
    /// Graph replays timed per batch size.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the measurements as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.dummy != "v4-flash" {
        bail!("--dummy {}: the dummy model available is v4-flash", a.dummy);
    }
    let ordinal = match a.device.strip_prefix("cuda") {
        Some(rest) => rest.trim_start_matches(':').parse().unwrap_or(0),
        None => bail!(
            "--device {}: profiling a dummy V4-Flash needs a GPU (cuda:N)",
            a.device
        ),
    };
    if a.batch.is_empty() || a.batch.contains(&0) {
        bail!("--batch needs positive batch sizes");
    }
    let o = ProfileOptions {
        ordinal,
        layers: a.layers,
        batches: a.batch.clone(),
        ctx: a.ctx,
        expert_format: a.expert_format.parse::<ExpertFormat>()?,
        steps: a.steps.max(1),
        seed: a.seed,
    };
    eprintln!(
        "profile: building a dummy V4-Flash ({} layers, {} experts) on {} and measuring its peaks…",
        o.layers, a.expert_format, a.device
    );
    let rep = amdahl_engine::device::profile_dummy(&o).context("profiling")?;
    print!("{}", render(&rep));
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&to_json(&rep))?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn gb(x: f64) -> f64 {
    x / 1e9
}

pub fn render(r: &ProfileReport) -> String {
    let mut s = String::new();
    let d = &r.device;
    s += &format!(
        "device {} ({}, sm_{}{}, {} SMs, {:.0} GiB); copy bandwidth {:.0} GB/s, bf16 GEMM {:.0} TFLOP/s (measured)\n",
        d.label,
        d.name,
        d.compute_capability.0,
        d.compute_capability.1,
        d.sms,
        d.total_mem as f64 / (1u64 << 30) as f64,
        gb(r.peaks.bandwidth),
        r.peaks.flops / 1e12
    );
    s += &format!(
        "model: dummy DeepSeek-V4-Flash widths, {} layers, routed experts {}, {:.2} GB of weights; context {} tokens\n",
        r.layers,
        r.expert_format,
        gb(r.weight_bytes as f64),
        r.ctx
    );
    for b in &r.batches {
        let per_layer =
            (b.step_seconds - b.clock.get(Stage::Head).as_secs_f64()).max(0.0) / r.layers as f64;
        s += &format!(
            "\nbatch {}: step {:.3} ms (graph), {:.3} ms per layer, {:.0} tok/s for these layers; eager {:.3} ms; \
             timed replay {:.3} ms (profiling overhead {:+.1}%); host {:.3} ms per step ({:.1}% of GPU time); \
             {:.1} routed experts touched per MoE layer\n",
            b.batch,
            b.step_seconds * 1e3,
            per_layer * 1e3,
            b.batch as f64 / b.step_seconds,
            b.eager_step_seconds * 1e3,
            b.timed_step_seconds * 1e3,
            100.0 * (b.timed_step_seconds / b.step_seconds - 1.0),
            b.host_seconds * 1e3,
            100.0 * b.host_seconds / b.step_seconds,
            b.experts_touched
        );
        let rep = Report::build(&b.clock, b.timed_step_seconds, Some(r.peaks));
        s += &format!(
            "{:<10} {:>10} {:>7} {:>10} {:>9} {:>8} {:>8} {:>9} {:>12}\n",
            "stage", "ms/step", "share", "MB", "GB/s", "%copy", "floor", "launches", "blocks/SMs"
        );
        for l in &rep.lines {
            let i = Stage::ALL.iter().position(|x| *x == l.stage).unwrap_or(7);
            if l.seconds <= 0.0 && b.launches[i] == 0 {
                continue;
            }
            let blocks = if b.launches[i] > 0 {
                format!("{:.1}/{}", b.blocks[i] as f64 / b.launches[i] as f64, d.sms)
            } else {
                "-".into()
            };
            s += &format!(
                "{:<10} {:>10.4} {:>6.1}% {:>10.2} {:>9.0} {:>7.1}% {:>7.1}% {:>9} {:>12}\n",
                l.stage.label(),
                l.seconds * 1e3,
                100.0 * l.share,
                l.bytes as f64 / 1e6,
                gb(l.bandwidth),
                100.0 * l.bandwidth / r.peaks.bandwidth,
                100.0 * l.efficiency.unwrap_or(0.0),
                b.launches[i],
                blocks
            );
        }
        for line in rep.sentences("decode") {
            s += &format!("  - {line}\n");
        }
    }
    s
}

fn to_json(r: &ProfileReport) -> serde_json::Value {
    let batches: Vec<serde_json::Value> = r
        .batches
        .iter()
        .map(|b| {
            let stages: serde_json::Map<String, serde_json::Value> = Stage::ALL
                .iter()
                .map(|&st| {
                    (
                        st.label().to_string(),
                        serde_json::json!({
                            "seconds": b.clock.get(st).as_secs_f64(),
                            "bytes": b.clock.bytes(st),
                            "flops": b.clock.flops(st),
                        }),
                    )
                })
                .collect();
            serde_json::json!({
                "batch": b.batch,
                "step_seconds": b.step_seconds,
                "timed_step_seconds": b.timed_step_seconds,
                "eager_step_seconds": b.eager_step_seconds,
                "host_seconds": b.host_seconds,
                "experts_touched": b.experts_touched,
                "launches": b.launches,
                "blocks": b.blocks,
                "max_blocks": b.max_blocks,
                "stages": stages,
            })
        })
        .collect();
    serde_json::json!({
        "device": r.device.label, "name": r.device.name, "sms": r.device.sms,
        "copy_bandwidth": r.peaks.bandwidth, "gemm_flops": r.peaks.flops,
        "layers": r.layers, "ctx": r.ctx, "expert_format": r.expert_format,
        "weight_bytes": r.weight_bytes, "batches": batches,
    })
}
