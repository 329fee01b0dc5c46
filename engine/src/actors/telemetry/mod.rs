//! Telemetry: receives step and request reports from the coordinator (and each device's peaks
//! from its worker) and turns them into Prometheus metrics, off the coordinator's path. Per
//! profiled step it charges every stage's wall time (and analytic bytes/FLOPs) to
//! `amdahl_stage_*_total{stage,device,phase}`; `other` is the step time the forward pass did not
//! attribute to a stage. It also keeps the rolling window ([`Window`]) that the bottleneck report
//! and the telemetry snapshots are computed from: five times a second it refreshes the window's
//! gauges (roofline efficiency, instrumentation overhead) and, when anyone listens, publishes a
//! snapshot on a watch channel (`/v1/ws/telemetry`); `GET /v1/profile` asks for one directly.

mod snapshot;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, AsyncContext, Context, Handler, Message, MessageResult};
use amdahl_protocol::telemetry::Snapshot;
use tokio::sync::watch;

use crate::api::{Timings, Transport};
use crate::metrics::Metrics;
use crate::profile::occupancy::Occupancy;
use crate::profile::report::Peaks;
use crate::profile::window::{StepSample, Window};
use crate::profile::{Stage, StageClock};

/// How often snapshots are published and window gauges refreshed (~5 Hz).
pub const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// What the rolling window covers.
pub const WINDOW_SPAN: Duration = Duration::from_secs(10);
const WINDOW_MAX_STEPS: usize = 2048;

/// One finished step.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StepReport {
    pub device: String,
    pub phase: &'static str,
    pub batch: usize,
    pub tokens: usize,
    pub elapsed: Duration,
    /// Whether the step was sampled for stage timing (else `clock` holds no times).
    pub profiled: bool,
    pub clock: StageClock,
    pub occupancy: Option<Occupancy>,
    pub profile_overhead: Duration,
    pub cache_bytes: u64,
    /// Inter-token gaps (seconds) of the tokens this step produced.
    pub itl: Vec<f64>,
    /// First tokens produced this step: (transport, seconds since submission).
    pub ttft: Vec<(Transport, f64)>,
    pub generated: u64,
}

/// One finished request.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RequestReport {
    pub reason: &'static str,
    pub transport: Transport,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub timings: Timings,
    pub scheduled: bool,
}

/// Queue and slot gauges.
#[derive(Debug, Clone, Copy, Default, Message)]
#[rtype(result = "()")]
pub struct Gauges {
    pub running: usize,
    pub waiting: usize,
    pub slot_usage: f64,
}

/// A request refused before admission.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Rejected(pub &'static str);

/// A client that left before its request ended.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Disconnect {
    pub transport: Transport,
    pub phase: &'static str,
}

/// A device worker started and measured its peaks.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct DeviceReady {
    pub device: String,
    pub peaks: Peaks,
    pub multiprocessors: Option<u32>,
}

/// Build a snapshot now.
#[derive(Debug, Message)]
#[rtype(result = "Snapshot")]
pub struct GetSnapshot;

/// Subscribe to the ~5 Hz snapshots (the receiver starts with a fresh one).
#[derive(Debug, Message)]
#[rtype(result = "watch::Receiver<Arc<Snapshot>>")]
pub struct Subscribe;

/// What telemetry knows about a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceFacts {
    pub peaks: Peaks,
    pub multiprocessors: Option<u32>,
}

/// The telemetry actor.
pub struct Telemetry {
    m: Arc<Metrics>,
    model: String,
    profile_every: u32,
    window: Window,
    devices: BTreeMap<String, DeviceFacts>,
    gauges: Gauges,
    cache_bytes: BTreeMap<String, u64>,
    steps_total: u64,
    seq: u64,
    tx: watch::Sender<Arc<Snapshot>>,
}

impl Telemetry {
    pub fn new(m: Arc<Metrics>, model: String, profile_every: u32) -> Self {
        Self {
            m,
            model,
            profile_every: profile_every.max(1),
            window: Window::new(WINDOW_SPAN, WINDOW_MAX_STEPS, Instant::now()),
            devices: BTreeMap::new(),
            gauges: Gauges::default(),
            cache_bytes: BTreeMap::new(),
            steps_total: 0,
            seq: 0,
            tx: watch::channel(Arc::new(Snapshot::default())).0,
        }
    }

