//! The tiled GEMM (linear_gemm.cu `gemm_*`) for linears of many tokens: when it replaces the
//! decode kernels, its block size, and its K split. The decode kernels give a block 16 weight
//! rows and read x from L2 per block, which beyond ~32 tokens makes x, not the weights, the
//! traffic; the GEMM's blocks are 128 or 256 rows × 64 or 128 tokens with both operands staged
//! in shared memory.

use std::sync::atomic::{AtomicU8, Ordering};

use amdahl_kernels::linear::{GEMM_BK, gemm_rows, gemm_smem};
use amdahl_kernels::{GEMM_FORMATS, gemm_entry};

use crate::error::Result;

use super::super::gpu::{Args, Gpu, Launch, SPLIT_WS_BYTES};
use super::super::weights::GLinear;

/// Fewest tokens the GEMM takes: from 33 the decode kernels run one 64-token group per 16-row
/// block, and x outweighs the weights in their traffic (H200, batch 64: attn_proj 0.929 → 0.550
/// ms and the LM head 0.527 → 0.386 ms per step; docs/PERF.md).
pub const GEMM_MIN_TOKENS: usize = 33;

/// Tokens from which blocks take 128 tokens instead of 64 (prefill chunks).
pub const GEMM_WIDE_TOKENS: usize = 256;

/// Forced on (1) or off (0), or unset (`u8::MAX`: `AMDAHL_GEMM=0` turns the GEMM off and
/// `AMDAHL_GEMM=<tokens>` moves its threshold, for measurements against the decode kernels).
static FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces the GEMM on (at any token count it can take) or off (`None`: the default rule).
#[cfg(test)]
pub fn force_gemm(v: Option<bool>) {
    FORCE.store(v.map_or(u8::MAX, u8::from), Ordering::Relaxed);
}

/// Whether the GEMM computes `m` tokens of `w` from x rows of `ldx` elements at `x`: from
/// [`GEMM_MIN_TOKENS`] (or as forced), a GEMM format, K a whole number of 64-column steps,
/// 16-byte aligned x rows.
pub fn gemm_applies(w: &GLinear, m: usize, ldx: usize, x: u64) -> bool {
    let fits = GEMM_FORMATS.contains(&w.fmt.name())
        && w.cols.is_multiple_of(GEMM_BK)
        && ldx.is_multiple_of(8)
        && x.is_multiple_of(16);
    fits && match FORCE.load(Ordering::Relaxed) {
        0 => false,
        1 => m > 0,
        _ => m >= gemm_min_tokens(std::env::var("AMDAHL_GEMM").ok().as_deref()),
    }
}

/// The fewest tokens the GEMM takes under `AMDAHL_GEMM` (`setting`): `0` turns it off, a count
/// moves the threshold (measurements of the GEMM at decode batches), anything else keeps
/// [`GEMM_MIN_TOKENS`].
fn gemm_min_tokens(setting: Option<&str>) -> usize {
    match setting.map(str::parse::<usize>) {
        Some(Ok(0)) => usize::MAX,
        Some(Ok(n)) => n,
        _ => GEMM_MIN_TOKENS,
    }
}

/// GEMM blocks resident at once for `m` tokens of `w`.
fn slots(gpu: &Gpu, w: &GLinear, m: usize) -> usize {
    blocks_per_sm(gpu, gemm_smem(w.fmt.name(), gemm_tokens(m))) * gpu.info.sms
}

/// Tokens per block for `m` tokens.
pub fn gemm_tokens(m: usize) -> usize {
    if m >= GEMM_WIDE_TOKENS { 128 } else { 64 }
}

