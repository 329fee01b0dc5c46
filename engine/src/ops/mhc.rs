//! Manifold-constrained hyper-connections (mHC, model-spec §3.3; transformers
//! `DeepseekV4HyperConnection` / `DeepseekV4HyperHead`). The residual is `hc` parallel streams per
//! token. Before a sub-layer, a mixing vector computed from the RMS-normalized streams gives
//! `pre` (stream weights for the sub-layer input), `post` (where the output goes) and `comb`
//! (an hc×hc stream mixer projected towards doubly stochastic by Sinkhorn iterations). After it:
//! `X'_k = post_k · y + Σ_j comb[j][k] · X_j`. All in f32.

use rayon::prelude::*;

use super::norm::rms_norm_unweighted;
use crate::tensor::{Mat, dot};

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Parameters of one hyper-connection site (attention or FFN of a layer).
#[derive(Debug, Clone)]
pub struct HyperConnection {
    /// `[(2+hc)·hc, hc·D]`.
    pub fn_w: Vec<f32>,
    /// `[(2+hc)·hc]`.
    pub base: Vec<f32>,
    /// `[3]`: scales of pre, post, comb.
    pub scale: Vec<f32>,
    pub hc: usize,
    pub sinkhorn_iters: usize,
    pub hc_eps: f32,
    pub norm_eps: f32,
}

/// Per-token mixing weights of one site.
#[derive(Debug, Clone)]
pub struct HcMix {
    /// `[T, hc]`.
    pub post: Vec<f32>,
    /// `[T, hc, hc]`, indexed `[from j][to k]`.
    pub comb: Vec<f32>,
}

impl HyperConnection {
    /// Computes the mixing weights for every token of `x` (`[T, hc·D]`) and the collapsed
    /// sub-layer input `Σ_i pre_i X_i` (`[T, D]`).
    pub fn pre(&self, x: &Mat) -> (HcMix, Mat) {
        let hc = self.hc;
        let width = x.cols;
        let d = width / hc;
        let mix_n = (2 + hc) * hc;
        let t = x.rows;
        let mut post = vec![0.0; t * hc];
        let mut comb = vec![0.0; t * hc * hc];
        let mut collapsed = Mat::zeros(t, d);
        post.par_chunks_mut(hc)
            .zip(comb.par_chunks_mut(hc * hc))
            .zip(collapsed.data.par_chunks_mut(d))
            .enumerate()
            .for_each(|(ti, ((post, comb), out))| {
                let row = x.row(ti);
                let mut flat = row.to_vec();
                rms_norm_unweighted(&mut flat, self.norm_eps);
                let mix: Vec<f32> = (0..mix_n)
                    .map(|m| dot(&flat, &self.fn_w[m * width..(m + 1) * width]))
                    .collect();
                let pre: Vec<f32> = (0..hc)
                    .map(|i| sigmoid(mix[i] * self.scale[0] + self.base[i]) + self.hc_eps)
                    .collect();
                for k in 0..hc {
                    post[k] = 2.0 * sigmoid(mix[hc + k] * self.scale[1] + self.base[hc + k]);
                }
                self.sinkhorn(&mix[2 * hc..], comb);
                for (i, p) in pre.iter().enumerate() {
                    crate::tensor::axpy(out, *p, &row[i * d..(i + 1) * d]);
                }
            });
        (HcMix { post, comb }, collapsed)
    }

    /// Row-softmax of the comb logits, then alternating column/row normalization.
    fn sinkhorn(&self, logits: &[f32], comb: &mut [f32]) {
        let hc = self.hc;
        let eps = self.hc_eps;
        for i in 0..hc {
            let row: Vec<f32> = (0..hc)
                .map(|j| logits[i * hc + j] * self.scale[2] + self.base[2 * hc + i * hc + j])
                .collect();
            let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            for j in 0..hc {
                comb[i * hc + j] = e[j] / s + eps;
            }
        }
        let col_norm = |c: &mut [f32]| {
            for j in 0..hc {
                let s: f32 = (0..hc).map(|i| c[i * hc + j]).sum();
                for i in 0..hc {
                    c[i * hc + j] /= s + eps;
                }
            }
        };
        let row_norm = |c: &mut [f32]| {
            for i in 0..hc {
                let s: f32 = c[i * hc..(i + 1) * hc].iter().sum();
                for j in 0..hc {
                    c[i * hc + j] /= s + eps;
                }
            }
        };
        col_norm(comb);
        for _ in 1..self.sinkhorn_iters {
            row_norm(comb);
            col_norm(comb);
        }
    }

    /// Analytic work of one site (pre + post) over `tokens` rows: the f32 mixing weights, the
    /// streams read twice and written once, the sub-layer output read; mixing FLOPs.
    pub fn work(&self, tokens: usize) -> (u64, u64) {
        let t = tokens as u64;
        let width = (self.fn_w.len() / self.base.len().max(1)) as u64;
        let mix = self.base.len() as u64;
        let d = width / self.hc as u64;
        let bytes = 4 * (self.fn_w.len() as u64 + t * (3 * width + d));
        let flops = t * (2 * mix * width + 2 * width * self.hc as u64 + 2 * width);
        (bytes, flops)
    }

