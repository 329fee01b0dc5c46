//! How the CUDA kernels are built and launched with respect to programmatic dependent launch
//! (device-independent, so builds without the `cuda` feature name it too).

/// Programmatic dependent launch (sm_90+): how the kernels are built and launched. `Wait` by
/// default (measured on the GPU: −4% per layer at batch 1, even at 16 and 64 tokens, docs/PERF.md);
/// `AMDAHL_PDL=0` turns it off, `AMDAHL_PDL=2` adds the prefetches (slower at 16 and 64 tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pdl {
    /// Plain launches; `pdl_enter()` compiles to nothing.
    Off = 0,
    /// Every kernel waits for its predecessor in `pdl_enter()` and is launched as its
    /// programmatic dependent.
    Wait = 1,
    /// As `Wait`, the decode linears and the router also prefetching their weights into L2
    /// before the wait.
    Prefetch = 2,
}

impl Pdl {
    pub const ALL: [Pdl; 3] = [Pdl::Off, Pdl::Wait, Pdl::Prefetch];

    /// `AMDAHL_PDL`: 0 → `Off`, 2 → `Prefetch`, anything else (or unset) → `Wait`.
    pub fn requested() -> Self {
        match std::env::var("AMDAHL_PDL").as_deref() {
            Ok("0") => Pdl::Off,
            Ok("2") => Pdl::Prefetch,
            _ => Pdl::Wait,
        }
    }

    /// `self` where `sm_{arch}` has programmatic dependent launch (Hopper and later), else `Off`.
    pub fn for_arch(self, arch: u32) -> Self {
        if arch >= 90 { self } else { Pdl::Off }
    }
}