/// K splits for `tiles` output tiles of `rows` × `tokens` over `steps` 64-column steps with
/// `slots` blocks resident at once: the least modelled time, in units of one unsplit block's
/// run: waves × (1/ks of the work + a tenth for a block's pipeline fill and epilogue), plus for
/// ks > 1 the `gemm_reduce` launch (the partials' bytes read by every resident block at one
/// stage, ~36 KB, per step time, and ~2 steps for the launch); each split keeps at least two
/// steps, the partials fit the workspace. Fills the GPU for the few-tile linears (wo_b: 16
/// tiles of 8192 columns at 64 tokens; wkv: 2).
pub fn gemm_splits(tiles: usize, rows: usize, tokens: usize, steps: usize, slots: usize) -> usize {
    let tile_bytes = rows * tokens * 4;
    let most = (steps / 2)
        .min(SPLIT_WS_BYTES / (tiles * tile_bytes))
        .clamp(1, 32);
    let run = steps as f64;
    let cost = |ks: usize| {
        let work = (tiles * ks).div_ceil(slots) as f64 * (1.0 / ks as f64 + 0.1);
        let reduce = if ks > 1 {
            (tiles * ks * tile_bytes) as f64 / (slots as f64 * 36_864.0 * run) + 2.0 / run
        } else {
            0.0
        };
        work + reduce
    };
    (1..=most)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(1)
}

/// Blocks of `smem` bytes one SM holds (at most the two the launch bounds allow registers for).
fn blocks_per_sm(gpu: &Gpu, smem: usize) -> usize {
    // Shared memory per SM: the per-block opt-in limit plus one block's 1 KiB reserve.
    ((gpu.info.max_smem_optin + 1024) / (smem + 1024)).clamp(1, 2)
}

/// `y[m, ldy] = x[m, ldx] · Wᵀ` by the tiled GEMM (the caller checked [`gemm_applies`]); a
/// stacked weight is a grouped linear as in [`super::linear`]. Returns the blocks launched.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    gpu: &Gpu,
    w: &GLinear,
    x: u64,
    ldx: usize,
    y: u64,
    ldy: usize,
    m: usize,
    out_bf16: bool,
) -> Result<u64> {
    let mats = Mats {
        desc: w.desc(),
        matrices: w.experts.max(1),
        xe: w.cols,
    };
    launch(gpu, w, mats, x, ldx, y, ldy, m, out_bf16)
}

/// Whether [`gemm_pair`] takes `w1` and `w3` at `m` tokens: the GEMM's rule for each, the same
/// shape and scale layout, and no per-matrix global scale (one descriptor spans both).
pub fn pair_applies(w1: &GLinear, w3: &GLinear, m: usize, ldx: usize, x: u64) -> bool {
    gemm_applies(w1, m, ldx, x)
        && w1.fmt == w3.fmt
        && (w1.rows, w1.cols, w1.experts, w1.s_ld, w1.row_phase)
            == (w3.rows, w3.cols, w3.experts, w3.s_ld, w3.row_phase)
        && w1.experts <= 1
        && w1.fmt.name() != "fp8t"
}

/// `h[m, 2N] = [x W1ᵀ | x W3ᵀ]` in f32 by one GEMM launch of two matrices over the same x (the
/// shared expert's up projections; the caller checked [`pair_applies`]).
pub fn gemm_pair(
    gpu: &Gpu,
    w1: &GLinear,
    w3: &GLinear,
    x: u64,
    ldx: usize,
    h: u64,
    m: usize,
) -> Result<u64> {
    let mut desc = w1.desc();
    // Matrix 1 is W3: its codes and scales as offsets from W1's.
    desc.w_stride = w3.w.ptr() as i64 - w1.w.ptr() as i64;
    desc.s_stride = match (&w1.s, &w3.s) {
        (Some(a), Some(b)) => b.ptr() as i64 - a.ptr() as i64,
        _ => 0,
    };
    let mats = Mats {
        desc,
        matrices: 2,
        xe: 0,
    };
    launch(gpu, w1, mats, x, ldx, h, 2 * w1.rows, m, false)
}

/// `act[m, n] = swiglu(h[m, n], h[m, n + i])` as bf16 (V4's clamped SwiGLU with `limit`), after
/// [`gemm_pair`] with `n` = its `i` rows.
pub fn swiglu_rows(gpu: &Gpu, h: u64, act: u64, m: usize, i: usize, limit: f32) -> Result<u64> {
    let l = Launch::new(
        ((m * i).div_ceil(1024).clamp(1, 4 * gpu.info.sms), 1, 1),
        256,
        0,
    );
    gpu.launch(
        amdahl_kernels::GEMM_SWIGLU,
        l,
        Args::new().ptr(h).ptr(act).usize(m).usize(i).f32(limit),
    )?;
    Ok(l.blocks())
}

