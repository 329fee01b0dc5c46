//! Stage timing. The fixed stage labels are shared by metrics, dashboard and reports
//! (ARCHITECTURE.md "Profiling stages"). On the CPU a stage's time is wall clock around the code
//! that implements it; the GPU records device events at the same boundaries.

pub mod peaks;
pub mod report;

use std::time::{Duration, Instant};

/// A decode/prefill stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    Mhc,
    AttnProj,
    Indexer,
    Attention,
    Moe,
    Head,
    Comm,
    Other,
}

impl Stage {
    pub const ALL: [Stage; 8] = [
        Stage::Mhc,
        Stage::AttnProj,
        Stage::Indexer,
        Stage::Attention,
        Stage::Moe,
        Stage::Head,
        Stage::Comm,
        Stage::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Stage::Mhc => "mhc",
            Stage::AttnProj => "attn_proj",
            Stage::Indexer => "indexer",
            Stage::Attention => "attention",
            Stage::Moe => "moe",
            Stage::Head => "head",
            Stage::Comm => "comm",
            Stage::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Accumulated wall time, bytes moved and FLOPs per stage for one step. The forward pass charges
/// bytes and FLOPs analytically as it goes (weights it actually touched, cache rows it read,
/// activations in and out), so achieved bandwidth and arithmetic rate come out per stage.
#[derive(Debug, Clone, Default)]
pub struct StageClock {
    totals: [Duration; 8],
    bytes: [u64; 8],
    flops: [u64; 8],
}

impl StageClock {
    /// Runs `f`, charging its wall time to `stage`.
    pub fn time<R>(&mut self, stage: Stage, f: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = f();
        self.totals[stage.index()] += t0.elapsed();
        r
    }

    pub fn add(&mut self, stage: Stage, d: Duration) {
        self.totals[stage.index()] += d;
    }

    pub fn get(&self, stage: Stage) -> Duration {
        self.totals[stage.index()]
    }

    pub fn total(&self) -> Duration {
        self.totals.iter().sum()
    }

    /// Adds analytic work to a stage.
    pub fn charge(&mut self, stage: Stage, bytes: u64, flops: u64) {
        self.bytes[stage.index()] += bytes;
        self.flops[stage.index()] += flops;
    }

    pub fn bytes(&self, stage: Stage) -> u64 {
        self.bytes[stage.index()]
    }

    pub fn flops(&self, stage: Stage) -> u64 {
        self.flops[stage.index()]
    }

    /// Adds another clock's totals (e.g. a worker's step into a rolling window).
    pub fn merge(&mut self, other: &StageClock) {
        for i in 0..8 {
            self.totals[i] += other.totals[i];
            self.bytes[i] += other.bytes[i];
            self.flops[i] += other.flops[i];
        }
    }
}
