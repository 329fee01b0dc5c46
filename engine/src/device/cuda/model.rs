//! The DeepSeek-V4 forward pass on one GPU (model-spec §3.3; the CPU reference is
//! `model::deepseek_v4`, which this mirrors op for op). A step is described by per-step metadata
//! in device memory and a [`Shape`] (rows, sequences, logit rows); the launch sequence depends
//! only on the shape, so the same code runs eagerly (prefill, mixed steps) or is captured once
//! per decode batch bucket and replayed as a CUDA graph.

use crate::config::{AttnKind, ModelConfig};
use crate::error::{EngineError, Result};
use crate::model::deepseek_v4::{DeepseekV4, LogitRows};
use crate::profile::Stage;
use crate::tensor::Mat;

use super::gpu::{DevBuf, Gpu};
use super::launch::{self as k, Rope};
use super::state::{KvState, Limits, MetaLayout, StepBufs, attn_chunk, attn_splits};
use super::timer::StageTimer;
use super::weights::GpuWeights;

/// Sampling of one logit row.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRow {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    /// Uniform draw in [0, 1) from the request's generator.
    pub u: f32,
    pub banned: Vec<u32>,
}

impl SampleRow {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            u: 0.0,
            banned: vec![],
        }
    }
}

/// One sequence's part of a step.
#[derive(Debug, Clone)]
pub struct StepSeq<'a> {
    pub slot: usize,
    /// Position of `tokens[0]`; the slot's cache holds exactly `start` tokens.
    pub start: usize,
    pub tokens: &'a [u32],
    pub logits: LogitRows,
    /// Sample the last row (requires `logits != None`).
    pub sample: Option<SampleRow>,
}

/// The launch shape of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub t: usize,
    pub b: usize,
    /// Logit rows (head + sampling).
    pub r: usize,
    pub sample: bool,
}

/// Host copy of a step's metadata, plus what the host needs afterwards.
#[derive(Debug, Clone)]
pub struct Plan {
    pub shape: Shape,
    pub ints: Vec<i32>,
    pub floats: Vec<f32>,
    /// Per sequence, its logit rows' indices among the `r` rows.
    pub rows_of: Vec<std::ops::Range<usize>>,
    /// Positions of every row (analytic work).
    pub positions: Vec<usize>,
}

/// A model resident on one GPU.
pub struct GpuModel {
    pub cfg: ModelConfig,
    pub gpu: Gpu,
    pub w: GpuWeights,
    pub kv: KvState,
    pub bufs: StepBufs,
    pub lim: Limits,
    pub layout: MetaLayout,
    rope_main: (DevBuf, f32),
    rope_comp: (DevBuf, f32),
    /// Launches of the sparse attention kernel per layer: 1, or more with
    /// `AMDAHL_SLOW_ATTENTION=N` to check the profiler's Amdahl projection against a real change.
    pub attn_repeat: usize,
    /// Steps of at most this many tokens launch as programmatic dependents in a `pdl` build
    /// (`AMDAHL_PDL_MAX_TOKENS`, default 16; at 64 tokens they were slower, docs/PERF.md).
    pub pdl_max_tokens: usize,
    /// Steps of at most this many tokens prefetch the large attention and shared-expert weights
    /// into L2 ahead of their kernels, on the prefetch stream (`AMDAHL_L2_AHEAD`, default 0:
    /// off; model/layer.rs says where).
    pub l2_ahead_max_tokens: usize,
    /// Steps of at most this many tokens prefetch the active experts' down projections into L2
    /// once the plan names them, beside the up kernel, where they fit
    /// (`AMDAHL_L2_AHEAD_EXPERTS`, default 0: off).
    pub l2_ahead_experts_max_tokens: usize,
}

impl std::fmt::Debug for GpuModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuModel")
            .field("gpu", &self.gpu)
            .field("lim", &self.lim)
            .finish()
    }
}

