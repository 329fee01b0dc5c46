//! Shared, read-only server state handed to every handler: the engine handle, the tokenizer and
//! chat template, limits, the API key and the shutdown signal. Nothing here is mutated after
//! start; mutable state lives in the engine's actors.

use std::sync::Arc;

use amdahl_engine::api::{ChatTemplate, EngineHandle, Metrics, ModelInfo, Tokenizer};
use tokio::sync::watch;

/// Request and connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_ws_message_bytes: usize,
    pub ws_max_inflight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            max_ws_message_bytes: 8 << 20,
            ws_max_inflight: 256,
        }
    }
}

/// What every handler can see.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) engine: EngineHandle,
    pub(crate) tok: Arc<Tokenizer>,
    pub(crate) template: Option<Arc<ChatTemplate>>,
    pub(crate) limits: Limits,
    pub(crate) api_key: Option<String>,
    /// Turns true once shutdown starts.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Unix seconds at start (the `created` of the model card).
    pub(crate) started: u64,
}

impl AppState {
    pub fn info(&self) -> &ModelInfo {
        self.engine.info()
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tok
    }

    pub fn template(&self) -> Option<&Arc<ChatTemplate>> {
        self.template.as_ref()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        self.engine.metrics()
    }

    pub fn draining(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// Unix time in seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
