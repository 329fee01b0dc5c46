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

mod launch;
mod mem;
mod streams;

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

pub use launch::{Args, Launch};
pub use mem::DevBuf;
pub use streams::{Event, PREFETCH_RANGES};

pub(crate) fn dev_err(what: &str, e: impl std::fmt::Debug) -> EngineError {
    EngineError::Device(format!("{what}: {e:?}"))
}

/// Is the CUDA driver library loadable?
pub fn driver_present() -> bool {
    // SAFETY: only probes whether libcuda can be opened.
    unsafe { sys::is_culib_present() }
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
    /// Scratch of the FP8 activations (`AMDAHL_FP8_ACT=1`, launch/linear_wg.rs `fp8_rows`):
    /// [`ACT_WS_BYTES`] for the main stream, then as many for the side stream.
    act_ws: Option<DevBuf>,
}

/// Bytes of quantized activations one stream's scratch holds: a 2048-token prefill chunk of
/// V4-Flash's 4096-wide hidden state (dense linears past it run in row chunks).
pub const ACT_WS_BYTES: usize = 16 << 20;

/// Bytes of split-K partial tiles the decode kernels may use, and tile counters, in
/// [`Gpu::split_ws`]; the tiled GEMM's partial tiles may use the whole buffer ([`SPLIT_WS_BYTES`]:
/// wo_b at 64 tokens is 16 tiles of 256 rows × 64 tokens, 64 KiB each, per split).
pub const SPLIT_PARTIAL_BYTES: usize = amdahl_kernels::linear::SPLIT_PARTS * 4;
pub const SPLIT_WS_BYTES: usize = 16 << 20;
const _: () = assert!(SPLIT_WS_BYTES >= SPLIT_PARTIAL_BYTES);
pub const SPLIT_COUNTERS: usize = amdahl_kernels::linear::SPLIT_TILES;
/// Work counters after the tile counters ([`Gpu::work_counters`]): the warp expert kernels'
/// tile queues, two words each (up, down).
pub const WORK_COUNTERS: usize = 4;

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
            Event::new(
                &ctx,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                "a fork event",
            )
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
            act_ws: None,
        };
        let ws = gpu.zeros(SPLIT_WS_BYTES + (SPLIT_COUNTERS + WORK_COUNTERS) * 4)?;
        let side_ws = gpu.zeros(SPLIT_WS_BYTES + (SPLIT_COUNTERS + WORK_COUNTERS) * 4)?;
        gpu.sync()?;
        gpu.split_ws = Some(ws);
        gpu.side_ws = Some(side_ws);
        gpu.act_ws = Some(gpu.alloc(2 * ACT_WS_BYTES)?);
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
        let p = ws.as_ref().map_or(0, DevBuf::ptr);
        (p, p + SPLIT_WS_BYTES as u64)
    }

    /// The FP8 activation scratch of the stream launches go to ([`ACT_WS_BYTES`]).
    pub fn act_ws(&self) -> u64 {
        let p = self.act_ws.as_ref().map_or(0, DevBuf::ptr);
        if self.on_side.load(Ordering::Relaxed) {
            p + ACT_WS_BYTES as u64
        } else {
            p
        }
    }

    /// The [`WORK_COUNTERS`] zeroed words of the stream launches go to (each kernel that uses a
    /// pair leaves it zeroed).
    pub fn work_counters(&self) -> u64 {
        self.split_ws().1 + (SPLIT_COUNTERS * 4) as u64
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

    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| dev_err("binding the CUDA context", e))
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}
