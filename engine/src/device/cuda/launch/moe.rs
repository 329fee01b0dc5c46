//! Launchers of the MoE kernels: routing, the plan, the grouped expert projections (streamed,
//! warp and block variants, chosen per step size) and the combine.

use amdahl_kernels::{linear_entry, moe as kmoe, warp_entry};

use crate::error::{EngineError, Result};

use super::super::gpu::{Args, Gpu, Launch};
use super::super::weights::GLinear;
use super::linear::lin_smem;
use super::{stream, tiles_for};

/// Token tiles of the block expert kernels: with many experts each gets a few tokens, so one
/// tile (looping for the rare busy expert) keeps registers low; prefill uses four; a single
/// dense expert (the shared one) takes every token and the dense linear's tiles.
fn moe_tiles(tokens: usize, slots: usize) -> usize {
    if slots == 1 {
        tiles_for(tokens)
    } else if tokens <= 64 {
        1
    } else {
        4
    }
}

/// The expert-kernel variants: streamed through shared-memory rings (decode, sm_90+), one warp
/// per 16-row tile, or blocks of 8 warps splitting K (prefill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeKernel {
    Stream,
    Warp,
    Block,
}

/// Forced expert-kernel variant: 0 = by size, else 1 + the variant. Starts from
/// `AMDAHL_MOE_KERNEL=stream|warp|block` (for measurements); tests set it with
/// [`force_moe_kernel`].
static MOE_FORCE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(u8::MAX);

/// Forces an expert-kernel variant (where it applies), or (`None`) the size rule.
pub fn force_moe_kernel(v: Option<MoeKernel>) {
    MOE_FORCE.store(
        v.map_or(0, |k| 1 + k as u8),
        std::sync::atomic::Ordering::Relaxed,
    );
}

fn forced() -> Option<MoeKernel> {
    use std::sync::atomic::Ordering;
    if MOE_FORCE.load(Ordering::Relaxed) == u8::MAX {
        force_moe_kernel(match std::env::var("AMDAHL_MOE_KERNEL").as_deref() {
            Ok("stream") => Some(MoeKernel::Stream),
            Ok("warp") => Some(MoeKernel::Warp),
            Ok("block") => Some(MoeKernel::Block),
            _ => None,
        });
    }
    match MOE_FORCE.load(Ordering::Relaxed) {
        1 => Some(MoeKernel::Stream),
        2 => Some(MoeKernel::Warp),
        3 => Some(MoeKernel::Block),
        _ => None,
    }
}

/// Which expert kernels a launch uses: the warp variant for decode steps over many experts, the
/// block variant otherwise. The streamed variant only when forced (up to 64 tokens; the shared
/// expert up to 8, beyond which it would re-read the weights per 8 tokens): on the H200 it is
/// slower than these at batch 1, 16 and 64 (docs/PERF.md). A forced variant that does not apply
/// falls back to the size rule.
fn moe_kernel(plan: MoePlan, w: &GLinear, stream: bool, down: bool) -> MoeKernel {
    let v = w.fmt.per_load();
    let warp_fits = w.cols.is_multiple_of(32 * v) && plan.slots > 1;
    let lo = if warp_at_one_token(down) { 1 } else { 2 };
    let by_size = if warp_fits && (lo..=64).contains(&plan.tokens) {
        MoeKernel::Warp
    } else {
        MoeKernel::Block
    };
    match forced() {
        Some(MoeKernel::Stream) if stream && plan.tokens <= if plan.slots > 1 { 64 } else { 8 } => {
            MoeKernel::Stream
        }
        Some(MoeKernel::Warp) if warp_fits => MoeKernel::Warp,
        Some(MoeKernel::Block) => MoeKernel::Block,
        _ => by_size,
    }
}

/// Whether a one-token step runs the up (`down` false) or down projection on the warp kernels
/// (`AMDAHL_MOE_WARP_AT_1=none|down|both`). Default `down`: at one token the down projection's
/// 1536 tiles spread over every SM (a tile per warp) take 17.2 µs against the block kernel's
/// 24.2 (H100, ncu; −6 µs per layer at batch 1), while the up projection's 768 tiles of twice
/// the K per warp are slower there than the block kernels, whose 8 warps split K (docs/PERF.md).
fn warp_at_one_token(down: bool) -> bool {
    static AT_ONE: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    let (up, dn) = *AT_ONE.get_or_init(|| match std::env::var("AMDAHL_MOE_WARP_AT_1").as_deref() {
        Ok("both") => (true, true),
        Ok("none") => (false, false),
        _ => (false, true),
    });
    if down { dn } else { up }
}

