//! `amdahl profile` on the GPU: decode steps of a dummy-weight model at real widths (or any
//! loaded model), replayed as CUDA graphs, with per-stage device time from a timed replay,
//! analytic bytes and FLOPs per stage (weights actually touched, KV rows read), launch sizes
//! against the SM count, and the copy bandwidth and GEMM rate measured in the same run.

use std::time::Instant;

use crate::config::{AttnKind, ModelConfig};
use crate::error::Result;
use crate::model::deepseek_v4::LogitRows;
use crate::profile::{Stage, StageClock};
use crate::rng::Rng;

use super::super::profiling::{
    BatchProfile, DeviceFacts, ExpertFormat, PrefillProfile, ProfileOptions, ProfileReport,
};
use super::gpu::Gpu;
use super::model::{GpuModel, SampleRow, StepSeq};
use super::state::{Limits, max_candidates};
use super::timer::StageTimer;
use super::weights::{Fmt, GpuWeights};
use super::{dummy, peaks};

fn weights_bytes(w: &GpuWeights) -> u64 {
    let mut b = w.head.expert_bytes() * w.head.experts as u64 + w.embed.data.bytes() as u64;
    for l in &w.layers {
        let a = &l.attn;
        let mut lins = vec![
            &a.wq_a,
            &a.wq_b,
            &a.wkv,
            &a.wo_b,
            &l.moe.router,
            &l.moe.w1,
            &l.moe.w2,
            &l.moe.w3,
        ];
        lins.extend(a.wo_a.iter());
        if let Some(c) = &a.compressor {
            lins.extend([&c.wkv, &c.wgate]);
        }
        if let Some(ix) = &a.indexer {
            lins.extend([&ix.wq_b, &ix.weights_proj, &ix.comp.wkv, &ix.comp.wgate]);
        }
        if let Some(s) = &l.moe.shared {
            lins.extend(s.iter());
        }
        b += lins
            .iter()
            .map(|x| x.expert_bytes() * x.experts as u64)
            .sum::<u64>();
    }
    b
}

/// Analytic bytes and FLOPs of one step per stage: weights read once, the routed experts this
/// step touched (`touched[l]`), KV rows each query reads (once), indexer keys, activations of
/// the hyper-connections; charged into `clock`.
pub fn charge_work(
    cfg: &ModelConfig,
    w: &GpuWeights,
    positions: &[usize],
    logit_rows: usize,
    touched: &[usize],
    max_len: usize,
    clock: &mut StageClock,
) {
    let t = positions.len() as u64;
    // Every matrix of a (stacked) dense linear is read once and applied to every token.
    let lin = |x: &super::weights::GLinear| {
        let n = x.experts as u64;
        (n * x.expert_bytes(), 2 * n * (x.rows * x.cols) as u64 * t)
    };
    let (d, hc) = (cfg.hidden_size as u64, cfg.hc_mult as u64);
    for (l, lw) in w.layers.iter().enumerate() {
        let a = &lw.attn;
        // mHC: two sites, each reads the mixing weights and the streams twice, writes them once.
        let mix = (cfg.hc_mix() * cfg.hc_dim()) as u64;
        clock.charge(
            Stage::Mhc,
            2 * (4 * mix + t * 4 * (3 * hc * d + d)),
            2 * t * (2 * mix + 2 * hc * d),
        );
        let mut proj: Vec<&super::weights::GLinear> = vec![&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b];
        proj.extend(a.wo_a.iter());
        if let Some(c) = &a.compressor {
            proj.extend([&c.wkv, &c.wgate]);
        }
        for x in proj {
            let (b, f) = lin(x);
            clock.charge(Stage::AttnProj, b, f);
        }
        if let Some(ix) = &a.indexer {
            for x in [&ix.wq_b, &ix.weights_proj, &ix.comp.wkv, &ix.comp.wgate] {
                let (b, f) = lin(x);
                clock.charge(Stage::Indexer, b, f);
            }
            let m = ix.comp.ratio;
            let keys: u64 = positions.iter().map(|&p| ((p + 1) / m) as u64).sum();
            clock.charge(
                Stage::Indexer,
                keys * ix.dim as u64 * 4,
                keys * 2 * (ix.heads * ix.dim) as u64,
            );
        }
        let hd = cfg.head_dim as u64;
        let cand: u64 = positions
            .iter()
            .map(|&p| {
                let win = cfg.sliding_window.min(p + 1) as u64;
                let comp = match a.kind {
                    AttnKind::Sliding => 0,
                    AttnKind::Hca { ratio } => (p + 1) / ratio,
                    AttnKind::Csa { ratio } => cfg.index_topk.min((p + 1) / ratio),
                } as u64;
                win + comp.min(max_candidates(cfg, a.kind, max_len) as u64)
            })
            .sum();
        clock.charge(
            Stage::Attention,
            cand * hd * 2,
            cand * 4 * hd * cfg.num_heads as u64,
        );
        let m = &lw.moe;
        let (rb, rf) = lin(&m.router);
        let per_expert = m.w1.expert_bytes() + m.w3.expert_bytes() + m.w2.expert_bytes();
        let k = m.top_k as u64;
        let ef = 2 * t * k * 3 * (m.w1.rows * m.w1.cols) as u64;
        clock.charge(
            Stage::Moe,
            rb + touched.get(l).copied().unwrap_or(0) as u64 * per_expert,
            rf + ef,
        );
        if let Some(s) = &m.shared {
            for x in s {
                let (b, f) = lin(x);
                clock.charge(Stage::Moe, b, f);
            }
        }
    }
    let r = logit_rows as u64;
    clock.charge(
        Stage::Head,
        w.head.expert_bytes(),
        2 * r * (w.head.rows * w.head.cols) as u64,
    );
}

