//! The rolling window behind the bottleneck report and the telemetry snapshots: the last
//! `span` of steps (at most `max_steps` of them) and of latency samples. Steps are grouped per
//! (device, phase); a group's stage clocks and wall times add up over its profiled steps, so the
//! report's shares are time-weighted, not a mean of per-step shares. Time is passed in, so the
//! window is tested without sleeping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::StageClock;
use super::occupancy::Occupancy;

/// One finished step as the window keeps it.
#[derive(Debug, Clone)]
pub struct StepSample {
    pub at: Instant,
    pub device: String,
    pub phase: &'static str,
    pub elapsed: Duration,
    /// The stage clock; None when the step was not sampled for profiling.
    pub clock: Option<StageClock>,
    /// The backend's estimate of what the timing itself cost in this step.
    pub overhead: Duration,
    pub occupancy: Option<Occupancy>,
    pub batch: usize,
    pub generated: u64,
}

/// The profiled steps of one device and phase, added up.
#[derive(Debug, Clone)]
pub struct Group {
    pub device: String,
    pub phase: &'static str,
    pub steps: u64,
    /// Wall time of those steps, seconds.
    pub wall: f64,
    pub clock: StageClock,
    pub occupancy: Option<Occupancy>,
}

/// Count, mean and linear-interpolated percentiles of a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// numpy's default percentile (linear interpolation between closest ranks) of sorted data.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

pub fn summarize(values: impl Iterator<Item = f64>) -> Summary {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Summary::default();
    }
    v.sort_by(f64::total_cmp);
    Summary {
        count: v.len(),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: percentile(&v, 0.50),
        p90: percentile(&v, 0.90),
        p99: percentile(&v, 0.99),
    }
}

const PHASE_ORDER: [&str; 3] = ["decode", "prefill", "mixed"];

/// Recent steps and latency samples.
#[derive(Debug)]
pub struct Window {
    span: Duration,
    max_steps: usize,
    max_samples: usize,
    started: Instant,
    /// The newest step evicted by the count cap: the window starts after it.
    evicted_at: Option<Instant>,
    steps: VecDeque<StepSample>,
    ttft: VecDeque<(Instant, f64)>,
    itl: VecDeque<(Instant, f64)>,
}

impl Window {
    pub fn new(span: Duration, max_steps: usize, started: Instant) -> Self {
        Self {
            span,
            max_steps: max_steps.max(1),
            max_samples: 4096,
            started,
            evicted_at: None,
            steps: VecDeque::new(),
            ttft: VecDeque::new(),
            itl: VecDeque::new(),
        }
    }

    pub fn push_step(&mut self, s: StepSample) {
        self.steps.push_back(s);
        while self.steps.len() > self.max_steps {
            if let Some(old) = self.steps.pop_front() {
                self.evicted_at = Some(old.at);
            }
        }
    }

    /// A time to first token (seconds) observed at `at`.
    pub fn push_ttft(&mut self, at: Instant, secs: f64) {
        push_capped(&mut self.ttft, (at, secs), self.max_samples);
    }

    /// An inter-token gap (seconds) observed at `at`.
    pub fn push_itl(&mut self, at: Instant, secs: f64) {
        push_capped(&mut self.itl, (at, secs), self.max_samples);
    }

    /// Forgets what is older than the span.
    pub fn prune(&mut self, now: Instant) {
        let Some(cut) = now.checked_sub(self.span) else {
            return;
        };
        while self.steps.front().is_some_and(|s| s.at < cut) {
            self.steps.pop_front();
        }
        for q in [&mut self.ttft, &mut self.itl] {
            while q.front().is_some_and(|(t, _)| *t < cut) {
                q.pop_front();
            }
        }
    }

    /// How much time the window covers now, seconds.
    pub fn seconds(&self, now: Instant) -> f64 {
        let mut start = self.started;
        if let Some(cut) = now.checked_sub(self.span) {
            start = start.max(cut);
        }
        if let Some(e) = self.evicted_at {
            start = start.max(e);
        }
        now.saturating_duration_since(start).as_secs_f64()
    }

    pub fn tokens_per_second(&self, now: Instant) -> f64 {
        let secs = self.seconds(now);
        let generated: u64 = self.steps.iter().map(|s| s.generated).sum();
        if secs > 0.0 {
            generated as f64 / secs
        } else {
            0.0
        }
    }

    /// Per (device, phase), the profiled steps added up; devices in name order, phases decode,
    /// prefill, mixed.
    pub fn groups(&self) -> Vec<Group> {
        let mut out: Vec<Group> = Vec::new();
        for s in &self.steps {
            let Some(clock) = &s.clock else { continue };
            let g = match out
                .iter_mut()
                .position(|g| g.device == s.device && g.phase == s.phase)
            {
                Some(i) => &mut out[i],
                None => {
                    out.push(Group {
                        device: s.device.clone(),
                        phase: s.phase,
                        steps: 0,
                        wall: 0.0,
                        clock: StageClock::default(),
                        occupancy: None,
                    });
                    let last = out.len() - 1;
                    &mut out[last]
                }
            };
            g.steps += 1;
            g.wall += s.elapsed.as_secs_f64();
            g.clock.merge(clock);
            if let Some(o) = &s.occupancy {
                match &mut g.occupancy {
                    Some(acc) => acc.merge(o),
                    None => g.occupancy = Some(o.clone()),
                }
            }
        }
        let rank = |p: &str| PHASE_ORDER.iter().position(|x| *x == p).unwrap_or(9);
        out.sort_by(|a, b| {
            (a.device.as_str(), rank(a.phase)).cmp(&(b.device.as_str(), rank(b.phase)))
        });
        out
    }

