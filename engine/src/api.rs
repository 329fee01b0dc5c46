//! The engine's facade for the web crate: start an engine on a model folder, submit token-id
//! requests, and read a bounded stream of [`StreamEvent`]s back. Cancelling a request is dropping
//! its receiver: the coordinator notices at the next step boundary (or on the next failed send)
//! and frees the request's cache slot in that step. Text (tokenization, chat templates,
//! incremental detokenization, stop strings) lives at the edge; this module re-exports the pieces.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
pub use amdahl_protocol::telemetry::Snapshot;
use tokio::sync::{mpsc, watch};

use crate::actors::coordinator::{CancelSeq, Coordinator, Drain, GetStats, StopSeq, Submit};
use crate::actors::telemetry::{GetSnapshot, Subscribe, Telemetry};
pub use crate::chat_template::ChatTemplate;
pub use crate::detok::{StopMatch, TextStream};
use crate::error::{EngineError, Result};
pub use crate::metrics::Metrics;
pub use crate::scheduler::{SchedulerConfig, SeqId};
pub use crate::tokenizer::Tokenizer;

/// Which front end a request came through (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Ws,
}

impl Transport {
    pub fn label(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Ws => "ws",
        }
    }
}

/// How to pick tokens and when to stop (stop strings are handled by [`TextStream`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// In (0, 1]; 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub top_k: usize,
    /// Same seed and prompt ⇒ same tokens. None: a fresh seed per request.
    pub seed: Option<u64>,
    /// Tokens to generate at most (clamped to the model's remaining context).
    pub max_tokens: usize,
    /// EOS and stop token ids are masked until this many tokens were generated.
    pub min_tokens: usize,
    /// Keep generating past EOS.
    pub ignore_eos: bool,
    /// Extra token ids that end the request (finish reason `stop`).
    pub stop_token_ids: Vec<u32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            max_tokens: 16,
            min_tokens: 0,
            ignore_eos: false,
            stop_token_ids: Vec::new(),
        }
    }
}

/// A tokenized request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub transport: Transport,
}

/// Why a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// EOS or a stop token id.
    Stop,
    /// `max_tokens` or the model's context reached.
    Length,
    /// Cancelled by the client or by shutdown.
    Cancelled,
    /// The device failed.
    Error,
}

impl FinishReason {
    pub fn label(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
        }
    }
}

/// Server-side timings of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Submission → first scheduled.
    pub queue: Duration,
    /// First scheduled → first token.
    pub prefill: Duration,
    /// Submission → first token.
    pub ttft: Duration,
    /// First token → last token.
    pub decode: Duration,
    /// Submission → end.
    pub e2e: Duration,
}

/// The terminal event of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reason: FinishReason,
    /// The stop token id that ended the request (not set for EOS).
    pub stop_token: Option<u32>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub timings: Timings,
    /// Set when `reason` is `Error`.
    pub error: Option<String>,
}

/// What a request's stream carries: generated tokens in order, then exactly one `Done`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Token(u32),
    Done(Finished),
}

/// An admitted request.
#[derive(Debug)]
pub struct Submission {
    /// Server id, used in logs and metrics (`req-…`).
    pub request_id: String,
    pub seq: SeqId,
    /// 0-based position in the queue at admission.
    pub queue_position: usize,
    /// Bounded: the capacity covers every event the request can produce, so the engine never
    /// blocks or drops on a slow reader.
    pub events: mpsc::Receiver<StreamEvent>,
}

/// The served model, as clients see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    pub name: String,
    pub max_model_len: usize,
    pub vocab_size: usize,
    pub eos_token_ids: Vec<u32>,
    pub device: String,
}

/// Device the model runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        if s == "cpu" {
            return Ok(DeviceSpec::Cpu);
        }
        if let Some(n) = s.strip_prefix("cuda") {
            let n = n
                .strip_prefix(':')
                .unwrap_or(if n.is_empty() { "0" } else { n });
            return n.parse().map(DeviceSpec::Cuda).map_err(|_| {
                EngineError::InvalidInput(format!("device `{s}`: expected cpu or cuda:N"))
            });
        }
        Err(EngineError::InvalidInput(format!(
            "device `{s}`: expected cpu or cuda:N"
        )))
    }
}

/// What to serve and how.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model_dir: PathBuf,
    /// The name clients use (`model` field); defaults to the folder name.
    pub model_name: Option<String>,
    pub device: DeviceSpec,
    pub scheduler: SchedulerConfig,
    /// Cap on prompt + output tokens; defaults to the model's `max_position_embeddings`.
    pub max_model_len: Option<usize>,
    /// Record stage timing on every Nth step; None: the backend's default (every step on the
    /// CPU).
    pub profile_every: Option<u32>,
}

/// Load and queue counts, for /health, /metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    pub draining: bool,
    pub dead: bool,
    pub steps: u64,
}

/// A cheap, cloneable handle to a running engine.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    coord: Addr<Coordinator>,
    telemetry: Addr<Telemetry>,
    info: Arc<ModelInfo>,
    metrics: Arc<Metrics>,
}

impl EngineHandle {
    /// Loads the model and starts the coordinator, telemetry and device worker actors. Call from
    /// inside a running actix `System`; the device worker gets its own thread.
    pub fn start(cfg: EngineConfig) -> Result<Self> {
        let s = crate::actors::start(cfg)?;
        Ok(Self {
            coord: s.coord,
            telemetry: s.telemetry,
            info: Arc::new(s.info),
            metrics: s.metrics,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Admits a request or refuses it (`Overloaded` when the queue is full, `Draining` during
    /// shutdown, `InvalidInput` for an empty or out-of-vocabulary prompt).
    pub async fn submit(&self, req: GenerateRequest) -> Result<Submission> {
        self.coord
            .send(Submit(req))
            .await
            .map_err(|_| EngineError::Shutdown)?
    }

    pub async fn stats(&self) -> Result<EngineStats> {
        self.coord
            .send(GetStats)
            .await
            .map_err(|_| EngineError::Shutdown)
    }

    /// Ends a request as `stop` because the edge matched a stop string in its text. Returns once
    /// the coordinator has ended it, so the caller drops the receiver only afterwards (dropping
    /// it first would race the next step, which would see a closed stream and count a client
    /// that left). A request that already ended is ignored.
    pub async fn stop(&self, seq: SeqId) {
        let _ = self.coord.send(StopSeq(seq)).await;
    }

    /// Cancels a request on the client's explicit request (dropping the receiver does the same
    /// but is counted as a client that left).
    pub fn cancel(&self, seq: SeqId) {
        self.coord.do_send(CancelSeq(seq));
    }

    /// The bottleneck report and serving numbers over the rolling window, built now.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        self.telemetry
            .send(GetSnapshot)
            .await
            .map_err(|_| EngineError::Shutdown)
    }

    /// Snapshots pushed about five times a second; the receiver starts with a fresh one. Slow
    /// readers skip to the newest (a watch channel), so a stalled dashboard costs nothing.
    pub async fn subscribe_telemetry(&self) -> Result<watch::Receiver<Arc<Snapshot>>> {
        self.telemetry
            .send(Subscribe)
            .await
            .map_err(|_| EngineError::Shutdown)
    }

    /// Stops admitting; running and queued requests continue.
    pub async fn drain(&self) -> Result<()> {
        self.coord
            .send(Drain)
            .await
            .map_err(|_| EngineError::Shutdown)
    }
}
