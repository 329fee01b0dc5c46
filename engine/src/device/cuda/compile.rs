//! NVRTC compilation of the kernel modules to CUBIN for one GPU architecture, with an on-disk
//! cache keyed by (NVRTC version, options, architecture, source). A cache filled on a machine
//! without a GPU (CI, or a developer machine) is valid on the GPU machine with the same NVRTC:
//! kernels then load without compiling.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::sys as nv;

use crate::device::Pdl;
use crate::error::{EngineError, Result};

fn dev(msg: String) -> EngineError {
    EngineError::Device(msg)
}

/// Is libnvrtc loadable (checked before any NVRTC call: cudarc panics otherwise)?
pub fn nvrtc_present() -> bool {
    // SAFETY: only probes whether the shared library can be opened.
    unsafe { nv::is_culib_present() }
}

/// NVRTC (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    if !nvrtc_present() {
        return Err(dev(
            "libnvrtc was not found (install the CUDA toolkit's NVRTC, or pip \
             nvidia-cuda-nvrtc==13.0.*, and put its lib folder on LD_LIBRARY_PATH)"
                .into(),
        ));
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: plain out-parameters.
    let r = unsafe { nv::nvrtcVersion(&mut a, &mut b) };
    if r != nv::nvrtcResult::NVRTC_SUCCESS {
        return Err(dev(format!("nvrtcVersion failed: {r:?}")));
    }
    Ok((a, b))
}

/// Options every module is compiled with, for `sm_{arch}`.
pub fn options(arch: u32, pdl: Pdl) -> Vec<String> {
    // sm_90 as sm_90a: the warpgroup MMAs (`attention_wg.cu`) exist only in the
    // architecture-specific target, and an sm_90a image runs on every sm_90 part.
    let target = if arch == 90 {
        "90a".to_string()
    } else {
        arch.to_string()
    };
    let mut o = vec![
        format!("--gpu-architecture=sm_{target}"),
        "--std=c++17".into(),
        "-default-device".into(),
    ];
    let pdl = pdl.for_arch(arch);
    if pdl != Pdl::Off {
        o.push(format!("-DAMDAHL_PDL={}", pdl as u8));
    }
    o
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where compiled kernels are kept: `$AMDAHL_KERNEL_CACHE`, else `$XDG_CACHE_HOME/amdahl/kernels`,
/// else `~/.cache/amdahl/kernels`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AMDAHL_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("amdahl").join("kernels")
}

/// A compiled module image and whether it came from the cache.
#[derive(Debug)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub cached: bool,
    pub seconds: f64,
}

/// CUBIN of `source` for `sm_{arch}`, from the cache in `dir` or freshly compiled (and stored).
pub fn compile_cached(
    name: &str,
    source: &str,
    arch: u32,
    pdl: Pdl,
    dir: &Path,
) -> Result<Compiled> {
    let t0 = std::time::Instant::now();
    let (ma, mi) = nvrtc_version()?;
    let opts = options(arch, pdl);
    let key = fnv1a(&[
        format!("nvrtc {ma}.{mi}").as_bytes(),
        opts.join(" ").as_bytes(),
        source.as_bytes(),
    ]);
    let path = dir.join(format!("{name}-sm{arch}-{key:016x}.cubin"));
    if let Ok(bytes) = std::fs::read(&path)
        && !bytes.is_empty()
    {
        return Ok(Compiled {
            cubin: bytes,
            cached: true,
            seconds: t0.elapsed().as_secs_f64(),
        });
    }
    let cubin = compile(name, source, &opts)?;
    // A cache that cannot be written only costs time on the next start.
    if std::fs::create_dir_all(dir).is_ok() {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &cubin).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(Compiled {
        cubin,
        cached: false,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Compiles one module to CUBIN; a compile error carries NVRTC's log.
pub fn compile(name: &str, source: &str, opts: &[String]) -> Result<Vec<u8>> {
    let src = CString::new(source).map_err(|_| dev(format!("{name}.cu contains a NUL byte")))?;
    let cname = CString::new(format!("{name}.cu")).map_err(|_| dev("bad module name".into()))?;
    let copts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|_| dev("bad NVRTC option".into())))
        .collect::<Result<_>>()?;
    let ptrs: Vec<*const std::ffi::c_char> = copts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC C API with valid NUL-terminated strings that outlive the program; the
    // program is destroyed on every path below.
    unsafe {
        let r = nv::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            return Err(dev(format!("nvrtcCreateProgram({name}) failed: {r:?}")));
        }
        let r = nv::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr());
        let log = program_log(prog);
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            nv::nvrtcDestroyProgram(&mut prog);
            return Err(dev(format!(
                "NVRTC could not compile {name}.cu ({r:?}):\n{log}"
            )));
        }
        let mut size = 0usize;
        let r = nv::nvrtcGetCUBINSize(prog, &mut size);
        let mut out = vec![0u8; size];
        let r2 = if r == nv::nvrtcResult::NVRTC_SUCCESS && size > 0 {
            nv::nvrtcGetCUBIN(prog, out.as_mut_ptr().cast())
        } else {
            r
        };
        nv::nvrtcDestroyProgram(&mut prog);
        if r2 != nv::nvrtcResult::NVRTC_SUCCESS || size == 0 {
            return Err(dev(format!(
                "NVRTC produced no CUBIN for {name}.cu ({r2:?})"
            )));
        }
        Ok(out)
    }
}

/// # Safety
/// `prog` must be a live NVRTC program.
unsafe fn program_log(prog: nv::nvrtcProgram) -> String {
    let mut n = 0usize;
    // SAFETY: per the caller's contract.
    unsafe {
        if nv::nvrtcGetProgramLogSize(prog, &mut n) != nv::nvrtcResult::NVRTC_SUCCESS || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n];
        if nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr().cast()) != nv::nvrtcResult::NVRTC_SUCCESS {
            return String::new();
        }
        CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Compiles every module of `amdahl-kernels` for `sm_{arch}` in the `pdl` build into `dir`
/// (CI's compile check and the pre-fill of a cache carried to a GPU machine). Returns (module,
/// seconds, cached).
pub fn compile_all(arch: u32, pdl: Pdl, dir: &Path) -> Result<Vec<(&'static str, f64, bool)>> {
    amdahl_kernels::MODULES
        .iter()
        .map(|m| {
            let c = compile_cached(m.name, &m.full_source(), arch, pdl, dir)?;
            Ok((m.name, c.seconds, c.cached))
        })
        .collect()
}