/// Distinct experts hit per MoE layer in the last step (from the plan offsets kept per layer).
pub(super) fn experts_touched(m: &GpuModel) -> Result<Vec<usize>> {
    let e = m.cfg.n_routed_experts;
    let hits: Vec<i32> = m.gpu.read(&m.bufs.hits, 0, m.cfg.num_layers * (e + 1))?;
    Ok(hits
        .chunks(e + 1)
        .map(|o| o.windows(2).filter(|w| w[1] > w[0]).count())
        .collect())
}

/// Profiles decode of a dummy V4-Flash.
pub fn profile_dummy(o: &ProfileOptions) -> Result<ProfileReport> {
    let gpu = Gpu::open(o.ordinal)?;
    let pk = peaks::measure(&gpu)?;
    let read_floors = peaks::read_floors(&gpu)?;
    tracing::info!(
        copy_gb_s = pk.bandwidth / 1e9,
        gemm_tflops = pk.flops / 1e12,
        "measured peaks"
    );
    let cfg = dummy::v4_flash_config(o.layers)?;
    let fmt = match o.expert_format {
        ExpertFormat::Nvfp4 => Fmt::Nvfp4,
        ExpertFormat::Mxfp4 => Fmt::Mxfp4,
        ExpertFormat::Fp8 => Fmt::Fp8BlockE8m0,
        ExpertFormat::Bf16 => Fmt::Bf16,
    };
    let w = dummy::dummy_weights(&gpu, &cfg, fmt, o.seed)?;
    let wb = weights_bytes(&w);
    let maxb = o.batches.iter().copied().max().unwrap_or(1);
    let chunk = o.prefill_chunk.clamp(1, o.prefill.max(1));
    let lim = Limits {
        tokens: if o.prefill > 0 { maxb.max(chunk) } else { maxb },
        seqs: maxb,
        max_len: (o.ctx + 4 * o.steps + 16).max(o.prefill + 16),
    };
    let i = &gpu.info;
    let info = DeviceFacts {
        label: format!("cuda:{}", i.ordinal),
        name: i.name.clone(),
        compute_capability: i.compute_capability,
        sms: i.sms,
        total_mem: i.total_mem,
    };
    let model = GpuModel::new(gpu, cfg, w, lim)?;
    dummy::fill_cache(&model.gpu, &model.kv, o.seed ^ 0x5eed)?;
    let mut out = Vec::new();
    for &b in &o.batches {
        out.push(profile_batch(&model, b, o)?);
    }
    let prefill = if o.prefill > 0 {
        Some(profile_prefill(&model, o.prefill, chunk, o.seed)?)
    } else {
        None
    };
    Ok(ProfileReport {
        device: info,
        peaks: pk,
        layers: o.layers,
        ctx: o.ctx,
        expert_format: fmt.name().to_string(),
        weight_bytes: wb,
        batches: out,
        prefill,
        kernels: kernel_choices(&model),
        read_floors,
    })
}

