//! The bottleneck report: per-stage share of step time, roofline efficiency against the device's
//! measured peaks, and Amdahl projections of what speeding up each stage would buy. Pure
//! arithmetic over accumulated stage totals, so it is unit-tested exactly.

use super::{Stage, StageClock};

/// Device peaks the roofline is drawn against (measured at startup).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peaks {
    /// Bytes per second (copy bandwidth counting bytes read + written... as measured).
    pub bandwidth: f64,
    /// FLOP per second.
    pub flops: f64,
}

/// One stage's line of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct StageLine {
    pub stage: Stage,
    pub seconds: f64,
    /// Fraction of the step time.
    pub share: f64,
    pub bytes: u64,
    pub flops: u64,
    /// Achieved bytes/s and FLOP/s.
    pub bandwidth: f64,
    pub flop_rate: f64,
    /// Roofline floor: max(bytes / peak bandwidth, flops / peak flops), seconds.
    pub floor_seconds: f64,
    /// floor / measured, in 0..=1 (0 when the stage has no analytic work).
    pub efficiency: f64,
    /// Step speed-up (tok/s gain, as a fraction) if this stage became 2× faster.
    pub gain_if_2x: f64,
    /// Step speed-up if this stage ran at its roofline floor.
    pub gain_at_floor: f64,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub step_seconds: f64,
    pub lines: Vec<StageLine>,
}

/// Step speed-up when a stage taking `part` of `total` seconds becomes `factor`× faster
/// (Amdahl's law): `total / (total − part + part / factor) − 1`.
pub fn amdahl_gain(total: f64, part: f64, factor: f64) -> f64 {
    if total <= 0.0 || factor <= 0.0 {
        return 0.0;
    }
    let new = total - part + part / factor;
    if new <= 0.0 {
        f64::INFINITY
    } else {
        total / new - 1.0
    }
}

impl Report {
    /// Builds the report from accumulated stage totals over `steps` steps and the step wall time
    /// (the time not covered by any stage is reported as `other`).
    pub fn build(clock: &StageClock, step_wall_seconds: f64, peaks: Peaks) -> Report {
        let covered: f64 = Stage::ALL
            .iter()
            .filter(|s| **s != Stage::Other)
            .map(|s| clock.get(*s).as_secs_f64())
            .sum();
        let total = step_wall_seconds.max(covered);
        let lines = Stage::ALL
            .iter()
            .map(|&stage| {
                let seconds = if stage == Stage::Other {
                    (total - covered).max(0.0) + clock.get(stage).as_secs_f64()
                } else {
                    clock.get(stage).as_secs_f64()
                };
                let (bytes, flops) = (clock.bytes(stage), clock.flops(stage));
                let floor = (bytes as f64 / peaks.bandwidth).max(flops as f64 / peaks.flops);
                let efficiency = if seconds > 0.0 && floor > 0.0 {
                    (floor / seconds).min(1.0)
                } else {
                    0.0
                };
                let rate = |x: u64| {
                    if seconds > 0.0 {
                        x as f64 / seconds
                    } else {
                        0.0
                    }
                };
                StageLine {
                    stage,
                    seconds,
                    share: if total > 0.0 { seconds / total } else { 0.0 },
                    bytes,
                    flops,
                    bandwidth: rate(bytes),
                    flop_rate: rate(flops),
                    floor_seconds: floor,
                    efficiency,
                    gain_if_2x: amdahl_gain(total, seconds, 2.0),
                    gain_at_floor: if floor > 0.0 && floor < seconds {
                        amdahl_gain(total, seconds, seconds / floor)
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        Report {
            step_seconds: total,
            lines,
        }
    }

    /// The largest stage first.
    pub fn by_share(&self) -> Vec<&StageLine> {
        let mut v: Vec<&StageLine> = self.lines.iter().filter(|l| l.seconds > 0.0).collect();
        v.sort_by(|a, b| b.share.total_cmp(&a.share));
        v
    }

    /// The report in words, one sentence per significant stage.
    pub fn sentences(&self) -> Vec<String> {
        self.by_share()
            .into_iter()
            .filter(|l| l.share >= 0.02)
            .map(|l| {
                let mut s = format!(
                    "{} is {:.0}% of the step: making it 2x faster gives {:+.0}% tok/s",
                    l.stage.label(),
                    100.0 * l.share,
                    100.0 * l.gain_if_2x
                );
                if l.efficiency > 0.0 {
                    s.push_str(&format!(
                        "; it runs at {:.0}% of its roofline floor, so reaching the floor gives {:+.0}% at most",
                        100.0 * l.efficiency,
                        100.0 * l.gain_at_floor
                    ));
                }
                s
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn amdahl_arithmetic() {
        // 38% of the time, 2x faster: 1 / (0.62 + 0.19) - 1 = 0.2345...
        assert!((amdahl_gain(1.0, 0.38, 2.0) - (1.0 / 0.81 - 1.0)).abs() < 1e-12);
        assert_eq!(amdahl_gain(1.0, 0.0, 2.0), 0.0);
        assert!((amdahl_gain(2.0, 2.0, 4.0) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn report_shares_efficiency_and_projections() {
        let mut c = StageClock::default();
        c.add(Stage::Attention, Duration::from_millis(38));
        c.add(Stage::Moe, Duration::from_millis(50));
        // MoE moved 91 MB at a 2 GB/s peak: floor 45.5 ms of 50 → 91% efficient.
        c.charge(Stage::Moe, 91_000_000, 0);
        c.charge(Stage::Attention, 0, 19_000_000_000);
        let peaks = Peaks {
            bandwidth: 2e9,
            flops: 1e12,
        };
        let r = Report::build(&c, 0.100, peaks);
        let line = |s| r.lines.iter().find(|l| l.stage == s).unwrap().clone();
        let att = line(Stage::Attention);
        assert!((att.share - 0.38).abs() < 1e-9);
        assert!((att.gain_if_2x - (1.0 / 0.81 - 1.0)).abs() < 1e-9);
        assert!((att.efficiency - 0.5).abs() < 1e-9); // 19 ms floor of 38 ms
        let moe = line(Stage::Moe);
        assert!((moe.efficiency - 0.91).abs() < 1e-9);
        assert!((moe.gain_at_floor - (0.1 / (0.1 - 0.05 + 0.0455) - 1.0)).abs() < 1e-9);
        assert!((moe.bandwidth - 1.82e9).abs() < 1.0);
        let other = line(Stage::Other);
        assert!((other.seconds - 0.012).abs() < 1e-9);
        let words = r.sentences();
        assert!(words[0].starts_with("moe is 50% of the step"), "{words:?}");
        assert!(
            words[1].contains("attention is 38%") && words[1].contains("+23% tok/s"),
            "{words:?}"
        );
    }
}
