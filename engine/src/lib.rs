//! amdahl's engine: DeepSeek-V4 model definition, checkpoint loading, CPU reference forward pass,
//! quantized formats, per-sequence caches, scheduling and device actors. No HTTP here: the `web`
//! crate talks to the engine through [`api`].

pub mod actors;
pub mod api;
pub mod chat_template;
pub mod checkpoint;
pub mod config;
pub mod detok;
pub mod device;
pub mod error;
pub mod kv_cache;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod profile;
pub mod quant;
pub mod rng;
pub mod scheduler;
pub mod tensor;
pub mod testkit;
pub mod tokenizer;

pub use error::{EngineError, Result};

/// Sets the size of the CPU backend's worker pool (call once, before any forward pass).
pub fn set_cpu_threads(n: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n.max(1))
        .build_global()
        .map_err(|e| EngineError::InvalidInput(format!("cannot size the CPU pool: {e}")))
}
