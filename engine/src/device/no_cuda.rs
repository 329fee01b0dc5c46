//! Stand-ins for the CUDA backend in builds without the `cuda` feature: the same entry points,
//! each refusing with [`EngineError::CudaNotCompiled`].

use super::Pdl;
use crate::error::{EngineError, Result};

/// Whether this build has the CUDA backend.
pub const CUDA_COMPILED: bool = false;

/// Is libnvrtc loadable? Never, without CUDA support compiled in.
pub fn nvrtc_present() -> bool {
    false
}

pub fn driver_present() -> bool {
    false
}

/// Compiling kernels needs the CUDA build.
pub fn compile_all(
    _arch: u32,
    _pdl: Pdl,
    _dir: &std::path::Path,
) -> Result<Vec<(&'static str, f64, bool)>> {
    Err(EngineError::CudaNotCompiled)
}

/// Profiling a GPU needs the CUDA build.
pub fn profile_dummy(
    _o: &super::profiling::ProfileOptions,
) -> Result<super::profiling::ProfileReport> {
    Err(EngineError::CudaNotCompiled)
}

/// Where compiled kernels would be cached.
pub fn kernel_cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("amdahl-kernels")
}

/// The CUDA backend's stand-in: never constructed.
#[derive(Debug)]
pub struct CudaBackend {
    _never: std::convert::Infallible,
}

impl CudaBackend {
    pub fn new(_m: &crate::model::deepseek_v4::DeepseekV4, _o: super::CudaOptions) -> Result<Self> {
        Err(EngineError::CudaNotCompiled)
    }
}

impl crate::actors::worker::Backend for CudaBackend {
    fn device(&self) -> &str {
        match self._never {}
    }

    fn run(
        &mut self,
        _s: crate::actors::worker::RunStep,
    ) -> Result<crate::actors::worker::StepOutput> {
        match self._never {}
    }

    fn peaks(&mut self) -> crate::profile::report::Peaks {
        match self._never {}
    }
}

/// The one-shot GPU runner's stand-in.
#[derive(Debug)]
pub struct GpuRunner {
    _never: std::convert::Infallible,
}

impl GpuRunner {
    pub fn new(
        _m: &crate::model::deepseek_v4::DeepseekV4,
        _o: usize,
        _s: usize,
        _l: usize,
        _c: usize,
    ) -> Result<Self> {
        Err(EngineError::CudaNotCompiled)
    }

    pub fn generate_greedy(&self, _p: &[u32], _n: usize, _eos: &[u32]) -> Result<Vec<u32>> {
        match self._never {}
    }

    pub fn logits(&self, _ids: &[Vec<u32>], _steps: &[(usize, usize)]) -> Result<Vec<Vec<f32>>> {
        match self._never {}
    }
}
