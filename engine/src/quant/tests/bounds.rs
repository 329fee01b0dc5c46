//! Each format's quantization error on random weights stays within the bound derived from its
//! definition (docs/quantization.md "Error bounds"), pack → unpack round trips are lossless, and
//! row splits dequantize to the rows of the whole.
//!
//! E2M1 round-to-nearest on v = x/s has half-spacing h(|v|) = 0.25 (|v| < 2), 0.5 (< 4), 1 (≤ 6),
//! and saturates above 6; E4M3 round-to-nearest has relative half-ulp 2⁻⁴ for normals and absolute
//! 2⁻¹⁰ below 2⁻⁶.

use crate::quant::fp8::FP8_BLOCK;
use crate::quant::{Fp8Block, Fp8Tensor, Mxfp4, Nvfp4, QuantWeight, e2m1, e4m3, e8m0};
use crate::rng::Rng;

/// Gaussian weights whose rows span four decades (so some blocks have tiny scales) plus a few
/// outliers (so block maxima differ from the bulk).
fn weights(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut w = Vec::with_capacity(rows * cols);
    for _ in 0..rows {
        let row_scale = 10f32.powf(rng.next_f32() * 4.0 - 3.0);
        for _ in 0..cols {
            let outlier = if rng.below(97) == 0 { 8.0 } else { 1.0 };
            w.push(rng.normal() * row_scale * outlier);
        }
    }
    w
}

fn half_gap(v: f32) -> f32 {
    if v < 2.0 {
        0.25
    } else if v < 4.0 {
        0.5
    } else {
        1.0
    }
}

/// Worst error of E2M1 round-to-nearest with saturation at scale `s`.
fn fp4_bound(x: f32, s: f32) -> f32 {
    let v = x.abs() / s;
    s * half_gap(v.min(6.0)).max(v - 6.0)
}

