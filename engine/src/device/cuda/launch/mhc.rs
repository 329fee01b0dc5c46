//! The mHC launchers: embedding into the residual streams, the mixing partials, pre- and
//! post-mix, the hyper-head, and row norms.

use std::sync::atomic::{AtomicU8, Ordering};

use amdahl_kernels::mhc as km;

use crate::error::{EngineError, Result};

use super::super::gpu::{Args, Gpu, Launch};

#[allow(clippy::too_many_arguments)]
pub fn embed(
    gpu: &Gpu,
    table: u64,
    fmt: i32,
    tokens: u64,
    x: u64,
    d: usize,
    hc: usize,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((d.div_ceil(256), t, 1), 256, 0);
    gpu.launch(
        km::EMBED_ROWS,
        l,
        Args::new()
            .ptr(table)
            .i32(fmt)
            .ptr(tokens)
            .ptr(x)
            .usize(d)
            .usize(hc),
    )?;
    Ok(l.blocks())
}

/// The mixing dot products of `rows` rows (`sel` maps rows to X rows; 0 = identity), split over
/// `MIX_PASS_PARTS` blocks per row, into `partial`.
#[allow(clippy::too_many_arguments)]
pub fn hc_mix_partial(
    gpu: &Gpu,
    x: u64,
    sel: u64,
    fn_w: u64,
    width: usize,
    nmix: usize,
    partial: u64,
    rows: usize,
) -> Result<u64> {
    let l = Launch::new((km::MIX_PASS_PARTS, rows, 1), 256, 0);
    gpu.launch(
        km::HC_MIX_PARTIAL,
        l,
        Args::new()
            .ptr(x)
            .ptr(sel)
            .ptr(fn_w)
            .usize(width)
            .usize(nmix)
            .ptr(partial),
    )?;
    Ok(l.blocks())
}

/// The pre-mix of a hyper-connection site fused with the sub-layer's RMSNorm: Sinkhorn, the
/// collapse and the norm, one block per token. `ready_parts` > 0: the mixing partials are
/// already in `partial` (an `hc_post` with `next` wrote that many per token); 0: they are
/// computed first (one more launch).
#[allow(clippy::too_many_arguments)]
pub fn hc_pre(
    gpu: &Gpu,
    x: u64,
    hcw: (u64, u64, u64),
    hc: usize,
    d: usize,
    iters: usize,
    hc_eps: f32,
    eps: f32,
    norm_w: u64,
    mix: u64,
    partial: u64,
    ready_parts: usize,
    u_f32: u64,
    u_bf: u64,
    t: usize,
) -> Result<u64> {
    if !d.is_multiple_of(4) || hc > 4 {
        return Err(EngineError::Device(format!(
            "hc_pre needs hidden_size % 4 == 0 and hc_mult <= 4 (got {d}, {hc})"
        )));
    }
    let (n, parts) = if ready_parts > 0 {
        (0, ready_parts)
    } else {
        let n = hc_mix_partial(gpu, x, 0, hcw.0, hc * d, (2 + hc) * hc, partial, t)?;
        (n, km::MIX_PASS_PARTS)
    };
    let l = Launch::new((t, 1, 1), km::PRE_THREADS, d * 4);
    gpu.launch(
        km::HC_PRE,
        l,
        Args::new()
            .ptr(x)
            .ptr(partial)
            .usize(parts)
            .ptr(hcw.1)
            .ptr(hcw.2)
            .usize(hc)
            .usize(d)
            .usize(iters)
            .f32(hc_eps)
            .f32(eps)
            .ptr(norm_w)
            .ptr(mix)
            .ptr(u_f32)
            .ptr(u_bf),
    )?;
    Ok(n + l.blocks())
}

/// Whether `hc_post` blocks take several tokens (the default; `AMDAHL_POST_TOKENS=1` keeps one
/// token per block). H100, ninth session: mhc stage at b64 0.540 → 0.415 ms per step of 4
/// layers, b16 0.229 → 0.196 (docs/PERF.md).
pub fn post_shares_tokens() -> bool {
    match POST_FORCE.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => std::env::var("AMDAHL_POST_TOKENS").as_deref() != Ok("1"),
    }
}

/// Forced (0 off, 1 on) or unset (`u8::MAX`): [`post_shares_tokens`].
static POST_FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces `hc_post`'s tokens per block on or off (`None`: the environment decides).
#[cfg(test)]
pub fn force_post_tokens(v: Option<bool>) {
    POST_FORCE.store(v.map_or(u8::MAX, u8::from), Ordering::Relaxed);
}

/// The post-mix of a site, in place on `x`. `next` = (the next site's mixing weights, the
/// partial buffer): also leaves that site's mixing partials (`km::post_parts(d)` per token),
/// so its `hc_pre` runs with `ready_parts` and no pass of its own. With
/// [`post_shares_tokens`], from 8 tokens a block takes `km::POST_TOK` tokens, loading those
/// weights once for all of them.
#[allow(clippy::too_many_arguments)]
pub fn hc_post(
    gpu: &Gpu,
    x: u64,
    y: u64,
    mix: u64,
    hc: usize,
    d: usize,
    t: usize,
    next: Option<(u64, u64)>,
) -> Result<u64> {
    let (fn_next, partial) = next.unwrap_or((0, 0));
    let tpb = km::post_tokens(t, post_shares_tokens());
    let l = Launch::new((km::post_parts(d), t.div_ceil(tpb), 1), 256, 0);
    gpu.launch(
        km::HC_POST,
        l,
        Args::new()
            .ptr(x)
            .ptr(y)
            .ptr(mix)
            .usize(hc)
            .usize(d)
            .usize(t)
            .usize(tpb)
            .ptr(fn_next)
            .ptr(partial),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn hc_head(
    gpu: &Gpu,
    x: u64,
    sel: u64,
    hw: (u64, u64, f32),
    hc: usize,
    d: usize,
    hc_eps: f32,
    eps: f32,
    norm_w: u64,
    partial: u64,
    out: u64,
    rows: usize,
) -> Result<u64> {
    let n = hc_mix_partial(gpu, x, sel, hw.0, hc * d, hc, partial, rows)?;
    let l = Launch::new((rows, 1, 1), 256, d * 4);
    gpu.launch(
        km::HC_HEAD,
        l,
        Args::new()
            .ptr(x)
            .ptr(sel)
            .ptr(partial)
            .usize(km::MIX_PASS_PARTS)
            .ptr(hw.1)
            .f32(hw.2)
            .usize(hc)
            .usize(d)
            .f32(hc_eps)
            .f32(eps)
            .ptr(norm_w)
            .ptr(out),
    )?;
    Ok(n + l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn norm_rows(
    gpu: &Gpu,
    x: u64,
    ldx: usize,
    w: u64,
    d: usize,
    eps: f32,
    out_f32: u64,
    out_bf: u64,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((t, 1, 1), 256, 0);
    gpu.launch(
        km::NORM_ROWS,
        l,
        Args::new()
            .ptr(x)
            .usize(ldx)
            .ptr(w)
            .usize(d)
            .f32(eps)
            .ptr(out_f32)
            .ptr(out_bf),
    )?;
    Ok(l.blocks())
}
