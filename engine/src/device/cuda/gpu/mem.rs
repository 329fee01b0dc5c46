//! Device memory: [`DevBuf`] allocations (freed on drop) and the copies and fills between them
//! and the host, ordered on the stream launches go to.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use cudarc::driver::result as drv;

use super::{Gpu, dev_err};
use crate::error::{EngineError, Result};

/// A device allocation. Freed when dropped.
#[derive(Debug)]
pub struct DevBuf {
    ptr: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DevBuf {
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Pointer `offset` bytes in.
    pub fn at(&self, offset: usize) -> u64 {
        debug_assert!(offset <= self.bytes);
        self.ptr + offset as u64
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ptr != 0 {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: the pointer came from malloc_sync on this context and is freed once.
            let _ = unsafe { drv::free_sync(self.ptr) };
        }
    }
}

impl Gpu {
    /// Allocates `bytes` (at least 1) of device memory.
    pub fn alloc(&self, bytes: usize) -> Result<DevBuf> {
        self.bind()?;
        // SAFETY: plain allocation on the bound context.
        let ptr = unsafe { drv::malloc_sync(bytes.max(16)) }.map_err(|e| {
            dev_err(
                &format!(
                    "allocating {bytes} bytes on cuda:{} ({} total)",
                    self.info.ordinal, self.info.total_mem
                ),
                e,
            )
        })?;
        Ok(DevBuf {
            ptr,
            bytes,
            ctx: self.ctx.clone(),
        })
    }

    /// Allocates and zero-fills.
    pub fn zeros(&self, bytes: usize) -> Result<DevBuf> {
        let b = self.alloc(bytes)?;
        self.memset(&b, 0)?;
        Ok(b)
    }

    pub fn memset(&self, b: &DevBuf, value: u8) -> Result<()> {
        // SAFETY: the range lies inside the allocation.
        unsafe { drv::memset_d8_async(b.ptr, value, b.bytes.max(1), self.cu_stream()) }
            .map_err(|e| dev_err("memset", e))
    }

    /// Uploads a slice into a new buffer (synchronously).
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<DevBuf> {
        let b = self.alloc(std::mem::size_of_val(data))?;
        self.write(&b, 0, data)?;
        self.sync()?;
        Ok(b)
    }

    /// Copies host data into `b` at byte `offset`, ordered on the stream. The host slice must
    /// stay alive until the stream reaches the copy; callers sync or keep it.
    pub fn write<T: Copy>(&self, b: &DevBuf, offset: usize, data: &[T]) -> Result<()> {
        let n = std::mem::size_of_val(data);
        if n == 0 {
            return Ok(());
        }
        if offset + n > b.bytes {
            return Err(EngineError::Device(format!(
                "write of {n} bytes at {offset} overruns a {}-byte buffer",
                b.bytes
            )));
        }
        // SAFETY: bounds checked above; T is plain data.
        unsafe { drv::memcpy_htod_async(b.ptr + offset as u64, data, self.cu_stream()) }
            .map_err(|e| dev_err("host-to-device copy", e))
    }

    /// Reads `n` elements of T from `b` at byte `offset` (synchronizes the stream).
    pub fn read<T: Copy + Default>(&self, b: &DevBuf, offset: usize, n: usize) -> Result<Vec<T>> {
        let bytes = n * std::mem::size_of::<T>();
        if offset + bytes > b.bytes {
            return Err(EngineError::Device(format!(
                "read of {bytes} bytes at {offset} overruns a {}-byte buffer",
                b.bytes
            )));
        }
        let mut out = vec![T::default(); n];
        if n == 0 {
            return Ok(out);
        }
        // SAFETY: bounds checked; the stream is synchronized before `out` is used.
        unsafe { drv::memcpy_dtoh_async(&mut out, b.ptr + offset as u64, self.cu_stream()) }
            .map_err(|e| dev_err("device-to-host copy", e))?;
        self.sync()?;
        Ok(out)
    }

    pub fn copy(
        &self,
        dst: &DevBuf,
        dst_off: usize,
        src: &DevBuf,
        src_off: usize,
        bytes: usize,
    ) -> Result<()> {
        if dst_off + bytes > dst.bytes || src_off + bytes > src.bytes {
            return Err(EngineError::Device("device copy out of bounds".into()));
        }
        // SAFETY: bounds checked.
        unsafe {
            drv::memcpy_dtod_async(
                dst.ptr + dst_off as u64,
                src.ptr + src_off as u64,
                bytes,
                self.cu_stream(),
            )
        }
        .map_err(|e| dev_err("device-to-device copy", e))
    }
}
