//! Device-independent types of `amdahl profile` (options, per-batch measurements, the device's
//! facts), so the CLI builds with or without the CUDA backend.

use crate::profile::StageClock;
use crate::profile::report::Peaks;

/// Routed-expert storage of a dummy model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertFormat {
    Nvfp4,
    Mxfp4,
    Fp8,
    Bf16,
}

impl std::str::FromStr for ExpertFormat {
    type Err = crate::EngineError;
    fn from_str(s: &str) -> crate::Result<Self> {
        Ok(match s {
            "nvfp4" => Self::Nvfp4,
            "mxfp4" | "deepseek-fp4" => Self::Mxfp4,
            "fp8" => Self::Fp8,
            "bf16" => Self::Bf16,
            other => {
                return Err(crate::EngineError::InvalidInput(format!(
                    "expert format `{other}`: expected nvfp4, mxfp4, fp8 or bf16"
                )));
            }
        })
    }
}

/// What a device is.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceFacts {
    pub label: String,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sms: usize,
    pub total_mem: usize,
}

/// What to profile.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    pub ordinal: usize,
    pub layers: usize,
    pub batches: Vec<usize>,
    /// Tokens already in every sequence's cache.
    pub ctx: usize,
    pub expert_format: ExpertFormat,
    /// Timed graph replays per batch size.
    pub steps: usize,
    pub seed: u64,
    /// Tokens of one prompt prefilled (into an empty sequence) after the decode batches; 0: none.
    pub prefill: usize,
    /// Tokens per forward pass of that prefill.
    pub prefill_chunk: usize,
}

/// A prompt's prefill: device time of its chunks (eager launches) and per-stage time and work.
#[derive(Debug, Clone)]
pub struct PrefillProfile {
    pub tokens: usize,
    pub chunk: usize,
    /// Device time of all chunks, without stage events.
    pub seconds: f64,
    /// Per-stage device time of a second pass with stage events, and its analytic bytes/FLOPs.
    pub clock: StageClock,
}

impl PrefillProfile {
    /// The stages whose FLOPs are matrix products on tensor cores: the linears (attention
    /// projections, indexer, experts, head); attention and mHC are not counted.
    pub const GEMM_STAGES: [crate::profile::Stage; 4] = [
        crate::profile::Stage::AttnProj,
        crate::profile::Stage::Indexer,
        crate::profile::Stage::Moe,
        crate::profile::Stage::Head,
    ];

    /// FLOPs of [`Self::GEMM_STAGES`] over the whole prompt.
    pub fn gemm_flops(&self) -> u64 {
        Self::GEMM_STAGES.iter().map(|&s| self.clock.flops(s)).sum()
    }

    /// Their achieved rate over their own stage time (from the pass with stage events).
    pub fn gemm_flops_per_second(&self) -> f64 {
        let t: f64 = Self::GEMM_STAGES
            .iter()
            .map(|&s| self.clock.get(s).as_secs_f64())
            .sum();
        if t > 0.0 {
            self.gemm_flops() as f64 / t
        } else {
            0.0
        }
    }
}

/// One batch size's measurements.
#[derive(Debug, Clone)]
pub struct BatchProfile {
    pub batch: usize,
    /// Mean GPU time of one decode step replayed from its graph (no stage events).
    pub step_seconds: f64,
    /// The same with stage events recorded (the profiler's overhead is the difference).
    pub timed_step_seconds: f64,
    /// Mean GPU time of the same step launched kernel by kernel, without a graph.
    pub eager_step_seconds: f64,
    /// Host time per step to build the metadata, copy it and launch the graph.
    pub host_seconds: f64,
    /// Per-stage device time (from the timed replays, averaged) with analytic bytes/FLOPs.
    pub clock: StageClock,
    /// Per-stage device time of one eagerly launched step with the same events (a second,
    /// independent measurement of the stages; launch gaps land in the stage that follows).
    pub eager_clock: StageClock,
    pub launches: [u64; 8],
    pub blocks: [u64; 8],
    pub max_blocks: [u64; 8],
    /// Mean distinct routed experts per MoE layer in one step.
    pub experts_touched: f64,
}

#[derive(Debug, Clone)]
pub struct ProfileReport {
    pub device: DeviceFacts,
    pub peaks: Peaks,
    pub layers: usize,
    pub ctx: usize,
    pub expert_format: String,
    pub weight_bytes: u64,
    pub batches: Vec<BatchProfile>,
    pub prefill: Option<PrefillProfile>,
    /// The kernel variants and switches in effect (opt-in builds, `AMDAHL_*` choices), so a log
    /// says what it measured.
    pub kernels: String,
    /// One-shot reads measured on the device, by size (empty on the CPU).
    pub read_floors: Vec<ReadFloor>,
}

/// The device time of one kernel that reads `bytes` once from DRAM, launched back to back with
/// others like it in a CUDA graph, as a decode step launches its kernels (`bytes` 0: an empty
/// kernel, the cost of a launch alone). It is a plain streaming read at full occupancy, not a
/// proven bound, but a kernel that must read as many bytes from DRAM in one launch does well to
/// come near it: small launches are paced by this, not by the copy bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadFloor {
    pub bytes: u64,
    pub seconds: f64,
}

/// The least time `launches` kernels reading `bytes` between them can take, from the measured
/// one-shot reads (sorted by size, the first the empty kernel): each launch reads an equal share,
/// its time interpolated linearly between the measured sizes and extrapolated past the largest
/// along the last segment. None without measurements or launches.
pub fn oneshot_seconds(floors: &[ReadFloor], launches: u64, bytes: u64) -> Option<f64> {
    if launches == 0 || floors.len() < 2 {
        return None;
    }
    let share = bytes as f64 / launches as f64;
    let i = floors
        .windows(2)
        .position(|w| share <= w[1].bytes as f64)
        .unwrap_or(floors.len() - 2);
    let (a, b) = (floors[i], floors[i + 1]);
    let slope = (b.seconds - a.seconds) / (b.bytes - a.bytes).max(1) as f64;
    let t = a.seconds + slope * (share - a.bytes as f64);
    Some(launches as f64 * t.max(0.0))
}

