//! The attention launchers: q / kv preparation with rope, the compressor, the indexer and its
//! top-k, split-K sparse attention and its combine, and the window ring.

use amdahl_kernels::attention as ka;

use crate::error::{EngineError, Result};

use super::super::gpu::{Args, Gpu, Launch};

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
