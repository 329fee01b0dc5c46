//! Kernel families at DeepSeek-V4-Flash widths against their CPU references, on fresh random
//! inputs (outputs poisoned with NaN before each run): linears in every weight format and token
//! count, the router, the MoE pipeline (NVFP4, MXFP4, BF16 experts), mHC, the compressor, the
//! indexer with top-k, split-K sparse attention with sinks, and sampling.

use super::{bf16_round, gpu, rel_l2, to_bf16_bits};
use crate::device::cuda::gpu::{DevBuf, Gpu};
use crate::device::cuda::launch as k;
use crate::ops::linear::Linear;
use crate::quant::{Fp8Block, Fp8Tensor, Mxfp4, Nvfp4, QuantWeight};
use crate::rng::Rng;
use crate::tensor::Mat;

const TOL: f64 = 1e-2;

fn randn(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.normal() * scale).collect()
}

fn poisoned(g: &Gpu, bytes: usize) -> DevBuf {
    let b = g.alloc(bytes).unwrap();
    g.memset(&b, 0xff).unwrap();
    b
}

fn linear_of(fmt: &str, w: &[f32], n: usize, kk: usize) -> Linear {
    let q = |x: QuantWeight| Linear::from_quant(x);
    match fmt {
        "bf16" => Linear {
            out_features: n,
            in_features: kk,
            data: crate::ops::linear::WeightData::Bf16(to_bf16_bits(w)),
            observer: None,
        },
        "f32" => Linear::from_f32(n, kk, w.to_vec()),
        "f16" => Linear {
            out_features: n,
            in_features: kk,
            data: crate::ops::linear::WeightData::F16(
                w.iter()
                    .map(|&x| half::f16::from_f32(x).to_bits())
                    .collect(),
            ),
            observer: None,
        },
        "fp8b_e8m0" => q(QuantWeight::Fp8Block(
            Fp8Block::quantize("t", w, n, kk, true).unwrap(),
        )),
        "fp8b_f32" => q(QuantWeight::Fp8Block(
            Fp8Block::quantize("t", w, n, kk, false).unwrap(),
        )),
        "fp8t" => q(QuantWeight::Fp8Tensor(
            Fp8Tensor::quantize("t", w, n, kk, None).unwrap(),
        )),
        "nvfp4" => q(QuantWeight::Nvfp4(
            Nvfp4::quantize("t", w, n, kk, None).unwrap(),
        )),
        "mxfp4" => q(QuantWeight::Mxfp4(Mxfp4::quantize("t", w, n, kk).unwrap())),
        other => panic!("unknown format {other}"),
    }
}

