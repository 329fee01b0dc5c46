//! Typed launchers, one per kernel family, so the forward pass reads as the model does. Each
//! picks the launch geometry (and the token-tile instantiation of the tensor-core linears) and
//! returns the number of blocks it launched, which the profiler turns into occupancy facts.

use amdahl_kernels::{attention as ka, linear_entry, mhc as km, sample as ks};

use crate::error::{EngineError, Result};

use super::gpu::{Args, Gpu, Launch};
use super::weights::GLinear;

pub mod gemm;
pub(crate) mod moe;
pub mod stream;
pub use moe::{
    MoePlan, RouteArgs, moe_combine, moe_down, moe_plan, moe_route, moe_up, plan_identity,
};

/// 8 warps × 128 floats × tiles: the cross-warp reduction buffer of linear.cu.
fn lin_smem(nt: usize) -> usize {
    8 * 128 * nt * 4
}

/// Token tiles (×8 tokens) for `m` tokens.
pub fn tiles_for(m: usize) -> usize {
    match m {
        0..=8 => 1,
        9..=16 => 2,
        17..=32 => 4,
        _ => 8,
    }
}

/// `y[m, ldy] (+col offset in the pointer) = x[m, ldx] · Wᵀ`, bf16 x; y f32 or bf16. A stacked
/// weight (`experts` > 1) is a grouped linear in one launch: matrix e reads x columns
/// [e·cols, (e+1)·cols) and writes y columns [e·rows, (e+1)·rows).
#[allow(clippy::too_many_arguments)]
pub fn linear(
    gpu: &Gpu,
    w: &GLinear,
    x: u64,
    ldx: usize,
    y: u64,
    ldy: usize,
    m: usize,
    out_bf16: bool,
) -> Result<u64> {
    if gemm::gemm_applies(w, m, ldx, x) {
        return gemm::gemm(gpu, w, x, ldx, y, ldy, m, out_bf16);
    }
    let nt = tiles_for(m);
    if stream::dense_streams(w.fmt, nt, w.fmt.bytes(w.rows, w.cols) * w.experts.max(1))
        && let Some(st) = stream::stream_for(gpu, w, 1)
    {
        let (ws, cnt) = gpu.split_ws();
        let l = Launch::new((st.blocks_per_sm * gpu.info.sms, 1, 1), 256, st.smem);
        gpu.launch_named(
            &amdahl_kernels::stream_linear_entry(w.fmt.name(), nt),
            l,
            Args::new()
                .raw(&w.desc().as_bytes())
                .ptr(x)
                .usize(ldx)
                .ptr(y)
                .usize(ldy)
                .usize(m)
                .usize(w.rows)
                .usize(w.cols)
                .usize(w.experts)
                .i32(out_bf16 as i32)
                .usize(st.stages)
                .ptr(ws)
                .ptr(cnt),
        )?;
        return Ok(l.blocks());
    }
    let name = linear_entry("linear", w.fmt.name(), nt);
    let tiles = w.rows.div_ceil(16);
    let slots = lin_blocks_per_sm(w.fmt, nt) * gpu.info.sms;
    let ks = k_splits(
        tiles * w.experts,
        w.cols,
        w.fmt.superchunk_cols(),
        m,
        nt,
        slots,
    );
    let (ws, cnt) = gpu.split_ws();
    let l = Launch::new((tiles, ks, w.experts), 256, lin_smem(nt));
    gpu.launch_named(
        &name,
        l,
        Args::new()
            .raw(&w.desc().as_bytes())
            .ptr(x)
            .usize(ldx)
            .ptr(y)
            .usize(ldy)
            .usize(m)
            .usize(w.rows)
            .usize(w.cols)
            .i32(out_bf16 as i32)
            .ptr(ws)
            .ptr(cnt),
    )?;
    Ok(l.blocks())
}

