//! Validation at the edge: body size and content type, JSON with the failing field named, every
//! sampling field range-checked, the model name checked, the prompt rendered (chat template) and
//! tokenized on the blocking pool, and its length checked against the model's context. The output
//! is a [`Prepared`] request the engine can run as is.

use actix_web::{HttpRequest, web};
use amdahl_engine::api::{SamplingParams, Tokenizer};
use amdahl_engine::chat_template::TemplateMessage;
use amdahl_protocol::openai::{ChatMessage, MessageContent, SamplingFields};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::state::AppState;

/// Most stop strings per request, and the longest one.
const MAX_STOPS: usize = 16;
const MAX_STOP_CHARS: usize = 256;

/// Reads the body up to `limit` bytes.
pub async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid("body", format!("reading the body: {e}")))?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::TooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Parses a JSON body; errors name the field (`param`) that failed.
pub fn parse_json<T: DeserializeOwned>(req: &HttpRequest, body: &[u8]) -> Result<T, ApiError> {
    if let Some(ct) = req.headers().get(actix_web::http::header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default();
        if !ct.starts_with("application/json") {
            return Err(ApiError::invalid(
                "content-type",
                format!("Content-Type must be application/json, got `{ct}`"),
            ));
        }
    }
    parse_json_bytes(body)
}

/// Parses JSON text; errors name the field that failed. The request types flatten their
/// sampling fields (which hides the failing path from serde), so those are checked on their own
/// first.
pub fn parse_json_bytes<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
        && v.is_object()
    {
        serde_path_to_error::deserialize::<_, SamplingFields>(&v).map_err(path_error)?;
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(path_error)
}

fn path_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let param = (path != "." && !path.is_empty()).then_some(path);
    let message = match &param {
        Some(p) => format!("invalid field `{p}`: {inner}"),
        None => format!("invalid JSON body: {inner}"),
    };
    ApiError::Invalid { message, param }
}

/// 404 unless `model` is absent or the served model's name.
pub fn check_model(state: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != state.info().name => Err(ApiError::ModelNotFound(m.to_string())),
        _ => Ok(()),
    }
}

/// Where a prompt comes from.
#[derive(Debug, Clone)]
pub enum PromptSource {
    Chat(Vec<ChatMessage>),
    Text(String),
    Ids(Vec<i64>),
}

impl PromptSource {
    fn param(&self) -> &'static str {
        match self {
            PromptSource::Chat(_) => "messages",
            PromptSource::Text(_) => "prompt",
            PromptSource::Ids(_) => "prompt",
        }
    }
}

/// How `max_tokens` defaults when absent.
#[derive(Debug, Clone, Copy)]
pub enum MaxTokensDefault {
    /// Completions: 16 (OpenAI and vLLM).
    Fixed(usize),
    /// Chat: the rest of the context.
    RestOfContext,
}

/// A validated, tokenized request.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub stops: Vec<String>,
    pub include_stop: bool,
    pub skip_special: bool,
}

/// Checked sampling fields, before the prompt length is known.
#[derive(Debug, Clone)]
pub struct Checked {
    params: SamplingParams,
    max_tokens: Option<usize>,
    stops: Vec<String>,
    include_stop: bool,
    skip_special: bool,
}

fn in_range(param: &str, v: Option<f64>, lo: f64, hi: f64, lo_open: bool) -> Result<(), ApiError> {
    if let Some(x) = v {
        let low_ok = if lo_open { x > lo } else { x >= lo };
        if !x.is_finite() || !low_ok || x > hi {
            let l = if lo_open { "(" } else { "[" };
            return Err(ApiError::invalid(
                param,
                format!("`{param}` must be in {l}{lo}, {hi}], got {x}"),
            ));
        }
    }
    Ok(())
}

/// Range-checks every sampling field. `max_tokens` is the effective field (chat:
/// `max_completion_tokens` or `max_tokens`).
pub fn check_sampling(
    f: &SamplingFields,
    max_tokens: Option<i64>,
    vocab: usize,
) -> Result<Checked, ApiError> {
    in_range("temperature", f.temperature, 0.0, 2.0, false)?;
    in_range("top_p", f.top_p, 0.0, 1.0, true)?;
    for (name, v) in [
        ("presence_penalty", f.presence_penalty),
        ("frequency_penalty", f.frequency_penalty),
    ] {
        in_range(name, v, -2.0, 2.0, false)?;
        if v.is_some_and(|x| x != 0.0) {
            return Err(ApiError::unsupported(
                name,
                format!("`{name}` is not supported; send 0 or omit it"),
            ));
        }
    }
    let top_k = match f.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k >= 1 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("`top_k` must be -1 (off) or >= 1, got {k}"),
            ));
        }
    };
    if let Some(n) = f.n
        && n != 1
    {
        if n < 1 {
            return Err(ApiError::invalid("n", format!("`n` must be >= 1, got {n}")));
        }
        return Err(ApiError::unsupported("n", "only n = 1 is supported"));
    }
    let max_tokens = match max_tokens {
        None => None,
        Some(m) if m >= 1 => Some(m as usize),
        Some(m) => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!("`max_tokens` must be >= 1, got {m}"),
            ));
        }
    };
    let min_tokens = match f.min_tokens {
        None => 0,
        Some(m) if m >= 0 => m as usize,
        Some(m) => {
            return Err(ApiError::invalid(
                "min_tokens",
                format!("`min_tokens` must be >= 0, got {m}"),
            ));
        }
    };
    if let Some(mt) = max_tokens
        && min_tokens > mt
    {
        return Err(ApiError::invalid(
            "min_tokens",
            format!("`min_tokens` ({min_tokens}) must not exceed `max_tokens` ({mt})"),
        ));
    }
    let stops = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stops.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOPS} stop strings, got {}", stops.len()),
        ));
    }
    if let Some(s) = stops.iter().find(|s| s.chars().count() > MAX_STOP_CHARS) {
        return Err(ApiError::invalid(
            "stop",
            format!(
                "stop strings are limited to {MAX_STOP_CHARS} characters; one has {}",
                s.chars().count()
            ),
        ));
    }
    let mut stop_token_ids = Vec::new();
    for &id in f.stop_token_ids.iter().flatten() {
        if id < 0 || id as usize >= vocab {
            return Err(ApiError::invalid(
                "stop_token_ids",
                format!("token id {id} is outside the vocabulary (size {vocab})"),
            ));
        }
        stop_token_ids.push(id as u32);
    }
    Ok(Checked {
        params: SamplingParams {
            temperature: f.temperature.unwrap_or(1.0) as f32,
            top_p: f.top_p.unwrap_or(1.0) as f32,
            top_k,
            seed: f.seed.map(|s| s as u64),
            max_tokens: 0,
            min_tokens,
            ignore_eos: f.ignore_eos.unwrap_or(false),
            stop_token_ids,
        },
        max_tokens,
        stops,
        include_stop: f.include_stop_str_in_output.unwrap_or(false),
        skip_special: f.skip_special_tokens.unwrap_or(true),
    })
}