#[test]
fn linears_in_every_format_match_the_cpu() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(1);
    // (rows, cols): a routed expert's up projection (K split in 2 at decode on 132 SMs),
    // V4-Flash wq_b, wkv (K split in 8, fp8) and an odd tail shape.
    for (n, kk) in [
        (2048usize, 4096usize),
        (4096, 1024),
        (512, 4096),
        (200, 136),
    ] {
        let w = randn(&mut rng, n * kk, 0.02);
        // The tiled FP4 formats are what upload makes of nvfp4 / mxfp4 at tileable shapes.
        for fmt in amdahl_kernels::LINEAR_FORMATS
            .iter()
            .filter(|f| !f.ends_with("fp4t"))
        {
            // FP4 blocks need in_features % 32: the odd shape becomes 200×160 for them.
            let (kk, w) = if fmt.ends_with("fp4") && kk % 32 != 0 {
                (160, randn(&mut rng, n * 160, 0.02))
            } else {
                (kk, w.clone())
            };
            let lin = linear_of(fmt, &w, n, kk);
            let gl = crate::device::cuda::weights::GLinear::upload(&g, fmt, &[&lin]).unwrap();
            let fmt = gl.fmt.name();
            if crate::quant::fp4_tiles::tileable(n, kk)
                && crate::device::cuda::weights::Fmt::Nvfp4.tiled().is_some()
            {
                assert!(
                    !lin_is_fp4(&lin) || fmt.ends_with("fp4t"),
                    "{fmt} {n}x{kk} not tiled"
                );
            }
            // Decode sizes through the streamed kernels (where they apply) and without; FP8
            // also through the streamed kernels that decode it to bf16 (one and two groups).
            let raw8 = amdahl_kernels::STREAM_RAW_FORMATS.contains(&fmt);
            let bf16 = Some(k::stream::Fp8Stream::Bf16);
            // (The persistent kernel, where it applies — FP8, K ≤ 1024 —, at 9 tokens.)
            let mut cases = vec![
                (1usize, true, None),
                (1, false, None),
                (5, true, None),
                (16, true, None),
                (16, false, None),
                (9, false, None),
                (33, true, None),
                (64, true, None),
                (100, true, None),
            ];
            if raw8 {
                cases.extend([(1, true, bf16), (5, true, bf16), (16, true, bf16)]);
            }
            for (i, (m, stream, fp8)) in cases.into_iter().enumerate() {
                let persist = i == 5;
                k::stream::force_stream(Some(stream));
                k::stream::force_fp8_stream(fp8);
                k::force_linear_persist(Some(persist));
                let x = bf16_round(&randn(&mut rng, m * kk, 1.0));
                let want = lin.forward(&Mat::from_vec(m, kk, x.clone()));
                let xb = g.upload(&to_bf16_bits(&x)).unwrap();
                let y = poisoned(&g, m * n * 4);
                k::linear(&g, &gl, xb.ptr(), kk, y.ptr(), n, m, false).unwrap();
                k::stream::force_stream(None);
                k::stream::force_fp8_stream(None);
                k::force_linear_persist(None);
                let got: Vec<f32> = g.read(&y, 0, m * n).unwrap();
                let e = rel_l2(&got, &want.data);
                let how = format!("stream={stream} fp8={fp8:?} persist={persist}");
                println!("linear {fmt} {n}x{kk} m={m} {how}: rel l2 {e:.2e}");
                assert!(e <= TOL, "linear {fmt} {n}x{kk} m={m} {how}: {e:.3e}");
            }
        }
    }
}

fn lin_is_fp4(l: &Linear) -> bool {
    matches!(
        l.data,
        crate::ops::linear::WeightData::Quant(QuantWeight::Nvfp4(_) | QuantWeight::Mxfp4(_))
    )
}

/// Columns [at, at + width) of the first `rows` rows of a row-major matrix with row stride `ld`.
fn columns(x: &[f32], ld: usize, rows: usize, at: usize, width: usize) -> Vec<f32> {
    (0..rows)
        .flat_map(|r| x[r * ld + at..r * ld + at + width].to_vec())
        .collect()
}

fn from_bf16(bits: &[u16]) -> Vec<f32> {
    bits.iter()
        .map(|&b| half::bf16::from_bits(b).to_f32())
        .collect()
}

