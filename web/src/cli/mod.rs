//! Command-line interface: argument definitions and dispatch. Each command lives in its own file
//! and talks to the engine only.

mod bench;
mod eval_arith;
mod generate;
mod info;
mod kernels;
mod logits;
mod profile;
mod quantize;
mod serve;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// amdahl — an inference server for DeepSeek-V4-class sparse-attention MoE models that tells you
/// where every decode millisecond goes.
#[derive(Debug, Parser)]
#[command(name = "amdahl", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// CPU worker threads for the CPU backend (default: all cores).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compute logits for token ids from a safetensors file (`input_ids` I64 [B,S]) and write
    /// them (`logits` F32 [B,S,V]).
    Logits(logits::Args),
    /// Greedy generation from a prompt (token ids or text).
    Generate(generate::Args),
    /// Serve the model over OpenAI-compatible HTTP/SSE and WebSocket (`amdahl.v1`).
    Serve(serve::Args),
    /// Drive a running server and print the "Serving Benchmark Result" table.
    Bench(bench::Args),
    /// Write a checkpoint in a quantized format (nvfp4, mxfp4, deepseek-fp4, fp8, fp8-v3) or
    /// dequantize one (f32).
    Quantize(quantize::Args),
    /// Describe a checkpoint: architecture, parameters, bytes by format, per-layer quantization,
    /// cache bytes per token, MoE backends that could run it.
    Info(info::Args),
    /// Exact-match accuracy of an arithmetic model (models/arith) through the engine, per op.
    EvalArith(eval_arith::Args),
    /// Profile decode of a dummy-weight DeepSeek-V4-Flash on a GPU: per-stage time, bytes,
    /// bandwidth against the measured roofline, launch sizes, Amdahl projections.
    Profile(profile::Args),
    /// Compile every CUDA kernel with NVRTC into the kernel cache (no GPU needed).
    Kernels(kernels::Args),
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Logits(a) => logits::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::Info(a) => info::run(a),
        Command::EvalArith(a) => eval_arith::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Kernels(a) => kernels::run(a),
    }
}

pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The model folder to use: the given one, or the embedded default.
pub fn model_dir(model: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match model {
        Some(m) => Ok(m),
        None => crate::default_model::dir(),
    }
}

/// `cpu` → None, `cuda` / `cuda:N` → Some(N); anything else is an error.
pub fn cuda_ordinal(device: &str) -> anyhow::Result<Option<usize>> {
    match device.parse::<amdahl_engine::api::DeviceSpec>()? {
        amdahl_engine::api::DeviceSpec::Cpu => Ok(None),
        amdahl_engine::api::DeviceSpec::Cuda(n) => Ok(Some(n)),
    }
}
