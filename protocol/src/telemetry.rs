//! Telemetry snapshots: what `GET /v1/ws/telemetry` pushes (~5 Hz) and `GET /v1/profile` returns.
//! One snapshot summarizes the server's rolling window: per device and per step phase, each
//! stage's share of step time, achieved bandwidth and arithmetic rate against the device's
//! measured peaks, the roofline efficiency, and the Amdahl projections, plus the serving numbers
//! (tok/s, TTFT and inter-token latency percentiles, queue, cache, batch size). Pure serde, so the
//! wasm dashboard decodes the same types. Units are in the field names: seconds, bytes, ratios in
//! 0..=1, latencies in milliseconds.

use serde::{Deserialize, Serialize};

/// The one frame type of the telemetry socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum TelemetryEvent {
    #[serde(rename = "telemetry")]
    Snapshot(Box<Snapshot>),
}

/// The state of the server over its rolling window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Unix time of the snapshot, milliseconds.
    pub ts_ms: u64,
    /// Increments with every snapshot the server builds.
    pub seq: u64,
    pub model: String,
    /// Length of the window the rates and shares cover, seconds (shorter right after start).
    pub window_seconds: f64,
    /// Engine steps since start (all of them, profiled or not).
    pub steps_total: u64,
    /// Generated tokens per second over the window.
    pub tokens_per_second: f64,
    pub requests: Queue,
    pub cache: Cache,
    pub batch: Batch,
    /// Time to first token over the window's requests, milliseconds.
    pub ttft_ms: Percentiles,
    /// Inter-token latency over the window's tokens, milliseconds.
    pub itl_ms: Percentiles,
    pub profile: ProfileSettings,
    pub devices: Vec<DeviceTelemetry>,
    /// The bottleneck report in words, most important first (decode before prefill).
    pub report: Vec<String>,
}

/// Running and waiting requests now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Queue {
    pub running: u64,
    pub waiting: u64,
}

/// Cache occupancy now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    /// Fraction of sequence cache slots in use.
    pub usage_ratio: f64,
    /// Bytes held by running sequences' caches, summed over devices.
    pub bytes: u64,
}

/// Sequences per step over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub last: u64,
    pub mean: f64,
    pub max: u64,
}

/// Linear-interpolated percentiles (numpy's default) of a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

/// How stage timing is sampled and what it costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSettings {
    /// Stage timing is recorded on every Nth step (`--profile-every`).
    pub every: u64,
    /// Steps in the window with stage timing.
    pub profiled_steps: u64,
    /// Instrumentation time as a fraction of profiled step time (the backend's estimate).
    pub overhead_ratio: f64,
}

/// Device peaks the roofline is drawn against, measured at startup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DevicePeaks {
    pub bandwidth_bytes_per_second: f64,
    pub flops_per_second: f64,
}

/// One device: its peaks and, per step phase, the stage report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceTelemetry {
    /// `cpu`, `cuda:0`, ...
    pub device: String,
    /// None until the device has measured them.
    pub peaks: Option<DevicePeaks>,
    /// Streaming multiprocessors (GPUs); None on the CPU.
    pub multiprocessors: Option<u32>,
    /// `decode`, `prefill`, `mixed`: only the phases the window saw.
    pub phases: Vec<PhaseReport>,
}

/// The stage report of one device and phase over the window's profiled steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub phase: String,
    pub steps: u64,
    /// Sum of the profiled steps' wall time, seconds.
    pub seconds: f64,
    pub mean_step_ms: f64,
    pub stages: Vec<StageReport>,
    /// Kernel launch facts per stage (GPU backends; empty on the CPU).
    pub occupancy: Vec<StageOccupancy>,
    /// This phase's report in words.
    pub sentences: Vec<String>,
}

/// Which roofline limit sets a stage's floor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// No analytic work was charged to the stage.
    #[default]
    None,
    Bytes,
    Flops,
}

/// One stage's line of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    /// Fixed labels: mhc, attn_proj, indexer, attention, moe, head, comm, other.
    pub stage: String,
    pub seconds: f64,
    /// Fraction of the phase's step time.
    pub share: f64,
    pub bytes: u64,
    pub flops: u64,
    pub bandwidth_bytes_per_second: f64,
    pub flops_per_second: f64,
    /// Roofline floor: max(bytes / peak bandwidth, flops / peak FLOP/s), seconds.
    pub floor_seconds: f64,
    pub bound: Bound,
    /// floor / measured in 0..=1; None without peaks or analytic work.
    pub efficiency: Option<f64>,
    /// Step speed-up (fraction of tok/s) if this stage became 2× faster.
    pub gain_if_2x: f64,
    /// Step speed-up if this stage ran at its roofline floor.
    pub gain_at_floor: f64,
}

/// Launch facts of one stage's kernels over the window: blocks per launch against the SMs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageOccupancy {
    pub stage: String,
    pub launches: u64,
    pub blocks_mean: f64,
    pub blocks_min: u64,
    pub blocks_max: u64,
    pub sms: u32,
    /// Launches whose grid had fewer blocks than the device has SMs.
    pub under_filled_launches: u64,
}

impl Snapshot {
    /// The device's report for a phase, if the window saw it.
    pub fn phase(&self, device: &str, phase: &str) -> Option<&PhaseReport> {
        self.devices
            .iter()
            .find(|d| d.device == device)?
            .phases
            .iter()
            .find(|p| p.phase == phase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips_with_its_type_tag() {
        let s = Snapshot {
            seq: 4,
            model: "m".into(),
            devices: vec![DeviceTelemetry {
                device: "cpu".into(),
                peaks: Some(DevicePeaks {
                    bandwidth_bytes_per_second: 1e10,
                    flops_per_second: 1e11,
                }),
                multiprocessors: None,
                phases: vec![PhaseReport {
                    phase: "decode".into(),
                    stages: vec![StageReport {
                        stage: "moe".into(),
                        bound: Bound::Bytes,
                        efficiency: Some(0.91),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let text = serde_json::to_string(&TelemetryEvent::Snapshot(Box::new(s.clone()))).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["type"], "telemetry");
        assert_eq!(v["devices"][0]["phases"][0]["stages"][0]["bound"], "bytes");
        let back: TelemetryEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, TelemetryEvent::Snapshot(Box::new(s.clone())));
        assert_eq!(s.phase("cpu", "decode").unwrap().stages[0].stage, "moe");
        assert!(s.phase("cpu", "prefill").is_none());
    }
}
