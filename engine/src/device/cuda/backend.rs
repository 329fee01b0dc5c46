//! The CUDA device worker's backend: owns the GPU model and maps scheduler sequences to cache
//! slots. Decode steps (one token per sequence) are captured once per (batch bucket, shape) as a
//! CUDA graph and replayed with new metadata; prefill and mixed steps launch eagerly. Steps the
//! coordinator marks for profiling record stage events (their own graph variant) and are charged with
//! analytic bytes and FLOPs. Sampling runs on the device; each sequence's seeded generator
//! gives the one uniform draw its token needs.

use std::collections::HashMap;
use std::time::Instant;

use crate::actors::worker::{Backend, RunStep, StepOutput};
use crate::error::{EngineError, Result};
use crate::model::deepseek_v4::{DeepseekV4, LogitRows};
use crate::profile::StageClock;
use crate::profile::report::Peaks;
use crate::rng::Rng;
use crate::scheduler::SeqId;

use super::super::CudaOptions;
use super::bench::charge_work;
use super::gpu::{Gpu, dev_err};
use super::model::{GpuModel, SampleRow, Shape, StepSeq};
use super::state::Limits;
use super::timer::StageTimer;

struct Seq {
    slot: usize,
    pos: usize,
    rng: Rng,
}

/// A CUDA backend for the device worker actor.
pub struct CudaBackend {
    model: GpuModel,
    label: String,
    seqs: HashMap<SeqId, Seq>,
    free: Vec<usize>,
    graphs: HashMap<(Shape, bool), (cudarc::driver::CudaGraph, StageTimer)>,
    opts: CudaOptions,
    /// Device time one recorded event costs (measured at start), for the overhead estimate.
    event_cost: std::time::Duration,
}

// SAFETY: the backend is created on one thread and then used only by the device worker's
// thread; every entry point binds the context to the calling thread first (CUDA handles are
// valid from any thread with the context current).
unsafe impl Send for CudaBackend {}

impl CudaBackend {
    /// Uploads a loaded model to GPU `opts.ordinal`.
    pub fn new(model: &DeepseekV4, opts: CudaOptions) -> Result<Self> {
        let gpu = Gpu::open(opts.ordinal)?;
        let (major, minor) = gpu.info.compute_capability;
        let device = crate::ops::moe::backends::Device::Cuda {
            major: major as u32,
            minor: minor as u32,
        };
        let choice = crate::ops::moe::backends::Choice::parse(&opts.moe_backend)?;
        let formats = model.weights.expert_formats();
        let moe = crate::ops::moe::backends::choose_built(choice, &formats, device)?;
        tracing::info!(backend = moe.name(), %device, "MoE backend");
        let lim = Limits {
            tokens: opts.max_step_tokens.max(opts.max_batch),
            seqs: opts.max_batch,
            max_len: opts.max_len,
        };
        let m = GpuModel::from_cpu(gpu, model, lim)?;
        tracing::info!(
            device = %m.gpu.info.name,
            cache_bytes = m.kv.bytes(),
            "model resident on cuda:{}",
            opts.ordinal
        );
        let event_cost = event_cost(&m.gpu)?;
        Ok(Self {
            label: format!("cuda:{}", opts.ordinal),
            free: (0..opts.max_batch).rev().collect(),
            model: m,
            seqs: HashMap::new(),
            graphs: HashMap::new(),
            opts,
            event_cost,
        })
    }

    pub fn model(&self) -> &GpuModel {
        &self.model
    }

    fn bucket(&self, b: usize) -> usize {
        b.next_power_of_two().min(self.model.lim.seqs)
    }
}

/// Device time of one event record: 256 records between two events.
fn event_cost(g: &Gpu) -> Result<std::time::Duration> {
    let (a, b) = (g.event()?, g.event()?);
    let mid: Vec<_> = (0..8).map(|_| g.event()).collect::<Result<_>>()?;
    g.record(&a, false)?;
    for i in 0..256 {
        g.record(&mid[i % mid.len()], false)?;
    }
    g.record(&b, false)?;
    b.synchronize()?;
    let ms = f64::from(a.elapsed_ms(&b)?);
    Ok(std::time::Duration::from_secs_f64(ms / 1e3 / 256.0))
}

impl Backend for CudaBackend {
    fn device(&self) -> &str {
        &self.label
    }

