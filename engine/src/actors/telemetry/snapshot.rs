//! Builds a telemetry [`Snapshot`] from the rolling window: per device and phase the bottleneck
//! [`Report`] (shares, bandwidth, roofline efficiency against the device's peaks, Amdahl
//! projections, sentences) and the launch facts; plus tok/s, latency percentiles, queue, cache
//! and batch size. Also mirrors the window's derived numbers into their gauges.

use std::collections::BTreeMap;
use std::time::Instant;

use amdahl_protocol::telemetry as t;

use super::{DeviceFacts, Gauges};
use crate::metrics::Metrics;
use crate::profile::occupancy::Occupancy;
use crate::profile::report::{Bound, Report};
use crate::profile::window::{Summary, Window};

/// Everything a snapshot is made of.
pub(super) struct Inputs<'a> {
    pub model: &'a str,
    pub window: &'a Window,
    pub devices: &'a BTreeMap<String, DeviceFacts>,
    pub gauges: Gauges,
    pub cache_bytes: u64,
    pub steps_total: u64,
    pub profile_every: u32,
    pub seq: u64,
    pub now: Instant,
}

fn ms(s: Summary) -> t::Percentiles {
    t::Percentiles {
        count: s.count as u64,
        p50: s.p50 * 1e3,
        p90: s.p90 * 1e3,
        p99: s.p99 * 1e3,
        mean: s.mean * 1e3,
    }
}

fn stage_reports(r: &Report) -> Vec<t::StageReport> {
    r.lines
        .iter()
        .map(|l| t::StageReport {
            stage: l.stage.label().into(),
            seconds: l.seconds,
            share: l.share,
            bytes: l.bytes,
            flops: l.flops,
            bandwidth_bytes_per_second: l.bandwidth,
            flops_per_second: l.flop_rate,
            floor_seconds: l.floor_seconds,
            bound: match l.bound {
                Bound::None => t::Bound::None,
                Bound::Bytes => t::Bound::Bytes,
                Bound::Flops => t::Bound::Flops,
            },
            efficiency: l.efficiency,
            gain_if_2x: l.gain_if_2x,
            gain_at_floor: l.gain_at_floor,
        })
        .collect()
}

fn occupancy(o: Option<&Occupancy>) -> Vec<t::StageOccupancy> {
    let Some(o) = o else { return Vec::new() };
    o.stages()
        .map(|(s, l)| t::StageOccupancy {
            stage: s.label().into(),
            launches: l.launches,
            blocks_mean: l.blocks as f64 / l.launches.max(1) as f64,
            blocks_min: l.blocks_min,
            blocks_max: l.blocks_max,
            sms: o.sms,
            under_filled_launches: l.under_filled,
        })
        .collect()
}

pub(super) fn build(i: &Inputs<'_>) -> Snapshot {
    let groups = i.window.groups();
    let mut devices: Vec<t::DeviceTelemetry> = i
        .devices
        .iter()
        .map(|(name, f)| t::DeviceTelemetry {
            device: name.clone(),
            peaks: Some(t::DevicePeaks {
                bandwidth_bytes_per_second: f.peaks.bandwidth,
                flops_per_second: f.peaks.flops,
            }),
            multiprocessors: f.multiprocessors,
            phases: Vec::new(),
        })
        .collect();
    for g in &groups {
        if !devices.iter().any(|d| d.device == g.device) {
            devices.push(t::DeviceTelemetry {
                device: g.device.clone(),
                ..Default::default()
            });
        }
    }
    let several = devices.len() > 1;
    let mut report = Vec::new();
    for g in &groups {
        let peaks = i.devices.get(&g.device).map(|f| f.peaks);
        let r = Report::build(&g.clock, g.wall, peaks);
        let covered = 1.0
            - r.line(crate::profile::Stage::Other)
                .map_or(0.0, |l| l.share);
        let mean_ms = 1e3 * g.wall / g.steps.max(1) as f64;
        let sentences = r.sentences(g.phase);
        report.push(format!(
            "{} on {}: {} step{}, {:.2} ms per step; stage timing covers {:.0}% of it",
            g.phase,
            g.device,
            g.steps,
            if g.steps == 1 { "" } else { "s" },
            mean_ms,
            100.0 * covered
        ));
        report.extend(sentences.iter().map(|s| {
            if several {
                format!("{}: {s}", g.device)
            } else {
                s.clone()
            }
        }));
        let phase = t::PhaseReport {
            phase: g.phase.into(),
            steps: g.steps,
            seconds: g.wall,
            mean_step_ms: mean_ms,
            stages: stage_reports(&r),
            occupancy: occupancy(g.occupancy.as_ref()),
            sentences,
        };
        if let Some(d) = devices.iter_mut().find(|d| d.device == g.device) {
            d.phases.push(phase);
        }
    }
    let (last, mean, max) = i.window.batch();
    Snapshot {
        ts_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        seq: i.seq,
        model: i.model.into(),
        window_seconds: i.window.seconds(i.now),
        steps_total: i.steps_total,
        tokens_per_second: i.window.tokens_per_second(i.now),
        requests: t::Queue {
            running: i.gauges.running as u64,
            waiting: i.gauges.waiting as u64,
        },
        cache: t::Cache {
            usage_ratio: i.gauges.slot_usage,
            bytes: i.cache_bytes,
        },
        batch: t::Batch {
            last: last as u64,
            mean,
            max: max as u64,
        },
        ttft_ms: ms(i.window.ttft()),
        itl_ms: ms(i.window.itl()),
        profile: t::ProfileSettings {
            every: u64::from(i.profile_every),
            profiled_steps: i.window.profiled_steps() as u64,
            overhead_ratio: i.window.overhead_ratio(),
        },
        devices,
        report,
    }
}

pub(super) use amdahl_protocol::telemetry::Snapshot;

/// The window's roofline efficiency per stage and the instrumentation overhead, as gauges.
pub(super) fn refresh_gauges(m: &Metrics, s: &Snapshot) {
    for d in &s.devices {
        if d.phases.is_empty() {
            continue;
        }
        m.profile_overhead_ratio
            .with_label_values(&[&d.device])
            .set(s.profile.overhead_ratio);
        for p in &d.phases {
            for st in &p.stages {
                if let Some(e) = st.efficiency {
                    m.stage_roofline_efficiency_ratio
                        .with_label_values(&[&st.stage, &d.device, &p.phase])
                        .set(e);
                }
            }
        }
    }
}
