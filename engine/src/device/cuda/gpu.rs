//! One GPU: its context and stream, the kernel modules loaded from NVRTC CUBINs, raw device
//! buffers, and checked kernel launches. Buffers are plain device pointers owned by [`DevBuf`]
//! (freed on drop); kernels take them as `u64` arguments, so a step's launches are identical
//! whether run eagerly or recorded into a CUDA graph. cudarc's event tracking is disabled: this
//! worker orders its streams itself (GPU.md: tracking breaks stream capture).
//!
//! Launches go to the main stream, or, between [`Gpu::fork`] and the end of its closure, to the
//! side stream: independent chains of a step (the kv path next to the q path, the shared expert
//! next to the router) run concurrently, in eager runs and as parallel branches of a captured
//! graph alike. The side stream has its own split-K workspace, so concurrent split linears never
//! share partial tiles or counters.
//!
//! A third stream, the prefetch stream ([`Gpu::prefetch_l2`]), takes L2 prefetches of weights
//! that a later kernel of the step reads: issued while the main stream runs small,
//! latency-bound kernels, their DRAM traffic fills time in which DRAM would sit idle.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::result as drv;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;

use super::compile;
use crate::device::Pdl;
use crate::error::{EngineError, Result};
use amdahl_kernels::Entry;

pub(crate) fn dev_err(what: &str, e: impl std::fmt::Debug) -> EngineError {
    EngineError::Device(format!("{what}: {e:?}"))
}

/// Is the CUDA driver library loadable?
pub fn driver_present() -> bool {
    // SAFETY: only probes whether libcuda can be opened.
    unsafe { sys::is_culib_present() }
}

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

/// A CUDA event (timing enabled). Destroyed when dropped.
#[derive(Debug)]
pub struct Event {
    ev: sys::CUevent,
    ctx: Arc<CudaContext>,
}

impl Event {
    /// Milliseconds from `self` to `end` (both must have completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: two live events of this context.
        unsafe { drv::event::elapsed(self.ev, end.ev) }.map_err(|e| dev_err("event elapsed", e))
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live event.
        unsafe { drv::event::synchronize(self.ev) }.map_err(|e| dev_err("event synchronize", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: destroyed once.
        let _ = unsafe { drv::event::destroy(self.ev) };
    }
}

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

/// Device facts used by launch choices and reports.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sms: usize,
    pub total_mem: usize,
    pub max_smem_optin: usize,
}

/// One GPU with its stream and loaded kernels.
pub struct Gpu {
    pub info: GpuInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The second stream [`Gpu::fork`] sends launches to.
    side: Arc<CudaStream>,
    /// Launches (and copies, memsets, split workspaces) currently go to `side`.
    on_side: AtomicBool,
    /// A fork's side work has not been joined into the main stream yet.
    unjoined: AtomicBool,
    /// Whether forks run on the side stream (`AMDAHL_FORK=0`: on the main one, in order).
    forks: AtomicBool,
    /// How the kernels were built and are launched: with `pdl_enter()` waits, as programmatic
    /// dependents of the one before them (sm_90+, opt-in: [`Gpu::open_with`], `AMDAHL_PDL`).
    pdl: Pdl,
    /// Whether launches of a `pdl` build go out as programmatic dependents now (the model turns
    /// it off for steps of more than `AMDAHL_PDL_MAX_TOKENS` tokens).
    programmatic: AtomicBool,
    /// Fork (main → side) and join (side → main) events, reused by every fork.
    fork_ev: Event,
    join_ev: Event,
    /// The stream [`Gpu::prefetch_l2`] launches go to, its fork and join events, and whether
    /// its work is still unjoined.
    ahead: Arc<CudaStream>,
    ahead_fork: Event,
    ahead_join: Event,
    ahead_unjoined: AtomicBool,
    _modules: Vec<Arc<CudaModule>>,
    funcs: HashMap<String, sys::CUfunction>,
    /// Split-K workspaces of the dense linear, main and side stream: partial tiles, then one
    /// arrival counter per tile (zero between launches: the last block of a tile resets its
    /// counter).
    split_ws: Option<DevBuf>,
    side_ws: Option<DevBuf>,
}