    /// The 5 Hz tick: forget old steps, refresh the window gauges, publish if anyone listens.
    fn tick(&mut self) {
        let now = Instant::now();
        self.window.prune(now);
        let subscribers = self.tx.receiver_count();
        self.m.telemetry_subscribers.set(subscribers as i64);
        let snap = self.snapshot(now);
        snapshot::refresh_gauges(&self.m, &snap);
        if subscribers > 0 {
            self.tx.send_replace(Arc::new(snap));
        }
    }

    fn snapshot(&mut self, now: Instant) -> Snapshot {
        self.seq += 1;
        snapshot::build(&snapshot::Inputs {
            model: &self.model,
            window: &self.window,
            devices: &self.devices,
            gauges: self.gauges,
            cache_bytes: self.cache_bytes.values().sum(),
            steps_total: self.steps_total,
            profile_every: self.profile_every,
            seq: self.seq,
            now,
        })
    }
}

impl Actor for Telemetry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(PUBLISH_EVERY, |act, _| act.tick());
    }
}

impl Handler<StepReport> for Telemetry {
    type Result = ();

    fn handle(&mut self, r: StepReport, _: &mut Context<Self>) {
        let m = &self.m;
        let now = Instant::now();
        self.steps_total += 1;
        let phase = [r.phase];
        m.step_duration_seconds
            .with_label_values(&phase)
            .observe(r.elapsed.as_secs_f64());
        m.batch_size
            .with_label_values(&phase)
            .observe(r.batch as f64);
        m.step_tokens
            .with_label_values(&phase)
            .observe(r.tokens as f64);
        if r.profiled {
            m.profiled_steps_total
                .with_label_values(&[&r.device, r.phase])
                .inc();
            let staged = r.clock.total();
            for s in Stage::ALL {
                let secs = if s == Stage::Other {
                    (r.clock.get(s) + r.elapsed.saturating_sub(staged)).as_secs_f64()
                } else {
                    r.clock.get(s).as_secs_f64()
                };
                m.stage_seconds_total
                    .with_label_values(&[s.label(), &r.device, r.phase])
                    .inc_by(secs);
                m.stage_bytes_total
                    .with_label_values(&[s.label(), &r.device])
                    .inc_by(r.clock.bytes(s));
                m.stage_flops_total
                    .with_label_values(&[s.label(), &r.device])
                    .inc_by(r.clock.flops(s));
            }
            if let Some(o) = &r.occupancy {
                for (s, l) in o.stages() {
                    let labels = [s.label(), r.device.as_str()];
                    m.stage_kernel_launches_total
                        .with_label_values(&labels)
                        .inc_by(l.launches);
                    m.stage_blocks_total
                        .with_label_values(&labels)
                        .inc_by(l.blocks);
                    m.stage_under_filled_launches_total
                        .with_label_values(&labels)
                        .inc_by(l.under_filled);
                }
            }
        }
        m.kv_cache_bytes
            .with_label_values(&[&self.model, &r.device])
            .set(r.cache_bytes as i64);
        self.cache_bytes.insert(r.device.clone(), r.cache_bytes);
        m.generation_tokens_total
            .with_label_values(&[&self.model])
            .inc_by(r.generated);
        let itl = m
            .inter_token_latency_seconds
            .with_label_values(&[&self.model]);
        for x in &r.itl {
            itl.observe(*x);
            self.window.push_itl(now, *x);
        }
        for (t, x) in &r.ttft {
            m.time_to_first_token_seconds
                .with_label_values(&[&self.model, t.label()])
                .observe(*x);
            self.window.push_ttft(now, *x);
        }
        self.window.push_step(StepSample {
            at: now,
            device: r.device,
            phase: r.phase,
            elapsed: r.elapsed,
            clock: r.profiled.then_some(r.clock),
            overhead: r.profile_overhead,
            occupancy: r.occupancy,
            batch: r.batch,
            generated: r.generated,
        });
    }
}

