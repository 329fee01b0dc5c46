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

/// The Sinkhorn projection of the comb logits `hc_pre` left in `mix`, a warp per token: what
/// `hc_post` reads, so the layer runs it on the side stream beside the sub-layer.
pub fn hc_sinkhorn(
    gpu: &Gpu,
    mix: u64,
    hc: usize,
    iters: usize,
    hc_eps: f32,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((t.div_ceil(8), 1, 1), 256, 0);
    gpu.launch(
        km::HC_SINKHORN,
        l,
        Args::new()
            .ptr(mix)
            .usize(hc)
            .usize(t)
            .usize(iters)
            .f32(hc_eps),
    )?;
    Ok(l.blocks())
}

/// The pre-mix of a hyper-connection site fused with the sub-layer's RMSNorm: pre, post and
/// comb's logits, the collapse and the norm, one block per token ([`hc_sinkhorn`] makes comb of
/// the logits). `ready_parts` > 0: the mixing partials are already in `partial` (an `hc_post`
/// with `next` wrote that many per token); 0: they are computed first (one more launch).
#[allow(clippy::too_many_arguments)]
pub fn hc_pre(
    gpu: &Gpu,
    x: u64,
    hcw: (u64, u64, u64),
    hc: usize,
    d: usize,
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
            .f32(hc_eps)
            .f32(eps)
            .ptr(norm_w)
            .ptr(mix)
            .ptr(u_f32)
            .ptr(u_bf),
    )?;
    Ok(n + l.blocks())
}

/// The post-mix kernel of a step: `Token` (`hc_post`, one token per block, every warp of a
/// block computing the block's X' values), `Shared` (`hc_post`, `km::POST_TOK` tokens per block,
/// which load the next site's mixing weights once for all of them) or `Rows` (`hc_post_rows`:
/// a warp per token over 128 columns, each X' value computed once, the weights staged in
/// shared memory). `AMDAHL_POST=token|shared|rows` forces one; by default `Rows` from 8
/// tokens, `Token` below (docs/PERF.md, fourteenth session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostMix {
    Token,
    Shared,
    Rows,
}

/// Forced post-mix kernel (0 token, 1 shared, 2 rows) or unset (`u8::MAX`).
static POST_FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces the post-mix kernel (`None`: the environment and the token count decide).
#[cfg(test)]
pub fn force_post_mix(v: Option<PostMix>) {
    POST_FORCE.store(v.map_or(u8::MAX, |v| v as u8), Ordering::Relaxed);
}

/// The post-mix kernel forced by a test or `AMDAHL_POST`, if any.
pub fn post_mix_forced() -> Option<PostMix> {
    match POST_FORCE.load(Ordering::Relaxed) {
        0 => Some(PostMix::Token),
        1 => Some(PostMix::Shared),
        2 => Some(PostMix::Rows),
        _ => match std::env::var("AMDAHL_POST").as_deref() {
            Ok("token") => Some(PostMix::Token),
            Ok("shared") => Some(PostMix::Shared),
            Ok("rows") => Some(PostMix::Rows),
            _ => None,
        },
    }
}

/// The post-mix kernel for `t` tokens of width `d` (`Rows` needs d ≤ 128 · `km::MIX_PARTS`).
pub fn post_mix(t: usize, d: usize) -> PostMix {
    let rows_fit = km::rows_parts(d) * km::ROWS_COLS >= d;
    match post_mix_forced() {
        Some(PostMix::Rows) if !rows_fit => PostMix::Token,
        Some(p) => p,
        None if t >= 8 && rows_fit => PostMix::Rows,
        None => PostMix::Token,
    }
}

/// Mixing partials per token that the post-mix of `t` tokens of width `d` leaves for the next
/// site's `hc_pre` (its `ready_parts`).
pub fn post_parts(t: usize, d: usize) -> usize {
    match post_mix(t, d) {
        PostMix::Rows => km::rows_parts(d),
        PostMix::Token | PostMix::Shared => km::post_parts(d),
    }
}

/// The post-mix of a site, in place on `x`. `next` = (the next site's mixing weights, the
/// partial buffer): also leaves that site's mixing partials ([`post_parts`] per token), so its
/// `hc_pre` runs with `ready_parts` and no pass of its own. The kernel is [`post_mix`]'s.
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
    let mut args = Args::new();
    args.ptr(x).ptr(y).ptr(mix).usize(hc).usize(d).usize(t);
    let mode = post_mix(t, d);
    if mode == PostMix::Rows {
        if !d.is_multiple_of(4) || hc > 4 {
            return Err(EngineError::Device(format!(
                "hc_post_rows needs hidden_size % 4 == 0 and hc_mult <= 4 (got {d}, {hc})"
            )));
        }
        let nmix = (2 + hc) * hc;
        let smem = if fn_next != 0 {
            nmix * hc * km::ROWS_COLS * 4
        } else {
            0
        };
        let l = Launch::new((km::rows_parts(d), t.div_ceil(km::ROWS_TOK), 1), 256, smem);
        gpu.launch(km::HC_POST_ROWS, l, args.ptr(fn_next).ptr(partial))?;
        return Ok(l.blocks());
    }
    let tpb = km::post_tokens(t, mode == PostMix::Shared);
    let l = Launch::new((km::post_parts(d), t.div_ceil(tpb), 1), 256, 0);
    gpu.launch(km::HC_POST, l, args.usize(tpb).ptr(fn_next).ptr(partial))?;
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
