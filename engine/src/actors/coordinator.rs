//! The coordinator: the single owner of admission, the scheduler and every request's bookkeeping
//! (prompt, generated tokens, sampling parameters, timings, event sender). It runs one step at a
//! time: plan → device worker → apply the sampled tokens → stream them → plan again, admitting new
//! requests between steps. A closed receiver (client gone, or cancelled) is noticed at the next
//! step boundary or on the next failed send, and the sequence's slot is freed in that step.
//!
//! Invariants: a request is in `live` iff the scheduler knows it; it gets exactly one `Done`
//! event (unless its receiver is gone); a sequence the worker may hold state for is freed on the
//! worker with the next step after it leaves `live`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorFutureExt, Addr, Arbiter, AsyncContext, Context, Handler, Message, WrapFuture,
};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::telemetry::{Gauges, RequestReport, StepReport, Telemetry};
use super::worker::{DeviceWorker, RunStep, SampleSpec, StepOutput, WorkItem};
use crate::api::{
    EngineStats, FinishReason, Finished, GenerateRequest, ModelInfo, StreamEvent, Submission,
    Timings, Transport,
};
use crate::error::{EngineError, Result};
use crate::ops::sampling::SamplerParams;
use crate::rng::Rng;
use crate::scheduler::{Rejection, Scheduler, SchedulerConfig, SeqId, StepPlan};

/// Submit a request.
#[derive(Debug, Message)]
#[rtype(result = "Result<Submission>")]
pub struct Submit(pub GenerateRequest);

/// Stop admitting.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Drain;

/// The edge matched a stop string: end the sequence as `stop` (not as a client that left).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopSeq(pub SeqId);

/// The client cancelled explicitly (WebSocket `request.cancel`): counted as `cancelled`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CancelSeq(pub SeqId);

/// Ask for load counts.
#[derive(Debug, Message)]
#[rtype(result = "EngineStats")]
pub struct GetStats;

struct Live {
    request_id: String,
    tx: mpsc::Sender<StreamEvent>,
    prompt: Vec<u32>,
    generated: Vec<u32>,
    params: crate::api::SamplingParams,
    max_tokens: usize,
    seed: u64,
    transport: Transport,
    submitted: Instant,
    scheduled: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

impl Live {
    fn phase(&self) -> &'static str {
        match (self.scheduled, self.first_token) {
            (None, _) => "queued",
            (Some(_), None) => "prefill",
            (Some(_), Some(_)) => "decode",
        }
    }

    fn timings(&self, now: Instant) -> Timings {
        let scheduled = self.scheduled.unwrap_or(now);
        let first = self.first_token.unwrap_or(now);
        let last = self.last_token.unwrap_or(first);
        Timings {
            queue: scheduled - self.submitted,
            prefill: first.saturating_duration_since(scheduled),
            ttft: first - self.submitted,
            decode: last.saturating_duration_since(first),
            e2e: now - self.submitted,
        }
    }
}

/// The coordinator actor.
pub struct Coordinator {
    sched: Scheduler,
    info: ModelInfo,
    live: HashMap<SeqId, Live>,
    /// One per device (expert-parallel ranks); every step goes to all, rank 0's output drives.
    workers: Vec<Addr<DeviceWorker>>,
    /// Keep the workers' threads alive as long as the coordinator lives.
    arbiters: Vec<Arbiter>,
    telemetry: Addr<Telemetry>,
    next_seq: SeqId,
    seeds: Rng,
    to_free: Vec<SeqId>,
    stepping: bool,
    draining: bool,
    dead: bool,
    steps: u64,
    /// Stage timing on every Nth step that runs the model.
    profile_every: u32,
    /// Steps that ran the model (free-only steps do not count).
    model_steps: u64,
    /// Mean step time, for the retry hint of a full queue.
    step_ewma: Duration,
}

impl Coordinator {
    pub(crate) fn new(
        cfg: SchedulerConfig,
        info: ModelInfo,
        workers: Vec<Addr<DeviceWorker>>,
        arbiters: Vec<Arbiter>,
        telemetry: Addr<Telemetry>,
        profile_every: u32,
    ) -> Self {
        let entropy = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self {
            sched: Scheduler::new(cfg),
            info,
            live: HashMap::new(),
            workers,
            arbiters,
            telemetry,
            next_seq: 1,
            seeds: Rng::new(entropy ^ u64::from(std::process::id())),
            to_free: Vec::new(),
            stepping: false,
            draining: false,
            dead: false,
            steps: 0,
            profile_every: profile_every.max(1),
            model_steps: 0,
            step_ewma: Duration::from_millis(10),
        }
    }

