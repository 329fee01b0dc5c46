//! The main, side and prefetch streams: forks and joins, L2 prefetches ahead of the kernels that
//! read the weights, events, synchronization and stream capture.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::CudaContext;
use cudarc::driver::result as drv;
use cudarc::driver::sys;

use super::launch::{Args, Launch};
use super::{Gpu, dev_err};
use crate::error::{EngineError, Result};

/// Weight ranges one [`Gpu::prefetch_l2`] launch takes (the kernel's parameters).
pub const PREFETCH_RANGES: usize = 4;

/// A CUDA event (timing enabled). Destroyed when dropped.
#[derive(Debug)]
pub struct Event {
    ev: sys::CUevent,
    ctx: Arc<CudaContext>,
}

impl Event {
    /// A new event of `ctx` (bound to this thread) with `flags`; `what` names it in errors.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        flags: sys::CUevent_flags,
        what: &str,
    ) -> Result<Self> {
        drv::event::create(flags)
            .map(|ev| Event {
                ev,
                ctx: ctx.clone(),
            })
            .map_err(|e| dev_err(&format!("creating {what}"), e))
    }

    /// Milliseconds from `self` to `end` (both must have completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: two live events of this context.
        unsafe { drv::event::elapsed(self.ev, end.ev) }.map_err(|e| dev_err("event elapsed", e))
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live event.
        unsafe { drv::event::synchronize(self.ev) }.map_err(|e| dev_err("event synchronize", e))
    }

    /// Records `self` on `stream` (the work queued there so far); `what` names it in errors.
    fn record(&self, stream: sys::CUstream, what: &str) -> Result<()> {
        // SAFETY: live event; `stream` is a live stream of the same context.
        unsafe { sys::cuEventRecord(self.ev, stream) }
            .result()
            .map_err(|e| dev_err(&format!("recording {what}"), e))
    }

    /// Makes `stream` wait for the work `self` last recorded; `what` names it in errors.
    fn wait_on(&self, stream: sys::CUstream, what: &str) -> Result<()> {
        // SAFETY: live event; `stream` is a live stream of the same context.
        unsafe { sys::cuStreamWaitEvent(stream, self.ev, 0) }
            .result()
            .map_err(|e| dev_err(what, e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: destroyed once.
        let _ = unsafe { drv::event::destroy(self.ev) };
    }
}

impl Gpu {
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
        self.fork_ev
            .record(self.stream.cu_stream(), "the fork event")?;
        self.fork_ev
            .wait_on(self.side.cu_stream(), "side stream waiting on the fork")?;
        self.on_side.store(true, Ordering::Relaxed);
        self.unjoined.store(true, Ordering::Relaxed);
        let r = side();
        self.on_side.store(false, Ordering::Relaxed);
        self.join_ev
            .record(self.side.cu_stream(), "the join event")?;
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

    /// Makes the main stream wait for the side work of the last [`Gpu::fork`].
    pub fn join(&self) -> Result<()> {
        self.join_pending(&self.unjoined, &self.join_ev, "joining the side stream")
    }

    /// Makes the main stream wait for `ev` if `pending` (then clears it).
    fn join_pending(&self, pending: &AtomicBool, ev: &Event, what: &str) -> Result<()> {
        if !pending.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        ev.wait_on(self.stream.cu_stream(), what)
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
        self.ahead_fork
            .record(self.stream.cu_stream(), "the prefetch fork event")?;
        self.ahead_fork.wait_on(
            self.ahead.cu_stream(),
            "prefetch stream waiting on the fork",
        )?;
        self.launch_to(self.ahead.cu_stream(), name, l, args)?;
        self.ahead_join
            .record(self.ahead.cu_stream(), "the prefetch join event")?;
        self.ahead_unjoined.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the main stream wait for the prefetch stream's launches so far (before a capture
    /// ends or the step's buffers are read back).
    pub fn join_prefetch(&self) -> Result<()> {
        self.join_pending(
            &self.ahead_unjoined,
            &self.ahead_join,
            "joining the prefetch stream",
        )
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

    /// The stream launches go to now: the main one, or the side one inside a fork.
    pub fn cu_stream(&self) -> sys::CUstream {
        if self.on_side.load(Ordering::Relaxed) {
            self.side.cu_stream()
        } else {
            self.stream.cu_stream()
        }
    }

    pub fn sync(&self) -> Result<()> {
        self.check_joined("a stream synchronize")?;
        self.join_prefetch()?;
        self.stream
            .synchronize()
            .map_err(|e| dev_err("stream synchronize (a kernel may have faulted)", e))
    }

    /// A timing event.
    pub fn event(&self) -> Result<Event> {
        self.bind()?;
        Event::new(&self.ctx, sys::CUevent_flags::CU_EVENT_DEFAULT, "an event")
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
}
