//! Expert parallelism (ARCHITECTURE.md "Multi-GPU"): N workers hold the attention stack
//! replicated and the routed experts split by `expert % N == rank`; every worker runs the same
//! step, computes its own experts' share of each MoE layer (rank 0 adds the shared expert), and
//! an all-reduce sums the shares, so every worker continues with the full MoE output. The
//! collective is a trait: in memory between threads here (CPU workers, CI), NCCL on GPUs.

use std::sync::{Barrier, Mutex};

/// A worker's place among the expert-parallel workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub world: usize,
}

impl Shard {
    /// The single-worker shard: owns everything.
    pub const SOLE: Shard = Shard { rank: 0, world: 1 };

    pub fn new(rank: usize, world: usize) -> Self {
        Self {
            rank,
            world: world.max(1),
        }
    }

    /// Whether this worker computes routed expert `e`.
    pub fn owns(&self, e: usize) -> bool {
        e % self.world == self.rank
    }

    /// Whether this worker adds the shared expert (exactly one does).
    pub fn adds_shared(&self) -> bool {
        self.rank == 0
    }
}

/// Collective operations among the workers of one step.
pub trait Collective: Send + Sync {
    fn world(&self) -> usize;
    /// Sums `data` element-wise over all ranks, in rank order (deterministic), leaving the sum
    /// in every rank's `data`. Every rank must call it with the same length.
    fn all_reduce_sum(&self, rank: usize, data: &mut [f32]);
}

/// All-reduce between threads of one process: each rank publishes its buffer, waits for the
/// others, and sums all buffers in rank order.
#[derive(Debug)]
pub struct InMemoryComm {
    world: usize,
    slots: Vec<Mutex<Vec<f32>>>,
    barrier: Barrier,
}

impl InMemoryComm {
    pub fn new(world: usize) -> Self {
        let world = world.max(1);
        Self {
            world,
            slots: (0..world).map(|_| Mutex::new(Vec::new())).collect(),
            barrier: Barrier::new(world),
        }
    }
}

impl Collective for InMemoryComm {
    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&self, rank: usize, data: &mut [f32]) {
        if self.world == 1 {
            return;
        }
        {
            let mut s = self.slots[rank].lock().unwrap_or_else(|p| p.into_inner());
            s.clear();
            s.extend_from_slice(data);
        }
        self.barrier.wait();
        data.iter_mut().for_each(|v| *v = 0.0);
        for slot in &self.slots {
            let s = slot.lock().unwrap_or_else(|p| p.into_inner());
            for (v, x) in data.iter_mut().zip(s.iter()) {
                *v += x;
            }
        }
        // Nobody may overwrite a slot before every rank has read all of them.
        self.barrier.wait();
    }
}

/// A worker's expert-parallel context for a forward pass.
#[derive(Clone, Copy)]
pub struct Ep<'a> {
    pub shard: Shard,
    pub comm: &'a dyn Collective,
}

impl std::fmt::Debug for Ep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ep").field("shard", &self.shard).finish()
    }
}

#[cfg(test)]
mod tests;
