//! The FP8 linear on FP8 warpgroup MMAs (`linear_wg_*`, linear_wg.cu): the reference's FP8
//! GEMM with the activations quantized per 1×128 group (`quant/act.rs`), for up to 64 tokens
//! on sm_90 when `AMDAHL_FP8_ACT=1`.

use amdahl_kernels::linear::{WG_ROWS, WG_THREADS, wg_smem};
use amdahl_kernels::{LINEAR_WG_FORMATS, LINEAR_WG_TOKENS, linear_wg_entry};

use crate::error::{EngineError, Result};
use crate::quant::act;

use super::super::gpu::{ACT_WS_BYTES, Args, Gpu, Launch, SPLIT_COUNTERS, SPLIT_WS_BYTES};
use super::super::weights::{Fmt, GLinear};

/// Bytes of quantized activations a block may hold (tokens × columns of its K split): 32 KiB
/// beside the 8-stage ring, 64 KiB at 64 tokens beside 5 stages (2 blocks per SM either way).
fn x_bytes(tokens: usize) -> usize {
    if tokens >= 64 { 64 << 10 } else { 32 << 10 }
}
/// Blocks of `linear_wg` one SM holds (by its shared memory, [`amdahl_kernels::linear::wg_smem`]).
const BLOCKS_PER_SM: usize = 2;

/// Whether the FP8 activations apply to weights of `fmt`: the mode on and an FP8 format.
pub fn quantizes(fmt: Fmt) -> bool {
    act::fp8_act() && LINEAR_WG_FORMATS.contains(&fmt.name())
}

/// Rows of `width` bf16 columns the activation scratch holds.
pub fn scratch_rows(width: usize) -> usize {
    ACT_WS_BYTES / (2 * width.max(1))
}

/// The activations an FP8 weight of `fmt` multiplies, for kernels that take bf16 activations:
/// with the FP8 activations on, rows [0, rows) × columns [0, width) of x (ld `ldx`) quantized
/// per 1×128 group (groups restart every `seg` columns: a grouped linear's matrices) into the
/// stream's scratch, returned with its ld (`width`); otherwise x and `ldx` as they are.
pub fn fp8_rows(
    gpu: &Gpu,
    fmt: Fmt,
    x: u64,
    ldx: usize,
    rows: usize,
    width: usize,
    seg: usize,
) -> Result<(u64, usize)> {
    if !quantizes(fmt) || rows == 0 {
        return Ok((x, ldx));
    }
    if rows > scratch_rows(width) || !width.is_multiple_of(seg) {
        return Err(EngineError::Device(format!(
            "AMDAHL_FP8_ACT=1: {rows} rows of {width} activations (groups every {seg}) do not fit \
             the {} MiB activation scratch; use a smaller prefill chunk or AMDAHL_FP8_ACT=0",
            ACT_WS_BYTES >> 20
        )));
    }
    let groups = seg.div_ceil(128) * (width / seg);
    let out = gpu.act_ws();
    gpu.launch(
        amdahl_kernels::ACT_QUANT_ROWS,
        Launch::new((groups.div_ceil(4), rows, 1), 128, 0),
        Args::new()
            .ptr(x)
            .usize(ldx)
            .usize(rows)
            .usize(width)
            .usize(seg)
            .ptr(out),
    )?;
    Ok((out, width))
}

/// The launch of `linear_wg` for `w` at `m` tokens from x rows of `ldx` at `x`, where it
/// applies: the FP8 activations on for an FP8 format ([`quantizes`]), an sm_90 GPU (the kernel
/// is sm_90a code; elsewhere its body is empty), 1–64 tokens, K a multiple of 128,
/// 16-byte-aligned x rows, and a K split whose activations fit beside the ring and whose
/// partial tiles fit the split workspace ([`wg_geometry`]).
pub fn wg_plan(
    gpu: &Gpu,
    w: &GLinear,
    m: usize,
    ldx: usize,
    x: u64,
) -> Option<(usize, usize, usize, usize)> {
    let eligible = quantizes(w.fmt)
        && gpu.info.compute_capability == (9, 0)
        && (1..=64).contains(&m)
        && w.cols.is_multiple_of(128)
        && ldx.is_multiple_of(8)
        && x.is_multiple_of(16);
    if eligible {
        wg_geometry(w, m, gpu.info.sms)
    } else {
        None
    }
}

/// Whether `linear_wg` computes `w` for `m` tokens ([`wg_plan`]).
#[cfg(test)]
pub fn wg_applies(gpu: &Gpu, w: &GLinear, m: usize, ldx: usize, x: u64) -> bool {
    wg_plan(gpu, w, m, ldx, x).is_some()
}

/// The launch of `linear_wg` for `w` at `m` tokens on `sms` SMs: (token columns, K splits,
/// columns per split, row-tile blocks per split and matrix).
pub fn wg_geometry(w: &GLinear, m: usize, sms: usize) -> Option<(usize, usize, usize, usize)> {
    geometry_of(w.rows, w.cols, w.experts.max(1), m, sms)
}

