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
    image: bool,
    t: usize,
) -> Result<u64> {
    if image && (!d.is_multiple_of(4) || d > ka::MAX_HEAD_DIM) {
        return Err(EngineError::Device(format!(
            "q's bf16 image needs head_dim a multiple of 4 and at most {}, got {d}",
            ka::MAX_HEAD_DIM
        )));
    }
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
            .f32(rope.scale)
            .i32(i32::from(image)),
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
    let l = Launch::new(
        ((heads * (rope.dim / 2)).div_ceil(256).max(1), t, 1),
        256,
        0,
    );
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

/// Shared memory of `indexer_scores_k{kpl}` in bytes: the query (heads padded to whole warp
/// groups) and head weights, one 32·kpl-key tile with rows padded to di + 4 floats, and the
/// eight warps' sums.
pub fn indexer_smem(hi: usize, di: usize, kpl: usize) -> usize {
    let hp = hi.div_ceil(ka::INDEXER_HEADS_PER_WARP) * ka::INDEXER_HEADS_PER_WARP;
    let tk = 32 * kpl;
    (hp * di + hp + tk * (di + 4) + 8 * tk) * 4
}

/// The indexer's kernels: a block per 256 keys of a row with every head in a thread's registers,
/// and a serial walk of each top-k histogram (`Rows`); key tiles in shared memory feeding eight
/// heads per warp on the FP32 pipe, and a warp's scan of the histogram (`Tiles`); or the scores
/// on tensor cores with q and k as bf16 high and low parts (`Mma`, the default where index_head_dim
/// is 128 and the heads are whole tiles of 16, at most 64; else `Tiles`) with `Tiles`' select.
/// `AMDAHL_INDEXER=rows|tiles|mma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexerKernels {
    Rows,
    Tiles,
    Mma,
}