    fn peaks(&mut self) -> Peaks {
        let _ = self.model.gpu.bind();
        match super::peaks::measure(&self.model.gpu) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    "measuring the GPU's peaks failed ({e}); using H200 datasheet-like values"
                );
                Peaks {
                    bandwidth: 4.3e12,
                    flops: 7.9e14,
                }
            }
        }
    }

    fn multiprocessors(&self) -> Option<u32> {
        Some(self.model.gpu.info.sms as u32)
    }

    /// Every 16th step records stage events (a graph variant of its own).
    fn default_profile_every(&self) -> u32 {
        16
    }

    fn run(&mut self, step: RunStep) -> Result<StepOutput> {
        let t0 = Instant::now();
        self.model.gpu.bind()?;
        for s in &step.free {
            if let Some(q) = self.seqs.remove(s) {
                self.free.push(q.slot);
            }
        }
        if step.items.is_empty() {
            let per_slot = self.model.kv.bytes() / self.model.lim.slots() as u64;
            return Ok(StepOutput {
                elapsed: t0.elapsed(),
                cache_bytes: per_slot * self.seqs.len() as u64,
                ..StepOutput::default()
            });
        }
        for it in &step.items {
            if !self.seqs.contains_key(&it.seq) {
                let slot = self.free.pop().ok_or_else(|| {
                    EngineError::Cache(format!("no free GPU cache slot for sequence {}", it.seq))
                })?;
                self.seqs.insert(
                    it.seq,
                    Seq {
                        slot,
                        pos: 0,
                        rng: Rng::new(it.seed),
                    },
                );
            }
            let q = &self.seqs[&it.seq];
            if q.pos != it.start {
                let found = q.pos;
                if let Some(q) = self.seqs.remove(&it.seq) {
                    self.free.push(q.slot);
                }
                return Err(EngineError::Cache(format!(
                    "sequence {}: plan starts at {} but the cache holds {found} tokens",
                    it.seq, it.start
                )));
            }
        }
        let mut rows = Vec::with_capacity(step.items.len());
        for it in &step.items {
            let q = self
                .seqs
                .get_mut(&it.seq)
                .ok_or_else(|| EngineError::Cache("lost sequence".into()))?;
            let sample = it.sample.as_ref().map(|sp| SampleRow {
                temperature: sp.params.temperature,
                top_k: sp.params.top_k,
                top_p: sp.params.top_p,
                u: q.rng.next_f64() as f32,
                banned: sp.banned.clone(),
            });
            rows.push((q.slot, sample));
        }
        let seqs: Vec<StepSeq<'_>> = step
            .items
            .iter()
            .zip(&rows)
            .map(|(it, (slot, sample))| StepSeq {
                slot: *slot,
                start: it.start,
                tokens: &it.tokens,
                logits: if sample.is_some() {
                    LogitRows::Last
                } else {
                    LogitRows::None
                },
                sample: sample.clone(),
            })
            .collect();
        let timed = step.profile;
        let decode = !seqs.is_empty() && seqs.iter().all(|s| s.tokens.len() == 1);
        let use_graph = self.opts.graphs && decode && seqs.len() <= self.model.lim.seqs;
        let plan = self
            .model
            .plan(&seqs, use_graph.then(|| self.bucket(seqs.len())))?;
        self.model.upload_meta(&plan)?;
        let mut eager_timer = StageTimer::new(timed);
        let result = if use_graph {
            let key = (plan.shape, timed);
            if !self.graphs.contains_key(&key) {
                let mut tm = StageTimer::new(timed);
                self.model.gpu.begin_capture()?;
                let r = self.model.launch_forward(plan.shape, true, &mut tm);
                let g = self.model.gpu.end_capture();
                r?;
                self.graphs.insert(key, (g?, tm));
            }
            let (g, _) = &self.graphs[&key];
            g.launch().map_err(|e| dev_err("graph launch", e))
        } else {
            self.model
                .launch_forward(plan.shape, false, &mut eager_timer)
        };
        let sampled_rows = result.and_then(|_| {
            if plan.shape.sample {
                self.model.read_sampled(plan.shape.r)
            } else {
                self.model.gpu.sync().map(|_| vec![])
            }
        });
        let sampled_rows = match sampled_rows {
            Ok(s) => s,
            Err(e) => {
                // The caches of these sequences cannot be trusted any more.
                for it in &step.items {
                    if let Some(q) = self.seqs.remove(&it.seq) {
                        self.free.push(q.slot);
                    }
                }
                return Err(e);
            }
        };
        let mut sampled = Vec::with_capacity(step.items.len());
        for ((it, s), r) in step.items.iter().zip(&seqs).zip(&plan.rows_of) {
            sampled.push(match (&s.sample, r.end) {
                (Some(_), e) if e > 0 => sampled_rows.get(e - 1).map(|&x| x as u32),
                _ => None,
            });
            if let Some(q) = self.seqs.get_mut(&it.seq) {
                q.pos += it.tokens.len();
            }
        }
        let mut clock = StageClock::default();
        let mut occupancy = None;
        let mut profile_overhead = std::time::Duration::ZERO;
        if timed {
            let tm = if use_graph {
                &self.graphs[&(plan.shape, true)].1
            } else {
                &eager_timer
            };
            tm.charge(&mut clock)?;
            occupancy = Some(tm.occupancy(self.model.gpu.info.sms as u32));
            profile_overhead = self.event_cost * tm.marks() as u32;
            let touched = super::bench::experts_touched(&self.model)?;
            let n_real: usize = step.items.iter().map(|i| i.tokens.len()).sum();
            charge_work(
                &self.model.cfg,
                &self.model.w,
                &plan.positions[..n_real],
                plan.shape.r,
                &touched,
                self.model.lim.max_len,
                &mut clock,
            );
        }
        let per_slot = self.model.kv.bytes() / self.model.lim.slots() as u64;
        Ok(StepOutput {
            sampled,
            clock,
            elapsed: t0.elapsed(),
            cache_bytes: per_slot * self.seqs.len() as u64,
            occupancy,
            profile_overhead,
        })
    }
}
