//! Launchers of the MoE kernels: routing, the plan, the grouped expert projections (block and
//! warp variants, chosen per step size) and the combine.

use amdahl_kernels::{linear_entry, moe as kmoe, warp_entry};

use crate::error::Result;

use super::super::gpu::{Args, Gpu, Launch};
use super::super::weights::GLinear;
use super::{lin_smem, tiles_for};

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

/// Forced expert-kernel variant: 0 = by size, 1 = warp, 2 = block. Starts from
/// `AMDAHL_MOE_KERNEL=warp|block` (for measurements); tests set it with [`force_moe_kernel`].
static MOE_FORCE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(u8::MAX);

/// Forces the warp (`Some(true)`) or block (`Some(false)`) expert kernels, or the size rule.
pub fn force_moe_kernel(v: Option<bool>) {
    let code = match v {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    MOE_FORCE.store(code, std::sync::atomic::Ordering::Relaxed);
}

/// Which expert kernels a launch uses: the warp-per-tile variant for decode-sized steps over
/// many experts, the block variant (8 warps split K) otherwise.
fn moe_warp(tokens: usize, slots: usize, w: &GLinear) -> bool {
    use std::sync::atomic::Ordering;
    if MOE_FORCE.load(Ordering::Relaxed) == u8::MAX {
        force_moe_kernel(match std::env::var("AMDAHL_MOE_KERNEL").as_deref() {
            Ok("warp") => Some(true),
            Ok("block") => Some(false),
            _ => None,
        });
    }
    let v = w.fmt.per_load();
    let fits = w.cols.is_multiple_of(32 * v) && slots > 1;
    fits && match MOE_FORCE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => (2..=64).contains(&tokens),
    }
}

/// Blocks of 256 threads the warp expert kernels run as: two per SM (their register budget).
fn warp_grid(gpu: &Gpu) -> usize {
    2 * gpu.info.sms.max(1)
}

/// The entry and geometry of a grouped expert launch of `kind` (`moe_up` reduces `matrices`
/// accumulators per block in the block variant).
fn expert_launch(
    gpu: &Gpu,
    kind: &str,
    w: &GLinear,
    plan: MoePlan,
    matrices: usize,
) -> (String, Launch) {
    if moe_warp(plan.tokens, plan.slots, w) {
        (
            warp_entry(kind, w.fmt.name()),
            Launch::new((warp_grid(gpu), 1, 1), 256, 0),
        )
    } else {
        let nt = moe_tiles(plan.tokens, plan.slots);
        (
            linear_entry(kind, w.fmt.name(), nt),
            Launch::new(
                (w.rows.div_ceil(16), plan.slots, 1),
                256,
                matrices * lin_smem(nt),
            ),
        )
    }
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
    let (name, l) = expert_launch(gpu, "moe_up", w1, plan, 2);
    gpu.launch_named(
        &name,
        l,
        Args::new()
            .raw(&w1.desc().as_bytes())
            .raw(&w3.desc().as_bytes())
            .ptr(x)
            .usize(ldx)
            .ptr(plan.offsets)
            .ptr(tok_of)
            .ptr(plan.act_list)
            .ptr(act)
            .usize(w1.rows)
            .usize(w1.cols)
            .f32(limit),
    )?;
    Ok(l.blocks())
}

/// Grouped down projection, rows scaled by their routing weight.
pub fn moe_down(gpu: &Gpu, w2: &GLinear, act: u64, plan: MoePlan, wt: u64, y: u64) -> Result<u64> {
    let (name, l) = expert_launch(gpu, "moe_down", w2, plan, 1);
    gpu.launch_named(
        &name,
        l,
        Args::new()
            .raw(&w2.desc().as_bytes())
            .ptr(act)
            .ptr(plan.offsets)
            .ptr(wt)
            .ptr(plan.act_list)
            .ptr(y)
            .usize(w2.rows)
            .usize(w2.cols),
    )?;
    Ok(l.blocks())
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
    gpu.launch(
        kmoe::MOE_ROUTE,
        l,
        Args::new()
            .ptr(r.logits)
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
            .ptr(r.wts),
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