/// 0: not yet read from `AMDAHL_INDEXER=rows|tiles|mma`; else 1 + the variant.
static INDEXER_KERNELS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets the indexer's kernels (tests, measurements); `None` goes back to `AMDAHL_INDEXER`.
pub fn force_indexer_kernels(v: Option<IndexerKernels>) {
    INDEXER_KERNELS.store(
        v.map_or(0, |k| 1 + k as u8),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The indexer's kernels in use.
pub fn indexer_kernels() -> IndexerKernels {
    use std::sync::atomic::Ordering;
    if INDEXER_KERNELS.load(Ordering::Relaxed) == 0 {
        let v = match std::env::var("AMDAHL_INDEXER").as_deref() {
            Ok("rows") => IndexerKernels::Rows,
            Ok("tiles") => IndexerKernels::Tiles,
            _ => IndexerKernels::Mma,
        };
        force_indexer_kernels(Some(v));
    }
    match INDEXER_KERNELS.load(Ordering::Relaxed) {
        1 => IndexerKernels::Rows,
        2 => IndexerKernels::Tiles,
        _ => IndexerKernels::Mma,
    }
}

/// Whether the tensor-core scores take `hi` heads of `di` dims.
pub fn indexer_mma_fits(hi: usize, di: usize) -> bool {
    di == ka::INDEXER_MMA_DIM && hi > 0 && hi.is_multiple_of(16) && hi <= ka::INDEXER_MMA_HEADS
}

/// Shared memory of `indexer_scores_mma`: q's and a key tile's two bf16 parts.
pub fn indexer_mma_smem() -> usize {
    2 * (ka::INDEXER_MMA_HEADS + ka::INDEXER_MMA_KEYS) * ka::INDEXER_MMA_LD * 2
}

/// Keys per lane of the tiled indexer scores for `t` rows: 1 (32-key tiles) where 128-key tiles
/// would leave most SMs idle (a batch of a few rows), else 4.
pub fn indexer_keys_per_lane(gpu: &Gpu, t: usize, max_e: usize) -> usize {
    if t * max_e.div_ceil(128) < gpu.info.sms {
        1
    } else {
        4
    }
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
    let mut args = Args::new();
    args.ptr(q)
        .ptr(w)
        .ptr(keys)
        .usize(hi)
        .usize(di)
        .usize(m)
        .usize(max_e)
        .ptr(meta.row_seq)
        .ptr(meta.row_pos)
        .ptr(meta.seq_slot)
        .ptr(scores);
    if indexer_kernels() == IndexerKernels::Rows {
        let l = Launch::new((max_e.div_ceil(256), t, 1), 256, (hi * di + hi) * 4);
        gpu.launch(ka::INDEXER_SCORES, l, &mut args)?;
        return Ok(l.blocks());
    }
    let sms = gpu.info.sms.max(1);
    if indexer_kernels() == IndexerKernels::Mma && indexer_mma_fits(hi, di) {
        // About three blocks per SM (69.6 KB of shared memory each), each walking its row's tiles.
        let tiles = max_e.div_ceil(ka::INDEXER_MMA_KEYS).max(1);
        let per_row = tiles.min((3 * sms).div_ceil(t.max(1)));
        let l = Launch::new((per_row, t, 1), 256, indexer_mma_smem());
        gpu.launch(ka::INDEXER_SCORES_MMA, l, &mut args)?;
        return Ok(l.blocks());
    }
    if !di.is_multiple_of(4) {
        return Err(EngineError::Device(format!(
            "the GPU indexer needs index_head_dim % 4 == 0, got {di}"
        )));
    }
    // Blocks of about two waves, each walking its row's tiles.
    let kpl = indexer_keys_per_lane(gpu, t, max_e);
    let tiles = max_e.div_ceil(32 * kpl).max(1);
    let per_row = tiles.min((4 * sms).div_ceil(t.max(1)));
    let smem = indexer_smem(hi, di, kpl);
    let l = Launch::new((per_row, t, 1), 256, smem);
    gpu.launch(
        if kpl == 1 {
            ka::INDEXER_SCORES_K1
        } else {
            ka::INDEXER_SCORES_K4
        },
        l,
        &mut args,
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
        match indexer_kernels() {
            IndexerKernels::Rows => ka::TOPK_SELECT,
            IndexerKernels::Tiles | IndexerKernels::Mma => ka::TOPK_SELECT_WARP,
        },
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
    /// q holds `q_prep`'s bf16 image (hi, lo per head), for `sparse_attn_wg_qi`
    /// ([`attn_q_image`]), not f32 rows.
    pub q_image: bool,
}

/// Heads per block forced by `AMDAHL_ATTN_HEADS=64|16` or [`force_attn_heads`] (0: by size;
/// `usize::MAX`: the environment not read yet).
static ATTN_HEADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Forces the sparse attention's heads per block (64 or 16; tests, measurements); `None` goes
/// back to choosing by size.
pub fn force_attn_heads(h: Option<usize>) {
    let v = h.filter(|&h| h == ka::HEADS_PER_BLOCK || h == ka::NARROW_HEADS);
    ATTN_HEADS.store(v.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
}

/// Heads per block of the sparse attention for `t` rows: 64 (each KV tile shared by the most
/// heads) unless that grid would fill at most half the SMs' first wave four times over, as at
/// batch 1, where a block's time is its warps' instruction chains and 16 heads per block (a
/// quarter of the work per warp, 4× the blocks) is faster. Where the 64-head blocks run on
/// warpgroup MMAs (`sparse_attn_wg`) they are faster down to a quarter of the SMs (H100: the
/// window layers at batch 16, 64 blocks, attention 0.1055 → 0.0971 ms per step; at batch 1,
/// 4–20 blocks, 0.0638 → 0.0770 with them).
pub fn attn_heads_per_block(gpu: &Gpu, a: &AttnArgs, t: usize) -> usize {
    use std::sync::atomic::Ordering;
    if ATTN_HEADS.load(Ordering::Relaxed) == usize::MAX {
        force_attn_heads(
            std::env::var("AMDAHL_ATTN_HEADS")
                .ok()
                .and_then(|v| v.parse().ok()),
        );
    }
    match ATTN_HEADS.load(Ordering::Relaxed) {
        0 => {
            let wide = a.splits * a.heads.div_ceil(ka::HEADS_PER_BLOCK) * t;
            let fill = if attn_uses_wg(gpu, a, ka::HEADS_PER_BLOCK) {
                1
            } else {
                2
            };
            if 4 * wide <= fill * gpu.info.sms {
                ka::NARROW_HEADS
            } else {
                ka::HEADS_PER_BLOCK
            }
        }
        h => h,
    }
}

/// `AMDAHL_ATTN_WG=0` or [`force_attn_wg`] keeps 64-head blocks on `sparse_attn_partial`
/// (0: off, 1: on where it applies, `usize::MAX`: the environment not read yet).
static ATTN_WG: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Switches the warpgroup-MMA attention (`sparse_attn_wg`) off or back on (tests, measurements).
pub fn force_attn_wg(on: bool) {
    ATTN_WG.store(usize::from(on), std::sync::atomic::Ordering::Relaxed);
}

/// Does a 64-head block of this layer run on `sparse_attn_wg`: an sm_90 GPU, 512-wide heads in
/// whole groups of 64, and the switch on (the default)?
pub fn attn_uses_wg(gpu: &Gpu, a: &AttnArgs, heads_per_block: usize) -> bool {
    use std::sync::atomic::Ordering;
    if ATTN_WG.load(Ordering::Relaxed) == usize::MAX {
        force_attn_wg(std::env::var("AMDAHL_ATTN_WG").map_or(true, |v| v != "0"));
    }
    ATTN_WG.load(Ordering::Relaxed) == 1
        && heads_per_block == ka::WG_HEADS
        && gpu.info.compute_capability == (9, 0)
        && a.head_dim == ka::WG_HEAD_DIM
        && a.heads.is_multiple_of(ka::WG_HEADS)
}

/// Does `q_prep` write q as its bf16 image for this layer's attention at `t` rows: where the
/// attention runs `sparse_attn_wg`, unless `AMDAHL_ATTN_QIMG=0` (read once). Then each block
/// copies q's two bf16 parts instead of loading and converting 128 KB of f32.
pub fn attn_q_image(gpu: &Gpu, a: &AttnArgs, t: usize) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("AMDAHL_ATTN_QIMG").as_deref() != Ok("0"))
        && attn_uses_wg(gpu, a, attn_heads_per_block(gpu, a, t))
}

pub fn sparse_attn(gpu: &Gpu, a: AttnArgs, meta: SeqMeta, t: usize) -> Result<u64> {
    let (hg, d) = (attn_heads_per_block(gpu, &a, t), a.head_dim);
    let topk_ints = if a.kind == 2 { a.chunk } else { 0 };
    if attn_uses_wg(gpu, &a, hg) {
        let l = Launch::new(
            (a.splits, a.heads / ka::WG_HEADS, t),
            ka::WG_THREADS,
            ka::WG_SMEM_FIXED + 4 * topk_ints,
        );
        let entry = if a.q_image {
            ka::SPARSE_ATTN_WG_QI
        } else {
            ka::SPARSE_ATTN_WG
        };
        gpu.launch(entry, l, &mut attn_args(&a, meta))?;
        return Ok(l.blocks());
    }
    if a.q_image {
        return Err(EngineError::Device(format!(
            "q is in its bf16 image, which only sparse_attn_wg reads, but {hg}-head blocks of \
             {d}-wide heads run another kernel"
        )));
    }
    if !d.is_multiple_of(16) || d > ka::MAX_HEAD_DIM {
        return Err(EngineError::Device(format!(
            "sparse attention needs head_dim a multiple of 16 and at most {}, got {d}",
            ka::MAX_HEAD_DIM
        )));
    }
    // Q's two bf16 parts and the ring of KV tiles as padded bf16 rows, the score tile in f32
    // (64 rows: 64 heads, or 16 heads × 4 parts of d), then (CSA) the split's top-k indices.
    let rows = 2 * hg + ka::KV_BUFFERS * ka::TILE_ROWS;
    let smem =
        rows * (d + ka::ROW_PAD) * 2 + ka::HEADS_PER_BLOCK * ka::SCORE_LD * 4 + 4 * topk_ints;
    let l = Launch::new((a.splits, a.heads.div_ceil(hg), t), ka::THREADS, smem);
    gpu.launch(
        if hg == ka::NARROW_HEADS {
            ka::SPARSE_ATTN_PARTIAL_H16
        } else {
            ka::SPARSE_ATTN_PARTIAL
        },
        l,
        &mut attn_args(&a, meta),
    )?;
    Ok(l.blocks())
}

/// The arguments every sparse attention kernel takes, in their order.
fn attn_args(a: &AttnArgs, meta: SeqMeta) -> Args {
    let mut args = Args::new();
    args.ptr(a.q)
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
        .ptr(a.ml_part);
    args
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
