//! The dense linear launchers: the decode kernels' token-tile instantiations and K splits, the
//! streamed and tiled-GEMM variants where they take over (`stream.rs`, `gemm.rs`), and the
//! f32-input router.

use std::sync::atomic::{AtomicU8, Ordering};

use amdahl_kernels::linear_entry;

use crate::error::{EngineError, Result};

use super::super::gpu::{Args, Gpu, Launch};
use super::super::weights::GLinear;
use super::{gemm, linear_wg, stream};

/// 8 warps × 128 floats × tiles: the cross-warp reduction buffer of linear.cu.
pub(super) fn lin_smem(nt: usize) -> usize {
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
    if let Some(geo) = linear_wg::wg_plan(gpu, w, m, ldx, x) {
        return linear_wg::linear_wg(gpu, w, geo, x, ldx, y, ldy, m, out_bf16);
    }
    if linear_wg::quantizes(w.fmt) {
        // The FP8 activations for the kernels below, in row chunks that fit the scratch.
        let width = w.cols * w.experts.max(1);
        let chunk = linear_wg::scratch_rows(width).max(1);
        let ybytes = if out_bf16 { 2 } else { 4 };
        let mut blocks = 0;
        for r0 in (0..m).step_by(chunk) {
            let mc = chunk.min(m - r0);
            let xr = x + (r0 * ldx * 2) as u64;
            let (xq, ldq) = linear_wg::fp8_rows(gpu, w.fmt, xr, ldx, mc, width, w.cols)?;
            let yr = y + (r0 * ldy * ybytes) as u64;
            blocks += linear_bf16x(gpu, w, xq, ldq, yr, ldy, mc, out_bf16)?;
        }
        return Ok(blocks);
    }
    linear_bf16x(gpu, w, x, ldx, y, ldy, m, out_bf16)
}

/// [`linear`] on the activations as given (bf16 values; FP8 weights decoded to bf16).
#[allow(clippy::too_many_arguments)]
fn linear_bf16x(
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
            &stream::linear_entry(w.fmt, nt),
            l,
            dense_args(w, x, ldx, y, ldy, m)
                .usize(w.experts)
                .i32(out_bf16 as i32)
                .usize(st.stages)
                .ptr(ws)
                .ptr(cnt),
        )?;
        return Ok(l.blocks());
    }
    if persist_applies(w, nt, ldx, x) {
        let tiles = w.rows.div_ceil(16);
        let per_matrix = tiles.min((2 * gpu.info.sms).div_ceil(w.experts.max(1)));
        let l = Launch::new((per_matrix, 1, w.experts), 256, lin_smem(nt));
        gpu.launch_named(
            &amdahl_kernels::linear_persist_entry(w.fmt.name()),
            l,
            dense_args(w, x, ldx, y, ldy, m).i32(out_bf16 as i32),
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
        dense_args(w, x, ldx, y, ldy, m)
            .i32(out_bf16 as i32)
            .ptr(ws)
            .ptr(cnt),
    )?;
    Ok(l.blocks())
}

/// The arguments the dense linear kernels (register, persistent, streamed, `linear_wg`) start
/// with.
pub(super) fn dense_args(w: &GLinear, x: u64, ldx: usize, y: u64, ldy: usize, m: usize) -> Args {
    let mut a = Args::new();
    a.raw(&w.desc().as_bytes())
        .ptr(x)
        .usize(ldx)
        .ptr(y)
        .usize(ldy)
        .usize(m)
        .usize(w.rows)
        .usize(w.cols);
    a
}

/// Forced persistent linear on (1) or off (0), or unset (`u8::MAX`: on unless
/// `AMDAHL_LINEAR_PERSIST=0`; H100, wq_b at 16 tokens 26.9 → 22.0 µs by ncu, docs/PERF.md).
static PERSIST_FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces the persistent dense linear on or off where it applies (`None`: the environment).
#[cfg(test)]
pub fn force_linear_persist(v: Option<bool>) {
    PERSIST_FORCE.store(v.map_or(u8::MAX, u8::from), Ordering::Relaxed);
}

/// `AMDAHL_LINEAR_PERSIST` (read once): the persistent linear unless `0`.
fn persist_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("AMDAHL_LINEAR_PERSIST").as_deref() != Ok("0"))
}

/// Whether the persistent dense linear (`linear_*_nt2_p`: blocks looping over row tiles with
/// the activations in registers) computes `w` at `nt` token groups from x rows of `ldx` at `x`:
/// when on (the default), an FP8 format, two groups, K a whole number of superchunks and at most
/// 8 warps × 2 of them, 16-byte-aligned x rows (wq_b at 9–16 tokens).
pub fn persist_applies(w: &GLinear, nt: usize, ldx: usize, x: u64) -> bool {
    let on = match PERSIST_FORCE.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => persist_env(),
    };
    let sc = w.fmt.superchunk_cols();
    on && nt == 2
        && amdahl_kernels::LINEAR_PERSIST_FORMATS.contains(&w.fmt.name())
        && w.cols.is_multiple_of(sc)
        && w.cols / sc <= 16
        && ldx.is_multiple_of(8)
        && x.is_multiple_of(16)
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
    if m > 8 * nt || blocks > super::super::gpu::SPLIT_COUNTERS {
        return 1;
    }
    let most = (k.div_ceil(sc_cols) / 8)
        .min(super::super::gpu::SPLIT_PARTIAL_BYTES / (blocks * 128 * nt * 4))
        .clamp(1, 32);
    let cost = |ks: usize| (blocks * ks).div_ceil(slots) as f64 * (1.0 / ks as f64 + 0.25);
    (1..=most)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(1)
}

/// Blocks of a dense linear entry one SM holds (`LIN_MIN_BLOCKS` in linear.cu).
fn lin_blocks_per_sm(fmt: super::super::weights::Fmt, nt: usize) -> usize {
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

#[cfg(test)]
mod k_split_tests {
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
