//! Rotary tables of DeepSeek-V4: "main" (sliding layers, θ = rope_theta, no scaling) and
//! "compress" (CSA/HCA layers and their compressors and indexer, θ = compress_rope_theta, YaRN).
//! Frequencies follow transformers' `_compute_yarn_parameters` (truncated correction range,
//! ramp over rope_dim/2 entries); cos/sin are scaled by `attention_factor`, which DeepSeek's
//! legacy configs pin to 1.0 (model-spec §3.3: no mscale anywhere).

use serde_json::Value;

use super::Parser;
use crate::error::Result;

/// YaRN frequency correction parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Yarn {
    pub factor: f64,
    pub original_max_position_embeddings: f64,
    pub beta_fast: f64,
    pub beta_slow: f64,
}

/// One rotary table: base, optional YaRN, and the cos/sin scale.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    pub theta: f64,
    pub yarn: Option<Yarn>,
    pub attention_factor: f64,
}

impl RopeConfig {
    /// Inverse frequencies, one per rotated pair (`rope_dim / 2` entries).
    pub fn inv_freq(&self, rope_dim: usize) -> Vec<f64> {
        let half = rope_dim / 2;
        let dim = rope_dim as f64;
        let base: Vec<f64> = (0..half)
            .map(|i| 1.0 / self.theta.powf((2 * i) as f64 / dim))
            .collect();
        let Some(y) = &self.yarn else {
            return base;
        };
        let correction_dim = |rotations: f64| {
            dim * (y.original_max_position_embeddings / (rotations * 2.0 * std::f64::consts::PI))
                .ln()
                / (2.0 * self.theta.ln())
        };
        let low = correction_dim(y.beta_fast).floor().max(0.0);
        let mut high = correction_dim(y.beta_slow).ceil().min(dim - 1.0);
        if low == high {
            high += 0.001;
        }
        base.iter()
            .enumerate()
            .map(|(i, &f)| {
                let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                // ramp = 1 → interpolate (f / factor); ramp = 0 → keep f (extrapolate).
                f / y.factor * ramp + f * (1.0 - ramp)
            })
            .collect()
    }
}

fn num(obj: &Value, key: &str) -> Option<f64> {
    obj.get(key).and_then(Value::as_f64)
}

fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// Parses one table from a transformers-style dict. `legacy_factor_one` pins the attention
/// factor to 1.0 when the dict has none (what transformers does for configs it nests itself).
fn table(
    p: &Parser<'_>,
    field: &str,
    obj: &Value,
    default_theta: f64,
    legacy_factor_one: bool,
    max_pos: f64,
) -> Result<RopeConfig> {
    let kind = obj
        .get("rope_type")
        .or_else(|| obj.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let theta = num(obj, "rope_theta").unwrap_or(default_theta);
    if theta <= 1.0 {
        return Err(p.err(
            &format!("{field}.rope_theta"),
            format!("{theta} must be > 1"),
        ));
    }
    match kind {
        "default" => Ok(RopeConfig {
            theta,
            yarn: None,
            attention_factor: 1.0,
        }),
        "yarn" => {
            let original = num(obj, "original_max_position_embeddings").ok_or_else(|| {
                p.err(
                    &format!("{field}.original_max_position_embeddings"),
                    "required for yarn",
                )
            })?;
            let factor = num(obj, "factor").unwrap_or(max_pos / original);
            if factor <= 0.0 {
                return Err(p.err(&format!("{field}.factor"), format!("{factor} must be > 0")));
            }
            let beta_fast = num(obj, "beta_fast").filter(|&b| b != 0.0).unwrap_or(32.0);
            let beta_slow = num(obj, "beta_slow").filter(|&b| b != 0.0).unwrap_or(1.0);
            let attention_factor = match num(obj, "attention_factor") {
                Some(f) => f,
                None if legacy_factor_one => 1.0,
                None => match (num(obj, "mscale"), num(obj, "mscale_all_dim")) {
                    (Some(m), Some(a)) if m != 0.0 && a != 0.0 => {
                        yarn_mscale(factor, m) / yarn_mscale(factor, a)
                    }
                    _ => yarn_mscale(factor, 1.0),
                },
            };
            Ok(RopeConfig {
                theta,
                yarn: Some(Yarn {
                    factor,
                    original_max_position_embeddings: original,
                    beta_fast,
                    beta_slow,
                }),
                attention_factor,
            })
        }
        other => Err(p.err(
            &format!("{field}.rope_type"),
            format!("`{other}` is not supported (default or yarn)"),
        )),
    }
}

/// Returns (main, compress) tables from either config spelling.
pub(super) fn parse(p: &Parser<'_>, _rope_dim: usize) -> Result<(RopeConfig, RopeConfig)> {
    let rope_theta = p.f64_or("rope_theta", 10_000.0)?;
    let compress_theta = p.f64_or("compress_rope_theta", 160_000.0)?;
    let max_pos = p.f64_or("max_position_embeddings", 1_048_576.0)?;
    let nested = p
        .get("rope_parameters")
        .filter(|rp| rp.get("main").is_some_and(Value::is_object))
        .filter(|rp| rp.get("compress").is_some_and(Value::is_object));
    if let Some(rp) = nested {
        let main = table(
            p,
            "rope_parameters.main",
            &rp["main"],
            rope_theta,
            false,
            max_pos,
        )?;
        let compress = table(
            p,
            "rope_parameters.compress",
            &rp["compress"],
            compress_theta,
            false,
            max_pos,
        )?;
        return Ok((main, compress));
    }
    // Flat spelling: `rope_parameters` or legacy `rope_scaling` holds the compress table's
    // scaling; the main table is plain RoPE at rope_theta.
    let main = RopeConfig {
        theta: rope_theta,
        yarn: None,
        attention_factor: 1.0,
    };
    let flat = p.get("rope_parameters").or_else(|| p.get("rope_scaling"));
    let compress = match flat {
        Some(obj) if obj.is_object() => {
            let mut obj = obj.clone();
            if let Some(map) = obj.as_object_mut() {
                // The flat dict's own theta (if any) is the main one; compress uses its own.
                map.insert("rope_theta".into(), Value::from(compress_theta));
            }
            let field = if p.get("rope_parameters").is_some() {
                "rope_parameters"
            } else {
                "rope_scaling"
            };
            table(p, field, &obj, compress_theta, true, max_pos)?
        }
        Some(other) => {
            return Err(p.err("rope_scaling", format!("expected an object, got {other}")));
        }
        None => RopeConfig {
            theta: compress_theta,
            yarn: None,
            attention_factor: 1.0,
        },
    };
    Ok((main, compress))
}
