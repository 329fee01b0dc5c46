//! The CUDA backend (cargo feature `cuda`): cudarc with dynamic loading, so the binary builds and
//! starts without CUDA and fails with a clear error only when a GPU is asked for. Unsafe code is
//! confined to this folder: raw device pointers, NVRTC and driver calls.
#![allow(unsafe_code)]

mod backend;
mod bench;
mod compile;
mod dummy;
mod gpu;
mod launch;
mod model;
mod oneshot;
mod peaks;
mod state;
mod timer;
mod weights;

pub use backend::CudaBackend;
pub use bench::profile_dummy;
pub use compile::{cache_dir as kernel_cache_dir, compile_all, nvrtc_present, nvrtc_version};
pub use gpu::{DevBuf, Gpu, GpuInfo, driver_present};
pub use model::{GpuModel, SampleRow, Shape, StepSeq};
pub use oneshot::GpuRunner;
pub use state::Limits;
pub use timer::StageTimer;
pub use weights::{Fmt, GLinear, GpuWeights};

/// Whether this build has the CUDA backend.
pub const CUDA_COMPILED: bool = true;

#[cfg(test)]
mod tests;
