//! `/v1/chat/completions` and `/v1/completions`, streamed (SSE, vLLM's chunk shapes: the role
//! chunk goes out with the first output, `usage` is null on every chunk but the optional final
//! usage chunk, then `data: [DONE]`) and not streamed. Errors before the first byte are HTTP
//! errors; errors after it are an in-stream `data: {"error":…}` followed by `[DONE]`.

use actix_web::{HttpRequest, HttpResponse, web};
use amdahl_engine::api::Transport;
use amdahl_protocol::openai::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk,
    ChatCompletionRequest, ChatDelta, Completion, CompletionChoice, CompletionRequest, ErrorBody,
    Prompt, Usage,
};
use bytes::Bytes;

use super::error::ApiError;
use super::generation::{Generation, Outcome};
use super::state::{AppState, unix_now};
use super::validate::{
    MaxTokensDefault, PromptSource, check_model, check_sampling, parse_json, prepare, read_body,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

/// Counts an edge rejection and passes the error on.
pub fn rejected(state: &AppState, e: ApiError) -> ApiError {
    if let Some(reason) = e.reject_reason() {
        state
            .metrics()
            .requests_rejected_total
            .with_label_values(&[reason])
            .inc();
    }
    e
}

pub async fn chat(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    chat_inner(req, payload, &state)
        .await
        .map_err(|e| rejected(&state, e))
}

async fn chat_inner(
    req: HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload, state.limits.max_body_bytes).await?;
    let r: ChatCompletionRequest = parse_json(&req, &body)?;
    check_model(state, r.model.as_deref())?;
    if r.logprobs == Some(true) || r.top_logprobs.is_some() {
        return Err(ApiError::unsupported(
            "logprobs",
            "logprobs are not supported by this server",
        ));
    }
    let stream = r.stream.unwrap_or(false);
    if r.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        ));
    }
    let max = r.max_completion_tokens.or(r.sampling.max_tokens);
    let checked = check_sampling(&r.sampling, max, state.info().vocab_size)?;
    let prepared = prepare(
        state,
        PromptSource::Chat(r.messages),
        checked,
        MaxTokensDefault::RestOfContext,
    )
    .await?;
    let include_usage = r.stream_options.is_some_and(|o| o.include_usage);
    run(state, prepared, Kind::Chat, stream, include_usage).await
}

pub async fn completions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    completions_inner(req, payload, &state)
        .await
        .map_err(|e| rejected(&state, e))
}

async fn completions_inner(
    req: HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload, state.limits.max_body_bytes).await?;
    let r: CompletionRequest = parse_json(&req, &body)?;
    check_model(state, r.model.as_deref())?;
    if r.logprobs.is_some() {
        return Err(ApiError::unsupported(
            "logprobs",
            "logprobs are not supported by this server",
        ));
    }
    if r.echo == Some(true) {
        return Err(ApiError::unsupported("echo", "echo is not supported"));
    }
    let stream = r.stream.unwrap_or(false);
    if r.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        ));
    }
    let source = prompt_source(r.prompt)?;
    let checked = check_sampling(&r.sampling, r.sampling.max_tokens, state.info().vocab_size)?;
    let prepared = prepare(state, source, checked, MaxTokensDefault::Fixed(16)).await?;
    let include_usage = r.stream_options.is_some_and(|o| o.include_usage);
    run(state, prepared, Kind::Completion, stream, include_usage).await
}

/// A completions prompt as one source; batches of prompts are refused.
pub fn prompt_source(p: Prompt) -> Result<PromptSource, ApiError> {
    let many = || {
        ApiError::unsupported(
            "prompt",
            "batched prompts are not supported; send one prompt per request",
        )
    };
    match p {
        Prompt::Text(s) => Ok(PromptSource::Text(s)),
        Prompt::Ids(ids) => Ok(PromptSource::Ids(ids)),
        Prompt::Texts(mut v) if v.len() == 1 => Ok(PromptSource::Text(v.remove(0))),
        Prompt::IdLists(mut v) if v.len() == 1 => Ok(PromptSource::Ids(v.remove(0))),
        Prompt::Texts(v) if v.is_empty() => Err(ApiError::invalid("prompt", "the prompt is empty")),
        Prompt::Texts(_) | Prompt::IdLists(_) => Err(many()),
    }
}

