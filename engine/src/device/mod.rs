//! Devices. The CPU reference runs everywhere; the CUDA backend (`cuda/`, cargo feature `cuda`)
//! runs the whole DeepSeek-V4 forward on an NVIDIA GPU with NVRTC-compiled kernels from
//! `amdahl-kernels`. Without the feature, `no_cuda.rs` provides the same names, each returning
//! [`EngineError::CudaNotCompiled`](crate::EngineError::CudaNotCompiled), so callers never need
//! `cfg` (STYLE.md rule 1: CUDA stays at this boundary).

mod pdl;
pub mod profiling;

pub use pdl::Pdl;

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub use cuda::*;

#[cfg(not(feature = "cuda"))]
mod no_cuda;
#[cfg(not(feature = "cuda"))]
pub use no_cuda::*;

/// Options of a CUDA backend that do not come from the checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaOptions {
    /// GPU ordinal.
    pub ordinal: usize,
    /// Sequences decoded together (cache slots).
    pub max_batch: usize,
    /// Longest sequence a slot holds (prompt + output).
    pub max_len: usize,
    /// Tokens per step (prefill chunks + decodes); sizes the activation buffers.
    pub max_step_tokens: usize,
    /// Capture decode steps as CUDA graphs (per batch-size bucket).
    pub graphs: bool,
    /// `--moe-backend` (auto or a name), resolved against the GPU and this build's kernels.
    pub moe_backend: String,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            ordinal: 0,
            max_batch: 16,
            max_len: 4096,
            max_step_tokens: 512,
            graphs: true,
            moe_backend: "auto".into(),
        }
    }
}
