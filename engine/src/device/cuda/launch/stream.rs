//! When the streamed decode kernels (linear_stream.cu `stream_*`: per-warp shared-memory rings
//! filled by bulk async copies, sm_90+) run, and their geometry: one block of 8 warps per SM,
//! each warp with `stages` stages of 4 KiB (+ FP4 scales) per matrix.

use std::sync::atomic::{AtomicU8, Ordering};

use amdahl_kernels::linear::{STREAM_WARPS, stream_stage_bytes};

use super::super::gpu::Gpu;
use super::super::weights::{Fmt, GLinear};

/// Forced on (1) or off (0), or unset (`u8::MAX`: `AMDAHL_STREAM=0` turns them off, for
/// measurements against the register-loading kernels).
static FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces the streamed kernels on or off where they apply (`None`: the environment decides).
#[cfg(test)]
pub fn force_stream(v: Option<bool>) {
    FORCE.store(v.map_or(2, u8::from), Ordering::Relaxed);
}

fn enabled() -> bool {
    match FORCE.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => std::env::var("AMDAHL_STREAM").map_or(true, |v| v != "0"),
    }
}

/// How the streamed dense linears decode FP8: `F16` (the hardware converts to f16 pairs, the
/// activations converted per tile; the default) or `Bf16` (integer-op decode to bf16 as the
/// register kernels do, the activations as stored: `stream_linear_raw_*`), which also streams
/// FP8 linears of two token groups. `AMDAHL_FP8_STREAM=bf16|f16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Stream {
    F16,
    Bf16,
}

/// Forced FP8 decode of the streamed linears (0 f16, 1 bf16), or unset (`u8::MAX`).
static FP8_FORCE: AtomicU8 = AtomicU8::new(u8::MAX);

/// Forces the streamed linears' FP8 decode (`None`: the environment decides).
#[cfg(test)]
pub fn force_fp8_stream(v: Option<Fp8Stream>) {
    FP8_FORCE.store(v.map_or(u8::MAX, |v| v as u8), Ordering::Relaxed);
}

/// The streamed linears' FP8 decode in effect.
pub fn fp8_stream() -> Fp8Stream {
    match FP8_FORCE.load(Ordering::Relaxed) {
        0 => Fp8Stream::F16,
        1 => Fp8Stream::Bf16,
        _ => match std::env::var("AMDAHL_FP8_STREAM").as_deref() {
            Ok("bf16") => Fp8Stream::Bf16,
            _ => Fp8Stream::F16,
        },
    }
}

/// Whether format `fmt` streams through the FP8-to-bf16 entries (`stream_linear_raw_*`).
fn raw8(fmt: Fmt) -> bool {
    fp8_stream() == Fp8Stream::Bf16 && amdahl_kernels::STREAM_RAW_FORMATS.contains(&fmt.name())
}

/// The streamed dense linear's entry for format `fmt` at `nt` token groups.
pub fn linear_entry(fmt: Fmt, nt: usize) -> String {
    if raw8(fmt) {
        amdahl_kernels::stream_raw_entry(fmt.name(), nt)
    } else {
        amdahl_kernels::stream_linear_entry(fmt.name(), nt)
    }
}

/// Shared memory the driver reserves per block (sm_90).
const BLOCK_RESERVE: usize = 1024;

/// Bytes in flight per SM the default ring depth aims at: 96 KiB.
const IN_FLIGHT: usize = 96 << 10;

/// The geometry of one streamed launch: blocks per SM, stages per warp, shared memory per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamGeo {
    pub blocks_per_sm: usize,
    pub stages: usize,
    pub smem: usize,
}

