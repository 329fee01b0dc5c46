//! The FP8 linear on FP8 warpgroup MMAs (`linear_wg`, sm_90) against the CPU linear with the
//! reference's FP8 activations (`quant/act.rs`): every FP8 format, split and unsplit K, row
//! counts that are not whole 64-row tiles, more row tiles than blocks, a grouped linear; and
//! the other kernels on the activations `act_quant_rows` quantizes (65+ tokens, K not a
//! multiple of 128).

use super::super::{bf16_round, gpu, rel_l2, to_bf16_bits};
use super::{columns, from_bf16, linear_of, poisoned, randn};
use crate::device::cuda::launch as k;
use crate::ops::linear::Linear;
use crate::quant::act;
use crate::rng::Rng;
use crate::tensor::Mat;

/// linear_wg and the CPU sum the same products (e4m3 × e4m3, exact) in different orders (H100:
/// 1.25e-4 to 1.28e-4 at every shape and token count).
const TOL: f64 = 2e-4;
/// The other kernels on `act_quant_rows`' activations: exact products too, except that they
/// round FP8B_F32 block scales to bf16 (H100: fp8b_e8m0 1.0e-7, fp8b_f32 2.2e-3).
const TOL_BF16_SCALES: f64 = 5e-3;

/// Runs `f` with the FP8 activations on, then restores the environment's mode.
fn with_fp8_act<T>(f: impl FnOnce() -> T) -> T {
    let _hold = act::MODE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    act::force_fp8_act(Some(true));
    let r = f();
    act::force_fp8_act(None);
    r
}

#[test]
fn fp8_linears_on_warpgroup_mmas_match_the_cpu_with_fp8_activations() {
    let Some(g) = gpu() else { return };
    if g.info.compute_capability != (9, 0) {
        println!(
            "linear_wg is sm_90 code; this GPU is {:?}",
            g.info.compute_capability
        );
        return;
    }
    let mut rng = Rng::new(11);
    // (rows, cols): wo_b-like (K split 4), wkv (K split to a k-block each), a row count that is
    // not whole tiles, V4-Flash wq_b (512 tiles: blocks loop over two).
    for (n, kk, fmts) in [
        (4096usize, 8192usize, &["fp8b_e8m0", "fp8b_f32", "fp8t"][..]),
        (512, 4096, &["fp8b_e8m0"][..]),
        (200, 256, &["fp8b_e8m0", "fp8t"][..]),
        (32768, 1024, &["fp8b_e8m0"][..]),
        (256, 200, &["fp8b_e8m0"][..]),
    ] {
        let w = randn(&mut rng, n * kk, 0.02);
        for fmt in fmts {
            let lin = linear_of(fmt, &w, n, kk);
            let gl = crate::device::cuda::weights::GLinear::upload(&g, fmt, &[&lin]).unwrap();
            for m in [1usize, 5, 16, 32, 40, 64, 100] {
                let wg = with_fp8_act(|| k::linear_wg::wg_applies(&g, &gl, m, kk, 0));
                assert_eq!(wg, m <= 64 && kk % 128 == 0, "{fmt} {n}x{kk} m={m}");
                // (tokens, splits, columns per split, blocks per split)
                let geo = k::linear_wg::wg_geometry(&gl, m, g.info.sms);
                let x = bf16_round(&randn(&mut rng, m * kk, 1.0));
                let xm = Mat::from_vec(m, kk, x.clone());
                let want = with_fp8_act(|| lin.forward(&xm));
                let bf16_x = lin.forward(&xm);
                let xb = g.upload(&to_bf16_bits(&x)).unwrap();
                let y = poisoned(&g, m * n * 4);
                with_fp8_act(|| k::linear(&g, &gl, xb.ptr(), kk, y.ptr(), n, m, false)).unwrap();
                let got: Vec<f32> = g.read(&y, 0, m * n).unwrap();
                let e = rel_l2(&got, &want.data);
                // Against the CPU with bf16 activations the error is e4m3's (~2-3%): the
                // kernel quantized its activations as the CPU did, not merely ran.
                let e_bf16 = rel_l2(&got, &bf16_x.data);
                let path = if wg {
                    format!("linear_wg {geo:?}")
                } else {
                    "act_quant_rows".into()
                };
                println!(
                    "{fmt} {n}x{kk} m={m} on {path}: rel l2 {e:.2e} (against bf16 activations \
                     {e_bf16:.2e})"
                );
                let tol = if wg { TOL } else { TOL_BF16_SCALES };
                assert!(e <= tol, "{fmt} {n}x{kk} m={m} on {path}: {e:.3e}");
                assert!(e_bf16 > 5.0 * e, "{fmt} {n}x{kk} m={m}: {e_bf16:.2e}");
            }
        }
    }
}

/// The grouped output projection (wo_a: 8 groups of 1024 × 4096), bf16 out, in K splits.
#[test]
fn grouped_fp8_linear_on_warpgroup_mmas_matches_the_cpu_per_group() {
    let Some(g) = gpu() else { return };
    if g.info.compute_capability != (9, 0) {
        return;
    }
    let mut rng = Rng::new(12);
    let (groups, n, kk) = (8usize, 1024usize, 4096usize);
    let lins: Vec<Linear> = (0..groups)
        .map(|_| linear_of("fp8b_e8m0", &randn(&mut rng, n * kk, 0.02), n, kk))
        .collect();
    let refs: Vec<&Linear> = lins.iter().collect();
    let gl = crate::device::cuda::weights::GLinear::upload(&g, "wo_a", &refs).unwrap();
    for m in [1usize, 16, 32, 64] {
        let (ldx, ldy) = (groups * kk, groups * n);
        let x = bf16_round(&randn(&mut rng, m * ldx, 1.0));
        let xb = g.upload(&to_bf16_bits(&x)).unwrap();
        let y = poisoned(&g, m * ldy * 2);
        with_fp8_act(|| k::linear(&g, &gl, xb.ptr(), ldx, y.ptr(), ldy, m, true)).unwrap();
        let raw: Vec<u16> = g.read(&y, 0, m * ldy).unwrap();
        for (e, lin) in lins.iter().enumerate() {
            let xe = columns(&x, ldx, m, e * kk, kk);
            let want = with_fp8_act(|| lin.forward(&Mat::from_vec(m, kk, xe)));
            let got = columns(&from_bf16(&raw), ldy, m, e * n, n);
            let err = rel_l2(&got, &want.data);
            println!("grouped linear_wg m={m} group {e}: rel l2 {err:.2e}");
            // bf16 output: its rounding (2^-9) dominates.
            assert!(err <= 5e-3, "grouped linear_wg m={m} group {e}: {err:.3e}");
        }
    }
}