impl Handler<RequestReport> for Telemetry {
    type Result = ();

    fn handle(&mut self, r: RequestReport, _: &mut Context<Self>) {
        let m = &self.m;
        let model = [self.model.as_str()];
        m.requests_finished_total
            .with_label_values(&[&self.model, r.reason])
            .inc();
        m.prompt_tokens_total
            .with_label_values(&model)
            .inc_by(r.prompt_tokens as u64);
        m.request_prompt_tokens
            .with_label_values(&model)
            .observe(r.prompt_tokens as f64);
        m.request_generation_tokens
            .with_label_values(&model)
            .observe(r.completion_tokens as f64);
        m.e2e_request_latency_seconds
            .with_label_values(&model)
            .observe(r.timings.e2e.as_secs_f64());
        if r.scheduled {
            m.request_queue_time_seconds
                .with_label_values(&model)
                .observe(r.timings.queue.as_secs_f64());
        }
        if r.completion_tokens > 0 {
            m.request_prefill_time_seconds
                .with_label_values(&model)
                .observe(r.timings.prefill.as_secs_f64());
            m.request_decode_time_seconds
                .with_label_values(&model)
                .observe(r.timings.decode.as_secs_f64());
        }
        if r.completion_tokens > 1 {
            m.request_time_per_output_token_seconds
                .with_label_values(&model)
                .observe(r.timings.decode.as_secs_f64() / (r.completion_tokens - 1) as f64);
        }
    }
}

impl Handler<Gauges> for Telemetry {
    type Result = ();

    fn handle(&mut self, g: Gauges, _: &mut Context<Self>) {
        let model = [self.model.as_str()];
        self.m
            .requests_running
            .with_label_values(&model)
            .set(g.running as i64);
        self.m
            .requests_waiting
            .with_label_values(&model)
            .set(g.waiting as i64);
        self.m
            .kv_cache_usage_ratio
            .with_label_values(&model)
            .set(g.slot_usage);
        self.gauges = g;
    }
}

impl Handler<Rejected> for Telemetry {
    type Result = ();

    fn handle(&mut self, r: Rejected, _: &mut Context<Self>) {
        self.m
            .requests_rejected_total
            .with_label_values(&[r.0])
            .inc();
    }
}

impl Handler<Disconnect> for Telemetry {
    type Result = ();

    fn handle(&mut self, d: Disconnect, _: &mut Context<Self>) {
        self.m
            .client_disconnects_total
            .with_label_values(&[d.transport.label(), d.phase])
            .inc();
    }
}

impl Handler<DeviceReady> for Telemetry {
    type Result = ();

    fn handle(&mut self, d: DeviceReady, _: &mut Context<Self>) {
        let labels = [d.device.as_str()];
        self.m
            .device_peak_bandwidth_bytes_per_second
            .with_label_values(&labels)
            .set(d.peaks.bandwidth);
        self.m
            .device_peak_flops_per_second
            .with_label_values(&labels)
            .set(d.peaks.flops);
        if let Some(n) = d.multiprocessors {
            self.m
                .device_multiprocessors
                .with_label_values(&labels)
                .set(i64::from(n));
        }
        // The overhead gauge exists from the start, so dashboards see the device at once.
        self.m
            .profile_overhead_ratio
            .with_label_values(&labels)
            .set(0.0);
        self.devices.insert(
            d.device,
            DeviceFacts {
                peaks: d.peaks,
                multiprocessors: d.multiprocessors,
            },
        );
    }
}

impl Handler<GetSnapshot> for Telemetry {
    type Result = MessageResult<GetSnapshot>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Context<Self>) -> Self::Result {
        let now = Instant::now();
        self.window.prune(now);
        MessageResult(self.snapshot(now))
    }
}

impl Handler<Subscribe> for Telemetry {
    type Result = MessageResult<Subscribe>;

    fn handle(&mut self, _: Subscribe, _: &mut Context<Self>) -> Self::Result {
        let now = Instant::now();
        self.window.prune(now);
        let snap = self.snapshot(now);
        self.tx.send_replace(Arc::new(snap));
        MessageResult(self.tx.subscribe())
    }
}

#[cfg(test)]
mod tests;