impl GpuModel {
    pub fn new(gpu: Gpu, cfg: ModelConfig, w: GpuWeights, lim: Limits) -> Result<Self> {
        if cfg.head_dim > 512 || !cfg.head_dim.is_multiple_of(8) {
            return Err(EngineError::Device(format!(
                "head_dim {} is not supported by the GPU attention (multiple of 8, at most 512)",
                cfg.head_dim
            )));
        }
        if cfg.index_n_heads > amdahl_kernels::attention::INDEXER_MAX_HEADS {
            return Err(EngineError::Device(format!(
                "index_n_heads {} > {} is not supported by the GPU indexer",
                cfg.index_n_heads,
                amdahl_kernels::attention::INDEXER_MAX_HEADS
            )));
        }
        let idx_smem = k::indexer_smem(cfg.index_n_heads, cfg.index_head_dim, 4);
        if k::indexer_kernels() != k::IndexerKernels::Rows
            && !k::indexer_mma_fits(cfg.index_n_heads, cfg.index_head_dim)
            && (!cfg.index_head_dim.is_multiple_of(4) || idx_smem > gpu.info.max_smem_optin)
        {
            return Err(EngineError::Device(format!(
                "an indexer of {} heads × {} is not supported by the GPU indexer (head dim a \
                 multiple of 4; {idx_smem} bytes of shared memory, this GPU allows {})",
                cfg.index_n_heads, cfg.index_head_dim, gpu.info.max_smem_optin
            )));
        }
        if cfg.n_routed_experts > amdahl_kernels::moe::MAX_EXPERTS
            || cfg.num_experts_per_tok > amdahl_kernels::moe::MAX_TOP_K
        {
            return Err(EngineError::Device(format!(
                "{} experts, top-{}: the GPU router takes at most {} experts and top-{}",
                cfg.n_routed_experts,
                cfg.num_experts_per_tok,
                amdahl_kernels::moe::MAX_EXPERTS,
                amdahl_kernels::moe::MAX_TOP_K
            )));
        }
        let inv = |r: &crate::config::RopeConfig| -> Vec<f32> {
            r.inv_freq(cfg.rope_dim).iter().map(|&f| f as f32).collect()
        };
        let rope_main = (
            gpu.upload(&inv(&cfg.main_rope))?,
            cfg.main_rope.attention_factor as f32,
        );
        let rope_comp = (
            gpu.upload(&inv(&cfg.compress_rope))?,
            cfg.compress_rope.attention_factor as f32,
        );
        let kv = KvState::new(&gpu, &cfg, lim)?;
        let bufs = StepBufs::new(&gpu, &cfg, lim, gpu.info.sms)?;
        gpu.sync()?;
        Ok(Self {
            layout: MetaLayout::new(lim),
            cfg,
            gpu,
            w,
            kv,
            bufs,
            lim,
            rope_main,
            rope_comp,
            pdl_max_tokens: std::env::var("AMDAHL_PDL_MAX_TOKENS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(16),
            l2_ahead_max_tokens: std::env::var("AMDAHL_L2_AHEAD")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            l2_ahead_experts_max_tokens: std::env::var("AMDAHL_L2_AHEAD_EXPERTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            attn_repeat: std::env::var("AMDAHL_SLOW_ATTENTION")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1usize)
                .max(1),
        })
    }

    /// Uploads a CPU-loaded model.
    pub fn from_cpu(gpu: Gpu, model: &DeepseekV4, lim: Limits) -> Result<Self> {
        let w = GpuWeights::upload(&gpu, &model.cfg, &model.weights)?;
        Self::new(gpu, model.cfg.clone(), w, lim)
    }

    fn rope(&self, kind: AttnKind) -> Rope {
        let (b, s) = if kind.uses_compress_rope() {
            &self.rope_comp
        } else {
            &self.rope_main
        };
        Rope {
            inv_freq: b.ptr(),
            dim: self.cfg.rope_dim,
            scale: *s,
        }
    }

    /// Builds the metadata of a step. `pad_to` pads a decode step with scratch-slot rows up to a
    /// graph bucket.
    pub fn plan(&self, seqs: &[StepSeq<'_>], pad_to: Option<usize>) -> Result<Plan> {
        let lay = self.layout;
        let lim = self.lim;
        let mut ints = vec![0i32; lay.ints];
        let mut floats = vec![0f32; lay.floats];
        let t: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        let b = seqs.len();
        let (t_pad, b_pad) = match pad_to {
            Some(n) => (t.max(n), b.max(n)),
            None => (t, b),
        };
        if t_pad > lim.tokens || b_pad > lim.seqs || t == 0 {
            return Err(EngineError::Device(format!(
                "a step of {t} tokens over {b} sequences does not fit the GPU buffers \
                 ({} tokens, {} sequences)",
                lim.tokens, lim.seqs
            )));
        }
        let mut positions = Vec::with_capacity(t_pad);
        let mut rows_of = Vec::with_capacity(b);
        let mut row = 0usize;
        let mut r = 0usize;
        let mut any_sample = false;
        for (i, s) in seqs.iter().enumerate() {
            if s.slot >= lim.seqs {
                return Err(EngineError::Cache(format!("slot {} out of range", s.slot)));
            }
            if s.start + s.tokens.len() > lim.max_len {
                return Err(EngineError::InvalidInput(format!(
                    "sequence of {} tokens exceeds the GPU cache length {}",
                    s.start + s.tokens.len(),
                    lim.max_len
                )));
            }
            ints[lay.seq_slot + i] = s.slot as i32;
            ints[lay.seq_start + i] = s.start as i32;
            ints[lay.seq_n + i] = s.tokens.len() as i32;
            ints[lay.seq_row0 + i] = row as i32;
            for (j, &tok) in s.tokens.iter().enumerate() {
                if tok as usize >= self.cfg.vocab_size {
                    return Err(EngineError::InvalidInput(format!(
                        "token id {tok} is outside the vocabulary (size {})",
                        self.cfg.vocab_size
                    )));
                }
                ints[lay.tokens + row + j] = tok as i32;
                ints[lay.row_seq + row + j] = i as i32;
                ints[lay.row_pos + row + j] = (s.start + j) as i32;
                positions.push(s.start + j);
            }
            let n = s.tokens.len();
            let sel: Vec<usize> = match s.logits {
                LogitRows::None => vec![],
                LogitRows::Last => vec![row + n - 1],
                LogitRows::All => (row..row + n).collect(),
            };
            let r0 = r;
            for &x in &sel {
                ints[lay.sel + r] = x as i32;
                r += 1;
            }
            if let Some(sp) = &s.sample {
                if sel.is_empty() {
                    return Err(EngineError::Device("sampling needs logits".into()));
                }
                if sp.banned.len() > amdahl_kernels::sample::MAX_BANNED {
                    return Err(EngineError::InvalidInput(format!(
                        "{} banned ids; the GPU sampler takes at most {}",
                        sp.banned.len(),
                        amdahl_kernels::sample::MAX_BANNED
                    )));
                }
                // The sampled row is the sequence's last logit row; parameters are per row.
                let rr = r - 1;
                if rr >= lim.seqs {
                    return Err(EngineError::Device("too many sampled rows".into()));
                }
                any_sample = true;
                floats[lay.temp + rr] = sp.temperature;
                floats[lay.top_p + rr] = sp.top_p;
                floats[lay.u + rr] = sp.u;
                ints[lay.top_k + rr] = sp.top_k as i32;
                for j in 0..amdahl_kernels::sample::MAX_BANNED {
                    ints[lay.banned + rr * amdahl_kernels::sample::MAX_BANNED + j] =
                        sp.banned.get(j).map_or(-1, |&x| x as i32);
                }
            }
            rows_of.push(r0..r);
            row += n;
        }
        // Padding rows: one token each on the scratch slot, position 0, greedy, no logits kept.
        let scratch = lim.seqs; // slots() - 1
        for i in b..b_pad {
            ints[lay.seq_slot + i] = scratch as i32;
            ints[lay.seq_start + i] = 0;
            ints[lay.seq_n + i] = 1;
            ints[lay.seq_row0 + i] = row as i32;
            ints[lay.tokens + row] = 0;
            ints[lay.row_seq + row] = i as i32;
            ints[lay.row_pos + row] = 0;
            positions.push(0);
            if pad_to.is_some() && any_sample {
                ints[lay.sel + r] = row as i32;
                for j in 0..amdahl_kernels::sample::MAX_BANNED {
                    ints[lay.banned + r * amdahl_kernels::sample::MAX_BANNED + j] = -1;
                }
                r += 1;
            }
            row += 1;
        }
        Ok(Plan {
            shape: Shape {
                t: t_pad,
                b: b_pad,
                r,
                sample: any_sample,
            },
            ints,
            floats,
            rows_of,
            positions,
        })
    }

    /// Copies a plan's metadata to the device (ordered before the next launches).
    pub fn upload_meta(&self, p: &Plan) -> Result<()> {
        self.gpu.write(&self.bufs.meta_i, 0, &p.ints)?;
        self.gpu.write(&self.bufs.meta_f, 0, &p.floats)?;
        Ok(())
    }

    fn mi(&self, off: usize) -> u64 {
        self.bufs.meta_i.at(off * 4)
    }

    fn mf(&self, off: usize) -> u64 {
        self.bufs.meta_f.at(off * 4)
    }

    pub fn seq_meta(&self) -> k::SeqMeta {
        let l = self.layout;
        k::SeqMeta {
            row_seq: self.mi(l.row_seq),
            row_pos: self.mi(l.row_pos),
            seq_slot: self.mi(l.seq_slot),
            seq_start: self.mi(l.seq_start),
            seq_n: self.mi(l.seq_n),
            seq_row0: self.mi(l.seq_row0),
        }
    }

    /// Launches every kernel of a step of `shape` (metadata already uploaded).
    pub fn launch_forward(&self, shape: Shape, capturing: bool, tm: &mut StageTimer) -> Result<()> {
        let c = &self.cfg;
        let g = &self.gpu;
        let bf = &self.bufs;
        let (t, d, hc) = (shape.t, c.hidden_size, c.hc_mult);
        let meta = self.seq_meta();
        g.set_programmatic(t <= self.pdl_max_tokens);
        tm.mark(g, Stage::Mhc, capturing)?;
        let n = k::embed(
            g,
            self.w.embed.data.ptr(),
            self.w.embed.fmt,
            self.mi(self.layout.tokens),
            bf.x.ptr(),
            d,
            hc,
            t,
        )?;
        tm.count(n);
        for l in 0..c.num_layers {
            self.layer(l, shape, meta, capturing, tm)?;
        }
        // The layers' L2 prefetches (if any) end inside the step.
        g.join_prefetch()?;
        // Head: collapse the selected rows, norm, lm head, then sampling.
        if shape.r > 0 {
            tm.mark(g, Stage::Head, capturing)?;
            let w = &self.w;
            tm.count(k::hc_head(
                g,
                bf.x.ptr(),
                self.mi(self.layout.sel),
                (w.hc_head_fn.ptr(), w.hc_head_base.ptr(), w.hc_head_scale),
                hc,
                d,
                c.hc_eps,
                c.rms_norm_eps,
                w.norm.ptr(),
                bf.mixp.ptr(),
                bf.head_in.ptr(),
                shape.r,
            )?);
            tm.count(k::linear(
                g,
                &w.head,
                bf.head_in.ptr(),
                d,
                bf.logits.ptr(),
                c.vocab_size,
                shape.r,
                false,
            )?);
            if shape.sample {
                let lay = self.layout;
                tm.count(k::sample(
                    g,
                    k::SampleArgs {
                        logits: bf.logits.ptr(),
                        vocab: c.vocab_size,
                        temperature: self.mf(lay.temp),
                        top_k: self.mi(lay.top_k),
                        top_p: self.mf(lay.top_p),
                        u: self.mf(lay.u),
                        banned: self.mi(lay.banned),
                        out: bf.sampled.ptr(),
                    },
                    shape.r,
                )?);
            }
        }
        tm.finish(g, capturing)
    }

    /// Reads the logits of the step's `r` rows.
    pub fn read_logits(&self, r: usize) -> Result<Vec<f32>> {
        self.gpu.read(&self.bufs.logits, 0, r * self.cfg.vocab_size)
    }

    /// Reads the sampled ids of the step's `r` rows.
    pub fn read_sampled(&self, r: usize) -> Result<Vec<i32>> {
        self.gpu.read(&self.bufs.sampled, 0, r)
    }

    /// Eager step returning each sequence's logits rows (tests, `amdahl logits`, `generate`).
    pub fn forward(&self, seqs: &[StepSeq<'_>]) -> Result<(Vec<Mat>, Vec<Option<u32>>)> {
        let plan = self.plan(seqs, None)?;
        self.upload_meta(&plan)?;
        let mut tm = StageTimer::new(false);
        self.launch_forward(plan.shape, false, &mut tm)?;
        let v = self.cfg.vocab_size;
        let logits = self.read_logits(plan.shape.r)?;
        let sampled = if plan.shape.sample {
            self.read_sampled(plan.shape.r)?
        } else {
            vec![]
        };
        let mut mats = Vec::with_capacity(seqs.len());
        let mut toks = Vec::with_capacity(seqs.len());
        for (s, rows) in seqs.iter().zip(&plan.rows_of) {
            mats.push(Mat::from_vec(
                rows.len(),
                v,
                logits[rows.start * v..rows.end * v].to_vec(),
            ));
            toks.push(match (&s.sample, rows.end) {
                (Some(_), e) if e > 0 => sampled.get(e - 1).map(|&x| x as u32),
                _ => None,
            });
        }
        Ok((mats, toks))
    }

    /// Attention split count and rows per split of a layer kind, for `t` rows.
    pub fn attn_geometry(&self, kind: AttnKind, t: usize) -> (usize, usize) {
        let s = attn_splits(&self.cfg, kind, self.lim.max_len, t, self.gpu.info.sms);
        (s, attn_chunk(&self.cfg, kind, self.lim.max_len, s))
    }
}

pub(crate) mod layer;
