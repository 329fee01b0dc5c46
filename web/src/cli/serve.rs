//! `amdahl serve`: the OpenAI-compatible HTTP/SSE + WebSocket server. Without `--model` it serves
//! the embedded default model. SIGINT/SIGTERM drain gracefully.

use std::path::PathBuf;
use std::time::Duration;

use amdahl_engine::api::{DeviceSpec, EngineConfig, SchedulerConfig};

use crate::server::{Limits, ServerConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model folder (config.json, safetensors, tokenizer.json[, chat template]). Default: the
    /// embedded default model.
    #[arg(long)]
    model: Option<PathBuf>,
    /// The model name clients send (default: the folder name, or amdahl-default).
    #[arg(long)]
    served_model_name: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Sequences decoded together (cache slots).
    #[arg(long, default_value_t = 64)]
    max_batch: usize,
    /// Admitted requests waiting for a slot; beyond it requests get 503 + Retry-After.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// Tokens per step (prefill chunks + decodes).
    #[arg(long, default_value_t = 512)]
    max_step_tokens: usize,
    /// Cap on prompt + output tokens (default: the model's max_position_embeddings).
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Require `Authorization: Bearer KEY` (everything but /health and /metrics).
    #[arg(long, env = "AMDAHL_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest request body, bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Largest WebSocket message, bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_ws_message_bytes: usize,
    /// Requests in flight per WebSocket.
    #[arg(long, default_value_t = 256)]
    ws_max_inflight: usize,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    http_workers: usize,
    /// Record per-stage timing on every Nth engine step (default: the device's choice; every
    /// step on the CPU, where a stage mark is one clock read). Unsampled steps still count in
    /// tok/s, step-time and latency metrics.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    profile_every: Option<u32>,
    /// How routed experts run: auto, or a backend (dequant, bf16, fp8, native-fp4, cpu). A
    /// choice the device or this build cannot run is refused at startup with what would work.
    #[arg(long, default_value = "auto")]
    moe_backend: String,
    /// Expert-parallel device workers: on the CPU, N workers on their own threads, each holding
    /// 1/N of the routed experts, with in-memory all-reduces (several GPUs: not built yet).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Seconds shutdown waits for in-flight requests before cancelling them.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_secs: u64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let (model_dir, default_name) = match a.model {
        Some(d) => (d, None),
        None => (
            crate::default_model::dir()?,
            Some(crate::default_model::NAME.to_string()),
        ),
    };
    let device: DeviceSpec = a.device.parse()?;
    let cfg = ServerConfig {
        engine: EngineConfig {
            model_dir,
            model_name: a.served_model_name.or(default_name),
            device,
            scheduler: SchedulerConfig {
                max_seqs: a.max_batch.max(1),
                max_step_tokens: a.max_step_tokens.max(1),
                max_queue: a.max_queue,
            },
            max_model_len: a.max_model_len,
            profile_every: a.profile_every,
            moe_backend: Some(a.moe_backend),
            workers: Some(a.workers.max(1)),
        },
        host: a.host,
        port: a.port,
        api_key: a.api_key,
        limits: Limits {
            max_body_bytes: a.max_body_bytes,
            max_ws_message_bytes: a.max_ws_message_bytes,
            ws_max_inflight: a.ws_max_inflight.max(1),
        },
        workers: a.http_workers,
        shutdown_grace: Duration::from_secs(a.shutdown_grace_secs),
    };
    actix_web::rt::System::new().block_on(async move {
        let server = crate::server::start(cfg)?;
        let info = server.engine().info().clone();
        println!(
            "amdahl serving `{}` (max_model_len {}, device {}) on {}",
            info.name,
            info.max_model_len,
            info.device,
            server.url()
        );
        println!("listening on {}", server.url());
        use std::io::Write;
        let _ = std::io::stdout().flush();
        server.run_until_signal().await
    })
}