async fn run(
    state: &AppState,
    prepared: super::validate::Prepared,
    kind: Kind,
    stream: bool,
    include_usage: bool,
) -> Result<HttpResponse, ApiError> {
    let mut gen_ = Generation::start(state, prepared, Transport::Http).await?;
    let model = state.info().name.clone();
    let prefix = match kind {
        Kind::Chat => "chatcmpl",
        Kind::Completion => "cmpl",
    };
    let id = format!("{prefix}-{}", gen_.request_id);
    let created = unix_now();
    if stream {
        let request_id = gen_.request_id.clone();
        let sse = Sse {
            gen_,
            kind,
            id,
            created,
            model,
            include_usage,
            sent_role: false,
            tail: Vec::new(),
            done: false,
        };
        let body = futures_util::stream::unfold(sse, |mut s| async move {
            let bytes = s.next_bytes().await?;
            Some((Ok::<_, actix_web::Error>(bytes), s))
        });
        return Ok(HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header(("Cache-Control", "no-cache"))
            .insert_header(("X-Request-Id", request_id))
            .streaming(body));
    }
    let mut text = String::new();
    let outcome = loop {
        let Some(c) = gen_.next().await else {
            return Err(ApiError::Internal(
                "the stream ended without an outcome".into(),
            ));
        };
        text.push_str(&c.text);
        if let Some(o) = c.done {
            break o;
        }
    };
    let reason = wire_reason(&outcome)?;
    let body = match kind {
        Kind::Chat => serde_json::to_value(ChatCompletion {
            id,
            object: "chat.completion".into(),
            created,
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: text,
                },
                logprobs: None,
                finish_reason: Some(reason.into()),
                stop_reason: outcome.stop_reason.clone(),
            }],
            usage: outcome.usage,
        }),
        Kind::Completion => serde_json::to_value(Completion {
            id,
            object: "text_completion".into(),
            created,
            model,
            choices: vec![CompletionChoice {
                index: 0,
                text,
                logprobs: None,
                finish_reason: Some(reason.into()),
                stop_reason: outcome.stop_reason.clone(),
            }],
            usage: Some(outcome.usage),
        }),
    }
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok()
        .insert_header(("X-Request-Id", gen_.request_id.clone()))
        .json(body))
}

/// `stop`/`length` pass through; a cancelled (shutdown) or failed request is an error.
fn wire_reason(o: &Outcome) -> Result<&'static str, ApiError> {
    match o.finish_reason {
        "stop" | "length" => Ok(o.finish_reason),
        "cancelled" => Err(ApiError::Draining),
        _ => Err(ApiError::Internal(
            o.error
                .clone()
                .unwrap_or_else(|| "generation failed".into()),
        )),
    }
}

/// The SSE state machine of one streamed request.
struct Sse {
    gen_: Generation,
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    sent_role: bool,
    /// Events computed but not yet sent (final chunk, usage, [DONE]).
    tail: Vec<Bytes>,
    done: bool,
}

fn event(v: &impl serde::Serialize) -> Bytes {
    match serde_json::to_string(v) {
        Ok(s) => Bytes::from(format!("data: {s}\n\n")),
        Err(e) => Bytes::from(format!(
            "data: {{\"error\":{{\"message\":\"{e}\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}}}\n\n"
        )),
    }
}

impl Sse {
    fn chat_chunk(
        &self,
        delta: ChatDelta,
        finish: Option<&Outcome>,
        reason: Option<&str>,
    ) -> Bytes {
        event(&ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChatChunkChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: reason.map(str::to_string),
                stop_reason: finish.and_then(|o| o.stop_reason.clone()),
            }],
            usage: None,
        })
    }

    fn text_chunk(&self, text: String, finish: Option<&Outcome>, reason: Option<&str>) -> Bytes {
        event(&Completion {
            id: self.id.clone(),
            object: "text_completion".into(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![CompletionChoice {
                index: 0,
                text,
                logprobs: None,
                finish_reason: reason.map(str::to_string),
                stop_reason: finish.and_then(|o| o.stop_reason.clone()),
            }],
            usage: None,
        })
    }

    fn usage_chunk(&self, usage: Usage) -> Bytes {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        };
        event(&serde_json::json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [], "usage": usage,
        }))
    }

    fn content(&mut self, text: String, out: &mut Vec<Bytes>) {
        match self.kind {
            Kind::Chat => {
                if !self.sent_role {
                    self.sent_role = true;
                    out.push(self.chat_chunk(
                        ChatDelta {
                            role: Some("assistant".into()),
                            content: Some(String::new()),
                        },
                        None,
                        None,
                    ));
                }
                if !text.is_empty() {
                    out.push(self.chat_chunk(
                        ChatDelta {
                            role: None,
                            content: Some(text),
                        },
                        None,
                        None,
                    ));
                }
            }
            Kind::Completion => {
                if !text.is_empty() {
                    out.push(self.text_chunk(text, None, None));
                }
            }
        }
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        loop {
            if !self.tail.is_empty() {
                return Some(self.tail.remove(0));
            }
            if self.done {
                return None;
            }
            let chunk = self.gen_.next().await;
            let mut out = Vec::new();
            let Some(chunk) = chunk else {
                self.done = true;
                continue;
            };
            // The role chunk goes out with the first output token, not before (TTFT honesty).
            if !chunk.token_ids.is_empty() || !chunk.text.is_empty() {
                self.content(chunk.text, &mut out);
            }
            if let Some(o) = chunk.done {
                match wire_reason(&o) {
                    Ok(reason) => {
                        if self.kind == Kind::Chat && !self.sent_role {
                            self.content(String::new(), &mut out);
                        }
                        out.push(match self.kind {
                            Kind::Chat => {
                                self.chat_chunk(ChatDelta::default(), Some(&o), Some(reason))
                            }
                            Kind::Completion => {
                                self.text_chunk(String::new(), Some(&o), Some(reason))
                            }
                        });
                        if self.include_usage {
                            out.push(self.usage_chunk(o.usage));
                        }
                    }
                    Err(e) => out.push(event(&ErrorBody { error: e.detail() })),
                }
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
                self.done = true;
            }
            self.tail = out;
        }
    }
}