/// [`wg_geometry`] of `mats` matrices of `rows` × `cols`. The split count (at most 16) has the
/// least modelled time, waves × (1/ks of a tile's columns + a quarter for a split's partial
/// tile and the last block's sum), among those whose activations fit beside the ring and whose
/// partial tiles fit the split workspace; blocks past one wave loop over row tiles.
fn geometry_of(
    rows: usize,
    cols: usize,
    mats: usize,
    m: usize,
    sms: usize,
) -> Option<(usize, usize, usize, usize)> {
    let nb = LINEAR_WG_TOKENS.into_iter().find(|&n| n >= m)?;
    let tiles = rows.div_ceil(WG_ROWS);
    let kbs = cols / 128;
    let slots = BLOCKS_PER_SM * sms;
    let fits = |ks: usize| {
        let kc = kbs.div_ceil(ks) * 128;
        nb * kc <= x_bytes(nb)
            && (ks == 1
                || (tiles * mats <= SPLIT_COUNTERS
                    && tiles * mats * ks * WG_ROWS * nb * 4 <= SPLIT_WS_BYTES))
    };
    // A split's partial tile and the last block's sum over the splits priced at a quarter of
    // a tile's columns (H100, ncu: wkv at 32 splits of one k-block 56 µs, the old register
    // kernel in 8 splits 7.3 µs).
    let cost = |ks: usize| (tiles * mats * ks).div_ceil(slots) as f64 * (1.0 / ks as f64 + 0.25);
    let ks = (1..=kbs.clamp(1, 16))
        .filter(|&ks| fits(ks))
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))?;
    // As many splits as the columns per split leave non-empty.
    let per = kbs.div_ceil(ks).max(1);
    let ks = kbs.div_ceil(per).max(1);
    let per_block = (tiles * mats * ks).div_ceil(slots).max(1);
    Some((nb, ks, per * 128, tiles.div_ceil(per_block)))
}

/// `y = x · Wᵀ` by `linear_wg` at the launch [`wg_plan`] gave (see [`super::linear`] for the
/// operands).
#[allow(clippy::too_many_arguments)]
pub fn linear_wg(
    gpu: &Gpu,
    w: &GLinear,
    (nb, ks, kc, gx): (usize, usize, usize, usize),
    x: u64,
    ldx: usize,
    y: u64,
    ldy: usize,
    m: usize,
    out_bf16: bool,
) -> Result<u64> {
    let (ws, cnt) = gpu.split_ws();
    let l = Launch::new((gx, ks, w.experts.max(1)), WG_THREADS, wg_smem(nb, kc));
    let mut a = super::linear::dense_args(w, x, ldx, y, ldy, m);
    a.i32(out_bf16 as i32).usize(kc).ptr(ws).ptr(cnt);
    gpu.launch_named(&linear_wg_entry(w.fmt.name(), nb), l, &mut a)?;
    Ok(l.blocks())
}

#[cfg(test)]
mod tests {
    fn geometry_of(
        rows: usize,
        cols: usize,
        mats: usize,
        m: usize,
        sms: usize,
    ) -> (usize, usize, usize, usize) {
        super::geometry_of(rows, cols, mats, m, sms).unwrap()
    }

    #[test]
    fn geometry_fills_the_gpu_within_the_shared_memory() {
        // V4-Flash's linears on 132 SMs (264 block slots), 16 tokens.
        // wq_b (32768 × 1024): no split, 512 tiles, 2 per block.
        assert_eq!(geometry_of(32768, 1024, 1, 16, 132), (16, 1, 1024, 256));
        // wo_a (8 groups of 1024 × 4096): 128 tiles in 2 splits of 2048 columns (32 KiB of x).
        assert_eq!(geometry_of(1024, 4096, 8, 16, 132), (16, 2, 2048, 16));
        // wo_b (4096 × 8192): 64 tiles in 4 splits, one wave.
        assert_eq!(geometry_of(4096, 8192, 1, 16, 132), (16, 4, 2048, 64));
        // wkv (512 × 4096): 8 tiles in 16 splits of two k-blocks.
        assert_eq!(geometry_of(512, 4096, 1, 16, 132), (16, 16, 256, 8));
        // 64 tokens: wo_b and the wo_a groups in splits of 1024 columns, their partial tiles
        // within the workspace.
        assert_eq!(geometry_of(4096, 8192, 1, 64, 132), (64, 8, 1024, 32));
        assert_eq!(geometry_of(1024, 4096, 8, 64, 132).1, 4);
        // 32 tokens: 1024 columns per split at most (32 KiB of x); 64 tokens 1024 (64 KiB).
        assert_eq!(geometry_of(32768, 1024, 1, 32, 132), (32, 1, 1024, 256));
        assert_eq!(geometry_of(1024, 4096, 8, 32, 132).2, 1024);
        assert_eq!(geometry_of(32768, 1024, 1, 64, 132), (64, 1, 1024, 256));
        // Two blocks per SM at every instantiation's largest split.
        for nb in [8, 16, 32, 64] {
            let kc = super::x_bytes(nb) / nb;
            assert!(
                2 * (amdahl_kernels::linear::wg_smem(nb, kc) + 1024) <= 228 << 10,
                "{nb}"
            );
        }
        // One token takes the 8-column instantiation.
        assert_eq!(geometry_of(32768, 1024, 1, 1, 132).0, 8);
        // Every split is non-empty and covers K.
        for cols in [128, 384, 1024, 4096, 8192, 7168] {
            for m in [1, 9, 17, 32, 64] {
                let (nb, ks, kc, gx) = geometry_of(4096, cols, 1, m, 132);
                assert!(nb >= m && nb * kc <= super::x_bytes(nb), "{cols} {m}");
                assert!(
                    (ks - 1) * kc < cols && ks * kc >= cols,
                    "{cols} {m}: {ks} × {kc}"
                );
                assert!((1..=64).contains(&gx));
            }
        }
    }
}
