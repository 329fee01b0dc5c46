//! Expert selection. Scores `s = f(W_g x)` with f ∈ {sqrt∘softplus, sigmoid, softmax}; hash
//! layers take the experts from `tid2eid[token]`, others the top-k of `s + bias` (bias only
//! selects). Weights are the unbiased scores of the chosen experts, normalized to sum 1 (as
//! transformers does) and multiplied by the routed scaling factor. Ties break to the lower index.

use crate::config::ScoringFunc;
use crate::error::{EngineError, Result};
use crate::ops::linear::Linear;
use crate::tensor::Mat;

/// How experts are chosen.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Top-k of score + correction bias (bias may be all zeros).
    TopK { bias: Vec<f32> },
    /// `tid2eid[token]`, `[vocab, k]`.
    Hash { tid2eid: Vec<u32>, vocab: usize },
}

#[derive(Debug, Clone)]
pub struct Router {
    /// `[E, D]`.
    pub weight: Linear,
    pub selection: Selection,
    pub scoring: ScoringFunc,
    pub top_k: usize,
    pub routed_scaling_factor: f32,
    pub norm_topk_prob: bool,
}

/// Chosen experts and weights, `[T, k]` each.
#[derive(Debug, Clone)]
pub struct Routing {
    pub experts: Vec<u32>,
    pub weights: Vec<f32>,
}

fn softplus(x: f32) -> f32 {
    // torch.nn.functional.softplus with beta 1, threshold 20.
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

impl Router {
    pub fn scores(&self, logits: &[f32]) -> Vec<f32> {
        match self.scoring {
            ScoringFunc::SqrtSoftplus => logits.iter().map(|&l| softplus(l).sqrt()).collect(),
            ScoringFunc::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect(),
            ScoringFunc::Softmax => {
                let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = logits.iter().map(|&l| (l - m).exp()).collect();
                let s: f32 = e.iter().sum();
                e.iter().map(|v| v / s).collect()
            }
        }
    }

    pub fn route(&self, x: &Mat, tokens: &[u32]) -> Result<Routing> {
        let logits = self.weight.forward(x);
        let k = self.top_k;
        let mut experts = Vec::with_capacity(x.rows * k);
        let mut weights = Vec::with_capacity(x.rows * k);
        for t in 0..x.rows {
            let s = self.scores(logits.row(t));
            let chosen: Vec<u32> = match &self.selection {
                Selection::TopK { bias } => {
                    let mut idx: Vec<usize> = (0..s.len()).collect();
                    let key = |i: usize| s[i] + bias[i];
                    idx.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
                    if crate::ops::ties::enabled() {
                        let keys: Vec<f32> = idx.iter().map(|&i| key(i)).collect();
                        crate::ops::ties::record(t, crate::ops::ties::margin(&keys, k));
                    }
                    idx[..k].iter().map(|&i| i as u32).collect()
                }
                Selection::Hash { tid2eid, vocab } => {
                    let tok = *tokens.get(t).ok_or_else(|| {
                        EngineError::InvalidInput("hash routing needs a token id per row".into())
                    })? as usize;
                    if tok >= *vocab {
                        return Err(EngineError::InvalidInput(format!(
                            "token id {tok} is outside the vocabulary ({vocab})"
                        )));
                    }
                    tid2eid[tok * k..(tok + 1) * k].to_vec()
                }
            };
            let mut w: Vec<f32> = chosen.iter().map(|&e| s[e as usize]).collect();
            if self.norm_topk_prob {
                let sum: f32 = w.iter().sum::<f32>() + 1e-20;
                w.iter_mut().for_each(|v| *v /= sum);
            }
            w.iter_mut().for_each(|v| *v *= self.routed_scaling_factor);
            experts.extend(chosen);
            weights.extend(w);
        }
        Ok(Routing { experts, weights })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(selection: Selection, scoring: ScoringFunc) -> Router {
        // 4 experts over D = 2: logits = [x0, x1, -x0, 0].
        let w = vec![1., 0., 0., 1., -1., 0., 0., 0.];
        Router {
            weight: Linear::from_f32(4, 2, w),
            selection,
            scoring,
            top_k: 2,
            routed_scaling_factor: 1.5,
            norm_topk_prob: true,
        }
    }

    #[test]
    fn topk_uses_bias_to_select_but_not_to_weigh() {
        let r = router(
            Selection::TopK {
                bias: vec![0., 0., 0., 10.],
            },
            ScoringFunc::Sigmoid,
        );
        let x = Mat::from_vec(1, 2, vec![2.0, 1.0]);
        let out = r.route(&x, &[0]).unwrap();
        assert_eq!(out.experts, vec![3, 0]);
        let s = r.scores(&[2.0, 1.0, -2.0, 0.0]);
        let expect = [s[3] / (s[3] + s[0]) * 1.5, s[0] / (s[3] + s[0]) * 1.5];
        for (a, b) in out.weights.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn hash_routing_reads_the_table_and_rejects_bad_tokens() {
        let r = router(
            Selection::Hash {
                tid2eid: vec![0, 1, 2, 3],
                vocab: 2,
            },
            ScoringFunc::SqrtSoftplus,
        );
        let x = Mat::from_vec(2, 2, vec![0.5, 0.5, -1.0, 3.0]);
        let out = r.route(&x, &[1, 0]).unwrap();
        assert_eq!(out.experts, vec![2, 3, 0, 1]);
        let sum: f32 = out.weights[..2].iter().sum();
        assert!((sum - 1.5).abs() < 1e-6);
        assert!(r.route(&x, &[1, 2]).is_err());
    }

    #[test]
    fn score_functions() {
        let r = router(Selection::TopK { bias: vec![0.; 4] }, ScoringFunc::Softmax);
        let s = r.scores(&[0.0, 0.0, 0.0, 0.0]);
        assert!(s.iter().all(|v| (v - 0.25).abs() < 1e-7));
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert_eq!(softplus(30.0), 30.0);
    }
}
