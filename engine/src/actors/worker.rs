//! Device worker: one per device, on its own thread (an actix arbiter), owning the model and
//! every running sequence's cache. It runs a step as planned by the coordinator and returns the
//! sampled tokens plus the step's stage timings. The CPU backend is here; a CUDA backend
//! implements the same [`Backend`] trait. Sampling happens here because logits never leave the
//! device; each sequence's RNG lives beside its cache so a seed gives the same tokens whatever
//! else shares the batch.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::{Actor, Context, Handler, Message};

use crate::error::{EngineError, Result};
use crate::kv_cache::SeqState;
use crate::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use crate::ops::sampling::{SamplerParams, sample};
use crate::profile::StageClock;
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
#[derive(Debug, Message)]
#[rtype(result = "Result<StepOutput>")]
pub struct RunStep {
    pub free: Vec<SeqId>,
    pub items: Vec<WorkItem>,
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
}

/// A device that can run planned steps.
pub trait Backend: Send + 'static {
    /// The device label for metrics (`cpu`, `cuda:0`).
    fn device(&self) -> &str;
    fn run(&mut self, step: RunStep) -> Result<StepOutput>;
}

struct CpuSeq {
    state: SeqState,
    rng: Rng,
}

/// The CPU reference backend.
pub struct CpuBackend {
    model: DeepseekV4,
    seqs: HashMap<SeqId, CpuSeq>,
}

impl CpuBackend {
    pub fn new(model: DeepseekV4) -> Self {
        Self {
            model,
            seqs: HashMap::new(),
        }
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> &str {
        "cpu"
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
        let mut clock = StageClock::default();
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
            self.model.forward(&mut batch, &mut clock)
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
        let t_sample = Instant::now();
        for ((it, s), l) in step.items.iter().zip(taken.iter_mut()).zip(&logits) {
            sampled.push(match &it.sample {
                Some(spec) if l.rows > 0 => {
                    Some(sample(l.row(0), &spec.params, &mut s.rng, &spec.banned))
                }
                _ => None,
            });
        }
        clock.add(crate::profile::Stage::Head, t_sample.elapsed());
        for (it, s) in step.items.iter().zip(taken) {
            self.seqs.insert(it.seq, s);
        }
        let cache_bytes = self.seqs.values().map(|s| s.state.bytes() as u64).sum();
        Ok(StepOutput {
            sampled,
            clock,
            elapsed: t0.elapsed(),
            cache_bytes,
        })
    }
}

/// The actor around a backend. Its handler blocks its own arbiter thread for the step, which is
/// the point: nothing else runs there.
pub struct DeviceWorker {
    backend: Box<dyn Backend>,
}

impl DeviceWorker {
    pub fn new(backend: Box<dyn Backend>) -> Self {
        Self { backend }
    }
}

impl Actor for DeviceWorker {
    type Context = Context<Self>;
}

impl Handler<RunStep> for DeviceWorker {
    type Result = Result<StepOutput>;

    fn handle(&mut self, msg: RunStep, _: &mut Context<Self>) -> Self::Result {
        self.backend.run(msg)
    }
}
