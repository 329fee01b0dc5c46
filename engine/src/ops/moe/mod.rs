//! Mixture of experts (model-spec §3.3 "MoE"; transformers `DeepseekV4SparseMoeBlock`): a router
//! picks `k` routed experts per token (hash table or top-k of score + bias) with normalized,
//! scaled weights; each expert is a clamped SwiGLU; a shared expert is always added.

pub mod backends;
mod experts;
mod router;

pub use experts::Expert;
pub use router::{Router, Routing, Selection};

use rayon::prelude::*;

use crate::error::Result;
use crate::parallel::Shard;
use crate::profile::{Stage, StageClock};
use crate::tensor::{Mat, axpy};

/// One MoE layer.
#[derive(Debug, Clone)]
pub struct MoeBlock {
    pub router: Router,
    pub experts: Vec<Expert>,
    pub shared: Option<Expert>,
}

impl MoeBlock {
    /// `x [T, D]` with the token ids of its rows (hash routing needs them) → `[T, D]`, charging
    /// the work to the `moe` stage: router, every distinct expert hit once, the shared expert.
    pub fn forward(&self, x: &Mat, tokens: &[u32], clock: &mut StageClock) -> Result<Mat> {
        self.forward_shard(x, tokens, clock, Shard::SOLE)
    }

    /// This worker's share of the layer under expert parallelism: the routed experts it owns
    /// (and the shared expert on the rank that adds it); the shares of all ranks sum to
    /// [`forward`](Self::forward)'s output. Routing is computed in full everywhere.
    pub fn forward_shard(
        &self,
        x: &Mat,
        tokens: &[u32],
        clock: &mut StageClock,
        shard: Shard,
    ) -> Result<Mat> {
        let mut work = self.router.weight.work(x.rows);
        let routing = self.router.route(x, tokens)?;
        let k = self.router.top_k;
        // Tokens per expert, in token order, with their routing weight.
        let mut assigned: Vec<Vec<(usize, f32)>> = vec![Vec::new(); self.experts.len()];
        for t in 0..x.rows {
            for j in 0..k {
                let e = routing.experts[t * k + j] as usize;
                assigned[e].push((t, routing.weights[t * k + j]));
            }
        }
        for (e, a) in assigned
            .iter()
            .enumerate()
            .filter(|(e, a)| !a.is_empty() && shard.owns(*e))
        {
            let ex = &self.experts[e];
            for lin in [&ex.w1, &ex.w3, &ex.w2] {
                let (b, f) = lin.work(a.len());
                work = (work.0 + b, work.1 + f);
            }
        }
        let partial: Vec<(usize, Mat)> = assigned
            .par_iter()
            .enumerate()
            .filter(|(e, a)| !a.is_empty() && shard.owns(*e))
            .map(|(e, a)| {
                let rows: Vec<usize> = a.iter().map(|(t, _)| *t).collect();
                (e, self.experts[e].forward(&x.gather_rows(&rows)))
            })
            .collect();
        let mut out = Mat::zeros(x.rows, x.cols);
        // Ascending expert order, like transformers' index_add over hit experts.
        for (e, y) in partial {
            for (i, (t, w)) in assigned[e].iter().enumerate() {
                axpy(out.row_mut(*t), *w, y.row(i));
            }
        }
        if let Some(shared) = self.shared.as_ref().filter(|_| shard.adds_shared()) {
            for lin in [&shared.w1, &shared.w3, &shared.w2] {
                let (b, f) = lin.work(x.rows);
                work = (work.0 + b, work.1 + f);
            }
            let s = shared.forward(x);
            for (o, v) in out.data.iter_mut().zip(&s.data) {
                *o += v;
            }
        }
        clock.charge(Stage::Moe, work.0, work.1);
        Ok(out)
    }
}
