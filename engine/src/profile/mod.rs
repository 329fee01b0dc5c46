//! Stage timing. The fixed stage labels are shared by metrics, dashboard and reports
//! (ARCHITECTURE.md "Profiling stages"). On the CPU a stage's time is wall clock around the code
//! that implements it; the GPU records device events at the same boundaries. A step that is not
//! sampled for profiling (`--profile-every`) runs with a disabled clock: the same calls, no timer
//! reads. The clock counts its timer reads so a backend can estimate what the timing cost.
//!
//! Attribution between [`StageClock::time`] regions is contiguous: the untimed gap between two of
//! them (freeing a stage's temporaries, small bookkeeping between calls) is charged to the stage
//! that ran before it. What happens before the first region, after the last, or after an
//! [`StageClock::add`] (a duration measured elsewhere) is the step's `other`.

pub mod occupancy;
pub mod peaks;
pub mod report;
pub mod window;

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
    /// Timing off for this step (not sampled).
    disabled: bool,
    /// Timer reads made.
    marks: u64,
    /// End of the last timed region and its stage: the next region charges the gap to it.
    last: Option<(Instant, Stage)>,
}

impl StageClock {
    /// A clock that records bytes and FLOPs but reads no timer: for steps not sampled.
    pub fn disabled() -> Self {
        Self {
            disabled: true,
            ..Self::default()
        }
    }

    /// A clock for a step: timing on when `profiled`.
    pub fn for_step(profiled: bool) -> Self {
        if profiled {
            Self::default()
        } else {
            Self::disabled()
        }
    }

    pub fn enabled(&self) -> bool {
        !self.disabled
    }

    /// Runs `f`, charging its wall time to `stage` (when enabled).
    pub fn time<R>(&mut self, stage: Stage, f: impl FnOnce() -> R) -> R {
        if self.disabled {
            return f();
        }
        let t0 = Instant::now();
        self.close_gap(t0);
        let r = f();
        let t1 = Instant::now();
        self.totals[stage.index()] += t1 - t0;
        self.last = Some((t1, stage));
        self.marks += 2;
        r
    }

    /// Charges a duration measured elsewhere: a region the caller timed itself, or device time
    /// read back from events after the step (ignored when disabled). It ends the gap chain: the
    /// host time before the next timed region belongs to no stage, so device-timed stages never
    /// absorb host gaps.
    pub fn add(&mut self, stage: Stage, d: Duration) {
        if self.disabled {
            return;
        }
        self.totals[stage.index()] += d;
        self.last = None;
        self.marks += 2;
    }

    /// Adds a duration measured elsewhere (device events), with no wall-clock gap accounting:
    /// the GPU backend reads a step's stage segments after the step has finished.
    pub fn add_measured(&mut self, stage: Stage, d: Duration) {
        self.totals[stage.index()] += d;
        self.marks += 1;
    }

    /// Charges the time since the previous region ended (if it ended before `start`) to it.
    fn close_gap(&mut self, start: Instant) {
        if let Some((end, prev)) = self.last {
            self.totals[prev.index()] += start.saturating_duration_since(end);
        }
    }

    /// Timer reads this clock made (an instrumentation-cost estimate is marks × read cost).
    pub fn marks(&self) -> u64 {
        self.marks
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
        self.marks += other.marks;
    }
}

/// Cost of one `Instant::now()` on this machine, best of a few batches: what a CPU stage mark
/// costs. Measured once by the CPU backend at startup (a few microseconds).
pub fn timer_read_cost() -> Duration {
    const N: u32 = 2000;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        for _ in 0..N {
            std::hint::black_box(Instant::now());
        }
        best = best.min(t0.elapsed() / N);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_clock_times_nothing_but_keeps_work() {
        let mut c = StageClock::for_step(false);
        assert_eq!(c.time(Stage::Moe, || 7), 7);
        c.add(Stage::Head, Duration::from_millis(3));
        c.charge(Stage::Moe, 10, 20);
        assert_eq!((c.total(), c.marks()), (Duration::ZERO, 0));
        assert_eq!((c.bytes(Stage::Moe), c.flops(Stage::Moe)), (10, 20));
        let mut on = StageClock::for_step(true);
        on.time(Stage::Moe, || std::thread::sleep(Duration::from_millis(1)));
        on.add(Stage::Head, Duration::ZERO);
        assert!(on.get(Stage::Moe) >= Duration::from_millis(1));
        assert_eq!(on.marks(), 4);
        let cost = timer_read_cost();
        assert!(
            cost > Duration::ZERO && cost < Duration::from_micros(50),
            "{cost:?}"
        );
    }

    #[test]
    fn gaps_between_regions_go_to_the_stage_before() {
        let ms = Duration::from_millis;
        let begin = Instant::now();
        let mut c = StageClock::default();
        std::thread::sleep(ms(30)); // before the first region: nobody's
        c.time(Stage::Mhc, || std::thread::sleep(ms(2)));
        std::thread::sleep(ms(4)); // between two regions: Mhc's
        c.time(Stage::Attention, || std::thread::sleep(ms(2)));
        std::thread::sleep(ms(3)); // before a caller-timed region: nobody's
        let t0 = Instant::now();
        std::thread::sleep(ms(6));
        c.add(Stage::Moe, t0.elapsed());
        std::thread::sleep(ms(5)); // after it: nobody's
        c.time(Stage::Head, || std::thread::sleep(ms(1)));
        let all = begin.elapsed();
        assert!(c.get(Stage::Mhc) >= ms(6), "{c:?}");
        assert!(c.get(Stage::Attention) >= ms(2), "{c:?}");
        assert!(c.get(Stage::Moe) >= ms(6), "{c:?}");
        assert!(c.get(Stage::Head) >= ms(1), "{c:?}");
        // The unattributed sleeps are not in any stage (so the Attention gap, the gap after Moe
        // and the time before the first mark are all missing from the total).
        assert!(c.total() <= all - ms(30 + 3 + 5), "{c:?} of {all:?}");
    }

    #[test]
    fn timer_reads_are_cheap() {
        let cost = timer_read_cost();
        assert!(
            cost > Duration::ZERO && cost < Duration::from_micros(50),
            "{cost:?}"
        );
    }
}