/// Blocks of 256 threads the warp expert kernels run as: two per SM (their register budget),
/// unless a test forces fewer ([`force_warp_grid`]).
fn warp_grid(gpu: &Gpu) -> usize {
    match WARP_GRID_FORCE.load(std::sync::atomic::Ordering::Relaxed) {
        0 => 2 * gpu.info.sms.max(1),
        n => n,
    }
}

static WARP_GRID_FORCE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Forces the warp expert kernels' grid to `blocks` (`None`: two per SM), so a test's few
/// experts still give more tiles than warps (the tile queue).
#[cfg(test)]
pub fn force_warp_grid(blocks: Option<usize>) {
    WARP_GRID_FORCE.store(blocks.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
}

/// The entry and geometry of a grouped expert launch of `kind` (`up` reads `matrices` = 2
/// weights per tile), and the streamed kernels' ring depth if they run.
fn expert_launch(
    gpu: &Gpu,
    kind: &str,
    w: &GLinear,
    plan: MoePlan,
    matrices: usize,
) -> (String, Launch, ExpertTail) {
    let st = stream::stream_for(gpu, w, matrices);
    match (moe_kernel(plan, w, st.is_some(), kind == "down"), st) {
        (MoeKernel::Stream, Some(st)) => (
            amdahl_kernels::stream_entry(kind, w.fmt.name()),
            Launch::new((st.blocks_per_sm * gpu.info.sms, 1, 1), 256, st.smem),
            ExpertTail::Stream(st.stages),
        ),
        (MoeKernel::Warp, _) => (
            warp_entry(&format!("moe_{kind}"), w.fmt.name()),
            Launch::new((warp_grid(gpu), 1, 1), 256, 0),
            ExpertTail::Warp(if dynamic_tiles() {
                gpu.work_counters() + if kind == "down" { 8 } else { 0 }
            } else {
                0
            }),
        ),
        _ => {
            let nt = moe_tiles(plan.tokens, plan.slots);
            (
                linear_entry(&format!("moe_{kind}"), w.fmt.name(), nt),
                Launch::new(
                    (w.rows.div_ceil(16), plan.slots, 1),
                    256,
                    matrices * lin_smem(nt),
                ),
                ExpertTail::None,
            )
        }
    }
}

/// The trailing arguments of an expert launch's variant: the streamed kernels' ring depth, the
/// warp kernels' tile queue (two zeroed words; 0: tiles by a fixed split).
#[derive(Debug, Clone, Copy)]
enum ExpertTail {
    None,
    Stream(usize),
    Warp(u64),
}

/// Whether the warp expert kernels take their tiles from a queue (default) or by a fixed split
/// of the tiles over the warps (`AMDAHL_MOE_TILES=fixed`).
fn dynamic_tiles() -> bool {
    static DYN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DYN.get_or_init(|| std::env::var("AMDAHL_MOE_TILES").as_deref() != Ok("fixed"))
}

/// Where a grouped expert launch finds its plan: expert offsets, the active-expert list
/// ([count, ids...]), and the most experts a step can activate (`slots`, the block kernels' grid
/// rows: min(E, tokens · k), 1 for the shared expert).
#[derive(Debug, Clone, Copy)]
pub struct MoePlan {
    pub offsets: u64,
    pub act_list: u64,
    pub slots: usize,
    pub tokens: usize,
}

/// Grouped up projection with the clamped SwiGLU: act rows at plan positions.
#[allow(clippy::too_many_arguments)]
pub fn moe_up(
    gpu: &Gpu,
    w1: &GLinear,
    w3: &GLinear,
    x: u64,
    ldx: usize,
    plan: MoePlan,
    tok_of: u64,
    act: u64,
    limit: f32,
) -> Result<u64> {
    let (name, l, tail) = expert_launch(gpu, "up", w1, plan, 2);
    let mut args = Args::new();
    args.raw(&w1.desc().as_bytes())
        .raw(&w3.desc().as_bytes())
        .ptr(x)
        .usize(ldx)
        .ptr(plan.offsets)
        .ptr(tok_of)
        .ptr(plan.act_list)
        .ptr(act)
        .usize(w1.rows)
        .usize(w1.cols)
        .f32(limit);
    tail_args(gpu, &mut args, plan, tail);
    gpu.launch_named(&name, l, &mut args)?;
    Ok(l.blocks())
}

/// Grouped down projection, rows scaled by their routing weight.
pub fn moe_down(gpu: &Gpu, w2: &GLinear, act: u64, plan: MoePlan, wt: u64, y: u64) -> Result<u64> {
    let (name, l, tail) = expert_launch(gpu, "down", w2, plan, 1);
    let mut args = Args::new();
    args.raw(&w2.desc().as_bytes())
        .ptr(act)
        .ptr(plan.offsets)
        .ptr(wt)
        .ptr(plan.act_list)
        .ptr(y)
        .usize(w2.rows)
        .usize(w2.cols);
    tail_args(gpu, &mut args, plan, tail);
    gpu.launch_named(&name, l, &mut args)?;
    Ok(l.blocks())
}

/// An expert launch's trailing arguments: for the streamed kernels the step's tokens (K splits
/// only when one token group holds them all), ring depth and split workspace; for the warp
/// kernels their tile queue.
fn tail_args(gpu: &Gpu, args: &mut Args, plan: MoePlan, tail: ExpertTail) {
    match tail {
        ExpertTail::Stream(stages) => {
            let (ws, cnt) = gpu.split_ws();
            args.usize(plan.tokens).usize(stages).ptr(ws).ptr(cnt);
        }
        ExpertTail::Warp(queue) => {
            args.ptr(queue);
        }
        ExpertTail::None => {}
    }
}

/// Router outputs and plan buffers of one MoE layer.
#[derive(Debug, Clone, Copy)]
pub struct RouteArgs {
    pub logits: u64,
    pub experts: usize,
    pub scoring: i32,
    pub bias: u64,
    pub tid2eid: u64,
    pub tokens: u64,
    pub k: usize,
    pub scaling: f32,
    pub norm_topk: bool,
    pub ids: u64,
    pub wts: u64,
}

pub fn moe_route(gpu: &Gpu, r: RouteArgs, t: usize) -> Result<u64> {
    let l = Launch::new((t.div_ceil(8), 1, 1), 256, 0);
    gpu.launch(kmoe::MOE_ROUTE, l, &mut route_args(&r, t))?;
    Ok(l.blocks())
}

/// `moe_route`'s arguments, which `moe_route_plan` starts with.
fn route_args(r: &RouteArgs, t: usize) -> Args {
    let mut a = Args::new();
    a.ptr(r.logits)
        .usize(r.experts)
        .usize(t)
        .i32(r.scoring)
        .ptr(r.bias)
        .ptr(r.tid2eid)
        .ptr(r.tokens)
        .usize(r.k)
        .f32(r.scaling)
        .i32(r.norm_topk as i32)
        .ptr(r.ids)
        .ptr(r.wts);
    a
}

/// Where a plan goes: `moe_plan`'s outputs.
#[derive(Debug, Clone, Copy)]
pub struct PlanOut {
    pub offsets: u64,
    pub tok_of: u64,
    pub wt_of: u64,
    pub slot_of: u64,
    pub act_list: u64,
}

/// Whether routing and its plan run as one launch (`moe_route_plan`, the default) or as
/// `moe_route` then `moe_plan` (`AMDAHL_ROUTE_PLAN=separate`).
pub fn route_plan_fused() -> bool {
    static FUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FUSED.get_or_init(|| std::env::var("AMDAHL_ROUTE_PLAN").as_deref() != Ok("separate"))
}

/// `moe_route_plan`'s block: a warp per token, at least one thread per expert (the plan's
/// scans), at most 32 tokens.
fn route_plan_threads(experts: usize, t: usize) -> usize {
    (32 * t.min(32)).max(experts.next_multiple_of(32))
}

/// `moe_route_plan`'s dynamic shared memory: each assignment's expert and weight, the
/// experts' counts and the scan scratch.
fn route_plan_smem(experts: usize, k: usize, t: usize) -> usize {
    (2 * t * k + experts + 34) * 4
}

/// Whether `moe_route_plan` can run these shapes on this GPU (its plan holds every
/// assignment in one block's shared memory); the caller otherwise takes `moe_route` and
/// `moe_plan`.
pub fn route_plan_fits(gpu: &Gpu, experts: usize, k: usize, t: usize) -> bool {
    experts <= kmoe::MAX_EXPERTS
        && k <= kmoe::MAX_TOP_K
        && route_plan_smem(experts, k, t) <= gpu.info.max_smem_optin
}

/// `moe_route` and `moe_plan` in one launch: a warp per token, up to 32 tokens per block; the
/// last block to finish plans (`done`: a zeroed counter it leaves zeroed). The plan equals
/// `moe_plan`'s.
pub fn moe_route_plan(gpu: &Gpu, r: RouteArgs, p: PlanOut, done: u64, t: usize) -> Result<u64> {
    if !route_plan_fits(gpu, r.experts, r.k, t) {
        return Err(EngineError::Device(format!(
            "{} experts, top-{}, {t} tokens: beyond moe_route_plan's {} experts, top-{} and {} \
             bytes of shared memory",
            r.experts,
            r.k,
            kmoe::MAX_EXPERTS,
            kmoe::MAX_TOP_K,
            gpu.info.max_smem_optin
        )));
    }
    let threads = route_plan_threads(r.experts, t);
    let l = Launch::new(
        (t.div_ceil(threads / 32), 1, 1),
        threads,
        route_plan_smem(r.experts, r.k, t),
    );
    gpu.launch(
        kmoe::MOE_ROUTE_PLAN,
        l,
        route_args(&r, t)
            .ptr(p.offsets)
            .ptr(p.tok_of)
            .ptr(p.wt_of)
            .ptr(p.slot_of)
            .ptr(p.act_list)
            .ptr(done),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn moe_plan(
    gpu: &Gpu,
    ids: u64,
    wts: u64,
    n: usize,
    k: usize,
    e: usize,
    offsets: u64,
    tok_of: u64,
    wt_of: u64,
    slot_of: u64,
    act_list: u64,
) -> Result<u64> {
    let l = Launch::new((1, 1, 1), 1024, n * 4);
    gpu.launch(
        kmoe::MOE_PLAN,
        l,
        Args::new()
            .ptr(ids)
            .ptr(wts)
            .usize(n)
            .usize(k)
            .usize(e)
            .ptr(offsets)
            .ptr(tok_of)
            .ptr(wt_of)
            .ptr(slot_of)
            .ptr(act_list),
    )?;
    Ok(l.blocks())
}

pub fn plan_identity(
    gpu: &Gpu,
    t: usize,
    offsets: u64,
    tok_of: u64,
    wt_of: u64,
    act_list: u64,
) -> Result<u64> {
    let l = Launch::new((t.div_ceil(256), 1, 1), 256, 0);
    gpu.launch(
        kmoe::PLAN_IDENTITY,
        l,
        Args::new()
            .usize(t)
            .ptr(offsets)
            .ptr(tok_of)
            .ptr(wt_of)
            .ptr(act_list),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn moe_combine(
    gpu: &Gpu,
    y: u64,
    slot_of: u64,
    k: usize,
    shared: u64,
    d: usize,
    out: u64,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((d.div_ceil(256), t, 1), 256, 0);
    gpu.launch(
        kmoe::MOE_COMBINE,
        l,
        Args::new()
            .ptr(y)
            .ptr(slot_of)
            .usize(k)
            .ptr(shared)
            .usize(d)
            .ptr(out),
    )?;
    Ok(l.blocks())
}

#[cfg(test)]
mod route_plan_tests {
    use super::{route_plan_smem, route_plan_threads};

    /// `moe_route_plan`'s blocks: a warp per token and a thread per expert (the plan's scans),
    /// whole warps, at most 1024 threads, and a grid of them that covers every token.
    #[test]
    fn route_plan_blocks_hold_every_expert_and_cover_the_tokens() {
        assert_eq!(route_plan_threads(256, 1), 256); // V4-Flash at batch 1: 8 warps, not 32
        assert_eq!(route_plan_threads(256, 16), 512);
        assert_eq!(route_plan_threads(256, 64), 1024);
        assert_eq!(route_plan_threads(384, 1), 384);
        for experts in [8usize, 72, 256, 300, 384] {
            for t in [1usize, 2, 7, 16, 31, 32, 33, 64, 100, 2048] {
                let threads = route_plan_threads(experts, t);
                assert!(threads.is_multiple_of(32) && threads >= experts && threads <= 1024);
                let per_block = threads / 32;
                assert!(t.div_ceil(per_block) * per_block >= t, "{experts} {t}");
                assert!(
                    t > 32 || t.div_ceil(per_block) == 1,
                    "{experts} {t}: one block"
                );
            }
        }
        // Each assignment's expert and weight, the counts and the scan scratch, in bytes.
        assert_eq!(route_plan_smem(256, 6, 1), (2 * 6 + 256 + 34) * 4);
    }
}