    fn admit(&mut self, req: GenerateRequest) -> Result<Submission> {
        if self.dead {
            return Err(EngineError::Device("the device worker failed".into()));
        }
        if self.draining {
            self.telemetry
                .do_send(super::telemetry::Rejected("not_ready"));
            return Err(EngineError::Draining);
        }
        let n = req.prompt.len();
        if n == 0 {
            return Err(EngineError::InvalidInput("the prompt is empty".into()));
        }
        if let Some(bad) = req
            .prompt
            .iter()
            .find(|&&t| t as usize >= self.info.vocab_size)
        {
            return Err(EngineError::InvalidInput(format!(
                "token id {bad} is outside the vocabulary (size {})",
                self.info.vocab_size
            )));
        }
        if n >= self.info.max_model_len {
            return Err(EngineError::InvalidInput(format!(
                "the prompt has {n} tokens; the model's maximum context length is {}",
                self.info.max_model_len
            )));
        }
        let seq = self.next_seq;
        let queue_position = match self.sched.enqueue(seq, n) {
            Ok(p) => p,
            Err(Rejection::QueueFull) => {
                self.telemetry
                    .do_send(super::telemetry::Rejected("queue_full"));
                let queued = self.sched.waiting();
                // A slot frees roughly every (mean tokens per request) steps; a few steps is a
                // fair first retry hint, at least 100 ms so clients do not spin.
                let hint = (self.step_ewma * 8).as_millis() as u64;
                return Err(EngineError::Overloaded {
                    queued,
                    retry_after_ms: hint.clamp(100, 30_000),
                });
            }
            Err(Rejection::Duplicate | Rejection::EmptyPrompt) => {
                return Err(EngineError::InvalidInput("cannot queue the request".into()));
            }
        };
        self.next_seq += 1;
        let max_tokens = req
            .params
            .max_tokens
            .min(self.info.max_model_len - n)
            .max(1);
        // Every event the request can produce fits, so sends never block or fail for a slow
        // reader: max_tokens tokens + one Done.
        let (tx, rx) = mpsc::channel(max_tokens + 2);
        let seed = req.params.seed.unwrap_or_else(|| self.seeds.next_u64());
        let request_id = format!("req-{seq:x}-{:08x}", self.seeds.next_u64() as u32);
        self.live.insert(
            seq,
            Live {
                request_id: request_id.clone(),
                tx,
                prompt: req.prompt,
                generated: Vec::new(),
                params: req.params,
                max_tokens,
                seed,
                transport: req.transport,
                submitted: Instant::now(),
                scheduled: None,
                first_token: None,
                last_token: None,
            },
        );
        Ok(Submission {
            request_id,
            seq,
            queue_position,
            events: rx,
        })
    }

    /// Drops requests whose receiver is gone; their slots are freed with the next step.
    fn sweep_closed(&mut self) {
        let gone: Vec<SeqId> = self
            .live
            .iter()
            .filter(|(_, l)| l.tx.is_closed())
            .map(|(s, _)| *s)
            .collect();
        for seq in gone {
            self.cancel(seq, true);
        }
    }

    fn cancel(&mut self, seq: SeqId, client_gone: bool) {
        let Some(l) = self.live.remove(&seq) else {
            return;
        };
        if self.sched.remove(seq) || l.scheduled.is_some() {
            self.to_free.push(seq);
        }
        if client_gone {
            self.telemetry.do_send(super::telemetry::Disconnect {
                transport: l.transport,
                phase: l.phase(),
            });
        }
        self.report(&l, FinishReason::Cancelled, client_gone, Instant::now());
        let _ = l.tx.try_send(StreamEvent::Done(Finished {
            reason: FinishReason::Cancelled,
            stop_token: None,
            prompt_tokens: l.prompt.len(),
            completion_tokens: l.generated.len(),
            timings: l.timings(Instant::now()),
            error: None,
        }));
    }

    fn report(&self, l: &Live, reason: FinishReason, client_gone: bool, now: Instant) {
        tracing::debug!(
            request_id = %l.request_id,
            reason = reason.label(),
            client_gone,
            prompt_tokens = l.prompt.len(),
            completion_tokens = l.generated.len(),
            "request finished"
        );
        self.telemetry.do_send(RequestReport {
            reason: if client_gone {
                "client_gone"
            } else {
                reason.label()
            },
            transport: l.transport,
            prompt_tokens: l.prompt.len(),
            completion_tokens: l.generated.len(),
            timings: l.timings(now),
            scheduled: l.scheduled.is_some(),
        });
    }

