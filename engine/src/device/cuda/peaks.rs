//! The GPU's roofline peaks, measured on the device itself: streaming copy bandwidth (bytes read
//! plus bytes written by a 16-byte-per-thread copy kernel over 2 × 1 GiB, best of 10), a bf16
//! GEMM through cuBLAS (8192³, f32 accumulation, best of 5), and the one-shot reads: the time
//! one launch that only reads N bytes takes, for the stages' launch-bound floors.

use cudarc::cublas::result as blas;
use cudarc::cublas::sys as bsys;

use amdahl_kernels::util as ku;

use crate::device::profiling::ReadFloor;
use crate::error::Result;
use crate::profile::report::Peaks;

use super::gpu::{Args, Gpu, Launch, dev_err};

/// Copy bandwidth, bytes/s (read + write).
pub fn copy_bandwidth(gpu: &Gpu) -> Result<f64> {
    let bytes = 1usize << 30;
    let src = gpu.zeros(bytes)?;
    let dst = gpu.zeros(bytes)?;
    let n = (bytes / 16) as i64;
    let l = Launch::new((gpu.info.sms * 8, 1, 1), 256, 0);
    let (a, b) = (gpu.event()?, gpu.event()?);
    let mut best = f64::INFINITY;
    for i in 0..11 {
        gpu.record(&a, false)?;
        gpu.launch(ku::COPY_U128, l, Args::new().buf(&src).buf(&dst).i64(n))?;
        gpu.record(&b, false)?;
        b.synchronize()?;
        if i > 0 {
            best = best.min(f64::from(a.elapsed_ms(&b)?) / 1e3);
        }
    }
    Ok(2.0 * bytes as f64 / best)
}

/// Sizes of the one-shot read probe: the empty kernel, then 1 to 64 MiB (a decode step's
/// launches read from a few KB to the 32-MB attention linears and the ~50-MB expert projections),
/// and 256 MiB, where a launch is long enough that its start and end no longer count (the
/// steady read rate, and the segment a stage's larger shares are extrapolated along).
const READ_SIZES: [usize; 9] = [
    0,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
    256 << 20,
];

/// Launches per timed graph of the probe: at least 32, and enough that one graph reads 256 MiB,
/// so a replay finds none of the previous replay's slices in L2 (50–60 MB on an H100 / H200).
fn read_chain(bytes: usize) -> usize {
    if bytes == 0 {
        32
    } else {
        (256usize << 20).div_ceil(bytes).max(32)
    }
}

/// One-shot reads: per size, the device time per launch of a chain of `probe_read` launches in
/// one CUDA graph (launched as the decode step's kernels are, programmatic where they are), each
/// reading a different slice of a 1 GiB buffer so every byte comes from DRAM; best of 5 replays.
pub fn read_floors(gpu: &Gpu) -> Result<Vec<ReadFloor>> {
    let pool = 1usize << 30;
    let src = gpu.zeros(pool)?;
    let sink = gpu.zeros(16)?;
    let l = Launch::new((gpu.info.sms * 8, 1, 1), 256, 0);
    let (a, b) = (gpu.event()?, gpu.event()?);
    let mut out = Vec::new();
    for &bytes in &READ_SIZES {
        let (slices, chain) = (pool / bytes.max(1), read_chain(bytes));
        gpu.begin_capture()?;
        let r = (0..chain).try_for_each(|i| {
            let at = src.ptr() + ((i % slices) * bytes) as u64;
            gpu.launch(
                ku::PROBE_READ,
                l,
                Args::new()
                    .ptr(at)
                    .i64((bytes / 16) as i64)
                    .i32(0x1e37_79b9)
                    .buf(&sink),
            )
        });
        let graph = gpu.end_capture();
        r?;
        let graph = graph?;
        let mut best = f64::INFINITY;
        for i in 0..6 {
            gpu.record(&a, false)?;
            graph.launch().map_err(|e| dev_err("graph launch", e))?;
            gpu.record(&b, false)?;
            b.synchronize()?;
            if i > 0 {
                best = best.min(f64::from(a.elapsed_ms(&b)?) / 1e3);
            }
        }
        out.push(ReadFloor {
            bytes: bytes as u64,
            seconds: best / chain as f64,
        });
    }
    Ok(out)
}

/// bf16 GEMM FLOP/s through cuBLAS.
pub fn gemm_flops(gpu: &Gpu) -> Result<f64> {
    let n = 8192usize;
    let a = gpu.zeros(n * n * 2)?;
    let b = gpu.zeros(n * n * 2)?;
    let c = gpu.zeros(n * n * 2)?;
    gpu.bind()?;
    let h = blas::create_handle().map_err(|e| dev_err("cublasCreate", e))?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (e0, e1) = (gpu.event()?, gpu.event()?);
    let mut best = f64::INFINITY;
    // SAFETY: handle and buffers are live for the calls; sizes match n×n bf16.
    let r = (|| -> Result<()> {
        unsafe { blas::set_stream(h, gpu.cu_stream() as bsys::cudaStream_t) }
            .map_err(|e| dev_err("cublasSetStream", e))?;
        for i in 0..6 {
            gpu.record(&e0, false)?;
            unsafe {
                blas::gemm_ex(
                    h,
                    bsys::cublasOperation_t::CUBLAS_OP_N,
                    bsys::cublasOperation_t::CUBLAS_OP_N,
                    n as i32,
                    n as i32,
                    n as i32,
                    (&alpha as *const f32).cast(),
                    a.ptr() as *const std::ffi::c_void,
                    bsys::cudaDataType::CUDA_R_16BF,
                    n as i32,
                    b.ptr() as *const std::ffi::c_void,
                    bsys::cudaDataType::CUDA_R_16BF,
                    n as i32,
                    (&beta as *const f32).cast(),
                    c.ptr() as *mut std::ffi::c_void,
                    bsys::cudaDataType::CUDA_R_16BF,
                    n as i32,
                    bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            }
            .map_err(|e| dev_err("cublasGemmEx", e))?;
            gpu.record(&e1, false)?;
            e1.synchronize()?;
            if i > 0 {
                best = best.min(f64::from(e0.elapsed_ms(&e1)?) / 1e3);
            }
        }
        Ok(())
    })();
    // SAFETY: created above, destroyed once.
    let _ = unsafe { blas::destroy_handle(h) };
    r?;
    Ok(2.0 * (n as f64).powi(3) / best)
}

/// Both peaks (a second or two on an H200).
pub fn measure(gpu: &Gpu) -> Result<Peaks> {
    Ok(Peaks {
        bandwidth: copy_bandwidth(gpu)?,
        flops: gemm_flops(gpu)?,
    })
}