/// Ring geometry of a streamed kernel over `matrices` weights (2: the fused up projection) of
/// `stage_bytes` per matrix within `smem_limit` of shared memory per SM: two blocks (16 warps) where two stages
/// each fit, so warps' decode latencies overlap, with enough stages for [`IN_FLIGHT`]; else one
/// block. `AMDAHL_STREAM_BLOCKS` / `AMDAHL_STREAM_STAGES` override (for measurements). None if
/// two stages do not fit one block.
pub fn geometry(stage_bytes: usize, matrices: usize, smem_limit: usize) -> Option<StreamGeo> {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    let per = matrices * stage_bytes;
    let smem = |s: usize| STREAM_WARPS * s * (per + 8);
    let pick = |b: usize| {
        let want = env("AMDAHL_STREAM_STAGES")
            .unwrap_or(1 + IN_FLIGHT.div_ceil(b * STREAM_WARPS * per))
            .clamp(2, 16);
        (2..=want)
            .rev()
            .find(|&s| b * (smem(s) + BLOCK_RESERVE) <= smem_limit)
    };
    let blocks = match env("AMDAHL_STREAM_BLOCKS") {
        Some(b) => b.clamp(1, 2),
        None if pick(2).is_some() => 2,
        None => 1,
    };
    let stages = pick(blocks)?;
    Some(StreamGeo {
        blocks_per_sm: blocks,
        stages,
        smem: smem(stages),
    })
}

/// Weights below this many bytes stay on the register-loading kernels: a streamed launch pays
/// ~7 µs before its first stage lands (H200, ncu: the 2 MB `wkv` took ~9 µs streamed), which only
/// a long stream hides.
pub const STREAM_MIN_BYTES: usize = 16 << 20;

/// Whether a dense linear of `nt` token groups over `bytes` of weights streams (where
/// [`stream_for`] allows): large weights only ([`STREAM_MIN_BYTES`]), at one group, or two of a
/// 2-byte format (no decode: the bf16 LM head streams at 80–83% of copy bandwidth, against
/// 78% from registers) or of FP8 decoded to bf16 ([`Fp8Stream::Bf16`]). Two groups of FP8
/// through the f16 converts decode slower streamed, as do the small compressor projections and
/// the expert kernels at every batch size (`AMDAHL_MOE_KERNEL=stream` forces those;
/// docs/PERF.md has the measurements). Forced on (`force_stream`, tests), any size streams.
pub fn dense_streams(fmt: Fmt, nt: usize, bytes: usize) -> bool {
    let large = bytes >= STREAM_MIN_BYTES || FORCE.load(Ordering::Relaxed) == 1;
    large && (nt == 1 || (nt == 2 && (matches!(fmt, Fmt::Bf16 | Fmt::F16) || raw8(fmt))))
}

/// The streamed kernels' geometry for weight `w` (`matrices` of it per stage), if they apply:
/// an sm_90+ GPU, a streamed format, K a whole number of stages.
pub fn stream_for(gpu: &Gpu, w: &GLinear, matrices: usize) -> Option<StreamGeo> {
    let name = w.fmt.name();
    let cols = 128 * w.fmt.per_load();
    if !enabled()
        || gpu.info.compute_capability.0 < 9
        || !amdahl_kernels::STREAM_FORMATS.contains(&name)
        || !w.cols.is_multiple_of(cols)
    {
        return None;
    }
    // Shared memory per SM: the per-block opt-in limit plus one block's reserve (H200: 228 KiB).
    geometry(
        stream_stage_bytes(name),
        matrices,
        gpu.info.max_smem_optin + BLOCK_RESERVE,
    )
}

#[cfg(test)]
mod tests {
    use super::geometry;

    #[test]
    fn rings_hold_the_target_in_flight_within_shared_memory() {
        const H200: usize = 233_472;
        // Row-major stages (5 KiB with the bank padding): two blocks of two stages.
        let g = geometry(5120, 1, H200).unwrap();
        assert_eq!((g.blocks_per_sm, g.stages), (2, 2));
        assert!(2 * (g.smem + 1024) <= H200);
        // The fused up projection of NVFP4T (2 × 4608 B): two stages of two blocks do not fit;
        // one block takes three (18 KiB in flight per warp).
        let g = geometry(4608, 2, H200).unwrap();
        assert_eq!((g.blocks_per_sm, g.stages), (1, 3));
        assert!(g.smem + 1024 <= H200);
        // A 150 KiB GPU: one block of two; 64 KiB: none.
        let g = geometry(4608, 2, 150 << 10).unwrap();
        assert_eq!((g.blocks_per_sm, g.stages), (1, 2));
        assert!(geometry(4608, 2, 64 << 10).is_none());
    }
}
