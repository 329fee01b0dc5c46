//! `amdahl profile`: decode steps of a dummy-weight DeepSeek-V4-Flash (real widths, random
//! weights generated on the GPU) at several batch sizes, replayed as CUDA graphs; prints per
//! batch the per-layer decode time, each stage's device time, bytes, achieved bandwidth against
//! the copy bandwidth measured in the same run, launch sizes against the SMs, the Amdahl
//! projections, and each stage's one-shot floor (its launches as pure reads of its bytes).

use std::path::PathBuf;

use amdahl_engine::device::profiling::{
    ExpertFormat, PrefillProfile, ProfileOptions, ProfileReport, ReadFloor, oneshot_seconds,
};
use amdahl_engine::profile::Stage;
use amdahl_engine::profile::report::{Peaks, Report, amdahl_gain};
use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dummy model to build on the device (random weights, real widths): `v4-flash`.
    #[arg(long, default_value = "v4-flash")]
    dummy: String,
    /// Profile this model folder on the CPU instead (`--device cpu`; default: the embedded
    /// model when `--device cpu` is given without it).
    #[arg(long)]
    model: Option<PathBuf>,
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
    /// After the decode batches, prefill one prompt of this many tokens (GPU; 0: none) and
    /// report its tokens/s per layer and the linears' fraction of the measured bf16 GEMM rate.
    #[arg(long, default_value_t = 0)]
    prefill: usize,
    /// Tokens per forward pass of that prefill.
    #[arg(long, default_value_t = 2048)]
    prefill_chunk: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.device == "cpu" {
        if a.prefill > 0 {
            bail!("--prefill is measured on a GPU (cuda:N); the CPU profile times decode steps");
        }
        let dir = super::model_dir(a.model.clone())?;
        let model = amdahl_engine::model::deepseek_v4::DeepseekV4::load(&dir)
            .with_context(|| format!("loading {}", dir.display()))?;
        eprintln!(
            "profile: {} on the CPU, context {} tokens, {} decode steps per batch size…",
            dir.display(),
            a.ctx,
            a.steps
        );
        let o = amdahl_engine::device::profiling::CpuProfileOptions {
            batches: a.batch.clone(),
            ctx: a.ctx,
            steps: a.steps.max(1),
            seed: a.seed,
        };
        let rep = amdahl_engine::device::profiling::profile_cpu(&model, &o)?;
        print!("{}", render(&rep));
        if let Some(p) = &a.json {
            std::fs::write(p, serde_json::to_string_pretty(&to_json(&rep))?)
                .with_context(|| format!("writing {}", p.display()))?;
        }
        return Ok(());
    }
    if a.model.is_some() {
        bail!(
            "--model is profiled on the CPU (--device cpu); on a GPU this build profiles the dummy V4-Flash"
        );
    }
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
        prefill: a.prefill,
        prefill_chunk: a.prefill_chunk.max(1),
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
    if d.sms == 0 {
        s += &format!(
            "device {} ({}); copy bandwidth {:.1} GB/s, linear {:.1} GFLOP/s f32 (measured)\n",
            d.label,
            d.name,
            gb(r.peaks.bandwidth),
            r.peaks.flops / 1e9
        );
    } else {
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
    }
    if d.sms == 0 {
        s += &format!(
            "model: {} layers, routed experts {}; context {} tokens (random)\n",
            r.layers, r.expert_format, r.ctx
        );
    } else {
        s += &format!(
            "model: dummy DeepSeek-V4-Flash widths, {} layers, routed experts {}, {:.2} GB of weights; context {} tokens\n",
            r.layers,
            r.expert_format,
            gb(r.weight_bytes as f64),
            r.ctx
        );
    }
    s += &format!("kernels: {}\n", r.kernels);
    s += &render_read_floors(&r.read_floors, r.peaks.bandwidth);
    let oneshot = |launches: u64, bytes: u64| oneshot_seconds(&r.read_floors, launches, bytes);
    for b in &r.batches {
        let per_layer =
            (b.step_seconds - b.clock.get(Stage::Head).as_secs_f64()).max(0.0) / r.layers as f64;
        if d.sms == 0 {
            s += &format!(
                "\nbatch {}: step {:.3} ms, {:.3} ms per layer, {:.0} tok/s (wall clock per stage)\n",
                b.batch,
                b.step_seconds * 1e3,
                per_layer * 1e3,
                b.batch as f64 / b.step_seconds
            );
        } else {
            s += &format!(
                "\nbatch {}: step {:.3} ms (graph), {:.3} ms per layer, {:.0} tok/s for these layers; eager {:.3} ms; \
             timed replay {:.3} ms (profiling overhead {:+.1}%); host {:.3} ms per step ({:.1}% of GPU time); \
             {:.1} routed experts touched per MoE layer (GPU)\n",
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
        }
        let rep = Report::build(&b.clock, b.timed_step_seconds, Some(r.peaks));
        s += &format!(
            "{:<10} {:>10} {:>9} {:>7} {:>10} {:>9} {:>8} {:>8} {:>9} {:>12} {:>10}\n",
            "stage",
            "ms/step",
            "eager ms",
            "share",
            "MB",
            "GB/s",
            "%copy",
            "floor",
            "launches",
            "blocks/SMs",
            "1-shot ms"
        );
        let (mut shot_sum, mut shot_launches) = (0.0, 0u64);
        let mut bounded = Vec::new();
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
            let shot = oneshot(b.launches[i], l.bytes);
            if let Some(t) = shot.filter(|&t| t > 0.0 && l.share >= 0.05) {
                bounded.push((l.stage, l.seconds, t, b.launches[i]));
            }
            shot_sum += shot.unwrap_or(0.0);
            shot_launches += b.launches[i];
            s += &format!(
                "{:<10} {:>10.4} {:>9.4} {:>6.1}% {:>10.2} {:>9.0} {:>7.1}% {:>7.1}% {:>9} {:>12} {:>10}\n",
                l.stage.label(),
                l.seconds * 1e3,
                b.eager_clock.get(l.stage).as_secs_f64() * 1e3,
                100.0 * l.share,
                l.bytes as f64 / 1e6,
                gb(l.bandwidth),
                100.0 * l.bandwidth / r.peaks.bandwidth,
                100.0 * l.efficiency.unwrap_or(0.0),
                b.launches[i],
                blocks,
                shot.map_or_else(|| "-".into(), |t| format!("{:.4}", t * 1e3))
            );
        }
        // The measure: a layer's bytes (every stage but the head) at the copy rate
        // against the layer's time.
        let layer_bytes = rep
            .lines
            .iter()
            .filter(|l| l.stage != Stage::Head)
            .map(|l| l.bytes as f64)
            .sum::<f64>()
            / r.layers as f64;
        if layer_bytes > 0.0 && per_layer > 0.0 && r.peaks.bandwidth > 0.0 {
            let at_copy = layer_bytes / r.peaks.bandwidth;
            s += &format!(
                "  - per layer: {:.1} MB read (every stage but the head), {:.3} ms at the copy rate: \
                 the layer's {:.3} ms run at {:.0}% of copy\n",
                layer_bytes / 1e6,
                at_copy * 1e3,
                per_layer * 1e3,
                100.0 * at_copy / per_layer
            );
        }
        if let Some(empty) = r.read_floors.first().filter(|_| shot_launches > 0) {
            s += &format!(
                "  - one-shot floor: the step's {} launches as pure reads of their stages' bytes would take {:.3} ms \
                 ({:.0}% of the graph's {:.3} ms), {:.3} ms of it the launches alone ({:.2} µs each)\n",
                shot_launches,
                shot_sum * 1e3,
                100.0 * shot_sum / b.step_seconds,
                b.step_seconds * 1e3,
                shot_launches as f64 * empty.seconds * 1e3,
                empty.seconds * 1e6
            );
        }
        for (stage, secs, shot, n) in bounded {
            let most = (secs / shot).max(1.0);
            s += &format!(
                "  - {} in its {} launches can be at most {:.1}× faster ({:+.0}% tok/s) before it needs fewer launches: \
                 as pure reads they take {:.4} ms\n",
                stage.label(),
                n,
                most,
                100.0 * amdahl_gain(rep.step_seconds, secs, most),
                shot * 1e3
            );
        }
        for line in rep.sentences("decode") {
            s += &format!("  - {line}\n");
        }
    }
    if let Some(p) = &r.prefill {
        s += &render_prefill(p, r.layers, &r.peaks);
    }
    s
}

