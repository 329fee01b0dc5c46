//! How the CUDA kernels are built and launched with respect to programmatic dependent launch
//! (device-independent, so builds without the `cuda` feature name it too).

/// Programmatic dependent launch (sm_90+): how the kernels are built and launched. Opt-in
/// (`AMDAHL_PDL=1|2`) until it is measured on the GPU (docs/PERF.md).
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

    /// `AMDAHL_PDL`: 1 → `Wait`, 2 → `Prefetch`, anything else (or unset) → `Off`.
    pub fn requested() -> Self {
        match std::env::var("AMDAHL_PDL").as_deref() {
            Ok("1") => Pdl::Wait,
            Ok("2") => Pdl::Prefetch,
            _ => Pdl::Off,
        }
    }

    /// `self` where `sm_{arch}` has programmatic dependent launch (Hopper and later), else `Off`.
    pub fn for_arch(self, arch: u32) -> Self {
        if arch >= 90 { self } else { Pdl::Off }
    }
}
