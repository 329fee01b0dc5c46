//! The MoE backend registry (ARCHITECTURE.md "MoE backends"): each backend declares the expert
//! weight formats it takes and the devices it runs on. `auto` picks the best backend for a
//! (checkpoint format, device) pair; an explicit choice the device cannot run is refused with an
//! error listing what would work. Nothing here touches a device, so the rules are tested on the
//! CPU; the CUDA backend asks this registry before it builds anything.

use std::collections::BTreeSet;

use crate::error::{EngineError, Result};
use crate::quant::Format;

/// Where the MoE runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// A CUDA GPU of compute capability `major.minor` (sm_90 = 9.0, sm_120 = 12.0).
    Cuda {
        major: u32,
        minor: u32,
    },
}

impl Device {
    /// Parses `cpu`, `sm_90`, `sm_100a`, `9.0`, `12.0`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            EngineError::InvalidInput(format!(
                "device `{s}` is not `cpu`, `sm_XY` (e.g. sm_90, sm_120) or `X.Y`"
            ))
        };
        if s == "cpu" {
            return Ok(Device::Cpu);
        }
        if let Some((a, b)) = s.split_once('.') {
            return Ok(Device::Cuda {
                major: a.parse().map_err(|_| bad())?,
                minor: b.parse().map_err(|_| bad())?,
            });
        }
        let digits = s
            .strip_prefix("sm_")
            .ok_or_else(bad)?
            .trim_end_matches(|c: char| c.is_ascii_alphabetic());
        if digits.len() < 2 {
            return Err(bad());
        }
        let (a, b) = digits.split_at(digits.len() - 1);
        Ok(Device::Cuda {
            major: a.parse().map_err(|_| bad())?,
            minor: b.parse().map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda { major, minor } => write!(f, "sm_{major}{minor}"),
        }
    }
}

/// A way to run the routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MoeBackend {
    /// FP4/FP8 weights dequantized in registers, BF16 activations (W4A16 / W8A16).
    Dequant,
    /// FP8 block-scaled weights, FP8 per-token-group activations.
    Fp8,
    /// NVFP4/MXFP4 weights with FP4 activations on FP4 tensor cores (W4A4).
    NativeFp4,
    /// BF16 weights and activations.
    Bf16,
    /// The CPU reference: any format, dequantized tile by tile, f32 activations.
    Cpu,
}

/// Every backend, in `auto`'s order of preference.
pub const ALL: [MoeBackend; 5] = [
    MoeBackend::NativeFp4,
    MoeBackend::Fp8,
    MoeBackend::Dequant,
    MoeBackend::Bf16,
    MoeBackend::Cpu,
];

impl MoeBackend {
    pub fn name(self) -> &'static str {
        match self {
            MoeBackend::Dequant => "dequant",
            MoeBackend::Fp8 => "fp8",
            MoeBackend::NativeFp4 => "native-fp4",
            MoeBackend::Bf16 => "bf16",
            MoeBackend::Cpu => "cpu",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        ALL.into_iter().find(|b| b.name() == s)
    }

    /// Whether the backend takes expert weights stored as `f`.
    pub fn takes(self, f: Format) -> bool {
        use Format::*;
        match self {
            MoeBackend::Dequant => {
                matches!(f, Nvfp4 | Mxfp4 | Fp8BlockE8m0 | Fp8BlockF32 | Fp8Tensor)
            }
            MoeBackend::Fp8 => matches!(f, Fp8BlockE8m0 | Fp8BlockF32),
            MoeBackend::NativeFp4 => matches!(f, Nvfp4 | Mxfp4),
            MoeBackend::Bf16 => matches!(f, Bf16 | F16 | F32),
            MoeBackend::Cpu => true,
        }
    }