/// The one-shot read table: per size, the time of one launch that only reads it, and its rate.
fn render_read_floors(floors: &[ReadFloor], copy: f64) -> String {
    if floors.is_empty() {
        return String::new();
    }
    let sizes: Vec<String> = floors
        .iter()
        .map(|f| {
            if f.bytes == 0 {
                format!("empty {:.2} µs", f.seconds * 1e6)
            } else {
                let rate = f.bytes as f64 / f.seconds;
                format!(
                    "{} MiB {:.1} µs ({:.0} GB/s, {:.0}% of copy)",
                    f.bytes >> 20,
                    f.seconds * 1e6,
                    gb(rate),
                    100.0 * rate / copy
                )
            }
        })
        .collect();
    format!(
        "one-shot reads (per launch, back to back in a graph, each reading its bytes once from DRAM): {}\n",
        sizes.join("; ")
    )
}

/// The prefill's summary line and its stage table (time, share, TFLOP/s, % of the GEMM rate).
fn render_prefill(p: &PrefillProfile, layers: usize, peaks: &Peaks) -> String {
    let tok_s = p.tokens as f64 / p.seconds;
    let gemm = p.gemm_flops_per_second();
    let mut s = format!(
        "\nprefill of {} tokens in chunks of {}: {:.1} ms, {:.0} tok/s for these {} layers, {:.0} tok/s per layer; \
         linears {:.1} TFLOP/s over their own stage time ({:.1}% of the measured bf16 GEMM rate)\n",
        p.tokens,
        p.chunk,
        p.seconds * 1e3,
        tok_s,
        layers,
        tok_s * layers as f64,
        gemm / 1e12,
        100.0 * gemm / peaks.flops
    );
    let total = p.clock.total().as_secs_f64();
    s += &format!(
        "{:<10} {:>10} {:>7} {:>10} {:>9}\n",
        "stage", "ms", "share", "TFLOP/s", "%GEMM"
    );
    for st in Stage::ALL {
        let t = p.clock.get(st).as_secs_f64();
        if t <= 0.0 {
            continue;
        }
        let f = p.clock.flops(st) as f64 / t;
        s += &format!(
            "{:<10} {:>10.3} {:>6.1}% {:>10.1} {:>8.1}%\n",
            st.label(),
            t * 1e3,
            100.0 * t / total.max(f64::MIN_POSITIVE),
            f / 1e12,
            100.0 * f / peaks.flops
        );
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
                .enumerate()
                .map(|(i, &st)| {
                    (
                        st.label().to_string(),
                        serde_json::json!({
                            "seconds": b.clock.get(st).as_secs_f64(),
                            "eager_seconds": b.eager_clock.get(st).as_secs_f64(),
                            "bytes": b.clock.bytes(st),
                            "flops": b.clock.flops(st),
                            "oneshot_seconds": oneshot_seconds(&r.read_floors, b.launches[i], b.clock.bytes(st)),
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
        "weight_bytes": r.weight_bytes, "kernels": r.kernels, "batches": batches,
        "read_floors": r.read_floors.iter().map(|f| serde_json::json!({
            "bytes": f.bytes, "seconds": f.seconds,
        })).collect::<Vec<_>>(),
        "prefill": r.prefill.as_ref().map(|p| serde_json::json!({
            "tokens": p.tokens, "chunk": p.chunk, "seconds": p.seconds,
            "gemm_flops": p.gemm_flops(), "gemm_flops_per_second": p.gemm_flops_per_second(),
            "stages": Stage::ALL.iter().map(|&st| (st.label().to_string(), serde_json::json!({
                "seconds": p.clock.get(st).as_secs_f64(),
                "bytes": p.clock.bytes(st),
                "flops": p.clock.flops(st),
            }))).collect::<serde_json::Map<String, serde_json::Value>>(),
        })),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use amdahl_engine::profile::StageClock;

    use super::*;

    #[test]
    fn prefill_line_reports_tokens_per_layer_and_the_gemm_fraction() {
        let mut clock = StageClock::default();
        // Linears: 6e12 FLOPs in 20 ms of stage time = 300 TFLOP/s; attention is not counted.
        clock.add_measured(Stage::AttnProj, Duration::from_millis(5));
        clock.charge(Stage::AttnProj, 1, 1_000_000_000_000);
        clock.add_measured(Stage::Moe, Duration::from_millis(15));
        clock.charge(Stage::Moe, 1, 5_000_000_000_000);
        clock.add_measured(Stage::Attention, Duration::from_millis(30));
        clock.charge(Stage::Attention, 1, 9_000_000_000_000);
        let p = PrefillProfile {
            tokens: 8192,
            chunk: 2048,
            seconds: 0.064,
            clock,
        };
        assert_eq!(p.gemm_flops(), 6_000_000_000_000);
        assert!((p.gemm_flops_per_second() - 3e14).abs() < 1e6);
        let peaks = Peaks {
            bandwidth: 4e12,
            flops: 6e14,
        };
        let s = render_prefill(&p, 4, &peaks);
        // 8192 tokens in 64 ms: 128000 tok/s for 4 layers, 512000 per layer; 300 of 600 TFLOP/s.
        assert!(
            s.contains("prefill of 8192 tokens in chunks of 2048: 64.0 ms, 128000 tok/s for these 4 layers, 512000 tok/s per layer"),
            "{s}"
        );
        assert!(s.contains("linears 300.0 TFLOP/s over their own stage time (50.0% of the measured bf16 GEMM rate)"), "{s}");
        // Stage rows: attention 30 of 50 ms at 300 TFLOP/s; the stages without time are left out.
        assert!(
            s.contains("attention      30.000   60.0%      300.0     50.0%"),
            "{s}"
        );
        assert!(!s.contains("mhc"), "{s}");
    }

    #[test]
    fn read_floor_line_gives_each_size_its_time_rate_and_share_of_copy() {
        let f = [(0, 2e-6), (1 << 20, 4e-6), (32 << 20, 16e-6)]
            .map(|(bytes, seconds)| ReadFloor { bytes, seconds });
        let s = render_read_floors(&f, 3e12);
        // 1 MiB in 4 µs: 262 GB/s, 9% of 3 TB/s; 32 MiB in 16 µs: 2097 GB/s, 70%.
        assert!(s.contains("empty 2.00 µs; 1 MiB 4.0 µs (262 GB/s, 9% of copy); 32 MiB 16.0 µs (2097 GB/s, 70% of copy)\n"), "{s}");
        assert_eq!(render_read_floors(&[], 3e12), "");
    }

    #[test]
    fn gpu_report_gives_each_stage_its_one_shot_floor_and_sums_them() {
        use amdahl_engine::device::profiling::{BatchProfile, DeviceFacts};
        // Two stages: attn_proj 4 launches reading 64 MiB (16 MiB each: 10 µs, so 40 µs) in
        // 100 µs; mhc 2 launches reading nothing (2 µs each) in 12 µs.
        let mut clock = StageClock::default();
        clock.add_measured(Stage::AttnProj, Duration::from_micros(100));
        clock.charge(Stage::AttnProj, 64 << 20, 1);
        clock.add_measured(Stage::Mhc, Duration::from_micros(12));
        clock.charge(Stage::Mhc, 0, 1);
        let mut launches = [0u64; 8];
        launches[0] = 2;
        launches[1] = 4;
        let batch = BatchProfile {
            batch: 1,
            step_seconds: 200e-6,
            timed_step_seconds: 200e-6,
            eager_step_seconds: 250e-6,
            host_seconds: 1e-6,
            clock: clock.clone(),
            eager_clock: clock,
            launches,
            blocks: [132; 8],
            max_blocks: [132; 8],
            experts_touched: 0.0,
        };
        let r = ProfileReport {
            device: DeviceFacts {
                label: "cuda:0".into(),
                name: "test GPU".into(),
                compute_capability: (9, 0),
                sms: 132,
                total_mem: 1 << 30,
            },
            peaks: Peaks {
                bandwidth: 3e12,
                flops: 8e14,
            },
            layers: 1,
            ctx: 8192,
            expert_format: "nvfp4".into(),
            weight_bytes: 0,
            batches: vec![batch],
            prefill: None,
            kernels: "test".into(),
            read_floors: [
                (0, 2e-6),
                (1 << 20, 3e-6),
                (16 << 20, 10e-6),
                (64 << 20, 28e-6),
            ]
            .map(|(bytes, seconds)| ReadFloor { bytes, seconds })
            .to_vec(),
        };
        let s = render(&r);
        assert!(s.contains("one-shot reads (per launch"), "{s}");
        let row = |stage: &str| {
            s.lines()
                .find(|l| l.starts_with(&format!("{stage} ")))
                .unwrap_or_else(|| panic!("no {stage} row in\n{s}"))
                .to_string()
        };
        assert!(row("attn_proj").ends_with("    0.0400"), "{s}");
        assert!(row("mhc").ends_with("    0.0040"), "{s}");
        // 44 µs of the 200-µs step; the 6 launches alone 12 µs.
        assert!(
            s.contains("one-shot floor: the step's 6 launches as pure reads of their stages' bytes would take 0.044 ms (22% of the graph's 0.200 ms), 0.012 ms of it the launches alone (2.00 µs each)"),
            "{s}"
        );
        // 64 MiB per layer at 3 TB/s: 22.4 µs of the layer's 200.
        assert!(
            s.contains("per layer: 67.1 MB read (every stage but the head), 0.022 ms at the copy rate: the layer's 0.200 ms run at 11% of copy\n"),
            "{s}"
        );
        // attn_proj: 100 µs against 40 as pure reads, 2.5× at most: 200 → 140 µs, +43% tok/s;
        // mhc (6% of the step) too: 12 against 4 µs, 3× at most: 200 → 192 µs.
        assert!(
            s.contains("attn_proj in its 4 launches can be at most 2.5× faster (+43% tok/s) before it needs fewer launches: as pure reads they take 0.0400 ms"),
            "{s}"
        );
        assert!(
            s.contains("mhc in its 2 launches can be at most 3.0× faster (+4% tok/s)"),
            "{s}"
        );
    }
}