    /// Steps in the window with stage timing.
    pub fn profiled_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.clock.is_some()).count()
    }

    /// Instrumentation time over profiled step time.
    pub fn overhead_ratio(&self) -> f64 {
        let (cost, wall) = self
            .steps
            .iter()
            .filter(|s| s.clock.is_some())
            .fold((0.0, 0.0), |(c, w), s| {
                (c + s.overhead.as_secs_f64(), w + s.elapsed.as_secs_f64())
            });
        if wall > 0.0 { cost / wall } else { 0.0 }
    }

    /// Sequences per step: (last, mean, max) over the window.
    pub fn batch(&self) -> (usize, f64, usize) {
        let n = self.steps.len();
        if n == 0 {
            return (0, 0.0, 0);
        }
        let sum: usize = self.steps.iter().map(|s| s.batch).sum();
        let max = self.steps.iter().map(|s| s.batch).max().unwrap_or(0);
        let last = self.steps.back().map(|s| s.batch).unwrap_or(0);
        (last, sum as f64 / n as f64, max)
    }

    pub fn ttft(&self) -> Summary {
        summarize(self.ttft.iter().map(|(_, x)| *x))
    }

    pub fn itl(&self) -> Summary {
        summarize(self.itl.iter().map(|(_, x)| *x))
    }
}

fn push_capped(q: &mut VecDeque<(Instant, f64)>, v: (Instant, f64), cap: usize) {
    q.push_back(v);
    while q.len() > cap {
        q.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Stage;

    fn step(at: Instant, phase: &'static str, ms: u64, moe_ms: u64, profiled: bool) -> StepSample {
        let clock = profiled.then(|| {
            let mut c = StageClock::default();
            c.add(Stage::Moe, Duration::from_millis(moe_ms));
            c
        });
        StepSample {
            at,
            device: "cpu".into(),
            phase,
            elapsed: Duration::from_millis(ms),
            clock,
            overhead: Duration::from_micros(10),
            occupancy: None,
            batch: ms as usize,
            generated: 2,
        }
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.5);
        assert!((percentile(&v, 0.9) - 3.7).abs() < 1e-12);
        assert_eq!(percentile(&v, 1.0), 4.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        let s = summarize([4.0, 1.0, 3.0, 2.0, f64::NAN].into_iter());
        assert_eq!((s.count, s.mean, s.p50), (4, 2.5, 2.5));
    }

    #[test]
    fn groups_weight_by_time_and_skip_unprofiled_steps() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(10), 100, t0);
        w.push_step(step(t0, "decode", 10, 5, true));
        w.push_step(step(t0, "decode", 30, 3, true));
        w.push_step(step(t0, "decode", 50, 50, false));
        w.push_step(step(t0, "prefill", 20, 10, true));
        let g = w.groups();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].phase, g[0].steps), ("decode", 2));
        assert!((g[0].wall - 0.040).abs() < 1e-12);
        assert_eq!(g[0].clock.get(Stage::Moe), Duration::from_millis(8));
        assert_eq!(g[1].phase, "prefill");
        assert_eq!(w.profiled_steps(), 3);
        // 3 × 10 µs over 60 ms of profiled steps.
        assert!((w.overhead_ratio() - 30e-6 / 0.060).abs() < 1e-12);
        assert_eq!(w.batch(), (20, 27.5, 50));
    }

    #[test]
    fn the_window_forgets_by_age_and_by_count() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Window::new(s(10), 3, t0);
        for i in 0..5 {
            w.push_step(step(t0 + s(i), "decode", 1, 1, true));
            w.push_ttft(t0 + s(i), i as f64);
        }
        // The count cap keeps steps 2..5; the window starts at the last evicted step (t0+1s).
        let now = t0 + s(5);
        assert_eq!(w.groups()[0].steps, 3);
        assert!((w.seconds(now) - 4.0).abs() < 1e-9);
        assert!((w.tokens_per_second(now) - 6.0 / 4.0).abs() < 1e-9);
        // 13 s later only what is newer than 10 s remains.
        let later = t0 + s(13);
        w.prune(later);
        assert_eq!(w.groups()[0].steps, 2);
        assert_eq!(w.ttft().count, 2);
        assert!((w.seconds(later) - 10.0).abs() < 1e-9);
        // Right after start the window is as long as the server has run.
        let fresh = Window::new(s(10), 3, t0);
        assert!((fresh.seconds(t0 + s(2)) - 2.0).abs() < 1e-9);
        assert_eq!(fresh.tokens_per_second(t0), 0.0);
    }
}
