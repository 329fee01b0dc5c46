//! Typed launchers, one per kernel family, so the forward pass reads as the model does. Each
//! picks the launch geometry (and the token-tile instantiation of the tensor-core linears) and
//! returns the number of blocks it launched, which the profiler turns into occupancy facts.

use amdahl_kernels::sample as ks;

use crate::error::Result;

use super::gpu::{Args, Gpu, Launch};

mod attention;
pub mod gemm;
mod linear;
pub mod linear_wg;
mod mhc;
pub(crate) mod moe;
pub mod stream;
pub use attention::*;
pub use linear::*;
pub use mhc::*;
pub use moe::{
    MoePlan, PlanOut, RouteArgs, moe_combine, moe_down, moe_plan, moe_route, moe_route_plan,
    moe_up, plan_identity, route_plan_fits, route_plan_fused,
};
pub use stream::fp8_stream;

/// Sampling parameter arrays (per logit row) and the output.
#[derive(Debug, Clone, Copy)]
pub struct SampleArgs {
    pub logits: u64,
    pub vocab: usize,
    pub temperature: u64,
    pub top_k: u64,
    pub top_p: u64,
    pub u: u64,
    pub banned: u64,
    pub out: u64,
}

pub fn sample(gpu: &Gpu, s: SampleArgs, rows: usize) -> Result<u64> {
    let l = Launch::new((rows, 1, 1), ks::THREADS, 0);
    gpu.launch(
        ks::SAMPLE_ROWS,
        l,
        Args::new()
            .ptr(s.logits)
            .usize(s.vocab)
            .ptr(s.temperature)
            .ptr(s.top_k)
            .ptr(s.top_p)
            .ptr(s.u)
            .ptr(s.banned)
            .ptr(s.out),
    )?;
    Ok(l.blocks())
}
