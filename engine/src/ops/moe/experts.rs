//! One expert: `W2 · (silu(min(W1·x, limit)) ⊙ clamp(W3·x, −limit, limit))` (swiglu clamp of
//! model-spec §3.3; transformers applies it to routed and shared experts alike).

use crate::ops::linear::Linear;
use crate::tensor::Mat;

#[derive(Debug, Clone)]
pub struct Expert {
    /// Gate projection `[I, D]`.
    pub w1: Linear,
    /// Down projection `[D, I]`.
    pub w2: Linear,
    /// Up projection `[I, D]`.
    pub w3: Linear,
    pub limit: f32,
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

impl Expert {
    pub fn forward(&self, x: &Mat) -> Mat {
        let gate = self.w1.forward(x);
        let up = self.w3.forward(x);
        let h: Vec<f32> = gate
            .data
            .iter()
            .zip(&up.data)
            .map(|(&g, &u)| silu(g.min(self.limit)) * u.clamp(-self.limit, self.limit))
            .collect();
        self.w2.forward(&Mat::from_vec(x.rows, gate.cols, h))
    }
}