/// What `amdahl profile --device cpu --model DIR` measures.
#[derive(Debug, Clone)]
pub struct CpuProfileOptions {
    pub batches: Vec<usize>,
    /// Random tokens prefilled into every sequence before the timed decode steps.
    pub ctx: usize,
    pub steps: usize,
    pub seed: u64,
}

/// Decode steps of a real model on the CPU reference backend, timed per stage with the wall
/// clock and charged with the forward pass's analytic bytes and FLOPs, against the CPU's measured
/// copy bandwidth and linear-layer FLOP rate. Same report as the GPU profiler.
pub fn profile_cpu(
    model: &crate::model::deepseek_v4::DeepseekV4,
    o: &CpuProfileOptions,
) -> crate::Result<ProfileReport> {
    use crate::model::deepseek_v4::{LogitRows, SeqInput};
    use crate::profile::Stage;
    let peaks = crate::profile::peaks::measure_cpu_peaks();
    let c = &model.cfg;
    if o.ctx + o.steps + 1 > c.max_position_embeddings {
        return Err(crate::EngineError::InvalidInput(format!(
            "--ctx {} + {} steps exceeds the model's {} positions",
            o.ctx, o.steps, c.max_position_embeddings
        )));
    }
    let mut rng = crate::rng::Rng::new(o.seed);
    let mut batches = Vec::new();
    for &b in &o.batches {
        let mut states: Vec<_> = (0..b).map(|_| model.new_state()).collect();
        let mut next: Vec<Vec<u32>> = (0..b)
            .map(|_| {
                (0..o.ctx.max(1))
                    .map(|_| rng.below(c.vocab_size) as u32)
                    .collect()
            })
            .collect();
        // Prefill (not timed), then decode steps.
        let mut items: Vec<SeqInput<'_>> = states
            .iter_mut()
            .zip(&next)
            .map(|(st, t)| SeqInput {
                tokens: t,
                state: st,
                logits: LogitRows::Last,
            })
            .collect();
        model.forward(&mut items, &mut StageClock::disabled())?;
        drop(items);
        let mut total = StageClock::default();
        let t0 = std::time::Instant::now();
        for _ in 0..o.steps {
            next = (0..b)
                .map(|_| vec![rng.below(c.vocab_size) as u32])
                .collect();
            let mut clock = StageClock::default();
            let mut items: Vec<SeqInput<'_>> = states
                .iter_mut()
                .zip(&next)
                .map(|(st, t)| SeqInput {
                    tokens: t,
                    state: st,
                    logits: LogitRows::Last,
                })
                .collect();
            model.forward(&mut items, &mut clock)?;
            total.merge(&clock);
        }
        let wall = t0.elapsed().as_secs_f64() / o.steps.max(1) as f64;
        let n = o.steps.max(1) as u64;
        let mut per_step = StageClock::default();
        for s in Stage::ALL {
            per_step.add_measured(s, total.get(s) / n as u32);
            per_step.charge(s, total.bytes(s) / n, total.flops(s) / n);
        }
        batches.push(BatchProfile {
            batch: b,
            step_seconds: wall,
            timed_step_seconds: wall,
            eager_step_seconds: wall,
            host_seconds: 0.0,
            eager_clock: per_step.clone(),
            clock: per_step,
            launches: [0; 8],
            blocks: [0; 8],
            max_blocks: [0; 8],
            experts_touched: 0.0,
        });
    }
    Ok(ProfileReport {
        device: DeviceFacts {
            label: "cpu".into(),
            name: format!("CPU ({} threads)", rayon::current_num_threads()),
            compute_capability: (0, 0),
            sms: 0,
            total_mem: 0,
        },
        peaks,
        layers: c.num_layers,
        ctx: o.ctx,
        expert_format: model
            .weights
            .expert_formats()
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join("+"),
        weight_bytes: 0,
        batches,
        prefill: None,
        kernels: "the CPU reference".into(),
        read_floors: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::{ReadFloor, oneshot_seconds};

    fn floors() -> Vec<ReadFloor> {
        [
            (0, 2e-6),
            (1 << 20, 3e-6),
            (16 << 20, 10e-6),
            (64 << 20, 28e-6),
        ]
        .iter()
        .map(|&(bytes, seconds)| ReadFloor { bytes, seconds })
        .collect()
    }

    #[test]
    fn oneshot_time_interpolates_extrapolates_and_scales_by_launches() {
        let f = floors();
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        // Launches alone: the empty kernel's time each.
        assert!(close(oneshot_seconds(&f, 5, 0), 10e-6));
        // A measured size, once and split over four launches of 4 MiB (between 1 and 16 MiB).
        assert!(close(oneshot_seconds(&f, 1, 16 << 20), 10e-6));
        let per_4mib = 3e-6 + 7e-6 * 3.0 / 15.0;
        assert!(close(oneshot_seconds(&f, 4, 16 << 20), 4.0 * per_4mib));
        // Past the largest size along the last segment's slope (18 µs per 48 MiB).
        assert!(close(oneshot_seconds(&f, 1, 112 << 20), 46e-6));
        assert_eq!(oneshot_seconds(&f, 0, 1 << 20), None);
        assert_eq!(oneshot_seconds(&f[..1], 3, 1 << 20), None);
    }
}
