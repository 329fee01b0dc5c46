//! The bottleneck report: per-stage share of step time, roofline efficiency against the device's
//! measured peaks, and Amdahl projections of what speeding up each stage would buy. Pure
//! arithmetic over accumulated stage totals, so it is unit-tested exactly.

use super::{Stage, StageClock};

/// Device peaks the roofline is drawn against (measured at startup by the device's backend).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peaks {
    /// Bytes per second (copy bandwidth counting bytes read + written).
    pub bandwidth: f64,
    /// FLOP per second.
    pub flops: f64,
}

/// Which roofline limit sets a stage's floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// No analytic work charged (or no peaks known).
    None,
    Bytes,
    Flops,
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
    pub bound: Bound,
    /// floor / measured, in 0..=1; None without peaks or without analytic work.
    pub efficiency: Option<f64>,
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

/// Percent with no decimals, as the sentences print it.
fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

impl Report {
    /// Builds the report from stage totals accumulated over some steps and those steps' wall
    /// time; the time not covered by any stage is reported as `other`. Without peaks there is
    /// no floor and no efficiency.
    pub fn build(clock: &StageClock, step_wall_seconds: f64, peaks: Option<Peaks>) -> Report {
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
                let (byte_floor, flop_floor) = match peaks {
                    Some(p) if p.bandwidth > 0.0 && p.flops > 0.0 => {
                        (bytes as f64 / p.bandwidth, flops as f64 / p.flops)
                    }
                    _ => (0.0, 0.0),
                };
                let floor = byte_floor.max(flop_floor);
                let bound = if floor <= 0.0 {
                    Bound::None
                } else if byte_floor >= flop_floor {
                    Bound::Bytes
                } else {
                    Bound::Flops
                };
                let efficiency = (seconds > 0.0 && floor > 0.0).then(|| (floor / seconds).min(1.0));
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
                    bound,
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

    pub fn line(&self, stage: Stage) -> Option<&StageLine> {
        self.lines.iter().find(|l| l.stage == stage)
    }

    /// The largest stage first.
    pub fn by_share(&self) -> Vec<&StageLine> {
        let mut v: Vec<&StageLine> = self.lines.iter().filter(|l| l.seconds > 0.0).collect();
        v.sort_by(|a, b| b.share.total_cmp(&a.share));
        v
    }

    /// The report in words for one phase (`decode`, `prefill`, `mixed`): one sentence per stage
    /// with at least 2% of the time, largest first, e.g. "moe is 50% of decode: making it 2×
    /// faster gives +33% tok/s; it is at 91% of its byte floor, so it has at most 10% left (+5%
    /// tok/s)"; below half the floor the headroom is a factor ("up to 6.1× faster").
    pub fn sentences(&self, phase: &str) -> Vec<String> {
        self.by_share()
            .into_iter()
            .filter(|l| l.share >= 0.02)
            .map(|l| {
                let name = match l.stage {
                    Stage::Other => "other (step time no stage claims)",
                    s => s.label(),
                };
                let mut s = format!(
                    "{name} is {} of {phase}: making it 2× faster gives +{} tok/s",
                    pct(l.share),
                    pct(l.gain_if_2x)
                );
                if let Some(eff) = l.efficiency {
                    let floor = match l.bound {
                        Bound::Flops => "FLOP",
                        _ => "byte",
                    };
                    // Near the floor the headroom reads best as a percentage, far from it
                    // as a factor ("at most 509% left" says less than "up to 6.1× faster").
                    let room = if eff >= 0.5 {
                        format!("so it has at most {} left", pct(1.0 / eff - 1.0))
                    } else {
                        format!("so it could run up to {:.1}× faster", 1.0 / eff)
                    };
                    s.push_str(&format!(
                        "; it is at {} of its {floor} floor, {room} (+{} tok/s)",
                        pct(eff),
                        pct(l.gain_at_floor)
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
        // A stage that is all of the step and becomes infinitely fast.
        assert_eq!(amdahl_gain(1.0, 1.0, f64::INFINITY), f64::INFINITY);
        assert_eq!(amdahl_gain(0.0, 0.0, 2.0), 0.0);
    }

    fn example() -> Report {
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
        Report::build(&c, 0.100, Some(peaks))
    }

    #[test]
    fn report_shares_efficiency_and_projections() {
        let r = example();
        let att = r.line(Stage::Attention).unwrap();
        assert!((att.share - 0.38).abs() < 1e-9);
        assert!((att.gain_if_2x - (1.0 / 0.81 - 1.0)).abs() < 1e-9);
        assert_eq!(att.bound, Bound::Flops);
        assert!((att.efficiency.unwrap() - 0.5).abs() < 1e-9); // 19 ms floor of 38 ms
        let moe = r.line(Stage::Moe).unwrap();
        assert_eq!(moe.bound, Bound::Bytes);
        assert!((moe.efficiency.unwrap() - 0.91).abs() < 1e-9);
        assert!((moe.gain_at_floor - (0.1 / (0.1 - 0.05 + 0.0455) - 1.0)).abs() < 1e-9);
        assert!((moe.bandwidth - 1.82e9).abs() < 1.0);
        let other = r.line(Stage::Other).unwrap();
        assert!((other.seconds - 0.012).abs() < 1e-9);
        assert_eq!(other.efficiency, None);
        let shares: f64 = r.lines.iter().map(|l| l.share).sum();
        assert!((shares - 1.0).abs() < 1e-12);
    }

    #[test]
    fn sentences_say_the_projections() {
        let words = example().sentences("decode");
        assert_eq!(
            words[0],
            "moe is 50% of decode: making it 2× faster gives +33% tok/s; it is at 91% of its \
             byte floor, so it has at most 10% left (+5% tok/s)"
        );
        assert_eq!(
            words[1],
            "attention is 38% of decode: making it 2× faster gives +23% tok/s; it is at 50% of \
             its FLOP floor, so it has at most 100% left (+23% tok/s)"
        );
        assert!(words[2].starts_with("other (step time no stage claims) is 12% of decode"));
        assert_eq!(words.len(), 3);
    }

    #[test]
    fn no_peaks_means_no_floor() {
        let mut c = StageClock::default();
        c.add(Stage::Moe, Duration::from_millis(10));
        c.charge(Stage::Moe, 1 << 20, 1 << 20);
        let r = Report::build(&c, 0.010, None);
        let moe = r.line(Stage::Moe).unwrap();
        assert_eq!((moe.efficiency, moe.bound), (None, Bound::None));
        assert_eq!(moe.gain_at_floor, 0.0);
        assert!(!r.sentences("prefill")[0].contains("floor"));
        // Far from the floor the headroom is a factor: 10 ms against a 1 ms byte floor.
        let peaks = Peaks {
            bandwidth: (1u64 << 20) as f64 / 1e-3,
            flops: 1e15,
        };
        let r = Report::build(&c, 0.020, Some(peaks));
        assert_eq!(
            r.sentences("decode")[0],
            "moe is 50% of decode: making it 2× faster gives +33% tok/s; it is at 10% of its \
             byte floor, so it could run up to 10.0× faster (+82% tok/s)"
        );
        // Stages may overlap the wall time measured around them; the total never shrinks.
        let r = Report::build(&c, 0.005, None);
        assert!((r.step_seconds - 0.010).abs() < 1e-12);
    }
}