/// The matrices of one GEMM launch: a descriptor (matrix e at its strides), how many, and the x
/// columns between matrices' inputs.
struct Mats {
    desc: super::super::weights::WDesc,
    matrices: usize,
    xe: usize,
}

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    w: &GLinear,
    mats: Mats,
    x: u64,
    ldx: usize,
    y: u64,
    ldy: usize,
    m: usize,
    out_bf16: bool,
) -> Result<u64> {
    let name = w.fmt.name();
    let tokens = gemm_tokens(m);
    let rows = gemm_rows(name, tokens);
    let smem = gemm_smem(name, tokens);
    let (nx, ny) = (w.rows.div_ceil(rows), m.div_ceil(tokens));
    let tiles = nx * ny * mats.matrices;
    let ks = gemm_splits(tiles, rows, tokens, w.cols / GEMM_BK, slots(gpu, w, m));
    let (ws, _) = gpu.split_ws();
    let l = Launch::new((nx, ny, mats.matrices * ks), 256, smem);
    gpu.launch_named(
        &gemm_entry(name, tokens),
        l,
        Args::new()
            .raw(&mats.desc.as_bytes())
            .ptr(x)
            .usize(ldx)
            .usize(mats.xe)
            .ptr(y)
            .usize(ldy)
            .usize(m)
            .usize(w.rows)
            .usize(w.cols)
            .i32(out_bf16 as i32)
            .usize(ks)
            .ptr(ws),
    )?;
    if ks == 1 {
        return Ok(l.blocks());
    }
    let r = Launch::new(((rows * tokens).div_ceil(1024), tiles, 1), 256, 0);
    gpu.launch(
        amdahl_kernels::GEMM_REDUCE,
        r,
        Args::new()
            .ptr(ws)
            .ptr(y)
            .usize(ldy)
            .usize(m)
            .usize(w.rows)
            .usize(rows)
            .usize(tokens)
            .usize(nx)
            .usize(ny)
            .usize(ks)
            .i32(out_bf16 as i32),
    )?;
    Ok(l.blocks() + r.blocks())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_splits_fill_the_gpu_for_few_tiles_only() {
        let slots = 2 * 132;
        // V4-Flash at 64 tokens (FP8 tiles of 256 rows): wq_b (128 tiles, 16 steps) and the bf16
        // LM head (1010 tiles of 128) run unsplit; wo_b (16 tiles, 128 steps) and wkv (2 tiles,
        // 64 steps) split to about a wave.
        assert_eq!(gemm_splits(1010, 128, 64, 64, slots), 1);
        let wq_b = gemm_splits(128, 256, 64, 16, slots);
        assert!(wq_b <= 2, "{wq_b}");
        let wo_b = gemm_splits(16, 256, 64, 128, slots);
        assert!((8..=16).contains(&wo_b), "{wo_b}");
        let wkv = gemm_splits(2, 256, 64, 64, slots);
        assert!(wkv >= 16 && 2 * wkv <= slots, "{wkv}");
        // Every split keeps two steps and the partials fit the workspace.
        for (tiles, rows, tokens, steps) in [
            (1, 256, 64, 2),
            (3, 128, 128, 5),
            (64, 256, 64, 64),
            (4096, 128, 64, 64),
        ] {
            let ks = gemm_splits(tiles, rows, tokens, steps, slots);
            assert!(ks == 1 || steps / ks >= 2, "{tiles} {steps}: {ks}");
            assert!(ks == 1 || tiles * ks * rows * tokens * 4 <= SPLIT_WS_BYTES);
        }
    }

    #[test]
    fn the_environment_moves_or_stops_the_threshold() {
        assert_eq!(gemm_min_tokens(None), GEMM_MIN_TOKENS);
        assert_eq!(gemm_min_tokens(Some("0")), usize::MAX);
        assert_eq!(gemm_min_tokens(Some("9")), 9);
        assert_eq!(gemm_min_tokens(Some("on")), GEMM_MIN_TOKENS);
    }

    #[test]
    fn wide_blocks_only_for_long_inputs() {
        assert_eq!(gemm_tokens(GEMM_MIN_TOKENS), 64);
        assert_eq!(gemm_tokens(255), 64);
        assert_eq!(gemm_tokens(2048), 128);
    }
}
