//! Device worker: one per device, on its own thread (an actix arbiter), owning the model and
//! every running sequence's cache. It runs a step as planned by the coordinator and returns the
//! sampled tokens plus the step's stage timings. The CPU backend is here; a CUDA backend
//! implements the same [`Backend`] trait. Sampling happens here because logits never leave the
//! device; each sequence's RNG lives beside its cache so a seed gives the same tokens whatever
//! else shares the batch. At start the worker asks its backend for the device's peaks (measured
//! on the device's own thread) and hands them to telemetry for the roofline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::OnceLock;

use actix::{Actor, Addr, Context, Handler, Message};

use super::telemetry::{DeviceReady, Telemetry};
use crate::error::{EngineError, Result};
use crate::kv_cache::SeqState;
use crate::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use crate::ops::sampling::{SamplerParams, sample};
use crate::parallel::{Collective, Ep, Shard};
use crate::profile::occupancy::Occupancy;
use crate::profile::report::Peaks;
use crate::profile::{StageClock, peaks, timer_read_cost};
use crate::rng::Rng;
use crate::scheduler::SeqId;

/// One sequence's work in a step.
#[derive(Debug, Clone)]
pub struct WorkItem {
    pub seq: SeqId,
    /// Position of `tokens[0]` in the sequence; must equal what the cache has consumed.
    pub start: usize,
    pub tokens: Vec<u32>,
    /// Sample the next token from the last row's logits.
    pub sample: Option<SampleSpec>,
    /// Seeds the sequence's RNG when the worker first sees it.
    pub seed: u64,
}

/// How to sample one token.
#[derive(Debug, Clone)]
pub struct SampleSpec {
    pub params: SamplerParams,
    /// Ids that must not be drawn (EOS / stop ids before `min_tokens`).
    pub banned: Vec<u32>,
}

/// A step: free finished sequences first, then run the items.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<StepOutput>")]
pub struct RunStep {
    pub free: Vec<SeqId>,
    pub items: Vec<WorkItem>,
    /// Record stage timing for this step (every `--profile-every`th step).
    pub profile: bool,
}

/// What a step produced.
#[derive(Debug, Clone, Default)]
pub struct StepOutput {
    /// Per item, the sampled token (None when the item did not sample).
    pub sampled: Vec<Option<u32>>,
    pub clock: StageClock,
    pub elapsed: Duration,
    /// Host bytes held by all live sequence caches after the step.
    pub cache_bytes: u64,
    /// Kernel launches per stage (GPU backends, profiled steps); None on the CPU.
    pub occupancy: Option<Occupancy>,
    /// The backend's estimate of what recording the stage timing cost in this step.
    pub profile_overhead: Duration,
}

/// A device that can run planned steps.
pub trait Backend: Send + 'static {
    /// The device label for metrics (`cpu`, `cuda:0`).
    fn device(&self) -> &str;
    fn run(&mut self, step: RunStep) -> Result<StepOutput>;
    /// The device's peak bandwidth and FLOP rate for the roofline, measured (or cached) on the
    /// worker's thread at start.
    fn peaks(&mut self) -> Peaks;
    /// Streaming multiprocessors, for the occupancy facts (None: not a GPU).
    fn multiprocessors(&self) -> Option<u32> {
        None
    }
    /// How often stage timing is sampled by default: every step where timing is nearly free
    /// (the CPU's wall clock), less often where it is not.
    fn default_profile_every(&self) -> u32 {
        1
    }
}

/// The CPU's peaks, measured once per process (every engine in a test binary shares the same
/// CPU, and measuring takes a few hundred milliseconds).
fn cpu_peaks() -> Peaks {
    static PEAKS: OnceLock<Peaks> = OnceLock::new();
    *PEAKS.get_or_init(peaks::measure_cpu_peaks)
}

struct CpuSeq {
    state: SeqState,
    rng: Rng,
}

/// The CPU reference backend.
pub struct CpuBackend {
    model: DeepseekV4,
    seqs: HashMap<SeqId, CpuSeq>,
    /// What one timer read costs here: the instrumentation estimate per stage mark.
    mark_cost: Duration,
    /// Expert-parallel rank and the collective shared with the other CPU workers.
    ep: Option<(Shard, Arc<dyn Collective>)>,
    label: String,
}

impl CpuBackend {
    pub fn new(model: DeepseekV4) -> Self {
        Self::sharded(model, None)
    }