/// The grouped output projection in one launch, as V4-Flash runs it: 8 stacked FP8 matrices of
/// 1024 × 4096, matrix e reading x columns [4096·e, …) and writing y columns [1024·e, …), bf16
/// out, at 1, 16 and 64 tokens.
#[test]
fn grouped_linear_matches_the_cpu_per_group() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(4);
    let (groups, n, kk) = (8usize, 1024usize, 4096usize);
    let lins: Vec<Linear> = (0..groups)
        .map(|_| linear_of("fp8b_e8m0", &randn(&mut rng, n * kk, 0.02), n, kk))
        .collect();
    let refs: Vec<&Linear> = lins.iter().collect();
    assert!(crate::device::cuda::weights::GLinear::stackable(&refs));
    let gl = crate::device::cuda::weights::GLinear::upload(&g, "wo_a", &refs).unwrap();
    for m in [1usize, 16, 64] {
        let (ldx, ldy) = (groups * kk, groups * n);
        let x = bf16_round(&randn(&mut rng, m * ldx, 1.0));
        let xb = g.upload(&to_bf16_bits(&x)).unwrap();
        let y = poisoned(&g, m * ldy * 2);
        k::linear(&g, &gl, xb.ptr(), ldx, y.ptr(), ldy, m, true).unwrap();
        let raw: Vec<u16> = g.read(&y, 0, m * ldy).unwrap();
        for (e, lin) in lins.iter().enumerate() {
            let xe = columns(&x, ldx, m, e * kk, kk);
            let want = lin.forward(&Mat::from_vec(m, kk, xe));
            let got = columns(&from_bf16(&raw), ldy, m, e * n, n);
            let err = rel_l2(&got, &want.data);
            println!("grouped linear m={m} group {e}: rel l2 {err:.2e}");
            assert!(err <= TOL, "grouped linear m={m} group {e}: {err:.3e}");
        }
    }
}

/// The grouped output projection's use: column offsets into x and y, bf16 output.
#[test]
fn linear_with_strides_and_bf16_output() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(2);
    let (n, kk, m, ldx, ldy, xo, yo) = (
        1024usize, 4096usize, 16usize, 32768usize, 8192usize, 4096usize, 2048usize,
    );
    let w = randn(&mut rng, n * kk, 0.02);
    let lin = linear_of("fp8b_e8m0", &w, n, kk);
    let gl = crate::device::cuda::weights::GLinear::upload(&g, "wo_a", &[&lin]).unwrap();
    let xfull = bf16_round(&randn(&mut rng, m * ldx, 1.0));
    let x = columns(&xfull, ldx, m, xo, kk);
    let want = lin.forward(&Mat::from_vec(m, kk, x));
    let xb = g.upload(&to_bf16_bits(&xfull)).unwrap();
    let y = poisoned(&g, m * ldy * 2);
    k::linear(&g, &gl, xb.at(xo * 2), ldx, y.at(yo * 2), ldy, m, true).unwrap();
    let raw: Vec<u16> = g.read(&y, 0, m * ldy).unwrap();
    let got = columns(&from_bf16(&raw), ldy, m, yo, n);
    let e = rel_l2(&got, &want.data);
    println!("strided bf16-out linear: rel l2 {e:.2e}");
    assert!(e <= TOL);
}

