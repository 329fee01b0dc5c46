//! Stage timing. The fixed stage labels are shared by metrics, dashboard and reports
//! (ARCHITECTURE.md "Profiling stages"). On the CPU a stage's time is wall clock around the code
//! that implements it; the GPU records device events at the same boundaries.

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

/// Accumulated wall time per stage for one step.
#[derive(Debug, Clone, Default)]
pub struct StageClock {
    totals: [Duration; 8],
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
}