    /// `X'_k = post_k · y + Σ_j comb[j][k] · X_j`, in place on the streams `x` (`[T, hc·D]`).
    pub fn post(&self, mix: &HcMix, x: &mut Mat, y: &Mat) {
        let hc = self.hc;
        let d = y.cols;
        x.data
            .par_chunks_mut(hc * d)
            .enumerate()
            .for_each(|(ti, streams)| {
                let old = streams.to_vec();
                let comb = &mix.comb[ti * hc * hc..(ti + 1) * hc * hc];
                let yr = y.row(ti);
                for k in 0..hc {
                    let out = &mut streams[k * d..(k + 1) * d];
                    let p = mix.post[ti * hc + k];
                    for (o, v) in out.iter_mut().zip(yr) {
                        *o = p * v;
                    }
                    for j in 0..hc {
                        crate::tensor::axpy(out, comb[j * hc + k], &old[j * d..(j + 1) * d]);
                    }
                }
            });
    }
}

/// The final stream collapse before the output norm.
#[derive(Debug, Clone)]
pub struct HyperHead {
    /// `[hc, hc·D]`.
    pub fn_w: Vec<f32>,
    pub base: Vec<f32>,
    pub scale: f32,
    pub hc: usize,
    pub hc_eps: f32,
    pub norm_eps: f32,
}

impl HyperHead {
    /// `[T, hc·D] → [T, D]`.
    pub fn collapse(&self, x: &Mat) -> Mat {
        let hc = self.hc;
        let width = x.cols;
        let d = width / hc;
        let mut out = Mat::zeros(x.rows, d);
        out.data.par_chunks_mut(d).enumerate().for_each(|(ti, o)| {
            let row = x.row(ti);
            let mut flat = row.to_vec();
            rms_norm_unweighted(&mut flat, self.norm_eps);
            for i in 0..hc {
                let m = dot(&flat, &self.fn_w[i * width..(i + 1) * width]);
                let pre = sigmoid(m * self.scale + self.base[i]) + self.hc_eps;
                crate::tensor::axpy(o, pre, &row[i * d..(i + 1) * d]);
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(hc: usize, d: usize, iters: usize) -> HyperConnection {
        let mix = (2 + hc) * hc;
        HyperConnection {
            fn_w: (0..mix * hc * d)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.05)
                .collect(),
            base: (0..mix).map(|i| (i as f32 * 0.3).sin()).collect(),
            scale: vec![0.7, 1.3, 2.0],
            hc,
            sinkhorn_iters: iters,
            hc_eps: 1e-6,
            norm_eps: 1e-6,
        }
    }

    #[test]
    fn sinkhorn_makes_comb_nearly_doubly_stochastic() {
        let (hc, d) = (4, 8);
        let s = site(hc, d, 20);
        let x = Mat::from_vec(
            2,
            hc * d,
            (0..2 * hc * d).map(|i| (i as f32 * 0.77).cos()).collect(),
        );
        let (mix, collapsed) = s.pre(&x);
        assert_eq!(collapsed.rows, 2);
        for t in 0..2 {
            let c = &mix.comb[t * 16..(t + 1) * 16];
            for i in 0..hc {
                let row: f32 = c[i * hc..(i + 1) * hc].iter().sum();
                let col: f32 = (0..hc).map(|j| c[j * hc + i]).sum();
                assert!((row - 1.0).abs() < 1e-3, "row {row}");
                assert!((col - 1.0).abs() < 1e-5, "col {col}");
            }
            assert!(
                mix.post[t * hc..(t + 1) * hc]
                    .iter()
                    .all(|p| (0.0..=2.0).contains(p))
            );
        }
    }

    #[test]
    fn post_with_identity_comb_and_zero_post_keeps_streams() {
        let (hc, d) = (2, 3);
        let s = site(hc, d, 1);
        let mut x = Mat::from_vec(1, hc * d, vec![1., 2., 3., 4., 5., 6.]);
        let mix = HcMix {
            post: vec![0.0, 1.0],
            comb: vec![1.0, 0.0, 0.0, 1.0],
        };
        let y = Mat::from_vec(1, d, vec![10., 20., 30.]);
        s.post(&mix, &mut x, &y);
        assert_eq!(x.data, vec![1., 2., 3., 14., 25., 36.]);
        // comb[j][k] moves stream j into stream k.
        let mut x = Mat::from_vec(1, hc * d, vec![1., 2., 3., 4., 5., 6.]);
        let swap = HcMix {
            post: vec![0.0, 0.0],
            comb: vec![0.0, 1.0, 1.0, 0.0],
        };
        s.post(&swap, &mut x, &y);
        assert_eq!(x.data, vec![4., 5., 6., 1., 2., 3.]);
    }
}
