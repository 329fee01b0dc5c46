//! Checked kernel launches: [`Args`] packing, [`Launch`] geometry, and launches by entry point,
//! plain or as programmatic dependents.

use std::sync::atomic::Ordering;

use cudarc::driver::result as drv;
use cudarc::driver::sys;

use super::{DevBuf, Gpu, dev_err};
use crate::device::Pdl;
use crate::error::{EngineError, Result};
use amdahl_kernels::Entry;

/// Kernel arguments, each stored 8-byte aligned; pointers to them are formed at launch.
#[derive(Debug, Default)]
pub struct Args {
    data: Vec<u64>,
    offsets: Vec<usize>,
}

impl Args {
    pub fn new() -> Self {
        Self::default()
    }

    fn push_bytes(&mut self, b: &[u8]) -> &mut Self {
        self.offsets.push(self.data.len());
        let words = b.len().div_ceil(8);
        let start = self.data.len();
        self.data.resize(start + words, 0);
        for (i, chunk) in b.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.data[start + i] = u64::from_le_bytes(w);
        }
        self
    }

    pub fn ptr(&mut self, p: u64) -> &mut Self {
        self.push_bytes(&p.to_le_bytes())
    }

    pub fn buf(&mut self, b: &DevBuf) -> &mut Self {
        self.ptr(b.ptr())
    }

    pub fn opt(&mut self, b: Option<&DevBuf>) -> &mut Self {
        self.ptr(b.map_or(0, DevBuf::ptr))
    }

    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.push_bytes(&v.to_le_bytes())
    }

    pub fn usize(&mut self, v: usize) -> &mut Self {
        self.i32(v as i32)
    }

    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.push_bytes(&v.to_le_bytes())
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.push_bytes(&v.to_le_bytes())
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.push_bytes(&v.to_le_bytes())
    }

    /// A `#[repr(C)]` struct passed by value.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.push_bytes(bytes)
    }
}

/// Launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub smem: u32,
}

impl Launch {
    pub fn new(grid: (usize, usize, usize), block: usize, smem: usize) -> Self {
        Self {
            grid: (grid.0 as u32, grid.1 as u32, grid.2 as u32),
            block: block as u32,
            smem: smem as u32,
        }
    }

    pub fn blocks(&self) -> u64 {
        u64::from(self.grid.0) * u64::from(self.grid.1) * u64::from(self.grid.2)
    }
}

impl Gpu {
    fn function(&self, name: &str) -> Result<sys::CUfunction> {
        self.funcs
            .get(name)
            .copied()
            .ok_or_else(|| EngineError::Device(format!("kernel `{name}` is not loaded")))
    }

    /// Launches a named entry point.
    pub fn launch(&self, e: Entry, l: Launch, args: &mut Args) -> Result<()> {
        self.launch_named(e.name, l, args)
    }

    /// Launches an entry point by name (macro-generated linear kernels).
    pub fn launch_named(&self, name: &str, l: Launch, args: &mut Args) -> Result<()> {
        self.launch_to(self.cu_stream(), name, l, args)
    }

    /// Launches an entry point on `stream` (one of this context's).
    pub(super) fn launch_to(
        &self,
        stream: sys::CUstream,
        name: &str,
        l: Launch,
        args: &mut Args,
    ) -> Result<()> {
        if l.blocks() == 0 {
            return Ok(());
        }
        let f = self.function(name)?;
        if l.smem as usize > self.info.max_smem_optin {
            return Err(EngineError::Device(format!(
                "kernel {name} needs {} bytes of shared memory; this GPU allows {}",
                l.smem, self.info.max_smem_optin
            )));
        }
        let mut ptrs: Vec<*mut std::ffi::c_void> = args
            .offsets
            .iter()
            .map(|&o| (&mut args.data[o] as *mut u64).cast())
            .collect();
        if self.pdl == Pdl::Off || !self.programmatic.load(Ordering::Relaxed) {
            // SAFETY: `ptrs` point into `args.data`, alive for the call; argument layout follows
            // the kernel's signature (checked by the GPU tests against the CPU reference).
            return unsafe {
                drv::launch_kernel(f, l.grid, (l.block, 1, 1), l.smem, stream, &mut ptrs)
            }
            .map_err(|e| dev_err(&format!("launching {name} {l:?}"), e));
        }
        // A programmatic launch: every kernel of this build starts with `pdl_enter()`
        // (common.cuh), which waits for the kernel before it, so this one may be launched while
        // that one runs.
        // SAFETY: zero is a valid bit pattern of the plain-data union.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: l.grid.0,
            gridDimY: l.grid.1,
            gridDimZ: l.grid.2,
            blockDimX: l.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: l.smem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as above; `cfg` and `attr` outlive the call.
        unsafe { sys::cuLaunchKernelEx(&cfg, f, ptrs.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(|e| dev_err(&format!("launching {name} {l:?}"), e))
    }
}