fn message_text(i: usize, m: &ChatMessage) -> Result<TemplateMessage, ApiError> {
    if m.role.is_empty() {
        return Err(ApiError::invalid(
            &format!("messages[{i}].role"),
            "`role` must not be empty",
        ));
    }
    let content = match &m.content {
        None => String::new(),
        Some(MessageContent::Text(s)) => s.clone(),
        Some(MessageContent::Parts(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => out.push_str(t),
                    _ => {
                        return Err(ApiError::unsupported(
                            &format!("messages[{i}].content[{j}]"),
                            format!("only text content parts are supported, got `{}`", p.kind),
                        ));
                    }
                }
            }
            out
        }
    };
    Ok(TemplateMessage {
        role: m.role.clone(),
        content,
    })
}

/// Renders (chat) and tokenizes a prompt on the blocking pool.
pub async fn tokenize(
    state: &AppState,
    source: PromptSource,
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ApiError> {
    let vocab = state.info().vocab_size;
    let tok: std::sync::Arc<Tokenizer> = state.tokenizer().clone();
    match source {
        PromptSource::Ids(ids) => {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if id < 0 || id as usize >= vocab {
                    return Err(ApiError::invalid(
                        "prompt",
                        format!("token id {id} is outside the vocabulary (size {vocab})"),
                    ));
                }
                out.push(id as u32);
            }
            Ok(out)
        }
        PromptSource::Text(text) => web::block(move || tok.encode(&text, true))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(ApiError::from),
        PromptSource::Chat(messages) => {
            if messages.is_empty() {
                return Err(ApiError::invalid(
                    "messages",
                    "`messages` must not be empty",
                ));
            }
            let msgs = messages
                .iter()
                .enumerate()
                .map(|(i, m)| message_text(i, m))
                .collect::<Result<Vec<_>, _>>()?;
            let Some(template) = state.template().cloned() else {
                return Err(ApiError::unsupported(
                    "messages",
                    "this model has no chat template; use /v1/completions",
                ));
            };
            web::block(move || {
                let text = template.render(&msgs, add_generation_prompt)?;
                tok.encode(&text, false)
            })
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::invalid("messages", e.to_string()))
        }
    }
}

/// Checks, renders, tokenizes and length-checks one request.
pub async fn prepare(
    state: &AppState,
    source: PromptSource,
    checked: Checked,
    default_max: MaxTokensDefault,
) -> Result<Prepared, ApiError> {
    let param = source.param();
    let prompt = tokenize(state, source, true).await?;
    let max_len = state.info().max_model_len;
    let n = prompt.len();
    if n == 0 {
        return Err(ApiError::invalid(param, "the prompt is empty"));
    }
    if n >= max_len {
        return Err(ApiError::ContextLength {
            message: format!(
                "This model's maximum context length is {max_len} tokens. However, your request \
                 has {n} input tokens. Please reduce the length of the input."
            ),
            param: "input_tokens".into(),
        });
    }
    let rest = max_len - n;
    let max_tokens = match (checked.max_tokens, default_max) {
        (Some(m), _) if m > rest => {
            return Err(ApiError::ContextLength {
                message: format!(
                    "'max_tokens' or 'max_completion_tokens' is too large: {m}. This model's \
                     maximum context length is {max_len} tokens and your request has {n} input \
                     tokens ({m} > {max_len} - {n})."
                ),
                param: "max_tokens".into(),
            });
        }
        (Some(m), _) => m,
        (None, MaxTokensDefault::Fixed(d)) => d.min(rest),
        (None, MaxTokensDefault::RestOfContext) => rest,
    };
    let mut params = checked.params;
    params.max_tokens = max_tokens;
    params.min_tokens = params.min_tokens.min(max_tokens);
    Ok(Prepared {
        prompt,
        params,
        stops: checked.stops,
        include_stop: checked.include_stop,
        skip_special: checked.skip_special,
    })
}
