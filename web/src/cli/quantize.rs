//! `amdahl quantize`: writes a dense DeepSeek-V4 checkpoint in one quantized format (or, with
//! `--format f32` / `bf16`, dequantizes any checkpoint we load into a dense twin).

use std::path::PathBuf;

use amdahl_engine::config::ModelConfig;
use amdahl_engine::model::deepseek_v4::quantize::{
    DenseDtype, Plan, QuantizeFormat, QuantizeOptions, dequantize_dir, dequantize_dir_as,
    quantize_dir,
};
use anyhow::Context;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// ModelOpt NVFP4 (U8 codes, E4M3 per-16 scales, f32 weight_scale_2 and input_scale).
    Nvfp4,
    /// gpt-oss MXFP4 routed experts (`_blocks`/`_scales`, quant_method mxfp4).
    Mxfp4,
    /// DeepSeek-V4 release layout: FP4 routed experts + FP8 (E8M0 128×128) attention/shared.
    DeepseekFp4,
    /// DeepSeek-V4 FP8: E4M3 weights, E8M0 `.scale` per 128×128 block.
    Fp8,
    /// DeepSeek-V3 FP8: E4M3 weights, f32 `weight_scale_inv` per 128×128 block.
    Fp8V3,
    /// Dequantize into a dense f32 checkpoint (the exact values the CPU backend computes with).
    F32,
    /// Dequantize into a dense bf16 checkpoint (exact for E8M0-scaled formats: fp8,
    /// deepseek-fp4, mxfp4; NVFP4 and fp8-v3 values are rounded to bf16).
    Bf16,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum)]
    format: Format,
    /// Input model folder (dense, except for --format f32).
    #[arg(long = "in")]
    input: PathBuf,
    /// Output folder (created; must not hold safetensors files).
    #[arg(long = "out")]
    output: PathBuf,
    /// Quantize the routed experts only (attention and shared experts stay dense).
    #[arg(long)]
    experts_only: bool,
    /// Random tokens run through the model to calibrate static activation scales (NVFP4).
    #[arg(long, default_value_t = 64)]
    calib_tokens: usize,
    /// Seed of the calibration tokens.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Largest output shard in GiB.
    #[arg(long, default_value_t = 4.0)]
    shard_gib: f64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let shard_bytes = (a.shard_gib * (1u64 << 30) as f64).max(1.0) as usize;
    let summary = match a.format {
        Format::F32 => dequantize_dir(&a.input, &a.output, shard_bytes)?,
        Format::Bf16 => dequantize_dir_as(&a.input, &a.output, shard_bytes, DenseDtype::Bf16)?,
        f => {
            let format = match f {
                Format::Nvfp4 => QuantizeFormat::Nvfp4,
                Format::Mxfp4 => QuantizeFormat::Mxfp4,
                Format::DeepseekFp4 => QuantizeFormat::DeepseekFp4,
                Format::Fp8 => QuantizeFormat::Fp8,
                Format::Fp8V3 | Format::F32 | Format::Bf16 => QuantizeFormat::Fp8V3,
            };
            let cfg = ModelConfig::from_path(&a.input)
                .with_context(|| format!("reading {}", a.input.display()))?;
            let plan = Plan::for_format(&cfg, format, a.experts_only);
            let opts = QuantizeOptions {
                calib_tokens: a.calib_tokens,
                seed: a.seed,
                shard_bytes,
            };
            quantize_dir(&a.input, &a.output, &plan, &opts)?
        }
    };
    for (target, n) in &summary.converted {
        println!("{target:<24} {n} modules");
    }
    println!(
        "{} → {} bytes of tensors in {} file(s) under {}",
        summary.bytes_in,
        summary.bytes_out,
        summary.files.len(),
        a.output.display()
    );
    Ok(())
}