fn amax(xs: &[f32]) -> f32 {
    xs.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

#[test]
fn mxfp4_error_is_within_its_bound() {
    let (rows, cols) = (48, 256);
    let w = weights(rows, cols, 1);
    let q = Mxfp4::quantize("m", &w, rows, cols).unwrap();
    let d = QuantWeight::Mxfp4(q).dequantize();
    for (b, (xs, ys)) in w.chunks(32).zip(d.chunks(32)).enumerate() {
        let am = amax(xs);
        // The spec's scale, recomputed here: the smallest power of two >= amax/6.
        let s = 2f32.powi((am as f64 / 6.0).log2().ceil() as i32);
        for (x, y) in xs.iter().zip(ys) {
            let err = (x - y).abs();
            assert!(err <= fp4_bound(*x, s), "block {b}: {x} -> {y}");
            // Scale rounded up: no clipping, and the worst case is one scale step.
            assert!(err <= am / 3.0, "block {b}: {x} -> {y}, amax {am}");
        }
    }
}

#[test]
fn nvfp4_error_is_within_its_bound() {
    let (rows, cols) = (48, 256);
    let w = weights(rows, cols, 2);
    let q = Nvfp4::quantize("m", &w, rows, cols, Some(0.01)).unwrap();
    let s2 = amax(&w) / (6.0 * 448.0);
    assert_eq!(q.global, s2);
    let scales = q.scales.clone();
    let d = QuantWeight::Nvfp4(q).dequantize();
    for (b, (xs, ys)) in w.chunks(16).zip(d.chunks(16)).enumerate() {
        let am = amax(xs);
        let s_true = am / 6.0 / s2;
        let s = e4m3::decode(scales[b]) * s2;
        for (x, y) in xs.iter().zip(ys) {
            let err = (x - y).abs();
            // Element rounding at the stored scale (f32 slack for the two multiplies).
            assert!(
                err <= fp4_bound(*x, s) * (1.0 + 1e-6),
                "block {b}: {x} -> {y}"
            );
            if s_true >= e4m3::E4M3_MIN_NORMAL {
                // A normal E4M3 scale is within 2^-4 of amax/6/s2, so |v| <= 6/(1 - 2^-4) and
                // the error is at most one (slightly enlarged) scale step.
                assert!(
                    err <= (1.0 + 1.0 / 16.0) * am / 6.0 * (1.0 + 1e-6),
                    "block {b}: {x} -> {y}, amax {am}"
                );
            }
        }
    }
}

fn fp8_bound(x: f32, s: f32) -> f32 {
    (x.abs() / 16.0).max(s / 1024.0)
}

#[test]
fn fp8_block_error_is_within_its_bound() {
    let (rows, cols) = (200, 300); // partial edge blocks in both dims
    let w = weights(rows, cols, 3);
    for e8 in [true, false] {
        let q = Fp8Block::quantize("m", &w, rows, cols, e8).unwrap();
        let d = QuantWeight::Fp8Block(q).dequantize();
        let (sr, sc) = (rows.div_ceil(FP8_BLOCK), cols.div_ceil(FP8_BLOCK));
        let mut bmax = vec![0.0f32; sr * sc];
        for r in 0..rows {
            for c in 0..cols {
                let a = &mut bmax[(r / 128) * sc + c / 128];
                *a = a.max(w[r * cols + c].abs());
            }
        }
        for r in 0..rows {
            for c in 0..cols {
                let am = bmax[(r / 128) * sc + c / 128];
                let s = if e8 {
                    2f32.powi((am as f64 / 448.0).log2().ceil() as i32)
                } else {
                    am / 448.0
                };
                let (x, y) = (w[r * cols + c], d[r * cols + c]);
                let slack = 4.0 * f32::EPSILON * x.abs();
                assert!(
                    (x - y).abs() <= fp8_bound(x, s) + slack,
                    "e8m0={e8} ({r},{c}): {x} -> {y}"
                );
            }
        }
    }
}

#[test]
fn fp8_tensor_error_is_within_its_bound() {
    let (rows, cols) = (16, 64);
    let w: Vec<f32> = weights(rows, cols, 4);
    let q = Fp8Tensor::quantize("m", &w, rows, cols, None).unwrap();
    let s = amax(&w) / 448.0;
    let d = QuantWeight::Fp8Tensor(q).dequantize();
    for (x, y) in w.iter().zip(&d) {
        assert!((x - y).abs() <= fp8_bound(*x, s) + 4.0 * f32::EPSILON * x.abs());
    }
}

#[test]
fn stored_parts_round_trip_and_dequantize_the_same() {
    let (rows, cols) = (8, 64);
    let w = weights(rows, cols, 5);
    let mx = Mxfp4::quantize("m", &w, rows, cols).unwrap();
    let again = Mxfp4::from_parts("m", rows, cols, mx.packed.clone(), mx.scales.clone()).unwrap();
    assert_eq!(mx, again);
    // Unpack → repack is the identity on the codes.
    assert_eq!(e2m1::pack(&e2m1::unpack(&mx.packed)), mx.packed);
    // Dequantize by hand from the definition: lut[nibble] · 2^(scale − 127).
    let codes = e2m1::unpack(&mx.packed);
    let d = QuantWeight::Mxfp4(mx.clone()).dequantize();
    for (i, (&c, &y)) in codes.iter().zip(&d).enumerate() {
        let s = e8m0::decode(mx.scales[i / 32]).unwrap();
        assert_eq!((e2m1::decode(c) * s).to_bits(), y.to_bits(), "element {i}");
    }
    let nv = Nvfp4::quantize("m", &w, rows, cols, Some(0.5)).unwrap();
    let again = Nvfp4::from_parts(
        "m",
        rows,
        cols,
        nv.packed.clone(),
        nv.scales.clone(),
        nv.global,
        nv.input_scale,
    )
    .unwrap();
    assert_eq!(nv, again);
}

#[test]
fn split_rows_matches_the_rows_of_the_whole() {
    // 3 × 100 rows: the second and third parts start inside a 128-row FP8 scale block.
    let (rows, cols) = (300, 160);
    let w = weights(rows, cols, 6);
    let all = [
        QuantWeight::Fp8Block(Fp8Block::quantize("m", &w, rows, cols, true).unwrap()),
        QuantWeight::Fp8Block(Fp8Block::quantize("m", &w, rows, cols, false).unwrap()),
        QuantWeight::Fp8Tensor(Fp8Tensor::quantize("m", &w, rows, cols, None).unwrap()),
        QuantWeight::Nvfp4(Nvfp4::quantize("m", &w, rows, cols, None).unwrap()),
        QuantWeight::Mxfp4(Mxfp4::quantize("m", &w, rows, cols).unwrap()),
    ];
    for q in all {
        let whole = q.dequantize();
        let parts: Vec<f32> = q
            .split_rows(3)
            .iter()
            .flat_map(|p| p.dequantize())
            .collect();
        assert_eq!(whole, parts, "{}", q.format());
        let bytes: usize = q.split_rows(3).iter().map(QuantWeight::bytes).sum();
        assert!(bytes >= q.bytes(), "{}", q.format());
    }
}

#[test]
fn bad_parts_are_refused_with_the_module_named() {
    let err = Mxfp4::from_parts(
        "layers.1.ffn.experts.0.w1",
        2,
        32,
        vec![0; 32],
        vec![127, 0xff],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("layers.1.ffn.experts.0.w1") && err.contains("0xFF"),
        "{err}"
    );
    let err = Nvfp4::from_parts("x.w", 1, 16, vec![0; 8], vec![0x7f], 1.0, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("x.w") && err.contains("weight_scale"), "{err}");
    let err = Nvfp4::from_parts("x.w", 1, 16, vec![0; 8], vec![0x38], f32::NAN, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("weight_scale_2"), "{err}");
    let err = Nvfp4::from_parts("x.w", 1, 16, vec![0; 8], vec![0x38], 1.0, Some(-1.0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("input_scale"), "{err}");
    assert!(Mxfp4::quantize("x.w", &[0.0; 16], 1, 16).is_err());
    assert!(Nvfp4::quantize("x.w", &[f32::NAN; 16], 1, 16, None).is_err());
}

/// Relative RMS error of each format on N(0, 1) weights [256, 512] (reported in
/// docs/quantization.md; run with `--nocapture` to see the numbers).
#[test]
fn relative_rms_error_per_format() {
    let (rows, cols) = (256, 512);
    let mut rng = Rng::new(42);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    let formats = [
        QuantWeight::Fp8Block(Fp8Block::quantize("m", &w, rows, cols, true).unwrap()),
        QuantWeight::Fp8Block(Fp8Block::quantize("m", &w, rows, cols, false).unwrap()),
        QuantWeight::Fp8Tensor(Fp8Tensor::quantize("m", &w, rows, cols, None).unwrap()),
        QuantWeight::Nvfp4(Nvfp4::quantize("m", &w, rows, cols, None).unwrap()),
        QuantWeight::Mxfp4(Mxfp4::quantize("m", &w, rows, cols).unwrap()),
    ];
    let energy: f64 = w.iter().map(|x| (*x as f64).powi(2)).sum();
    let mut rel = Vec::new();
    for q in &formats {
        let d = q.dequantize();
        let err: f64 = w
            .iter()
            .zip(&d)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        let r = (err / energy).sqrt();
        let bits = 8.0 * q.bytes() as f64 / (rows * cols) as f64;
        eprintln!(
            "weight rel-RMS {:<16} {r:.4}  ({bits:.3} bits/weight)",
            q.format().name()
        );
        rel.push(r);
    }
    // E4M3: relative half-ulp 2^-4, RMS about 2^-4/sqrt(3) for normals.
    for r in &rel[..3] {
        assert!(*r < 0.0625 / 3f64.sqrt() * 1.2, "{rel:?}");
    }
    // FP4 is several times worse than FP8, NVFP4's finer blocks and E4M3 scales beat MXFP4.
    assert!(
        rel[3] > 3.0 * rel[0] && rel[4] > rel[3] && rel[4] < 0.25,
        "{rel:?}"
    );
}