/// K splits of a dense linear of `blocks` row-tile blocks over `k` columns when `slots` blocks
/// run at once: the split with the least modelled time, waves × (1/ks of the work + a fixed
/// quarter for a block's start, reduction and store), so few-tile linears (wq_a, wkv, the
/// compressors' and the indexer's projections) fill the GPU and one-wave ones (wo_b) run fuller
/// waves. A warp keeps at least one superchunk; one token group only (m <= 8·nt); the partials
/// must fit the workspace. 1 = no split.
pub fn k_splits(
    blocks: usize,
    k: usize,
    sc_cols: usize,
    m: usize,
    nt: usize,
    slots: usize,
) -> usize {
    if m > 8 * nt || blocks > super::gpu::SPLIT_COUNTERS {
        return 1;
    }
    let most = (k.div_ceil(sc_cols) / 8)
        .min(super::gpu::SPLIT_PARTIAL_BYTES / (blocks * 128 * nt * 4))
        .clamp(1, 32);
    let cost = |ks: usize| (blocks * ks).div_ceil(slots) as f64 * (1.0 / ks as f64 + 0.25);
    (1..=most)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(1)
}

/// Blocks of a dense linear entry one SM holds (`LIN_MIN_BLOCKS` in linear.cu).
fn lin_blocks_per_sm(fmt: super::weights::Fmt, nt: usize) -> usize {
    match nt {
        1 if fmt.superchunk_cols() < 128 => 3,
        1 | 2 => 2,
        _ => 1,
    }
}

/// f32-input linear (router): y [m, N] f32. Blocks of 32 rows × 16 tokens, K split (in
/// 256-column chunks) until the GPU holds about two blocks per SM, within the split workspace.
pub fn linear_f32x(gpu: &Gpu, w: &GLinear, x: u64, ldx: usize, y: u64, m: usize) -> Result<u64> {
    let name = format!("linear_f32x_{}", w.fmt.name());
    if !w.cols.is_multiple_of(8) || !ldx.is_multiple_of(4) {
        return Err(EngineError::Device(format!(
            "router linear {}: K = {} and ldx = {ldx} must be multiples of 8 and 4",
            w.rows, w.cols
        )));
    }
    let tiles = w.rows.div_ceil(32) * m.div_ceil(16);
    let splits = f32x_splits(tiles, w.cols.div_ceil(256), gpu.info.sms);
    let (ws, cnt) = gpu.split_ws();
    let l = Launch::new((w.rows.div_ceil(32), splits, m.div_ceil(16)), 256, 0);
    gpu.launch_named(
        &name,
        l,
        Args::new()
            .raw(&w.desc().as_bytes())
            .ptr(x)
            .usize(ldx)
            .ptr(y)
            .usize(m)
            .usize(w.rows)
            .usize(w.cols)
            .ptr(ws)
            .ptr(cnt),
    )?;
    Ok(l.blocks())
}

/// K splits of the router linear: enough for ~2 blocks per SM over `tiles` (32 × 16) output
/// tiles, at most one per 256-column chunk, within the split workspace (512 partials per tile
/// and split; one counter per tile).
fn f32x_splits(tiles: usize, chunks: usize, sms: usize) -> usize {
    use amdahl_kernels::linear::{SPLIT_PARTS, SPLIT_TILES};
    if tiles > SPLIT_TILES {
        return 1;
    }
    let want = (2 * sms)
        .div_ceil(tiles)
        .min(chunks)
        .min(SPLIT_PARTS / (512 * tiles))
        .max(1);
    // Every split gets chunks: as many as the kernel's `per` (chunks per split) leaves non-empty.
    chunks.div_ceil(chunks.div_ceil(want)).max(1)
}

#[cfg(test)]
mod f32x_tests {
    use super::f32x_splits;

