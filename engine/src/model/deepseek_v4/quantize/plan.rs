//! Which modules a quantization format converts, and to what. Following DeepSeek's official V4
//! release, the quantized linears are the attention projections (wq_a, wq_b, wkv, wo_a, wo_b,
//! indexer wq_b), the routed experts and the shared experts; embeddings, head, router gate,
//! compressor and indexer-scorer projections stay dense (as do norms, hc parameters, compressor
//! position biases and sinks, which are not linears). `--experts-only` converts routed experts
//! only.

use std::collections::BTreeMap;

use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::quant::Role;

use super::super::modules::linear_modules;

/// A checkpoint format `amdahl quantize` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantizeFormat {
    /// ModelOpt NVFP4 everywhere it applies (hf_quant_config.json, quant_algo NVFP4).
    Nvfp4,
    /// gpt-oss-style MXFP4 routed experts (`_blocks`/`_scales`, quant_method mxfp4).
    Mxfp4,
    /// DeepSeek-V4 official layout: FP4 routed experts (expert_dtype fp4) + FP8 E8M0 blocks.
    DeepseekFp4,
    /// DeepSeek-V4 FP8: 128×128 blocks with E8M0 `.scale`.
    Fp8,
    /// DeepSeek-V3 FP8: 128×128 blocks with f32 `weight_scale_inv`.
    Fp8V3,
}

/// What one module becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Fp8Block {
        e8m0: bool,
    },
    /// ModelOpt per-tensor FP8 (only in hand-built mixed plans).
    Fp8Tensor,
    Nvfp4,
    /// DeepSeek FP4 experts: I8 codes + F8_E8M0 `.scale` per expert.
    Mxfp4Native,
    /// gpt-oss fused experts: `experts.{gate_up,down}_proj_{blocks,scales}` per layer.
    Mxfp4Fused,
}

impl Target {
    pub fn label(self) -> &'static str {
        match self {
            Target::Fp8Block { e8m0: true } => "fp8-block(e8m0)",
            Target::Fp8Block { e8m0: false } => "fp8-block(f32)",
            Target::Fp8Tensor => "fp8-tensor",
            Target::Nvfp4 => "nvfp4",
            Target::Mxfp4Native => "mxfp4 (DeepSeek FP4)",
            Target::Mxfp4Fused => "mxfp4 (gpt-oss blocks)",
        }
    }
}

/// Module (official name) → target; modules not listed are copied unchanged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub targets: BTreeMap<String, Target>,
}

/// Whether the release-style plan converts modules of this role.
fn converts(role: Role, experts_only: bool) -> bool {
    match role {
        Role::RoutedExpert => true,
        Role::Attention | Role::SharedExpert => !experts_only,
        _ => false,
    }
}

impl Plan {
    /// The plan of a format over a model.
    pub fn for_format(cfg: &ModelConfig, format: QuantizeFormat, experts_only: bool) -> Self {
        let mut targets = BTreeMap::new();
        for m in linear_modules(cfg) {
            let role = m.role();
            if !converts(role, experts_only) {
                continue;
            }
            let t = match (format, role) {
                (QuantizeFormat::Nvfp4, _) => Some(Target::Nvfp4),
                (QuantizeFormat::Mxfp4, Role::RoutedExpert) => Some(Target::Mxfp4Fused),
                // gpt-oss's convention has MXFP4 for routed experts only.
                (QuantizeFormat::Mxfp4, _) => None,
                (QuantizeFormat::DeepseekFp4, Role::RoutedExpert) => Some(Target::Mxfp4Native),
                (QuantizeFormat::DeepseekFp4 | QuantizeFormat::Fp8, _) => {
                    Some(Target::Fp8Block { e8m0: true })
                }
                (QuantizeFormat::Fp8V3, _) => Some(Target::Fp8Block { e8m0: false }),
            };
            if let Some(t) = t {
                targets.insert(m.name, t);
            }
        }
        Plan { targets }
    }

    pub fn has(&self, f: impl Fn(Target) -> bool) -> bool {
        self.targets.values().any(|&t| f(t))
    }

    /// Checks the plan can be declared by one set of configs and fits the model's shapes.
    pub fn validate(&self, cfg: &ModelConfig) -> Result<()> {
        let modules = linear_modules(cfg);
        let bad = |module: &str, message: String| EngineError::Quantization {
            module: module.to_string(),
            message,
        };
        for (name, t) in &self.targets {
            let m = modules
                .iter()
                .find(|m| &m.name == name)
                .ok_or_else(|| bad(name, "no such linear module in this model".into()))?;
            let block = match t {
                Target::Nvfp4 => 16,
                Target::Mxfp4Native | Target::Mxfp4Fused => 32,
                _ => 1,
            };
            if m.inp % block != 0 {
                return Err(bad(
                    name,
                    format!(
                        "in_features {} is not a multiple of {block}, the scale block of {t:?}",
                        m.inp
                    ),
                ));
            }
            let fp4_expert = matches!(t, Target::Mxfp4Native | Target::Mxfp4Fused);
            if fp4_expert && m.role() != Role::RoutedExpert {
                return Err(bad(name, format!("{t:?} applies to routed experts only")));
            }
            if m.role() == Role::Embedding {
                return Err(bad(name, "embeddings are never quantized".into()));
            }
        }
        // The declaring configs cover all routed experts at once.
        for t in [Target::Mxfp4Native, Target::Mxfp4Fused] {
            let uncovered = modules
                .iter()
                .find(|m| m.role() == Role::RoutedExpert && self.targets.get(&m.name) != Some(&t));
            if let Some(m) = uncovered.filter(|_| self.has(|x| x == t)) {
                return Err(bad(
                    &m.name,
                    format!(
                        "{t:?} must cover every routed expert (the config declares it model-wide)"
                    ),
                ));
            }
        }
        let e8 = self.has(|t| t == Target::Fp8Block { e8m0: true });
        let f32s = self.has(|t| t == Target::Fp8Block { e8m0: false });
        if e8 && f32s {
            return Err(bad(
                "<plan>",
                "E8M0 and f32 FP8 block scales cannot share one quantization_config".into(),
            ));
        }
        if self.has(|t| t == Target::Mxfp4Fused) && self.has(|t| t != Target::Mxfp4Fused) {
            return Err(bad(
                "<plan>",
                "quant_method mxfp4 (gpt-oss) declares routed experts only; it cannot be mixed \
                 with other formats"
                    .into(),
            ));
        }
        Ok(())
    }
}
