//! Measured device peaks for the roofline: on the CPU, a large memcpy (bytes read + written, the
//! same convention as the GPU copy bandwidth) and a blocked f32 matmul through the engine's own
//! linear layer. Measured once at startup; a few hundred milliseconds.

use std::time::Instant;

use super::report::Peaks;
use crate::ops::linear::Linear;
use crate::tensor::Mat;

/// Copy bandwidth of `bytes`-sized buffers, best of `reps`, counting read + write.
pub fn cpu_copy_bandwidth(bytes: usize, reps: usize) -> f64 {
    let n = bytes / 4;
    let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut dst = vec![0.0f32; n];
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t0.elapsed().as_secs_f64());
        std::hint::black_box(&mut dst);
    }
    2.0 * (n * 4) as f64 / best
}

/// f32 FLOP/s of the CPU linear layer on a square-ish problem, best of `reps`.
pub fn cpu_linear_flops(dim: usize, tokens: usize, reps: usize) -> f64 {
    let w = Linear::from_f32(
        dim,
        dim,
        (0..dim * dim).map(|i| (i % 7) as f32 * 0.1).collect(),
    );
    let x = Mat::from_vec(
        tokens,
        dim,
        (0..tokens * dim).map(|i| (i % 5) as f32).collect(),
    );
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        std::hint::black_box(w.forward(&x));
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * (dim * dim * tokens) as f64 / best
}

/// Both CPU peaks with default sizes (64 MiB copy, 1024² × 64 matmul).
pub fn measure_cpu_peaks() -> Peaks {
    Peaks {
        bandwidth: cpu_copy_bandwidth(64 << 20, 5),
        flops: cpu_linear_flops(1024, 64, 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_positive_and_plausible() {
        let bw = cpu_copy_bandwidth(1 << 20, 3);
        let fl = cpu_linear_flops(64, 8, 2);
        // Any machine copies faster than 100 MB/s and multiplies faster than 10 MFLOP/s.
        assert!(bw > 1e8 && bw.is_finite(), "{bw}");
        assert!(fl > 1e7 && fl.is_finite(), "{fl}");
    }
}
