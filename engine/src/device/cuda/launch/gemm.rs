//! The tiled GEMM (linear.cu `gemm_*`) for linears of many tokens: when it replaces the decode
//! kernels, its block size, and its K split. The decode kernels give a block 16 weight rows and
//! read x from L2 per block, which beyond ~32 tokens makes x, not the weights, the traffic; the
//! GEMM's blocks are 128 rows × 64 or 128 tokens with both operands staged in shared memory.

use std::sync::atomic::{AtomicU8, Ordering};

use amdahl_kernels::linear::{GEMM_BK, GEMM_ROWS, gemm_smem};
use amdahl_kernels::{GEMM_FORMATS, gemm_entry};

use crate::error::Result;

use super::super::gpu::{Args, Gpu, Launch, SPLIT_COUNTERS, SPLIT_WS_BYTES};
use super::super::weights::GLinear;

/// Fewest tokens the GEMM takes for a weight whose row tiles alone fill the GPU (the bf16 LM
/// head at 64 tokens: 0.715 → 0.533 ms per step on the H200). Below [`GEMM_WIDE_TOKENS`] the
/// FP8 attention linears and the few-tile ones (split K) stay on the decode kernels, which were
/// faster there (docs/PERF.md, 2026-12-04 third session).
pub const GEMM_MIN_TOKENS: usize = 33;

/// Tokens from which every GEMM-format linear takes the GEMM, in blocks of 128 tokens (prefill
/// chunks: attn_proj 111 → 50 ms for 8192 tokens).
pub const GEMM_WIDE_TOKENS: usize = 256;

/// Forced on (1) or off (0), or unset (`u8::MAX`: `AMDAHL_GEMM=0` turns the GEMM off, for
/// measurements against the decode kernels).
static FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces the GEMM on (at any token count it can take) or off (`None`: the default rule).
#[cfg(test)]
pub fn force_gemm(v: Option<bool>) {
    FORCE.store(v.map_or(u8::MAX, u8::from), Ordering::Relaxed);
}

/// The default rule for `m` tokens of `w` when `slots` GEMM blocks run at once: every GEMM
/// format from [`GEMM_WIDE_TOKENS`]; from [`GEMM_MIN_TOKENS`] bf16 weights of at least `slots`
/// 64-token tiles.
pub fn gemm_wanted(w: &GLinear, m: usize, slots: usize) -> bool {
    let tiles = w.rows.div_ceil(GEMM_ROWS) * m.div_ceil(gemm_tokens(m)) * w.experts.max(1);
    m >= GEMM_WIDE_TOKENS || (m >= GEMM_MIN_TOKENS && w.fmt.name() == "bf16" && tiles >= slots)
}

/// Whether the GEMM computes `m` tokens of `w` from x rows of `ldx` elements at `x`: the
/// default rule (or the forced choice), a GEMM format, K a whole number of 64-column steps,
/// 16-byte aligned x rows.
pub fn gemm_applies(gpu: &Gpu, w: &GLinear, m: usize, ldx: usize, x: u64) -> bool {
    let fits = GEMM_FORMATS.contains(&w.fmt.name())
        && w.cols.is_multiple_of(GEMM_BK)
        && ldx.is_multiple_of(8)
        && x.is_multiple_of(16);
    fits && match FORCE.load(Ordering::Relaxed) {
        0 => false,
        1 => m > 0,
        _ => {
            std::env::var("AMDAHL_GEMM").map_or(true, |v| v != "0")
                && gemm_wanted(w, m, slots(gpu, w, m))
        }
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

/// K splits for `tiles` output tiles of `tokens` tokens over `steps` 64-column steps with
/// `slots` blocks resident at once: the least modelled time, waves × (1/ks of the work + a tenth
/// for a block's pipeline fill and epilogue), each split at least two steps, the partials within
/// the workspace. Fills the GPU for the few-tile linears (wo_b: 32 tiles of 8192 columns; wkv: 4).
pub fn gemm_splits(tiles: usize, tokens: usize, steps: usize, slots: usize) -> usize {
    if tiles > SPLIT_COUNTERS {
        return 1;
    }
    let most = (steps / 2)
        .min(SPLIT_WS_BYTES / (tiles * GEMM_ROWS * tokens * 4))
        .clamp(1, 32);
    let cost = |ks: usize| (tiles * ks).div_ceil(slots) as f64 * (1.0 / ks as f64 + 0.1);
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
    let name = w.fmt.name();
    let tokens = gemm_tokens(m);
    let smem = gemm_smem(name, tokens);
    let matrices = w.experts.max(1);
    let (nx, ny) = (w.rows.div_ceil(GEMM_ROWS), m.div_ceil(tokens));
    let slots = slots(gpu, w, m);
    let ks = gemm_splits(nx * ny * matrices, tokens, w.cols / GEMM_BK, slots);
    let (ws, cnt) = gpu.split_ws();
    let l = Launch::new((nx, ny, matrices * ks), 256, smem);
    gpu.launch_named(
        &gemm_entry(name, tokens),
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
            .usize(ks)
            .ptr(ws)
            .ptr(cnt),
    )?;
    Ok(l.blocks())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_splits_fill_the_gpu_for_few_tiles_only() {
        let slots = 2 * 132;
        // V4-Flash at 64 tokens: the LM head (1010 tiles) and wq_b (256) run unsplit; wo_b (32
        // tiles, 128 steps) and wkv (4 tiles, 64 steps) split to about a wave.
        assert_eq!(gemm_splits(1010, 64, 64, slots), 1);
        assert_eq!(gemm_splits(256, 64, 16, slots), 1);
        let wo_b = gemm_splits(32, 64, 128, slots);
        assert!((4..=8).contains(&wo_b), "{wo_b}");
        let wkv = gemm_splits(4, 64, 64, slots);
        assert!(wkv >= 16 && 4 * wkv <= slots, "{wkv}");
        // Every split keeps two steps and the partials fit the workspace.
        for (tiles, tokens, steps) in [(1, 64, 2), (3, 128, 5), (64, 64, 64), (4096, 64, 64)] {
            let ks = gemm_splits(tiles, tokens, steps, slots);
            assert!(ks == 1 || steps / ks >= 2, "{tiles} {steps}: {ks}");
            assert!(ks == 1 || tiles * ks * GEMM_ROWS * tokens * 4 <= SPLIT_WS_BYTES);
        }
        assert_eq!(gemm_splits(SPLIT_COUNTERS + 1, 64, 1024, slots), 1);
    }

    #[test]
    fn wide_blocks_only_for_long_inputs() {
        assert_eq!(gemm_tokens(GEMM_MIN_TOKENS), 64);
        assert_eq!(gemm_tokens(255), 64);
        assert_eq!(gemm_tokens(2048), 128);
    }
}