    /// One of several expert-parallel CPU workers: keeps only its experts and all-reduces each
    /// MoE layer's shares with the others through `ep`'s collective.
    pub fn sharded(mut model: DeepseekV4, ep: Option<(Shard, Arc<dyn Collective>)>) -> Self {
        let label = match &ep {
            Some((s, _)) if s.world > 1 && s.rank > 0 => format!("cpu/{}", s.rank),
            _ => "cpu".to_string(),
        };
        if let Some((s, _)) = &ep {
            model.retain_experts(*s);
        }
        Self {
            ep,
            label,
            model,
            seqs: HashMap::new(),
            mark_cost: timer_read_cost(),
        }
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> &str {
        &self.label
    }

    fn peaks(&mut self) -> Peaks {
        cpu_peaks()
    }

    fn run(&mut self, step: RunStep) -> Result<StepOutput> {
        let t0 = Instant::now();
        for seq in &step.free {
            self.seqs.remove(seq);
        }
        for it in &step.items {
            let entry = self.seqs.entry(it.seq).or_insert_with(|| CpuSeq {
                state: self.model.new_state(),
                rng: Rng::new(it.seed),
            });
            if entry.state.pos != it.start {
                let found = entry.state.pos;
                // The plan and the cache disagree: drop the state so the error is not sticky.
                self.seqs.remove(&it.seq);
                return Err(EngineError::Cache(format!(
                    "sequence {}: plan starts at {} but the cache holds {found} tokens",
                    it.seq, it.start
                )));
            }
        }
        // Split the map borrow: take the entries out for the step, put them back after.
        let mut taken: Vec<CpuSeq> = Vec::with_capacity(step.items.len());
        for it in &step.items {
            let s = self.seqs.remove(&it.seq).ok_or_else(|| {
                EngineError::Cache(format!("sequence {} appears twice in a step", it.seq))
            })?;
            taken.push(s);
        }
        let mut clock = StageClock::for_step(step.profile);
        let logits = {
            let mut batch: Vec<SeqInput<'_>> = step
                .items
                .iter()
                .zip(taken.iter_mut())
                .map(|(it, s)| SeqInput {
                    tokens: &it.tokens,
                    state: &mut s.state,
                    logits: if it.sample.is_some() {
                        LogitRows::Last
                    } else {
                        LogitRows::None
                    },
                })
                .collect();
            let ep = self.ep.as_ref().map(|(shard, comm)| Ep {
                shard: *shard,
                comm: comm.as_ref(),
            });
            self.model.forward_ep(&mut batch, &mut clock, ep)
        };
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                // The states advanced partially: they cannot be trusted, so they are dropped
                // and the coordinator fails these sequences.
                return Err(e);
            }
        };
        let mut sampled = Vec::with_capacity(step.items.len());
        clock.time(crate::profile::Stage::Head, || {
            for ((it, s), l) in step.items.iter().zip(taken.iter_mut()).zip(&logits) {
                sampled.push(match &it.sample {
                    Some(spec) if l.rows > 0 => {
                        Some(sample(l.row(0), &spec.params, &mut s.rng, &spec.banned))
                    }
                    _ => None,
                });
            }
        });
        for (it, s) in step.items.iter().zip(taken) {
            self.seqs.insert(it.seq, s);
        }
        let cache_bytes = self.seqs.values().map(|s| s.state.bytes() as u64).sum();
        let profile_overhead = self.mark_cost * clock.marks().min(u64::from(u32::MAX)) as u32;
        Ok(StepOutput {
            sampled,
            clock,
            elapsed: t0.elapsed(),
            cache_bytes,
            occupancy: None,
            profile_overhead,
        })
    }
}

/// The actor around a backend. Its handler blocks its own arbiter thread for the step, which is
/// the point: nothing else runs there.
pub struct DeviceWorker {
    backend: Box<dyn Backend>,
    telemetry: Addr<Telemetry>,
}

impl DeviceWorker {
    pub fn new(backend: Box<dyn Backend>, telemetry: Addr<Telemetry>) -> Self {
        Self { backend, telemetry }
    }
}

impl Actor for DeviceWorker {
    type Context = Context<Self>;

    /// Measures the peaks before the first step (the mailbox waits), on this thread.
    fn started(&mut self, _: &mut Context<Self>) {
        let peaks = self.backend.peaks();
        tracing::info!(
            device = self.backend.device(),
            bandwidth_gb_s = peaks.bandwidth / 1e9,
            gflop_s = peaks.flops / 1e9,
            "device peaks"
        );
        self.telemetry.do_send(DeviceReady {
            device: self.backend.device().to_string(),
            peaks,
            multiprocessors: self.backend.multiprocessors(),
        });
    }
}

impl Handler<RunStep> for DeviceWorker {
    type Result = Result<StepOutput>;

    fn handle(&mut self, msg: RunStep, _: &mut Context<Self>) -> Self::Result {
        self.backend.run(msg)
    }
}
