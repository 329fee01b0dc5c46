//! KV compressor (model-spec §3.3 "Compressor"; transformers `DeepseekV4HCACompressor` /
//! `DeepseekV4CSACompressor`). Every `m` source tokens close a window and emit one entry: a
//! per-channel softmax (over the window's slots, gate + learned position bias) weighted sum of
//! the tokens' kv projections, RMS-normalized and roped at the window's first position.
//! Overlapping compressors (CSA, m = 4) project to 2·dim: the first half (Ca) of window w−1 and
//! the second half (Cb) of window w share one softmax over 2m slots. Tokens are fed one at a
//! time in position order, so an entry exists exactly when its window is complete.

use crate::kv_cache::CompressorState;
use crate::ops::linear::Linear;
use crate::ops::norm::rms_norm;
use crate::ops::rope::{self, RopeTable};

#[derive(Debug, Clone)]
pub struct Compressor {
    /// `[width, D]`.
    pub wkv: Linear,
    /// `[width, D]`.
    pub wgate: Linear,
    /// Position bias added to the gate, `[m, width]`.
    pub ape: Vec<f32>,
    /// RMSNorm weight of the entries, `[dim]`.
    pub norm: Vec<f32>,
    pub ratio: usize,
    pub dim: usize,
    pub overlap: bool,
    pub eps: f32,
}

impl Compressor {
    /// Width of the per-token projections (2·dim when overlapping).
    pub fn width(&self) -> usize {
        if self.overlap { 2 * self.dim } else { self.dim }
    }

    pub fn new_state(&self) -> CompressorState {
        CompressorState::default()
    }