/// The tiled GEMM (forced on, so also at token counts the default rule leaves to the decode
/// kernels) in each of its formats: tails in rows and tokens, 64- and 128-token blocks, K split
/// (wo_b-like 4096 × 8192 at 64 tokens, wkv-like 512 × 4096), f32 and bf16 outputs at column
/// offsets, bitwise repeatable; and its default rule, and its results against the decode kernels.
#[test]
fn tiled_gemm_matches_the_cpu() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(5);
    for (n, kk, ms) in [
        (200usize, 192usize, &[1usize, 33, 64, 100, 300][..]),
        (512, 4096, &[64, 256][..]),
        (4096, 8192, &[64][..]),
    ] {
        let w = randn(&mut rng, n * kk, 0.02);
        for fmt in amdahl_kernels::GEMM_FORMATS {
            let lin = linear_of(fmt, &w, n, kk);
            let gl = crate::device::cuda::weights::GLinear::upload(&g, fmt, &[&lin]).unwrap();
            assert_eq!(gl.fmt.name(), fmt);
            // The f32 block scales become bf16 operands (as in the decode kernels): ~2^-9.
            let tol = if fmt == "fp8b_f32" { 5e-3 } else { 1e-5 };
            for &m in ms {
                let x = bf16_round(&randn(&mut rng, m * kk, 1.0));
                let want = lin.forward(&Mat::from_vec(m, kk, x.clone()));
                let xb = g.upload(&to_bf16_bits(&x)).unwrap();
                k::gemm::force_gemm(Some(true));
                let run = |out_bf16: bool, yo: usize, ldy: usize| {
                    let y = poisoned(&g, m * ldy * 4);
                    let at = yo * if out_bf16 { 2 } else { 4 };
                    k::linear(&g, &gl, xb.ptr(), kk, y.at(at), ldy, m, out_bf16).unwrap();
                    if out_bf16 {
                        let raw: Vec<u16> = g.read(&y, 0, m * ldy).unwrap();
                        columns(&from_bf16(&raw), ldy, m, yo, n)
                    } else {
                        let raw: Vec<f32> = g.read(&y, 0, m * ldy).unwrap();
                        columns(&raw, ldy, m, yo, n)
                    }
                };
                let got = run(false, 0, n);
                let again = run(false, 0, n);
                let strided = run(true, 24, n + 40);
                k::gemm::force_gemm(None);
                let e = rel_l2(&got, &want.data);
                let eb = rel_l2(&strided, &want.data);
                println!(
                    "gemm {fmt} {n}x{kk} m={m}: rel l2 {e:.2e}, bf16 out at an offset {eb:.2e}"
                );
                assert!(e <= tol, "gemm {fmt} {n}x{kk} m={m}: {e:.3e}");
                assert!(eb <= 5e-3, "gemm {fmt} {n}x{kk} m={m} bf16 out: {eb:.3e}");
                assert!(
                    got.iter()
                        .zip(&again)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "gemm {fmt} {n}x{kk} m={m}: not deterministic"
                );
                if m >= k::gemm::GEMM_MIN_TOKENS {
                    // From 33 tokens the default rule takes the GEMM; the decode kernels agree.
                    assert!(k::gemm::gemm_applies(&gl, m, kk, xb.ptr()));
                    k::gemm::force_gemm(Some(false));
                    let y = poisoned(&g, m * n * 4);
                    k::linear(&g, &gl, xb.ptr(), kk, y.ptr(), n, m, false).unwrap();
                    k::gemm::force_gemm(None);
                    let old: Vec<f32> = g.read(&y, 0, m * n).unwrap();
                    let d = rel_l2(&got, &old);
                    assert!(
                        d <= tol,
                        "gemm vs decode kernels {fmt} {n}x{kk} m={m}: {d:.3e}"
                    );
                }
            }
        }
    }
}