    #[test]
    fn router_splits_fill_the_gpu_without_empty_splits() {
        // V4-Flash router (256 × 4096: 8 row tiles, 16 chunks) on 132 SMs.
        assert_eq!(f32x_splits(8, 16, 132), 16); // 1 or 16 tokens: 128 blocks
        assert_eq!(f32x_splits(32, 16, 132), 8); // 64 tokens: 9 wanted, 2 chunks each → 8
        assert_eq!(f32x_splits(1024, 16, 132), 1); // a 2048-token prefill chunk
        assert_eq!(f32x_splits(3, 4, 132), 4); // never more splits than chunks
        assert_eq!(f32x_splits(5000, 16, 132), 1); // more tiles than counters
        for tiles in 1..300 {
            let s = f32x_splits(tiles, 16, 132);
            let per = 16usize.div_ceil(s);
            assert!(
                (s - 1) * per < 16,
                "tiles {tiles}: split {s} would be empty"
            );
            assert!(s * tiles * 512 <= amdahl_kernels::linear::SPLIT_PARTS);
        }
    }
}

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

/// The post-mix of a site, in place on `x`. `next` = (the next site's mixing weights, the
/// partial buffer): also leaves that site's mixing partials (`km::post_parts(d)` per token),
/// so its `hc_pre` runs with `ready_parts` and no pass of its own.
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
    let l = Launch::new((km::post_parts(d), t, 1), 256, 0);
    gpu.launch(
        km::HC_POST,
        l,
        Args::new()
            .ptr(x)
            .ptr(y)
            .ptr(mix)
            .usize(hc)
            .usize(d)
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

/// Rope table on the device: inverse frequencies and the attention factor.
#[derive(Debug, Clone, Copy)]
pub struct Rope {
    pub inv_freq: u64,
    pub dim: usize,
    pub scale: f32,
}

#[allow(clippy::too_many_arguments)]
pub fn q_prep(
    gpu: &Gpu,
    q: u64,
    h: usize,
    d: usize,
    eps: f32,
    row_pos: u64,
    rope: Rope,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((h.div_ceil(8), t, 1), 256, 0);
    gpu.launch(
        ka::Q_PREP,
        l,
        Args::new()
            .ptr(q)
            .usize(h)
            .usize(d)
            .f32(eps)
            .ptr(row_pos)
            .ptr(rope.inv_freq)
            .usize(rope.dim)
            .f32(rope.scale),
    )?;
    Ok(l.blocks())
}

pub fn rope_heads(
    gpu: &Gpu,
    x: u64,
    heads: usize,
    width: usize,
    row_pos: u64,
    rope: Rope,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((t, 1, 1), 256, 0);
    gpu.launch(
        ka::ROPE_HEADS,
        l,
        Args::new()
            .ptr(x)
            .usize(heads)
            .usize(width)
            .ptr(row_pos)
            .ptr(rope.inv_freq)
            .usize(rope.dim)
            .f32(rope.scale),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn kv_prep(
    gpu: &Gpu,
    kv: u64,
    norm_w: u64,
    d: usize,
    eps: f32,
    row_pos: u64,
    rope: Rope,
    out: u64,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((t, 1, 1), 256, d * 4);
    gpu.launch(
        ka::KV_PREP,
        l,
        Args::new()
            .ptr(kv)
            .ptr(norm_w)
            .usize(d)
            .f32(eps)
            .ptr(row_pos)
            .ptr(rope.inv_freq)
            .usize(rope.dim)
            .f32(rope.scale)
            .ptr(out),
    )?;
    Ok(l.blocks())
}

/// The per-sequence metadata pointers of a step.
#[derive(Debug, Clone, Copy)]
pub struct SeqMeta {
    pub row_seq: u64,
    pub row_pos: u64,
    pub seq_slot: u64,
    pub seq_start: u64,
    pub seq_n: u64,
    pub seq_row0: u64,
}

/// One compressor's device pieces for `compressor_update`.
#[derive(Debug, Clone, Copy)]
pub struct CompArgs {
    pub ckv: u64,
    pub cgate: u64,
    pub width: usize,
    pub ape: u64,
    pub norm_w: u64,
    pub dim: usize,
    pub ratio: usize,
    pub overlap: bool,
    pub state: u64,
    pub entries: u64,
    pub entries_bf16: bool,
    pub max_entries: usize,
}

pub fn compressor_update(
    gpu: &Gpu,
    c: CompArgs,
    eps: f32,
    meta: SeqMeta,
    rope: Rope,
    b: usize,
) -> Result<u64> {
    let threads = c.dim.div_ceil(32) * 32;
    let l = Launch::new((b, 1, 1), threads.clamp(32, 1024), c.dim * 4);
    gpu.launch(
        ka::COMPRESSOR_UPDATE,
        l,
        Args::new()
            .ptr(c.ckv)
            .ptr(c.cgate)
            .usize(c.width)
            .ptr(c.ape)
            .ptr(c.norm_w)
            .f32(eps)
            .usize(c.dim)
            .usize(c.ratio)
            .i32(c.overlap as i32)
            .ptr(meta.seq_slot)
            .ptr(meta.seq_start)
            .ptr(meta.seq_n)
            .ptr(meta.seq_row0)
            .ptr(c.state)
            .ptr(c.entries)
            .i32(c.entries_bf16 as i32)
            .usize(c.max_entries)
            .ptr(rope.inv_freq)
            .usize(rope.dim)
            .f32(rope.scale),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn indexer_scores(
    gpu: &Gpu,
    q: u64,
    w: u64,
    keys: u64,
    hi: usize,
    di: usize,
    m: usize,
    max_e: usize,
    meta: SeqMeta,
    scores: u64,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((max_e.div_ceil(256), t, 1), 256, (hi * di + hi) * 4);
    gpu.launch(
        ka::INDEXER_SCORES,
        l,
        Args::new()
            .ptr(q)
            .ptr(w)
            .ptr(keys)
            .usize(hi)
            .usize(di)
            .usize(m)
            .usize(max_e)
            .ptr(meta.row_seq)
            .ptr(meta.row_pos)
            .ptr(meta.seq_slot)
            .ptr(scores),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn topk_select(
    gpu: &Gpu,
    scores: u64,
    max_e: usize,
    m: usize,
    topk: usize,
    row_pos: u64,
    out: u64,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((t, 1, 1), 1024, 0);
    gpu.launch(
        ka::TOPK_SELECT,
        l,
        Args::new()
            .ptr(scores)
            .usize(max_e)
            .usize(m)
            .usize(topk)
            .ptr(row_pos)
            .ptr(out),
    )?;
    Ok(l.blocks())
}

/// Everything `sparse_attn_partial` reads about one layer.
#[derive(Debug, Clone, Copy)]
pub struct AttnArgs {
    pub q: u64,
    pub kv_step: u64,
    pub ring: u64,
    pub entries: u64,
    pub topk_idx: u64,
    pub topk: usize,
    pub kind: i32,
    pub ratio: usize,
    pub window: usize,
    pub max_entries: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub chunk: usize,
    pub splits: usize,
    pub o_part: u64,
    pub ml_part: u64,
}

pub fn sparse_attn(gpu: &Gpu, a: AttnArgs, meta: SeqMeta, t: usize) -> Result<u64> {
    let (hg, d) = (ka::HEADS_PER_BLOCK, a.head_dim);
    if !d.is_multiple_of(16) || d > ka::MAX_HEAD_DIM {
        return Err(EngineError::Device(format!(
            "sparse attention needs head_dim a multiple of 16 and at most {}, got {d}",
            ka::MAX_HEAD_DIM
        )));
    }
    // Q's two bf16 parts and the ring of KV tiles as padded bf16 rows, the score tile in f32.
    let rows = 2 * hg + ka::KV_BUFFERS * ka::TILE_ROWS;
    let smem = rows * (d + ka::ROW_PAD) * 2 + hg * ka::SCORE_LD * 4;
    let l = Launch::new((a.splits, a.heads.div_ceil(hg), t), ka::THREADS, smem);
    gpu.launch(
        ka::SPARSE_ATTN_PARTIAL,
        l,
        Args::new()
            .ptr(a.q)
            .ptr(a.kv_step)
            .ptr(a.ring)
            .ptr(a.entries)
            .ptr(a.topk_idx)
            .usize(a.topk)
            .i32(a.kind)
            .usize(a.ratio.max(1))
            .usize(a.window)
            .usize(a.max_entries.max(1))
            .usize(a.heads)
            .usize(a.head_dim)
            .f32(a.scale)
            .usize(a.chunk)
            .usize(a.splits)
            .ptr(meta.row_seq)
            .ptr(meta.row_pos)
            .ptr(meta.seq_slot)
            .ptr(meta.seq_start)
            .ptr(meta.seq_row0)
            .ptr(a.o_part)
            .ptr(a.ml_part),
    )?;
    Ok(l.blocks())
}

#[allow(clippy::too_many_arguments)]
pub fn attn_combine(
    gpu: &Gpu,
    a: AttnArgs,
    sinks: u64,
    row_pos: u64,
    rope: Rope,
    out: u64,
    t: usize,
) -> Result<u64> {
    let l = Launch::new((a.heads, t, 1), (a.head_dim / 2).clamp(32, 256), 0);
    gpu.launch(
        ka::SPARSE_ATTN_COMBINE,
        l,
        Args::new()
            .ptr(a.o_part)
            .ptr(a.ml_part)
            .ptr(sinks)
            .usize(a.heads)
            .usize(a.head_dim)
            .usize(a.splits)
            .ptr(row_pos)
            .ptr(rope.inv_freq)
            .usize(rope.dim)
            .f32(rope.scale)
            .ptr(out),
    )?;
    Ok(l.blocks())
}

pub fn ring_store(
    gpu: &Gpu,
    kv_step: u64,
    ring: u64,
    window: usize,
    d: usize,
    meta: SeqMeta,
    b: usize,
) -> Result<u64> {
    let l = Launch::new((b, 1, 1), 256, 0);
    gpu.launch(
        ka::RING_STORE,
        l,
        Args::new()
            .ptr(kv_step)
            .ptr(ring)
            .usize(window)
            .usize(d)
            .ptr(meta.seq_slot)
            .ptr(meta.seq_start)
            .ptr(meta.seq_n)
            .ptr(meta.seq_row0),
    )?;
    Ok(l.blocks())
}

/// Sampling parameter arrays (per logit row) and the output.
#[derive(Debug, Clone, Copy)]
pub struct SampleArgs {
    pub logits: u64,
    pub vocab: usize,
    pub temperature: u64,
    pub top_k: u64,
    pub top_p: u64,
    pub u: u64,
    pub banned: u64,
    pub out: u64,
}

pub fn sample(gpu: &Gpu, s: SampleArgs, rows: usize) -> Result<u64> {
    let l = Launch::new((rows, 1, 1), ks::THREADS, 0);
    gpu.launch(
        ks::SAMPLE_ROWS,
        l,
        Args::new()
            .ptr(s.logits)
            .usize(s.vocab)
            .ptr(s.temperature)
            .ptr(s.top_k)
            .ptr(s.top_p)
            .ptr(s.u)
            .ptr(s.banned)
            .ptr(s.out),
    )?;
    Ok(l.blocks())
}

#[cfg(test)]
mod tests {
    use super::k_splits;

    #[test]
    fn k_splits_fill_the_gpu_only_for_few_tiles_at_decode() {
        // V4-Flash on 132 SMs at 3 blocks each (one token, fp8: 396 slots): wkv (512 × 4096),
        // wq_a (1024 × 4096) split to one full wave; wo_b (4096 × 8192) in 3 for two fuller
        // waves; the indexer's weights_proj (64 × 4096 bf16) as far as a superchunk per warp allows.
        assert_eq!(k_splits(32, 4096, 64, 1, 1, 396), 8);
        assert_eq!(k_splits(64, 4096, 64, 1, 1, 396), 6);
        assert_eq!(k_splits(256, 8192, 64, 1, 1, 396), 3);
        assert_eq!(k_splits(4, 4096, 32, 1, 1, 396), 16);
        // More tokens than one group, or a short K (one superchunk per warp): no split.
        assert_eq!(k_splits(32, 4096, 64, 100, 8, 396), 1);
        assert_eq!(k_splits(32, 512, 64, 1, 1, 396), 1);
    }
}
