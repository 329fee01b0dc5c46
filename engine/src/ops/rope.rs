//! Interleaved partial RoPE on the trailing `rope_dim` channels of a vector (model-spec §3.3):
//! pairs (2i, 2i+1) of the rope slice rotate by `pos · inv_freq[i]`. The inverse rotation (used on
//! the attention output, since K = V carried rope into V) rotates by the negated angle. Angles
//! are formed in f32 as transformers does (`inv_freq · pos` in float32), so long positions round
//! the same way.

use crate::config::RopeConfig;

/// Precomputed inverse frequencies for one rope table.
#[derive(Debug, Clone)]
pub struct RopeTable {
    inv_freq: Vec<f32>,
    scale: f32,
}

/// cos/sin of every pair at one position.
#[derive(Debug, Clone)]
pub struct RopeAngles {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

impl RopeTable {
    pub fn new(cfg: &RopeConfig, rope_dim: usize) -> Self {
        Self {
            inv_freq: cfg.inv_freq(rope_dim).iter().map(|&f| f as f32).collect(),
            scale: cfg.attention_factor as f32,
        }
    }

    pub fn rope_dim(&self) -> usize {
        self.inv_freq.len() * 2
    }

    pub fn angles(&self, pos: usize) -> RopeAngles {
        let p = pos as f32;
        let (cos, sin) = self
            .inv_freq
            .iter()
            .map(|&f| {
                let a = (f * p) as f64;
                ((a.cos() as f32) * self.scale, (a.sin() as f32) * self.scale)
            })
            .unzip();
        RopeAngles { cos, sin }
    }
}

/// Rotates the trailing rope slice of `x` in place (`inverse` negates the angle).
#[inline]
pub fn apply(x: &mut [f32], a: &RopeAngles, inverse: bool) {
    let rd = a.cos.len() * 2;
    let start = x.len() - rd;
    let r = &mut x[start..];
    let sign = if inverse { -1.0 } else { 1.0 };
    for i in 0..a.cos.len() {
        let (c, s) = (a.cos[i], sign * a.sin[i]);
        let (x0, x1) = (r[2 * i], r[2 * i + 1]);
        r[2 * i] = x0 * c - x1 * s;
        r[2 * i + 1] = x1 * c + x0 * s;
    }
}

/// Applies `apply` to each `width`-wide chunk of `x` (every head of a row).
pub fn apply_heads(x: &mut [f32], width: usize, a: &RopeAngles, inverse: bool) {
    for head in x.chunks_exact_mut(width) {
        apply(head, a, inverse);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RopeTable {
        let cfg = RopeConfig {
            theta: 10_000.0,
            yarn: None,
            attention_factor: 1.0,
        };
        RopeTable::new(&cfg, 8)
    }

    #[test]
    fn inverse_undoes_forward_and_nope_dims_stay() {
        let t = table();
        let orig: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin()).collect();
        let mut x = orig.clone();
        let a = t.angles(37);
        apply(&mut x, &a, false);
        assert_eq!(&x[..4], &orig[..4]);
        assert_ne!(&x[4..], &orig[4..]);
        apply(&mut x, &a, true);
        for (p, q) in x.iter().zip(&orig) {
            assert!((p - q).abs() < 1e-6);
        }
    }

    #[test]
    fn dot_products_depend_only_on_relative_position() {
        let t = table();
        let q: Vec<f32> = (0..8).map(|i| (i as f32 * 0.3).cos()).collect();
        let k: Vec<f32> = (0..8).map(|i| (i as f32 * 0.9).sin()).collect();
        let score = |pq: usize, pk: usize| {
            let (mut a, mut b) = (q.clone(), k.clone());
            apply(&mut a, &t.angles(pq), false);
            apply(&mut b, &t.angles(pk), false);
            crate::tensor::dot(&a, &b)
        };
        assert!((score(10, 3) - score(107, 100)).abs() < 1e-4);
    }
}