    fn finish(
        &mut self,
        seq: SeqId,
        reason: FinishReason,
        stop_token: Option<u32>,
        error: Option<String>,
    ) {
        let Some(l) = self.live.remove(&seq) else {
            return;
        };
        self.sched.remove(seq);
        self.to_free.push(seq);
        let now = Instant::now();
        let gone =
            l.tx.try_send(StreamEvent::Done(Finished {
                reason,
                stop_token,
                prompt_tokens: l.prompt.len(),
                completion_tokens: l.generated.len(),
                timings: l.timings(now),
                error,
            }))
            .is_err();
        self.report(&l, reason, gone && reason != FinishReason::Error, now);
    }

    fn publish_gauges(&self) {
        self.telemetry.do_send(Gauges {
            running: self.sched.running(),
            waiting: self.sched.waiting(),
            slot_usage: self.sched.slot_usage(),
        });
    }

    fn build_step(&mut self, plan: &StepPlan) -> RunStep {
        let now = Instant::now();
        for seq in &plan.admitted {
            if let Some(l) = self.live.get_mut(seq) {
                l.scheduled = Some(now);
            }
        }
        let eos = &self.info.eos_token_ids;
        let items = plan
            .items
            .iter()
            .filter_map(|it| {
                let l = self.live.get(&it.seq)?;
                let all = || l.prompt.iter().chain(&l.generated);
                let tokens: Vec<u32> = all().skip(it.start).take(it.len).copied().collect();
                let sample = it.sample.then(|| {
                    let p = &l.params;
                    let mut banned = Vec::new();
                    if l.generated.len() < p.min_tokens {
                        if !p.ignore_eos {
                            banned.extend_from_slice(eos);
                        }
                        banned.extend_from_slice(&p.stop_token_ids);
                    }
                    SampleSpec {
                        params: SamplerParams {
                            temperature: p.temperature,
                            top_k: p.top_k,
                            top_p: p.top_p,
                        },
                        banned,
                    }
                });
                Some(WorkItem {
                    seq: it.seq,
                    start: it.start,
                    tokens,
                    sample,
                    seed: l.seed,
                })
            })
            .collect::<Vec<_>>();
        let profile = !items.is_empty()
            && self
                .model_steps
                .is_multiple_of(u64::from(self.profile_every));
        if !items.is_empty() {
            self.model_steps += 1;
        }
        RunStep {
            free: std::mem::take(&mut self.to_free),
            items,
            profile,
        }
    }

    fn maybe_step(&mut self, ctx: &mut Context<Self>) {
        if self.stepping {
            return;
        }
        self.sweep_closed();
        let plan = self.sched.plan();
        if plan.items.is_empty() && self.to_free.is_empty() {
            self.publish_gauges();
            return;
        }
        let step = self.build_step(&plan);
        let profiled = step.profile;
        self.publish_gauges();
        self.stepping = true;
        // The same step to every worker (ranks 1.. first); all must succeed, rank 0's output is
        // applied.
        let sends: Vec<_> = self.workers.iter().map(|w| w.send(step.clone())).collect();
        let fut = futures_util::future::join_all(sends);
        ctx.spawn(fut.into_actor(self).map(move |results, act, ctx| {
            act.stepping = false;
            let mut outs = Vec::with_capacity(results.len());
            let mut failure = None;
            for r in results {
                match r {
                    Ok(Ok(out)) => outs.push(out),
                    Ok(Err(e)) => failure = failure.or(Some(e.to_string())),
                    Err(_) => {
                        act.dead = true;
                        failure = failure.or(Some("the device worker stopped".to_string()));
                    }
                }
            }
            match failure {
                Some(msg) => act.fail_step(&plan, &msg),
                None => {
                    if let Some(out) = outs.into_iter().next() {
                        act.apply(&plan, out, profiled);
                    }
                }
            }
            act.maybe_step(ctx);
        }));
    }

    fn fail_step(&mut self, plan: &StepPlan, msg: &str) {
        tracing::error!("step failed: {msg}");
        for it in &plan.items {
            self.finish(it.seq, FinishReason::Error, None, Some(msg.to_string()));
        }
    }

