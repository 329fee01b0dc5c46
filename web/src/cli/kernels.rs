//! `amdahl kernels`: compiles every CUDA kernel module with NVRTC for an architecture into the
//! kernel cache, without a GPU. CI runs it as the kernels' compile check; a cache filled here can
//! be carried to a GPU machine with the same NVRTC version, which then starts without compiling.

use std::path::PathBuf;

use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Compute capability as a number (90 = sm_90, H100/H200).
    #[arg(long, default_value_t = 90)]
    arch: u32,
    /// Cache folder (default: $AMDAHL_KERNEL_CACHE or ~/.cache/amdahl/kernels).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Build all three launch builds (plain, programmatic, programmatic with prefetches: what
    /// `AMDAHL_PDL=0|1|2` run); without it, the build this environment's `AMDAHL_PDL` runs.
    #[arg(long)]
    pdl: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = a
        .cache
        .unwrap_or_else(amdahl_engine::device::kernel_cache_dir);
    use amdahl_engine::device::Pdl;
    let variants: Vec<Pdl> = if a.pdl {
        Pdl::ALL.to_vec()
    } else {
        vec![Pdl::requested().for_arch(a.arch)]
    };
    let mut done = Vec::new();
    for pdl in variants {
        let built = amdahl_engine::device::compile_all(a.arch, pdl, &dir)
            .with_context(|| format!("compiling the kernels for sm_{}", a.arch))?;
        for (m, secs, cached) in &built {
            println!(
                "{m:<10} sm_{}{} {}",
                a.arch,
                match pdl {
                    Pdl::Off => "",
                    Pdl::Wait => " pdl=1",
                    Pdl::Prefetch => " pdl=2",
                },
                if *cached {
                    "cached".to_string()
                } else {
                    format!("compiled in {secs:.1} s")
                }
            );
        }
        done.extend(built);
    }
    println!("{} modules ready in {}", done.len(), dir.display());
    Ok(())
}