/// Bytes of split-K partial tiles the decode kernels may use, and tile counters, in
/// [`Gpu::split_ws`]; the tiled GEMM's partial tiles may use the whole buffer ([`SPLIT_WS_BYTES`]:
/// wo_b at 64 tokens is 16 tiles of 256 rows × 64 tokens, 64 KiB each, per split).
pub const SPLIT_PARTIAL_BYTES: usize = amdahl_kernels::linear::SPLIT_PARTS * 4;
pub const SPLIT_WS_BYTES: usize = 16 << 20;
const _: () = assert!(SPLIT_WS_BYTES >= SPLIT_PARTIAL_BYTES);
pub const SPLIT_COUNTERS: usize = amdahl_kernels::linear::SPLIT_TILES;
/// Weight ranges one [`Gpu::prefetch_l2`] launch takes (the kernel's parameters).
pub const PREFETCH_RANGES: usize = 4;

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish()
    }
}

impl Gpu {
    /// Opens GPU `ordinal`, compiles (or loads from the cache) every kernel module for its
    /// architecture and resolves every entry point; programmatic launches as `AMDAHL_PDL` asks.
    pub fn open(ordinal: usize) -> Result<Self> {
        Self::open_with(ordinal, Pdl::requested())
    }

    /// [`Gpu::open`] with the kernels built and launched for programmatic dependent launch as
    /// `pdl` says (where the GPU has it).
    pub fn open_with(ordinal: usize, pdl: Pdl) -> Result<Self> {
        if !driver_present() {
            return Err(EngineError::Device(
                "the CUDA driver (libcuda) was not found on this machine; use --device cpu".into(),
            ));
        }
        let count = CudaContext::device_count().map_err(|e| dev_err("cuDeviceGetCount", e))?;
        if ordinal >= count.max(0) as usize {
            return Err(EngineError::Device(format!(
                "cuda:{ordinal} does not exist: this machine has {count} CUDA device(s)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| dev_err("creating the CUDA context", e))?;
        // SAFETY: no cudarc-tracked buffers are ever used; this worker orders its stream itself.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| dev_err("creating a stream", e))?;
        let side = ctx
            .new_stream()
            .map_err(|e| dev_err("creating the side stream", e))?;
        let sync_event = || {
            drv::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map(|ev| Event {
                    ev,
                    ctx: ctx.clone(),
                })
                .map_err(|e| dev_err("creating a fork event", e))
        };
        let (fork_ev, join_ev) = (sync_event()?, sync_event()?);
        let ahead = ctx
            .new_stream()
            .map_err(|e| dev_err("creating the prefetch stream", e))?;
        let (ahead_fork, ahead_join) = (sync_event()?, sync_event()?);
        let cc = ctx
            .compute_capability()
            .map_err(|e| dev_err("compute capability", e))?;
        let attr = |a| ctx.attribute(a).map_err(|e| dev_err("device attribute", e));
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
        let max_smem_optin =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as usize;
        let info = GpuInfo {
            ordinal,
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            compute_capability: cc,
            sms,
            total_mem: ctx.total_mem().unwrap_or(0),
            max_smem_optin,
        };
        let arch = (cc.0 * 10 + cc.1) as u32;
        let pdl = pdl.for_arch(arch);
        let dir = compile::cache_dir();
        let mut modules = Vec::new();
        let mut funcs = HashMap::new();
        for m in amdahl_kernels::MODULES {
            let c = compile::compile_cached(m.name, &m.full_source(), arch, pdl, &dir)?;
            tracing::info!(
                module = m.name,
                cached = c.cached,
                seconds = c.seconds,
                "kernel module ready"
            );
            let module = ctx
                .load_module(Ptx::from_binary(c.cubin))
                .map_err(|e| dev_err(&format!("loading kernel module {}", m.name), e))?;
            modules.push(module);
        }
        for (mname, ename) in amdahl_kernels::all_entries() {
            let idx = amdahl_kernels::MODULES
                .iter()
                .position(|m| m.name == mname)
                .ok_or_else(|| EngineError::Device(format!("no module {mname}")))?;
            let f = modules[idx]
                .load_function(&ename)
                .map_err(|e| dev_err(&format!("kernel {ename} in {mname}.cu"), e))?;
            let cf = f.cu_function();
            // Let every kernel use the device's full shared memory (less its static part) when
            // a launch asks for it.
            // SAFETY: valid function handle of a loaded module.
            unsafe {
                let fixed = drv::function::get_function_attribute(
                    cf,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                )
                .unwrap_or(0);
                drv::function::set_function_attribute(
                    cf,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    max_smem_optin as i32 - fixed,
                )
                .map_err(|e| dev_err(&format!("shared memory limit of {ename}"), e))?;
            }
            funcs.insert(ename, cf);
        }
        let mut gpu = Self {
            info,
            ctx,
            stream,
            side,
            on_side: AtomicBool::new(false),
            unjoined: AtomicBool::new(false),
            forks: AtomicBool::new(std::env::var("AMDAHL_FORK").map_or(true, |v| v != "0")),
            programmatic: AtomicBool::new(true),
            fork_ev,
            join_ev,
            ahead,
            ahead_fork,
            ahead_join,
            ahead_unjoined: AtomicBool::new(false),
            pdl,
            _modules: modules,
            funcs,
            split_ws: None,
            side_ws: None,
        };
        let ws = gpu.zeros(SPLIT_WS_BYTES + SPLIT_COUNTERS * 4)?;
        let side_ws = gpu.zeros(SPLIT_WS_BYTES + SPLIT_COUNTERS * 4)?;
        gpu.sync()?;
        gpu.split_ws = Some(ws);
        gpu.side_ws = Some(side_ws);
        Ok(gpu)
    }

    /// The split-K workspace of the stream launches go to: (partial tiles, tile counters)
    /// device pointers.
    pub fn split_ws(&self) -> (u64, u64) {
        let ws = if self.on_side.load(Ordering::Relaxed) {
            &self.side_ws
        } else {
            &self.split_ws
        };
        let p = ws.as_ref().map_or(0, |b| b.ptr);
        (p, p + SPLIT_WS_BYTES as u64)
    }

    /// Runs `side` with every launch on the side stream, after all the main stream's work so
    /// far; the main stream goes on at once. [`Gpu::join`] makes the main stream wait for it.
    /// With `AMDAHL_FORK=0` the side work runs on the main stream, in order.
    pub fn fork(&self, side: impl FnOnce() -> Result<()>) -> Result<()> {
        if !self.forks.load(Ordering::Relaxed) {
            return side();
        }
        if self.on_side.load(Ordering::Relaxed) || self.unjoined.load(Ordering::Relaxed) {
            return Err(EngineError::Device(
                "a fork inside an unjoined fork (one side stream only)".into(),
            ));
        }
        // SAFETY: live events and streams of this context.
        unsafe {
            sys::cuEventRecord(self.fork_ev.ev, self.stream.cu_stream())
                .result()
                .map_err(|e| dev_err("recording the fork event", e))?;
            sys::cuStreamWaitEvent(self.side.cu_stream(), self.fork_ev.ev, 0)
                .result()
                .map_err(|e| dev_err("side stream waiting on the fork", e))?;
        }
        self.on_side.store(true, Ordering::Relaxed);
        self.unjoined.store(true, Ordering::Relaxed);
        let r = side();
        self.on_side.store(false, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { sys::cuEventRecord(self.join_ev.ev, self.side.cu_stream()) }
            .result()
            .map_err(|e| dev_err("recording the join event", e))?;
        if r.is_err() {
            // The step fails; leave the streams joined so the next one starts clean.
            self.join()?;
        }
        r
    }

    /// Turns the side stream on or off for later forks (off: their work runs in order on the
    /// main stream; the tests compare the two).
    pub fn set_forks(&self, on: bool) -> Result<()> {
        self.check_joined("switching forks")?;
        self.forks.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// How kernels are built and launched (programmatic dependents unless `Pdl::Off`).
    pub fn pdl(&self) -> Pdl {
        self.pdl
    }

    /// Launches later kernels of a `pdl` build as programmatic dependents (`true`, the default)
    /// or plainly: their `pdl_enter()` wait then returns at once (a plain launch starts after
    /// its predecessor ends). No effect on a build without `pdl_enter()` waits.
    pub fn set_programmatic(&self, on: bool) {
        self.programmatic.store(on, Ordering::Relaxed);
    }

    /// Makes the main stream wait for the side work of the last [`Gpu::fork`].
    pub fn join(&self) -> Result<()> {
        if !self.unjoined.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        // SAFETY: live event and stream of this context.
        unsafe { sys::cuStreamWaitEvent(self.stream.cu_stream(), self.join_ev.ev, 0) }
            .result()
            .map_err(|e| dev_err("joining the side stream", e))
    }

    /// Prefetches `ranges` (device pointer, bytes) into L2 on the prefetch stream, after the
    /// main stream's work so far; the main stream goes on at once. Nothing waits for the
    /// prefetches: a later kernel that reads those bytes finds them in L2 if they arrived and
    /// stayed, else reads DRAM as before. At most [`PREFETCH_RANGES`] ranges; empty ranges are
    /// skipped; sm_90+ only (bulk prefetches), elsewhere nothing is issued.
    pub fn prefetch_l2(&self, ranges: &[(u64, usize)]) -> Result<()> {
        if ranges.len() > PREFETCH_RANGES {
            return Err(EngineError::Device(format!(
                "{} prefetch ranges in one launch; at most {PREFETCH_RANGES}",
                ranges.len()
            )));
        }
        let pieces: usize = ranges
            .iter()
            .map(|r| r.1.div_ceil(amdahl_kernels::util::PREFETCH_PIECE))
            .sum();
        let mut args = Args::new();
        for i in 0..PREFETCH_RANGES {
            let (p, n) = ranges.get(i).copied().unwrap_or((0, 0));
            args.ptr(p).i64(n as i64);
        }
        self.launch_ahead(amdahl_kernels::util::PREFETCH_L2.name, pieces, &mut args)
    }

    /// L2 prefetches of the active experts' share of a stacked expert weight: expert e's codes
    /// `[w + e·w_bytes, + w_bytes)` and scales `[s + e·s_bytes, + s_bytes)` (`s` may be 0), for
    /// the first `slots` experts of the active list `act_list` (device: count, then ids, as the
    /// MoE plan writes it), on the prefetch stream after the main stream's work so far (the
    /// plan included). As [`Gpu::prefetch_l2`]: a hint nothing waits for; sm_90+.
    pub fn prefetch_l2_experts(
        &self,
        act_list: u64,
        slots: usize,
        (w, w_bytes): (u64, usize),
        (s, s_bytes): (u64, usize),
    ) -> Result<()> {
        let piece = amdahl_kernels::util::PREFETCH_PIECE;
        let s_bytes = if s == 0 { 0 } else { s_bytes };
        let pieces = slots * (w_bytes.div_ceil(piece) + s_bytes.div_ceil(piece));
        let mut args = Args::new();
        args.ptr(act_list)
            .usize(slots)
            .ptr(w)
            .i64(w_bytes as i64)
            .ptr(s)
            .i64(s_bytes as i64);
        self.launch_ahead(
            amdahl_kernels::util::PREFETCH_L2_EXPERTS.name,
            pieces,
            &mut args,
        )
    }

    /// Launches `name` over `pieces` prefetch pieces (a thread each) on the prefetch stream
    /// after the main stream's work so far: refused inside a fork; nothing to do for no pieces
    /// or before sm_90.
    fn launch_ahead(&self, name: &str, pieces: usize, args: &mut Args) -> Result<()> {
        if self.on_side.load(Ordering::Relaxed) {
            return Err(EngineError::Device(
                "an L2 prefetch from inside a fork (issue it from the main stream)".into(),
            ));
        }
        if pieces == 0 || self.info.compute_capability.0 < 9 {
            return Ok(());
        }
        let threads = amdahl_kernels::util::PREFETCH_THREADS;
        let l = Launch::new((pieces.div_ceil(threads), 1, 1), threads, 0);
        // SAFETY: live events and streams of this context.
        unsafe {
            sys::cuEventRecord(self.ahead_fork.ev, self.stream.cu_stream())
                .result()
                .map_err(|e| dev_err("recording the prefetch fork event", e))?;
            sys::cuStreamWaitEvent(self.ahead.cu_stream(), self.ahead_fork.ev, 0)
                .result()
                .map_err(|e| dev_err("prefetch stream waiting on the fork", e))?;
        }
        self.launch_to(self.ahead.cu_stream(), name, l, args)?;
        // SAFETY: as above.
        unsafe { sys::cuEventRecord(self.ahead_join.ev, self.ahead.cu_stream()) }
            .result()
            .map_err(|e| dev_err("recording the prefetch join event", e))?;
        self.ahead_unjoined.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the main stream wait for the prefetch stream's launches so far (before a capture
    /// ends or the step's buffers are read back).
    pub fn join_prefetch(&self) -> Result<()> {
        if !self.ahead_unjoined.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        // SAFETY: live event and stream of this context.
        unsafe { sys::cuStreamWaitEvent(self.stream.cu_stream(), self.ahead_join.ev, 0) }
            .result()
            .map_err(|e| dev_err("joining the prefetch stream", e))
    }

    /// An error when a fork's side work is still unjoined (before stage marks, capture ends
    /// and synchronizations, which would otherwise race with it or see it unfinished).
    fn check_joined(&self, what: &str) -> Result<()> {
        if self.unjoined.load(Ordering::Relaxed) {
            return Err(EngineError::Device(format!(
                "{what} while a fork's side work is unjoined (Gpu::join missing)"
            )));
        }
        Ok(())
    }

    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| dev_err("binding the CUDA context", e))
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The stream launches go to now: the main one, or the side one inside a fork.
    pub fn cu_stream(&self) -> sys::CUstream {
        if self.on_side.load(Ordering::Relaxed) {
            self.side.cu_stream()
        } else {
            self.stream.cu_stream()
        }
    }

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

    pub fn sync(&self) -> Result<()> {
        self.check_joined("a stream synchronize")?;
        self.join_prefetch()?;
        self.stream
            .synchronize()
            .map_err(|e| dev_err("stream synchronize (a kernel may have faulted)", e))
    }

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
    fn launch_to(
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

    /// A timing event.
    pub fn event(&self) -> Result<Event> {
        self.bind()?;
        let ev = drv::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| dev_err("creating an event", e))?;
        Ok(Event {
            ev,
            ctx: self.ctx.clone(),
        })
    }

    /// Records `ev` on the stream. Inside a stream capture the record must be an external one
    /// (CU_EVENT_RECORD_EXTERNAL) to give a usable timestamp at replay.
    pub fn record(&self, ev: &Event, capturing: bool) -> Result<()> {
        self.check_joined("an event record")?;
        let flags = if capturing { 1 } else { 0 };
        // SAFETY: live event and stream of this context.
        unsafe { sys::cuEventRecordWithFlags(ev.ev, self.cu_stream(), flags) }
            .result()
            .map_err(|e| dev_err("recording an event", e))
    }

    /// Begins capturing the stream into a graph.
    pub fn begin_capture(&self) -> Result<()> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| dev_err("begin stream capture", e))
    }

    /// Ends the capture and instantiates the graph.
    pub fn end_capture(&self) -> Result<cudarc::driver::CudaGraph> {
        self.check_joined("the end of a stream capture")?;
        self.join_prefetch()?;
        self.stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(|e| dev_err("end stream capture", e))?
            .ok_or_else(|| EngineError::Device("stream capture produced no graph".into()))
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}