    /// The formats the backend takes, for messages.
    pub fn formats(self) -> &'static str {
        match self {
            MoeBackend::Dequant => "NVFP4, MXFP4, FP8",
            MoeBackend::Fp8 => "FP8 block-scaled",
            MoeBackend::NativeFp4 => "NVFP4, MXFP4",
            MoeBackend::Bf16 => "BF16 (F16/F32 converted)",
            MoeBackend::Cpu => "any",
        }
    }

    /// The devices the backend runs on, for messages.
    pub fn devices(self) -> &'static str {
        match self {
            MoeBackend::Dequant => "CUDA sm_80+",
            MoeBackend::Fp8 => "CUDA sm_89+",
            MoeBackend::NativeFp4 => "CUDA sm_100 / sm_120 families (FP4 tensor cores)",
            MoeBackend::Bf16 => "any CUDA GPU",
            MoeBackend::Cpu => "CPU",
        }
    }

    fn runs_on(self, d: Device) -> bool {
        match (self, d) {
            (MoeBackend::Cpu, Device::Cpu) => true,
            (MoeBackend::Cpu, _) | (_, Device::Cpu) => false,
            (MoeBackend::Dequant, Device::Cuda { major, .. }) => major >= 8,
            (MoeBackend::Fp8, Device::Cuda { major, minor }) => (major, minor) >= (8, 9),
            (MoeBackend::NativeFp4, Device::Cuda { major, .. }) => major == 10 || major == 12,
            (MoeBackend::Bf16, Device::Cuda { .. }) => true,
        }
    }

    /// `Ok` if the backend can run experts stored in `formats` on `device`, else why not.
    pub fn check(self, formats: &BTreeSet<Format>, device: Device) -> Result<(), String> {
        let mut why = Vec::new();
        let refused: Vec<&str> = formats
            .iter()
            .filter(|f| !self.takes(**f))
            .map(|f| f.name())
            .collect();
        if !refused.is_empty() {
            why.push(format!(
                "takes {} weights, experts are {}",
                self.formats(),
                refused.join(", ")
            ));
        }
        if !self.runs_on(device) {
            why.push(format!("needs {}, this device is {device}", self.devices()));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }
}

impl MoeBackend {
    /// Whether this build has kernels for the backend on `d`: the CPU reference on the CPU; on
    /// CUDA the `dequant` path (FP4/FP8 dequantized to bf16 in registers) and `bf16`. `fp8`
    /// (W8A8) and `native-fp4` (W4A4) have no kernels yet.
    pub fn built(self, d: Device) -> bool {
        match d {
            Device::Cpu => self == MoeBackend::Cpu,
            Device::Cuda { .. } => matches!(self, MoeBackend::Dequant | MoeBackend::Bf16),
        }
    }
}

/// Resolves a request among the backends this build has kernels for: `auto` takes the best one
/// that runs; an explicit choice the hardware could run but this build cannot is refused too,
/// never rerouted silently.
pub fn choose_built(
    choice: Choice,
    formats: &BTreeSet<Format>,
    device: Device,
) -> Result<MoeBackend> {
    let runs = |b: MoeBackend| b.check(formats, device).is_ok() && b.built(device);
    let working: Vec<&str> = ALL.iter().filter(|b| runs(**b)).map(|b| b.name()).collect();
    let fmts: Vec<&str> = formats.iter().map(|f| f.name()).collect();
    match choice {
        Choice::Auto => ALL.iter().copied().find(|b| runs(*b)).ok_or_else(|| {
            EngineError::Device(format!(
                "no MoE backend of this build runs experts stored as {} on {device}",
                fmts.join(", ")
            ))
        }),
        Choice::Explicit(b) if runs(b) => Ok(b),
        Choice::Explicit(b) => {
            let why = match b.check(formats, device) {
                Err(why) => why,
                Ok(()) => format!(
                    "{device} could run it, but this build has no {} kernels yet",
                    b.name()
                ),
            };
            Err(EngineError::Device(format!(
                "MoE backend `{}` cannot run experts stored as {} on {device}: {why}; backends that would work: {}",
                b.name(),
                fmts.join(", "),
                if working.is_empty() {
                    "none".to_string()
                } else {
                    working.join(", ")
                }
            )))
        }
    }
}