/// The shared expert at many tokens: W1 and W3 in one paired GEMM launch, the clamped SwiGLU,
/// then W2, against the CPU (the act rounded to bf16 as the GPU stores it).
#[test]
fn paired_gemm_swiglu_matches_the_cpu() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(6);
    let (inter, d, limit) = (512usize, 1024usize, 7.0f32);
    for fmt in ["fp8b_e8m0", "bf16"] {
        let mk =
            |rng: &mut Rng, n: usize, kk: usize| linear_of(fmt, &randn(rng, n * kk, 0.05), n, kk);
        let (l1, l3, l2) = (
            mk(&mut rng, inter, d),
            mk(&mut rng, inter, d),
            mk(&mut rng, d, inter),
        );
        let up = |l: &Linear| crate::device::cuda::weights::GLinear::upload(&g, fmt, &[l]).unwrap();
        let (w1, w3, w2) = (up(&l1), up(&l3), up(&l2));
        for m in [33usize, 64, 300] {
            let x = bf16_round(&randn(&mut rng, m * d, 1.0));
            let xm = Mat::from_vec(m, d, x.clone());
            let (a, b) = (l1.forward(&xm), l3.forward(&xm));
            let act: Vec<f32> = a
                .data
                .iter()
                .zip(&b.data)
                .map(|(&gate, &upv)| {
                    let gg = gate.min(limit);
                    gg / (1.0 + (-gg).exp()) * upv.clamp(-limit, limit)
                })
                .collect();
            let act = bf16_round(&act);
            let want = l2.forward(&Mat::from_vec(m, inter, act.clone()));
            let xb = g.upload(&to_bf16_bits(&x)).unwrap();
            assert!(k::gemm::pair_applies(&w1, &w3, m, d, xb.ptr()));
            let h = poisoned(&g, m * 2 * inter * 4);
            let actb = poisoned(&g, m * inter * 2);
            let y = poisoned(&g, m * d * 4);
            k::gemm::gemm_pair(&g, &w1, &w3, xb.ptr(), d, h.ptr(), m).unwrap();
            k::gemm::swiglu_rows(&g, h.ptr(), actb.ptr(), m, inter, limit).unwrap();
            k::linear(&g, &w2, actb.ptr(), inter, y.ptr(), d, m, false).unwrap();
            let hs: Vec<f32> = g.read(&h, 0, m * 2 * inter).unwrap();
            let gate = columns(&hs, 2 * inter, m, 0, inter);
            let upv = columns(&hs, 2 * inter, m, inter, inter);
            let eg = rel_l2(&gate, &a.data);
            let eu = rel_l2(&upv, &b.data);
            let raw: Vec<u16> = g.read(&actb, 0, m * inter).unwrap();
            let ea = rel_l2(&from_bf16(&raw), &act);
            let got: Vec<f32> = g.read(&y, 0, m * d).unwrap();
            let ey = rel_l2(&got, &want.data);
            println!("paired gemm {fmt} m={m}: W1 {eg:.2e} W3 {eu:.2e} act {ea:.2e} out {ey:.2e}");
            assert!(
                eg <= 1e-5 && eu <= 1e-5,
                "{fmt} m={m}: up {eg:.3e} / {eu:.3e}"
            );
            assert!(
                ea <= 1e-2 && ey <= 1e-2,
                "{fmt} m={m}: act {ea:.3e}, out {ey:.3e}"
            );
        }
    }
}

#[test]
fn router_linear_takes_f32_inputs() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(3);
    // Decode sizes (split K over 16 chunks at 1 and 16 tokens, 8 at 64), a prefill-sized m
    // (partial token tile), and a shape of partial row tiles and K chunks.
    for (n, kk, m) in [
        (256usize, 4096usize, 1usize),
        (256, 4096, 16),
        (256, 4096, 64),
        (256, 4096, 300),
        (72, 1000, 37),
    ] {
        let w = randn(&mut rng, n * kk, 0.02);
        let x = randn(&mut rng, m * kk, 1.0);
        for fmt in ["bf16", "f32"] {
            let lin = linear_of(fmt, &w, n, kk);
            let gl = crate::device::cuda::weights::GLinear::upload(&g, "gate", &[&lin]).unwrap();
            let want = lin.forward(&Mat::from_vec(m, kk, x.clone()));
            let xb = g.upload(&x).unwrap();
            let y = poisoned(&g, m * n * 4);
            k::linear_f32x(&g, &gl, xb.ptr(), kk, y.ptr(), m).unwrap();
            let got: Vec<f32> = g.read(&y, 0, m * n).unwrap();
            let e = rel_l2(&got, &want.data);
            println!("router {fmt} {n}x{kk} m={m}: rel l2 {e:.2e}");
            assert!(e <= 1e-5, "router {fmt} {n}x{kk} m={m}: {e:.3e}");
            // The split counters were reset: a second launch gives the same bits.
            let y2 = poisoned(&g, m * n * 4);
            k::linear_f32x(&g, &gl, xb.ptr(), kk, y2.ptr(), m).unwrap();
            let again: Vec<f32> = g.read(&y2, 0, m * n).unwrap();
            assert!(
                got.iter()
                    .zip(&again)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "router {fmt} {n}x{kk} m={m}: not deterministic"
            );
        }
    }
}

mod attention;
mod linear_wg;
mod moe;
mod rest;
