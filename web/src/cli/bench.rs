//! `amdahl bench`: benchmark a running server and print vLLM's "Serving Benchmark Result" table
//! (optionally a result JSON).

use std::path::PathBuf;

use crate::bench::{BenchConfig, TransportArg, run_bench};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Model name (default: the first one the server lists).
    #[arg(long)]
    model: Option<String>,
    /// Requests in flight at once.
    #[arg(long, alias = "max-concurrency", default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value_t = 100)]
    num_prompts: usize,
    /// Prompt length (characters; tokens for byte-level vocabularies).
    #[arg(long, alias = "random-input-len", default_value_t = 32)]
    input_len: usize,
    /// Tokens to generate per request.
    #[arg(long, alias = "random-output-len", default_value_t = 32)]
    output_len: usize,
    #[arg(long, value_enum, default_value = "http")]
    transport: TransportArg,
    /// Generate exactly --output-len tokens (true) or stop at EOS (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    ignore_eos: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the vLLM-style result JSON here.
    #[arg(long)]
    result_json: Option<PathBuf>,
    /// Bearer key for servers started with --api-key.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let cfg = BenchConfig {
        url: a.url.trim_end_matches('/').to_string(),
        model: a.model,
        concurrency: a.concurrency,
        num_prompts: a.num_prompts,
        input_len: a.input_len,
        output_len: a.output_len,
        transport: a.transport,
        ignore_eos: a.ignore_eos,
        seed: a.seed,
        api_key: a.api_key,
        progress: true,
    };
    let out = actix_web::rt::System::new().block_on(async move { run_bench(&cfg).await })?;
    print!("{}", out.table);
    if let Some(path) = a.result_json {
        std::fs::write(&path, serde_json::to_string_pretty(&out.json)?)?;
        eprintln!("wrote {}", path.display());
    }
    if out.summary.failed > 0 {
        let first = out
            .results
            .iter()
            .find(|r| !r.success)
            .map(|r| r.error.clone())
            .unwrap_or_default();
        eprintln!(
            "{} requests failed; first error: {first}",
            out.summary.failed
        );
    }
    Ok(())
}
