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
}