    /// Feeds the projections of the token at `pos` (the next position of this sequence).
    /// Returns true if it completed a window and emitted an entry.
    pub fn push(
        &self,
        st: &mut CompressorState,
        kv: &[f32],
        gate: &[f32],
        pos: usize,
        table: &RopeTable,
    ) -> bool {
        let (m, w) = (self.ratio, self.width());
        debug_assert_eq!(
            st.pending_kv.len() / w,
            pos % m,
            "compressor fed out of order"
        );
        st.pending_kv.extend_from_slice(kv);
        st.pending_gate.extend_from_slice(gate);
        if !(pos + 1).is_multiple_of(m) {
            return false;
        }
        // Bias the gates of the completed window.
        for (g, b) in st.pending_gate.iter_mut().zip(&self.ape) {
            *g += b;
        }
        let d = self.dim;
        let mut entry = vec![0.0f32; d];
        let (kv, gate) = (&st.pending_kv, &st.pending_gate);
        // Slots for channel c: (kv, gate) pairs.
        let prev = if self.overlap && !st.prev_a_kv.is_empty() {
            Some((&st.prev_a_kv, &st.prev_a_gate))
        } else {
            None
        };
        let off = if self.overlap { d } else { 0 };
        for c in 0..d {
            let mut mx = f32::NEG_INFINITY;
            if let Some((_, pg)) = prev {
                for j in 0..m {
                    mx = mx.max(pg[j * d + c]);
                }
            }
            for j in 0..m {
                mx = mx.max(gate[j * w + off + c]);
            }
            let (mut num, mut den) = (0.0f32, 0.0f32);
            if let Some((pk, pg)) = prev {
                for j in 0..m {
                    let e = (pg[j * d + c] - mx).exp();
                    num += e * pk[j * d + c];
                    den += e;
                }
            }
            for j in 0..m {
                let e = (gate[j * w + off + c] - mx).exp();
                num += e * kv[j * w + off + c];
                den += e;
            }
            entry[c] = num / den;
        }
        if self.overlap {
            st.prev_a_kv.clear();
            st.prev_a_gate.clear();
            for j in 0..m {
                st.prev_a_kv.extend_from_slice(&kv[j * w..j * w + d]);
                st.prev_a_gate.extend_from_slice(&gate[j * w..j * w + d]);
            }
        }
        rms_norm(&mut entry, &self.norm, self.eps);
        let first = pos + 1 - m;
        rope::apply(&mut entry, &table.angles(first), false);
        st.entries.extend_from_slice(&entry);
        st.pending_kv.clear();
        st.pending_gate.clear();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeConfig;

    fn compressor(overlap: bool, m: usize, d: usize) -> Compressor {
        let w = if overlap { 2 * d } else { d };
        Compressor {
            wkv: Linear::from_f32(w, 1, vec![0.0; w]),
            wgate: Linear::from_f32(w, 1, vec![0.0; w]),
            ape: (0..m * w).map(|i| (i as f32 * 0.37).sin()).collect(),
            norm: vec![1.0; d],
            ratio: m,
            dim: d,
            overlap,
            eps: 1e-6,
        }
    }

    fn table(rd: usize) -> RopeTable {
        RopeTable::new(
            &RopeConfig {
                theta: 10_000.0,
                yarn: None,
                attention_factor: 1.0,
            },
            rd,
        )
    }

    /// Direct formula for HCA entry w: softmax over the window's m tokens per channel.
    #[test]
    fn hca_entry_is_softmax_pooled_window() {
        let (m, d) = (4, 6);
        let c = compressor(false, m, d);
        let t = table(2);
        let mut st = c.new_state();
        let kv: Vec<Vec<f32>> = (0..8)
            .map(|p| (0..d).map(|i| ((p * d + i) as f32 * 0.3).cos()).collect())
            .collect();
        let gate: Vec<Vec<f32>> = (0..8)
            .map(|p| (0..d).map(|i| ((p + i) as f32 * 0.5).sin()).collect())
            .collect();
        let emitted: Vec<bool> = (0..8)
            .map(|p| c.push(&mut st, &kv[p], &gate[p], p, &t))
            .collect();
        assert_eq!(
            emitted,
            vec![false, false, false, true, false, false, false, true]
        );
        assert_eq!(st.n_entries(d), 2);
        // Window 1 (positions 4..8), before norm and rope.
        let mut expect = vec![0.0f32; d];
        for ch in 0..d {
            let g: Vec<f32> = (0..m)
                .map(|j| gate[4 + j][ch] + c.ape[j * d + ch])
                .collect();
            let mx = g.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = g.iter().map(|v| (v - mx).exp()).collect();
            let s: f32 = e.iter().sum();
            expect[ch] = (0..m).map(|j| e[j] / s * kv[4 + j][ch]).sum();
        }
        rms_norm(&mut expect, &c.norm, c.eps);
        rope::apply(&mut expect, &t.angles(4), false);
        for (a, b) in st.entries[d..].iter().zip(&expect) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    /// With overlap, window 1 pools window 0's first halves together with its own second halves;
    /// window 0 sees only its own second halves.
    #[test]
    fn csa_overlap_pools_previous_first_half() {
        let (m, d) = (2, 3);
        let c = compressor(true, m, d);
        let t = table(2);
        let w = 2 * d;
        let kv: Vec<Vec<f32>> = (0..4)
            .map(|p| (0..w).map(|i| ((p * w + i) as f32 * 0.21).sin()).collect())
            .collect();
        let gate: Vec<Vec<f32>> = (0..4)
            .map(|p| (0..w).map(|i| ((p * 3 + i) as f32 * 0.4).cos()).collect())
            .collect();
        let mut st = c.new_state();
        for p in 0..4 {
            c.push(&mut st, &kv[p], &gate[p], p, &t);
        }
        let pool = |slots: &[(f32, f32)]| {
            let mx = slots.iter().map(|s| s.1).fold(f32::NEG_INFINITY, f32::max);
            let den: f32 = slots.iter().map(|s| (s.1 - mx).exp()).sum();
            slots.iter().map(|s| (s.1 - mx).exp() * s.0).sum::<f32>() / den
        };
        let mut e0 = vec![0.0; d];
        let mut e1 = vec![0.0; d];
        for ch in 0..d {
            let b = |p: usize, j: usize| (kv[p][d + ch], gate[p][d + ch] + c.ape[j * w + d + ch]);
            let a = |p: usize, j: usize| (kv[p][ch], gate[p][ch] + c.ape[j * w + ch]);
            e0[ch] = pool(&[b(0, 0), b(1, 1)]);
            e1[ch] = pool(&[a(0, 0), a(1, 1), b(2, 0), b(3, 1)]);
        }
        for (e, first) in [(&mut e0, 0), (&mut e1, 2)] {
            rms_norm(e, &c.norm, c.eps);
            rope::apply(e, &t.angles(first), false);
        }
        let got = &st.entries;
        for (a, b) in got.iter().zip(e0.iter().chain(&e1)) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }
}