/// The kernel variants and switches a profile of `m` runs with.
fn kernel_choices(m: &GpuModel) -> String {
    let env = |k: &str, default: &str| std::env::var(k).unwrap_or_else(|_| default.to_string());
    let on = |k: &str| if env(k, "1") == "0" { "off" } else { "on" };
    let pdl = match m.gpu.pdl() {
        crate::device::Pdl::Off => "off".to_string(),
        p => format!("{p:?} up to {} tokens", m.pdl_max_tokens),
    };
    format!(
        "programmatic launches {pdl}; indexer {:?}; route+plan {}; expert kernels {}; \
         streamed linears {} (FP8 decoded to {:?}); tiled GEMM {}; side stream {}; FP4 tiles {}; \
         mHC post-mix {}; L2 prefetch ahead: weights up to {} tokens, experts up \
         to {}",
        super::launch::indexer_kernels(),
        if super::launch::route_plan_fused() {
            "fused"
        } else {
            "separate"
        },
        env("AMDAHL_MOE_KERNEL", "by size"),
        on("AMDAHL_STREAM"),
        super::launch::fp8_stream(),
        on("AMDAHL_GEMM"),
        on("AMDAHL_FORK"),
        on("AMDAHL_FP4_TILES"),
        super::launch::post_mix_forced()
            .map_or("rows from 8 tokens".to_string(), |p| format!("{p:?}")),
        m.l2_ahead_max_tokens,
        m.l2_ahead_experts_max_tokens,
    )
}

/// One `tokens`-long prompt into slot 0 from position 0 (after the decode batches: the slot's
/// old rows are not visible from position 0), `chunk` tokens per eager forward: a warm-up pass,
/// a pass timed by events around each chunk, and a pass with stage events and analytic work.
fn profile_prefill(m: &GpuModel, tokens: usize, chunk: usize, seed: u64) -> Result<PrefillProfile> {
    let g = &m.gpu;
    let mut rng = Rng::new(seed ^ 0x9e37_79b9);
    let v = m.cfg.vocab_size;
    let ids: Vec<u32> = (0..tokens).map(|_| rng.below(v) as u32).collect();
    let (e0, e1) = (g.event()?, g.event()?);
    let pass = |timed: bool, clock: &mut StageClock| -> Result<f64> {
        let mut secs = 0.0;
        for s in (0..tokens).step_by(chunk) {
            let seq = [StepSeq {
                slot: 0,
                start: s,
                tokens: &ids[s..(s + chunk).min(tokens)],
                logits: LogitRows::Last,
                sample: None,
            }];
            let plan = m.plan(&seq, None)?;
            m.upload_meta(&plan)?;
            let mut tm = StageTimer::new(timed);
            g.record(&e0, false)?;
            m.launch_forward(plan.shape, false, &mut tm)?;
            g.record(&e1, false)?;
            e1.synchronize()?;
            secs += f64::from(e0.elapsed_ms(&e1)?) / 1e3;
            if timed {
                let mut c = StageClock::default();
                tm.charge(&mut c)?;
                for st in Stage::ALL {
                    clock.add_measured(st, c.get(st));
                }
                let touched = experts_touched(m)?;
                charge_work(
                    &m.cfg,
                    &m.w,
                    &plan.positions,
                    plan.shape.r,
                    &touched,
                    m.lim.max_len,
                    clock,
                );
            }
        }
        Ok(secs)
    };
    pass(false, &mut StageClock::default())?;
    let seconds = pass(false, &mut StageClock::default())?;
    let mut clock = StageClock::default();
    pass(true, &mut clock)?;
    Ok(PrefillProfile {
        tokens,
        chunk,
        seconds,
        clock,
    })
}

