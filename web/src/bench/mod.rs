//! `amdahl bench`: drives a running server with N requests at a fixed concurrency over HTTP/SSE
//! (`/v1/completions`, streamed, usage chunk on) or the `amdahl.v1` WebSocket, shows a progress
//! bar, and prints vLLM's "Serving Benchmark Result" table. Prompts are random printable text
//! of `input_len` characters (one token per character for byte-level vocabularies); token counts
//! come from the server's usage, as vLLM's bench reads them.

pub mod http;
pub mod report;
pub mod ws;

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use amdahl_engine::rng::Rng;
use report::RequestResult;

/// Transport to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportArg {
    Http,
    Ws,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Base URL, e.g. http://127.0.0.1:8000
    pub url: String,
    pub model: Option<String>,
    pub concurrency: usize,
    pub num_prompts: usize,
    pub input_len: usize,
    pub output_len: usize,
    pub transport: TransportArg,
    pub ignore_eos: bool,
    pub seed: u64,
    pub api_key: Option<String>,
    pub progress: bool,
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Job {
    pub index: usize,
    pub prompt: String,
}

/// A shared cursor handing out jobs to the concurrent workers (single-threaded runtime).
#[derive(Debug, Clone)]
pub struct Jobs {
    next: Rc<Cell<usize>>,
    prompts: Rc<Vec<String>>,
}

impl Jobs {
    pub fn take(&self) -> Option<Job> {
        let i = self.next.get();
        let prompt = self.prompts.get(i)?.clone();
        self.next.set(i + 1);
        Some(Job { index: i, prompt })
    }
}

/// Random printable prompts (seeded, so runs are repeatable).
pub fn make_prompts(n: usize, len: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            (0..len)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect()
        })
        .collect()
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct BenchOutput {
    pub summary: report::Summary,
    pub results: Vec<RequestResult>,
    pub table: String,
    pub json: serde_json::Value,
}

/// Runs the benchmark (inside an actix `System`).
pub async fn run_bench(cfg: &BenchConfig) -> anyhow::Result<BenchOutput> {
    if cfg.concurrency == 0 || cfg.num_prompts == 0 || cfg.input_len == 0 || cfg.output_len == 0 {
        bail!("--concurrency, --num-prompts, --input-len and --output-len must be >= 1");
    }
    let client = http::client(cfg.concurrency);
    let model = match &cfg.model {
        Some(m) => m.clone(),
        None => http::first_model(&client, cfg)
            .await
            .context("asking the server for its model (GET /v1/models)")?,
    };
    let prompts = make_prompts(cfg.num_prompts, cfg.input_len, cfg.seed);
    let jobs = Jobs {
        next: Rc::new(Cell::new(0)),
        prompts: Rc::new(prompts),
    };
    let bar = if cfg.progress {
        let b = ProgressBar::new(cfg.num_prompts as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "{bar:40.cyan/blue} {pos}/{len} requests [{elapsed_precise}<{eta_precise}]",
        ) {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let t0 = Instant::now();
    let mut results = match cfg.transport {
        TransportArg::Http => http::drive(&client, cfg, &model, &jobs, &bar, t0).await,
        TransportArg::Ws => ws::drive(cfg, &model, &jobs, &bar, t0).await?,
    };
    let duration = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    results.sort_by_key(|(i, _)| *i);
    let results: Vec<RequestResult> = results.into_iter().map(|(_, r)| r).collect();
    let summary = report::summarize(&results, duration, Some(cfg.concurrency));
    let table = report::table(&summary);
    let transport = match cfg.transport {
        TransportArg::Http => "http",
        TransportArg::Ws => "ws",
    };
    let json = report::result_json(
        &summary,
        &results,
        json!({
            "model_id": model, "transport": transport, "num_prompts": cfg.num_prompts,
            "random_input_len": cfg.input_len, "random_output_len": cfg.output_len,
            "date": crate::server::state::unix_now(),
        }),
    );
    Ok(BenchOutput {
        summary,
        results,
        table,
        json,
    })
}

/// Seconds since the start.
pub fn since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

/// Upper bound on one request (a stuck server must not hang the bench).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