/// A user's backend request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Explicit(MoeBackend),
}

impl Choice {
    pub fn parse(s: &str) -> Result<Self> {
        if s == "auto" {
            return Ok(Choice::Auto);
        }
        MoeBackend::parse(s).map(Choice::Explicit).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|b| b.name()).collect();
            EngineError::InvalidInput(format!(
                "MoE backend `{s}` is not one of auto, {}",
                names.join(", ")
            ))
        })
    }
}

/// Every backend with whether it can run these experts on this device (and why not).
pub fn evaluate(
    formats: &BTreeSet<Format>,
    device: Device,
) -> Vec<(MoeBackend, Result<(), String>)> {
    ALL.iter().map(|&b| (b, b.check(formats, device))).collect()
}

/// Resolves a request: `auto` takes the first backend in preference order that can run; an
/// explicit backend is returned if it can run, else refused with the reasons and the list of
/// backends that would work.
pub fn choose(choice: Choice, formats: &BTreeSet<Format>, device: Device) -> Result<MoeBackend> {
    let table = evaluate(formats, device);
    let working: Vec<&str> = table
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(b, _)| b.name())
        .collect();
    let fmts: Vec<&str> = formats.iter().map(|f| f.name()).collect();
    match choice {
        Choice::Auto => table
            .iter()
            .find(|(_, r)| r.is_ok())
            .map(|(b, _)| *b)
            .ok_or_else(|| {
                EngineError::Device(format!(
                    "no MoE backend runs experts stored as {} on {device}",
                    fmts.join(", ")
                ))
            }),
        Choice::Explicit(b) => match b.check(formats, device) {
            Ok(()) => Ok(b),
            Err(why) => Err(EngineError::Device(format!(
                "MoE backend `{}` cannot run experts stored as {} on {device}: {why}; \
                 backends that would work: {}",
                b.name(),
                fmts.join(", "),
                if working.is_empty() {
                    "none".to_string()
                } else {
                    working.join(", ")
                }
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(f: &[Format]) -> BTreeSet<Format> {
        f.iter().copied().collect()
    }

    #[test]
    fn devices_parse() {
        assert_eq!(
            Device::parse("sm_90").unwrap(),
            Device::Cuda { major: 9, minor: 0 }
        );
        assert_eq!(
            Device::parse("sm_120").unwrap(),
            Device::Cuda {
                major: 12,
                minor: 0
            }
        );
        assert_eq!(
            Device::parse("sm_100a").unwrap(),
            Device::Cuda {
                major: 10,
                minor: 0
            }
        );
        assert_eq!(
            Device::parse("8.9").unwrap(),
            Device::Cuda { major: 8, minor: 9 }
        );
        assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
        assert!(Device::parse("h100").is_err() && Device::parse("sm_9").is_err());
        assert_eq!(
            Device::Cuda {
                major: 12,
                minor: 0
            }
            .to_string(),
            "sm_120"
        );
    }

    #[test]
    fn the_built_backends_are_chosen_and_the_others_refused_with_what_works() {
        let h200 = Device::Cuda { major: 9, minor: 0 };
        let nv = set(&[Format::Nvfp4]);
        let fp8 = set(&[Format::Fp8BlockE8m0]);
        let bf = set(&[Format::Bf16]);
        assert_eq!(
            choose_built(Choice::Auto, &nv, h200).unwrap(),
            MoeBackend::Dequant
        );
        assert_eq!(
            choose_built(Choice::Auto, &fp8, h200).unwrap(),
            MoeBackend::Dequant
        );
        assert_eq!(
            choose_built(Choice::Auto, &bf, h200).unwrap(),
            MoeBackend::Bf16
        );
        assert_eq!(
            choose_built(Choice::Auto, &nv, Device::Cpu).unwrap(),
            MoeBackend::Cpu
        );
        // native-fp4 on sm_90: the hardware has no FP4 tensor cores.
        let e = choose_built(Choice::Explicit(MoeBackend::NativeFp4), &nv, h200)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("native-fp4") && e.contains("sm_100") && e.contains("would work: dequant"),
            "{e}"
        );
        // fp8 on sm_90: the GPU could, this build cannot; never rerouted.
        let e = choose_built(Choice::Explicit(MoeBackend::Fp8), &fp8, h200)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no fp8 kernels yet") && e.contains("would work: dequant"),
            "{e}"
        );
        assert_eq!(
            choose_built(Choice::Explicit(MoeBackend::Dequant), &fp8, h200).unwrap(),
            MoeBackend::Dequant
        );
        // bf16 cannot take FP4 experts.
        let e = choose_built(Choice::Explicit(MoeBackend::Bf16), &nv, h200)
            .unwrap_err()
            .to_string();
        assert!(e.contains("takes BF16"), "{e}");
    }

    #[test]
    fn auto_picks_the_best_backend_per_format_and_device() {
        let h200 = Device::Cuda { major: 9, minor: 0 };
        let b200 = Device::Cuda {
            major: 10,
            minor: 0,
        };
        let rtx = Device::Cuda {
            major: 12,
            minor: 0,
        };
        let a100 = Device::Cuda { major: 8, minor: 0 };
        let l40 = Device::Cuda { major: 8, minor: 9 };
        let nv = set(&[Format::Nvfp4]);
        let fp8 = set(&[Format::Fp8BlockE8m0]);
        let bf = set(&[Format::Bf16]);
        let cases = [
            (&nv, h200, MoeBackend::Dequant),
            (&nv, b200, MoeBackend::NativeFp4),
            (&nv, rtx, MoeBackend::NativeFp4),
            (&fp8, h200, MoeBackend::Fp8),
            (&fp8, l40, MoeBackend::Fp8),
            (&fp8, a100, MoeBackend::Dequant),
            (&bf, h200, MoeBackend::Bf16),
            (&nv, Device::Cpu, MoeBackend::Cpu),
            (&bf, Device::Cpu, MoeBackend::Cpu),
        ];
        for (f, d, want) in cases {
            assert_eq!(choose(Choice::Auto, f, d).unwrap(), want, "{f:?} on {d}");
        }
        // Mixed expert formats: only a backend taking both qualifies.
        let mixed = set(&[Format::Nvfp4, Format::Fp8BlockE8m0]);
        assert_eq!(
            choose(Choice::Auto, &mixed, b200).unwrap(),
            MoeBackend::Dequant
        );
        // Nothing runs FP8 on a pre-Ampere GPU.
        let v100 = Device::Cuda { major: 7, minor: 0 };
        assert!(choose(Choice::Auto, &fp8, v100).is_err());
    }

    #[test]
    fn explicit_choices_the_device_cannot_run_list_what_would() {
        let h200 = Device::Cuda { major: 9, minor: 0 };
        let nv = set(&[Format::Nvfp4]);
        let err = choose(Choice::Explicit(MoeBackend::NativeFp4), &nv, h200)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("native-fp4")
                && err.contains("sm_90")
                && err.contains("would work: dequant"),
            "{err}"
        );
        let err = choose(Choice::Explicit(MoeBackend::Fp8), &nv, h200)
            .unwrap_err()
            .to_string();
        assert!(err.contains("experts are nvfp4"), "{err}");
        assert_eq!(
            choose(Choice::Explicit(MoeBackend::Dequant), &nv, h200).unwrap(),
            MoeBackend::Dequant
        );
        let err = choose(Choice::Explicit(MoeBackend::Dequant), &nv, Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(err.contains("would work: cpu"), "{err}");
        assert!(Choice::parse("fp4").is_err());
        assert_eq!(Choice::parse("auto").unwrap(), Choice::Auto);
        assert_eq!(
            Choice::parse("native-fp4").unwrap(),
            Choice::Explicit(MoeBackend::NativeFp4)
        );
    }
}