fn profile_batch(m: &GpuModel, b: usize, o: &ProfileOptions) -> Result<BatchProfile> {
    let g = &m.gpu;
    let mut rng = Rng::new(o.seed.wrapping_add(b as u64));
    let v = m.cfg.vocab_size;
    let toks: Vec<Vec<u32>> = (0..b).map(|_| vec![rng.below(v) as u32]).collect();
    let mut pos = o.ctx;
    let step = |pos: usize| -> Vec<StepSeq<'_>> {
        toks.iter()
            .enumerate()
            .map(|(i, t)| StepSeq {
                slot: i,
                start: pos,
                tokens: t,
                logits: LogitRows::Last,
                sample: Some(SampleRow::greedy()),
            })
            .collect()
    };
    // Warm-up and occupancy (launch sizes per stage) from one eager step.
    let plan = m.plan(&step(pos), None)?;
    m.upload_meta(&plan)?;
    let mut counts = StageTimer::new(false);
    m.launch_forward(plan.shape, false, &mut counts)?;
    g.sync()?;
    pos += 1;
    // Eager timing.
    let (e0, e1) = (g.event()?, g.event()?);
    let plan = m.plan(&step(pos), None)?;
    m.upload_meta(&plan)?;
    g.record(&e0, false)?;
    m.launch_forward(plan.shape, false, &mut StageTimer::new(false))?;
    g.record(&e1, false)?;
    e1.synchronize()?;
    let eager = f64::from(e0.elapsed_ms(&e1)?) / 1e3;
    pos += 1;
    // One eager step with stage events: the stages measured a second way.
    let plan = m.plan(&step(pos), None)?;
    m.upload_meta(&plan)?;
    let mut et = StageTimer::new(true);
    m.launch_forward(plan.shape, false, &mut et)?;
    g.sync()?;
    let mut eager_clock = StageClock::default();
    et.charge(&mut eager_clock)?;
    pos += 1;
    // Graphs: plain and with stage events.
    let capture = |timed: bool| -> Result<(cudarc::driver::CudaGraph, StageTimer)> {
        let mut tm = StageTimer::new(timed);
        g.begin_capture()?;
        let r = m.launch_forward(plan.shape, true, &mut tm);
        let graph = g.end_capture();
        r?;
        Ok((graph?, tm))
    };
    let (plain, _) = capture(false)?;
    let (timed, tm) = capture(true)?;
    let launch = |graph: &cudarc::driver::CudaGraph| {
        graph
            .launch()
            .map_err(|e| super::gpu::dev_err("graph launch", e))
    };
    // Plain replays: GPU time over all steps, host time per step.
    let mut host = 0.0;
    g.record(&e0, false)?;
    for _ in 0..o.steps {
        let t0 = Instant::now();
        let p = m.plan(&step(pos), None)?;
        m.upload_meta(&p)?;
        launch(&plain)?;
        host += t0.elapsed().as_secs_f64();
        pos += 1;
    }
    g.record(&e1, false)?;
    e1.synchronize()?;
    let step_s = f64::from(e0.elapsed_ms(&e1)?) / 1e3 / o.steps as f64;
    // Timed replays: per-stage time.
    let mut clock = StageClock::default();
    let mut timed_total = 0.0;
    let reps = 3usize;
    let mut touched = vec![0usize; m.cfg.num_layers];
    for rep in 0..reps {
        let p = m.plan(&step(pos), None)?;
        m.upload_meta(&p)?;
        launch(&timed)?;
        g.sync()?;
        let mut c = StageClock::default();
        tm.charge(&mut c)?;
        timed_total += tm.total_seconds()?;
        for s in Stage::ALL {
            clock.add_measured(s, c.get(s) / reps as u32);
        }
        touched = experts_touched(m)?;
        // The analytic work of one step (times are averaged over the replays, work is per step).
        if rep == 0 {
            charge_work(
                &m.cfg,
                &m.w,
                &p.positions,
                p.shape.r,
                &touched,
                m.lim.max_len,
                &mut clock,
            );
        }
        pos += 1;
    }
    let moe_layers: Vec<usize> = touched.iter().copied().filter(|&x| x > 0).collect();
    let experts = if moe_layers.is_empty() {
        0.0
    } else {
        moe_layers.iter().sum::<usize>() as f64 / moe_layers.len() as f64
    };
    Ok(BatchProfile {
        batch: b,
        step_seconds: step_s,
        timed_step_seconds: timed_total / reps as f64,
        eager_step_seconds: eager,
        host_seconds: host / o.steps as f64,
        clock,
        eager_clock,
        launches: counts.launches,
        blocks: counts.blocks,
        max_blocks: counts.max_blocks,
        experts_touched: experts,
    })
}
