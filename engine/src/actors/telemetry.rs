//! Telemetry: receives step and request reports from the coordinator and turns them into
//! Prometheus metrics, off the coordinator's path. Per step it charges every stage's wall time
//! (and analytic bytes/FLOPs) to `amdahl_stage_*_total{stage,device,phase}`; `other` is the step
//! time the forward pass did not attribute to a stage. Rolling windows and dashboard pushes build
//! on the same reports.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler, Message};

use crate::api::{Timings, Transport};
use crate::metrics::Metrics;
use crate::profile::{Stage, StageClock};

/// One finished step.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StepReport {
    pub phase: &'static str,
    pub batch: usize,
    pub tokens: usize,
    pub elapsed: Duration,
    pub clock: StageClock,
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
#[derive(Debug, Message)]
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

/// The telemetry actor.
pub struct Telemetry {
    m: Arc<Metrics>,
    model: String,
    device: String,
}

impl Telemetry {
    pub fn new(m: Arc<Metrics>, model: String, device: String) -> Self {
        Self { m, model, device }
    }
}

impl Actor for Telemetry {
    type Context = Context<Self>;
}

impl Handler<StepReport> for Telemetry {
    type Result = ();

    fn handle(&mut self, r: StepReport, _: &mut Context<Self>) {
        let m = &self.m;
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
        let staged = r.clock.total();
        for s in Stage::ALL {
            let secs = if s == Stage::Other {
                (r.clock.get(s) + r.elapsed.saturating_sub(staged)).as_secs_f64()
            } else {
                r.clock.get(s).as_secs_f64()
            };
            m.stage_seconds_total
                .with_label_values(&[s.label(), &self.device, r.phase])
                .inc_by(secs);
            m.stage_bytes_total
                .with_label_values(&[s.label(), &self.device])
                .inc_by(r.clock.bytes(s));
            m.stage_flops_total
                .with_label_values(&[s.label(), &self.device])
                .inc_by(r.clock.flops(s));
        }
        m.kv_cache_bytes
            .with_label_values(&[&self.model, &self.device])
            .set(r.cache_bytes as i64);
        m.generation_tokens_total
            .with_label_values(&[&self.model])
            .inc_by(r.generated);
        let itl = m
            .inter_token_latency_seconds
            .with_label_values(&[&self.model]);
        for x in r.itl {
            itl.observe(x);
        }
        for (t, x) in r.ttft {
            m.time_to_first_token_seconds
                .with_label_values(&[&self.model, t.label()])
                .observe(x);
        }
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
