//! The engine's error type. Every message names the bad field, tensor or limit, so a user can act
//! on it without reading the code. The web crate maps these to HTTP statuses in one place.

use std::path::PathBuf;

/// Result alias for the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Every failure the engine reports.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {file}: field `{field}`: {message}")]
    Config {
        file: String,
        field: String,
        message: String,
    },
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("tensor `{name}` is missing from the checkpoint{hint}")]
    MissingTensor { name: String, hint: String },
    #[error("tensor `{name}`: expected shape {expected:?}, found {found:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor `{name}`: dtype {dtype} is not supported here ({message})")]
    UnsupportedDtype {
        name: String,
        dtype: String,
        message: String,
    },
    #[error("tensor `{name}`: {message}")]
    BadTensor { name: String, message: String },
    #[error("quantization of `{module}`: {message}")]
    Quantization { module: String, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("cache: {0}")]
    Cache(String),
    #[error("device: {0}")]
    Device(String),
    #[error(
        "this binary was built without the CUDA backend (rebuild with `cargo build --release -p amdahl --features cuda`) ; use --device cpu"
    )]
    CudaNotCompiled,
    #[error("engine shut down")]
    Shutdown,
    #[error("the request queue is full ({queued} waiting); retry in {retry_after_ms} ms")]
    Overloaded { queued: usize, retry_after_ms: u64 },
    #[error("the server is shutting down and admits no new requests")]
    Draining,
}

impl EngineError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn config(file: &str, field: &str, message: impl Into<String>) -> Self {
        Self::Config {
            file: file.to_string(),
            field: field.to_string(),
            message: message.into(),
        }
    }
}
