//! The web layer's errors and the one place they become HTTP statuses, OpenAI-shaped bodies
//! (`{"error":{message,type,param,code}}`) and WebSocket `error` events (docs/serving.md §1.6).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use amdahl_engine::EngineError;
use amdahl_protocol::openai::{ErrorBody, ErrorDetail};
use amdahl_protocol::ws::WsError;

/// Every way a request can fail at the edge.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed JSON, wrong types, out-of-range values.
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<String>,
    },
    /// A field the server understands but does not serve (logprobs, n > 1, ...).
    #[error("{message}")]
    Unsupported { message: String, param: String },
    #[error("{message}")]
    ContextLength { message: String, param: String },
    #[error("The model `{0}` does not exist.")]
    ModelNotFound(String),
    #[error("Unauthorized: a valid `Authorization: Bearer <key>` header is required.")]
    Unauthorized,
    #[error("The request body is larger than the limit of {limit} bytes.")]
    TooLarge { limit: usize },
    #[error("The request queue is full; retry in {retry_after_ms} ms.")]
    Overloaded { retry_after_ms: u64 },
    #[error("The server is shutting down and admits no new requests.")]
    Draining,
    #[error("The engine is not available: {0}")]
    EngineDead(String),
    #[error("Not found: {0}")]
    NoRoute(String),
    #[error("Internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            message: message.into(),
            param: Some(param.to_string()),
        }
    }

    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        ApiError::Unsupported {
            message: message.into(),
            param: param.to_string(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid { .. } | ApiError::Unsupported { .. } => StatusCode::BAD_REQUEST,
            ApiError::ContextLength { .. } => StatusCode::BAD_REQUEST,
            ApiError::ModelNotFound(_) | ApiError::NoRoute(_) => StatusCode::NOT_FOUND,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Overloaded { .. } | ApiError::Draining | ApiError::EngineDead(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn kind_and_code(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::Invalid { .. } => ("invalid_request_error", "invalid_parameter"),
            ApiError::Unsupported { .. } => ("invalid_request_error", "unsupported_parameter"),
            ApiError::ContextLength { .. } => ("invalid_request_error", "context_length_exceeded"),
            ApiError::ModelNotFound(_) => ("not_found_error", "model_not_found"),
            ApiError::NoRoute(_) => ("not_found_error", "not_found"),
            ApiError::Unauthorized => ("invalid_request_error", "invalid_api_key"),
            ApiError::TooLarge { .. } => ("invalid_request_error", "request_too_large"),
            ApiError::Overloaded { .. } => ("overloaded_error", "server_overloaded"),
            ApiError::Draining => ("overloaded_error", "draining"),
            ApiError::EngineDead(_) => ("server_error", "engine_dead"),
            ApiError::Internal(_) => ("server_error", "internal_error"),
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            ApiError::Invalid { param, .. } => param.clone(),
            ApiError::Unsupported { param, .. } | ApiError::ContextLength { param, .. } => {
                Some(param.clone())
            }
            ApiError::ModelNotFound(_) => Some("model".into()),
            _ => None,
        }
    }

    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            ApiError::Overloaded { retry_after_ms } => Some(*retry_after_ms),
            ApiError::Draining | ApiError::EngineDead(_) => Some(1000),
            _ => None,
        }
    }

    /// The `reason` label of `amdahl_requests_rejected_total` for errors counted at the edge
    /// (the engine counts queue_full and not_ready itself).
    pub fn reject_reason(&self) -> Option<&'static str> {
        match self {
            ApiError::Invalid { .. } | ApiError::Unsupported { .. } => Some("invalid"),
            ApiError::ModelNotFound(_) | ApiError::TooLarge { .. } => Some("invalid"),
            ApiError::ContextLength { .. } => Some("too_long"),
            ApiError::Unauthorized => Some("unauthorized"),
            _ => None,
        }
    }

    pub fn detail(&self) -> ErrorDetail {
        let (kind, code) = self.kind_and_code();
        ErrorDetail {
            message: self.to_string(),
            kind: kind.into(),
            param: self.param(),
            code: code.into(),
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.detail(),
        }
    }

    /// The WebSocket form: the same fields plus the status and retry hint.
    pub fn ws(&self) -> WsError {
        let d = self.detail();
        WsError {
            kind: d.kind,
            code: d.code,
            param: d.param,
            message: d.message,
            status: self.status().as_u16(),
            retry_after_ms: self.retry_after_ms(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Overloaded { retry_after_ms, .. } => {
                ApiError::Overloaded { retry_after_ms }
            }
            EngineError::Draining => ApiError::Draining,
            EngineError::InvalidInput(m) => ApiError::Invalid {
                message: m,
                param: None,
            },
            EngineError::Tokenizer(m) => ApiError::Invalid {
                message: format!("tokenizer: {m}"),
                param: None,
            },
            EngineError::Shutdown | EngineError::Device(_) => ApiError::EngineDead(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status()
    }

    fn error_response(&self) -> HttpResponse {
        let mut r = HttpResponse::build(self.status());
        if let Some(ms) = self.retry_after_ms() {
            // Retry-After is whole seconds; the openai SDKs also read retry-after-ms.
            r.insert_header(("Retry-After", ms.div_ceil(1000).max(1).to_string()));
            r.insert_header(("retry-after-ms", ms.to_string()));
        }
        r.json(self.body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_codes_and_params() {
        let e = ApiError::invalid("temperature", "must be in [0, 2]");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let b = serde_json::to_value(e.body()).unwrap();
        assert_eq!(b["error"]["param"], "temperature");
        assert_eq!(b["error"]["code"], "invalid_parameter");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        let o = ApiError::from(EngineError::Overloaded {
            queued: 3,
            retry_after_ms: 1500,
        });
        assert_eq!(o.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(o.ws().retry_after_ms, Some(1500));
        assert_eq!(o.ws().code, "server_overloaded");
        let r = o.error_response();
        assert_eq!(r.headers().get("Retry-After").unwrap(), "2");
        assert_eq!(
            ApiError::ModelNotFound("x".into()).status(),
            StatusCode::NOT_FOUND
        );
    }
}
