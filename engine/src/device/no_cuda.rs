//! Stand-ins for the CUDA backend in builds without the `cuda` feature: the same entry points,
//! each refusing with [`EngineError::CudaNotCompiled`].

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
pub fn compile_all(_arch: u32, _dir: &std::path::Path) -> Result<Vec<(&'static str, f64, bool)>> {
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
}