    fn apply(&mut self, plan: &StepPlan, out: StepOutput, profiled: bool) {
        self.steps += 1;
        self.step_ewma = (self.step_ewma * 7 + out.elapsed) / 8;
        let now = Instant::now();
        let decodes = plan.items.iter().filter(|i| i.decode).count();
        let phase = match (decodes, plan.items.len() - decodes) {
            (_, 0) => "decode",
            (0, _) => "prefill",
            _ => "mixed",
        };
        let mut itl = Vec::new();
        let mut ttft = Vec::new();
        let mut generated = 0u64;
        for (it, tok) in plan.items.iter().zip(&out.sampled) {
            self.sched.on_computed(it.seq, it.len);
            let Some(tok) = *tok else { continue };
            let Some(l) = self.live.get_mut(&it.seq) else {
                continue;
            };
            generated += 1;
            match l.last_token {
                Some(prev) => itl.push((now - prev).as_secs_f64()),
                None => {
                    l.first_token = Some(now);
                    ttft.push((l.transport, (now - l.submitted).as_secs_f64()));
                }
            }
            l.last_token = Some(now);
            l.generated.push(tok);
            let sent = l.tx.try_send(StreamEvent::Token(tok));
            let p = &l.params;
            let is_eos = !p.ignore_eos && self.info.eos_token_ids.contains(&tok);
            let is_stop = p.stop_token_ids.contains(&tok);
            let n = l.generated.len();
            let at_limit = n >= l.max_tokens || l.prompt.len() + n >= self.info.max_model_len;
            match sent {
                Err(TrySendError::Closed(_)) => self.cancel(it.seq, true),
                Err(TrySendError::Full(_)) => {
                    // Cannot happen: the channel holds every event the request can produce.
                    self.finish(
                        it.seq,
                        FinishReason::Error,
                        None,
                        Some("stream buffer overflow".into()),
                    );
                }
                Ok(()) if is_stop => self.finish(it.seq, FinishReason::Stop, Some(tok), None),
                Ok(()) if is_eos => self.finish(it.seq, FinishReason::Stop, None, None),
                Ok(()) if at_limit => self.finish(it.seq, FinishReason::Length, None, None),
                Ok(()) => self.sched.on_token(it.seq),
            }
        }
        if plan.items.is_empty() {
            // A step that only freed finished sequences: no model work to report.
            return;
        }
        self.telemetry.do_send(StepReport {
            device: self.info.device.clone(),
            phase,
            batch: plan.items.len(),
            tokens: plan.tokens(),
            elapsed: out.elapsed,
            profiled,
            clock: out.clock,
            occupancy: out.occupancy,
            profile_overhead: out.profile_overhead,
            cache_bytes: out.cache_bytes,
            itl,
            ttft,
            generated,
        });
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Self::Context) {
        for a in &self.arbiters {
            a.stop();
        }
    }
}

impl Handler<Submit> for Coordinator {
    type Result = Result<Submission>;

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let r = self.admit(msg.0);
        if r.is_ok() {
            self.maybe_step(ctx);
        }
        r
    }
}

impl Handler<Drain> for Coordinator {
    type Result = ();

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) {
        self.draining = true;
    }
}

impl Handler<StopSeq> for Coordinator {
    type Result = ();

    fn handle(&mut self, msg: StopSeq, _: &mut Context<Self>) {
        // The edge drops the receiver right after asking, so no Done is sent and a closed
        // channel here does not mean the client left.
        let Some(l) = self.live.remove(&msg.0) else {
            return;
        };
        self.sched.remove(msg.0);
        self.to_free.push(msg.0);
        self.report(&l, FinishReason::Stop, false, Instant::now());
    }
}

impl Handler<CancelSeq> for Coordinator {
    type Result = ();

    fn handle(&mut self, msg: CancelSeq, _: &mut Context<Self>) {
        self.cancel(msg.0, false);
    }
}

impl Handler<GetStats> for Coordinator {
    type Result = actix::MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, ctx: &mut Context<Self>) -> Self::Result {
        // A stats query is also a step boundary chance: reap requests whose client left while
        // the engine was idle (nothing else would notice them).
        self.maybe_step(ctx);
        actix::MessageResult(EngineStats {
            running: self.sched.running(),
            waiting: self.sched.waiting(),
            draining: self.draining,
            dead: self.dead,
            steps: self.steps,
        })
    }
}
