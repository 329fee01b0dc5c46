//! GPU tests (feature `cuda`): every kernel family against its CPU reference on fresh random
//! inputs, and whole tiny models against the CPU forward (all three paths, greedy decoding,
//! graph replay). Without a GPU they print that they skipped, unless `AMDAHL_REQUIRE_GPU=1`,
//! which makes a missing GPU a failure (the GPU machine's runs set it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod model;
mod ops;
mod serve;

use super::gpu::Gpu;

/// The GPU, or None (skip) when there is none and none is required.
pub(super) fn gpu() -> Option<Gpu> {
    let required = std::env::var("AMDAHL_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if !super::gpu::driver_present() {
        assert!(
            !required,
            "AMDAHL_REQUIRE_GPU=1 but the CUDA driver is missing"
        );
        eprintln!("skipped: no CUDA driver on this machine");
        return None;
    }
    match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(e) => {
            assert!(
                !required,
                "AMDAHL_REQUIRE_GPU=1 but cuda:0 failed to open: {e}"
            );
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// ‖a − b‖ / ‖b‖.
pub(super) fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += f64::from(x - y).powi(2);
        den += f64::from(*y).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Rounds to bf16 and back (what the kernels see of a bf16 activation).
pub(super) fn bf16_round(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|&x| half::bf16::from_f32(x).to_f32())
        .collect()
}

pub(super) fn to_bf16_bits(v: &[f32]) -> Vec<u16> {
    v.iter()
        .map(|&x| half::bf16::from_f32(x).to_bits())
        .collect()
}

/// Every kernel module compiles with NVRTC for sm_90 (needs only libnvrtc, no GPU). CI sets
/// AMDAHL_REQUIRE_NVRTC=1 so a missing NVRTC fails instead of skipping.
#[test]
fn every_kernel_module_compiles_for_sm90() {
    let required = std::env::var("AMDAHL_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    if !super::compile::nvrtc_present() {
        assert!(
            !required,
            "AMDAHL_REQUIRE_NVRTC=1 but libnvrtc was not found"
        );
        eprintln!("skipped: libnvrtc not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The plain build and the programmatic-launch ones (`pdl_enter()` waits, weight prefetches).
    for pdl in crate::device::Pdl::ALL {
        let done = super::compile::compile_all(90, pdl, dir.path()).unwrap();
        assert_eq!(done.len(), amdahl_kernels::MODULES.len());
        assert!(
            done.iter().all(|(_, _, cached)| !*cached),
            "{pdl:?}: a stale cache hit"
        );
        // A second pass comes from the cache.
        let again = super::compile::compile_all(90, pdl, dir.path()).unwrap();
        assert!(again.iter().all(|(_, _, cached)| *cached));
    }
}
