//! Lightning indexer of CSA layers (model-spec §3.3 "Indexer"; transformers
//! `DeepseekV4Indexer`). It keeps its own overlapping compressor at `index_head_dim` over the same
//! windows as the main one, scores query t against visible keys with
//! `I(t,s) = Σ_h w_h · ReLU(q_h · k_s) · dim^-½`, `w_h = weights_proj(x)_h · heads^-½`, and keeps the
//! top `index_topk` visible entries (ties to the lower index). "Reference" numerics: no Hadamard,
//! no FP4 keys.

use super::compressor::Compressor;
use crate::ops::linear::Linear;
use crate::tensor::dot;

#[derive(Debug, Clone)]
pub struct Indexer {
    pub compressor: Compressor,
    /// `[heads·dim, q_lora]`.
    pub wq_b: Linear,
    /// `[heads, D]`.
    pub weights_proj: Linear,
    pub heads: usize,
    pub dim: usize,
    pub topk: usize,
}

impl Indexer {
    /// Scores of query `q` (`[heads·dim]`, roped) with head weights `w` (raw `weights_proj`
    /// output) against the first `n_vis` keys (`[n, dim]`).
    pub fn scores(&self, q: &[f32], w: &[f32], keys: &[f32], n_vis: usize) -> Vec<f32> {
        let (h, d) = (self.heads, self.dim);
        let qs = (d as f32).powf(-0.5);
        let ws = (h as f32).powf(-0.5);
        (0..n_vis)
            .map(|s| {
                let k = &keys[s * d..(s + 1) * d];
                (0..h)
                    .map(|hh| dot(&q[hh * d..(hh + 1) * d], k).max(0.0) * qs * (w[hh] * ws))
                    .sum()
            })
            .collect()
    }

    /// Indices of the top `min(topk, n_vis)` visible entries, best first.
    pub fn select(&self, q: &[f32], w: &[f32], keys: &[f32], n_vis: usize) -> Vec<usize> {
        let s = self.scores(q, w, keys, n_vis);
        top_k(&s, self.topk)
    }

    /// [`select`](Self::select) and the choice's relative margin (`ops::ties::margin`).
    pub fn select_with_margin(
        &self,
        q: &[f32],
        w: &[f32],
        keys: &[f32],
        n_vis: usize,
    ) -> (Vec<usize>, f32) {
        let s = self.scores(q, w, keys, n_vis);
        let mut sorted = s.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        (
            top_k(&s, self.topk),
            crate::ops::ties::margin(&sorted, self.topk),
        )
    }
}

/// Indices of the `k` largest values, larger first, ties to the lower index.
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    let k = k.min(values.len());
    if k < values.len() {
        idx.select_nth_unstable_by(k, |&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
        idx.truncate(k);
    }
    idx.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_picks_the_largest_with_low_index_ties() {
        let v = [0.5, 2.0, -1.0, 2.0, 0.7];
        assert_eq!(top_k(&v, 3), vec![1, 3, 4]);
        assert_eq!(top_k(&v, 10), vec![1, 3, 4, 0, 2]);
        assert_eq!(top_k(&v, 0), Vec::<usize>::new());
    }

    #[test]
    fn scores_are_weighted_relu_dots() {
        let ix = Indexer {
            compressor: Compressor {
                wkv: Linear::from_f32(4, 1, vec![0.0; 4]),
                wgate: Linear::from_f32(4, 1, vec![0.0; 4]),
                ape: vec![0.0; 16],
                norm: vec![1.0; 2],
                ratio: 4,
                dim: 2,
                overlap: true,
                eps: 1e-6,
            },
            wq_b: Linear::from_f32(4, 1, vec![0.0; 4]),
            weights_proj: Linear::from_f32(2, 1, vec![0.0; 2]),
            heads: 2,
            dim: 2,
            topk: 1,
        };
        let q = [1.0, 0.0, 0.0, 1.0];
        let w = [2.0, -1.0];
        let keys = [3.0, -1.0, -2.0, 4.0];
        let s = ix.scores(&q, &w, &keys, 2);
        let c = 0.5f32.sqrt() * 0.5f32.sqrt();
        // key 0: head0 relu(3)=3·2, head1 relu(-1)=0 → 6c; key 1: head0 0, head1 4·(-1) → -4c.
        assert!((s[0] - 6.0 * c).abs() < 1e-6);
        assert!((s[1] + 4.0 * c).abs() < 1e-6);
        assert_eq!(ix.select(&q, &w, &keys, 2), vec![0]);
        assert_eq!(ix.select(&q, &w, &keys, 1), vec![0]);
    }
}
