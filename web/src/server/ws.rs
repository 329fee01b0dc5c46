//! `GET /v1/ws`: the `amdahl.v1` WebSocket protocol (docs/serving.md §2.2). One socket carries
//! many requests keyed by the client's `id`. Every `request.create` ends in exactly one terminal
//! event: `error` (refused before admission) or `request.created` … `request.delta`* …
//! `request.done`. Cancelling, or closing the socket, drops the request's engine stream, which
//! frees its cache slot at the next step boundary. Backpressure: the connection task writes one
//! frame at a time; while a slow reader blocks it, tokens wait in the engine's per-request
//! buffer and go out merged into one delta (`seq` still +1 per delta). A reader stalled past
//! the hard limit is closed with 1008; shutdown closes with 1001 once in-flight requests end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix_web::http::header::{HeaderValue, SEC_WEBSOCKET_PROTOCOL};
use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::{AggregatedMessage, AggregatedMessageStream, CloseCode, CloseReason, ProtocolError};
use amdahl_engine::api::Transport;
use amdahl_protocol::openai::{SamplingFields, Usage};
use amdahl_protocol::ws::{
    ClientEvent, CreateRequest, SUBPROTOCOL, ServerEvent, SessionLimits, Timings, WsError,
};
use futures_util::StreamExt;
use futures_util::stream::{AbortHandle, Abortable, LocalBoxStream, SelectAll};

use super::error::ApiError;
use super::generation::{Chunk, Generation};
use super::openai::{prompt_source, rejected};
use super::state::AppState;
use super::validate::{
    MaxTokensDefault, PromptSource, check_model, check_sampling, parse_json_bytes, prepare,
};

const PING_EVERY: Duration = Duration::from_secs(20);
/// A reader that accepts nothing for this long is dropped (1008).
const STALL_LIMIT: Duration = Duration::from_secs(30);

pub async fn ws_route(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    if state.draining() {
        return Err(ApiError::Draining.into());
    }
    let (mut res, session, stream) = actix_ws::handle(&req, body)?;
    let offered = req
        .headers()
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == SUBPROTOCOL);
    if offered {
        res.headers_mut().insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(SUBPROTOCOL),
        );
    }
    let limit = state.limits.max_ws_message_bytes;
    let stream = stream
        .max_frame_size(limit)
        .aggregate_continuations()
        .max_continuation_size(limit);
    let conn = Conn {
        state: state.get_ref().clone(),
        session,
        inflight: HashMap::new(),
        streams: SelectAll::new(),
        draining: false,
    };
    actix_web::rt::spawn(conn.run(stream));
    Ok(res)
}

struct Inflight {
    abort: AbortHandle,
    engine_seq: amdahl_engine::api::SeqId,
    seq: u64,
    include_token_ids: bool,
    prompt_tokens: usize,
    completion_tokens: usize,
    started: Instant,
    first_token: Option<Instant>,
}

type ChunkStream = Abortable<LocalBoxStream<'static, (String, Chunk)>>;

struct Conn {
    state: AppState,
    session: actix_ws::Session,
    inflight: HashMap<String, Inflight>,
    streams: SelectAll<ChunkStream>,
    draining: bool,
}

/// Why the loop ended.
enum End {
    ClientGone,
    Close(CloseCode, &'static str),
}

fn ws_err(code: &str, status: u16, message: impl Into<String>) -> WsError {
    WsError {
        kind: "invalid_request_error".into(),
        code: code.into(),
        param: None,
        message: message.into(),
        status,
        retry_after_ms: None,
    }
}

impl Conn {
    async fn run(mut self, mut stream: AggregatedMessageStream) {
        let m = self.state.metrics().clone();
        m.ws_connections.inc();
        let mut shutdown = self.state.shutdown.clone();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        let info = self.state.info().clone();
        let hello = ServerEvent::SessionCreated {
            session_id: format!("ws-{:016x}", rand_id()),
            protocol: SUBPROTOCOL.into(),
            model: info.name.clone(),
            max_model_len: info.max_model_len as u64,
            limits: SessionLimits {
                max_inflight: self.state.limits.ws_max_inflight as u64,
                max_message_bytes: self.state.limits.max_ws_message_bytes as u64,
            },
        };
        let end = match self.send(&hello).await {
            Err(end) => end,
            Ok(()) => self.serve(&mut stream, &mut shutdown, &mut ping).await,
        };
        // Dropping the streams drops every engine receiver: the requests are cancelled.
        let gone = self.inflight.len();
        self.streams = SelectAll::new();
        if gone > 0 {
            tracing::debug!("websocket closed with {gone} requests in flight");
        }
        m.ws_connections.dec();
        if let End::Close(code, why) = end {
            let _ = self
                .session
                .close(Some(CloseReason {
                    code,
                    description: Some(why.into()),
                }))
                .await;
        }
    }

    async fn serve(
        &mut self,
        stream: &mut AggregatedMessageStream,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
        ping: &mut tokio::time::Interval,
    ) -> End {
        if *shutdown.borrow() {
            self.draining = true;
        }
        loop {
            if self.draining && self.inflight.is_empty() {
                return End::Close(CloseCode::Away, "server shutting down");
            }
            tokio::select! {
                biased;
                r = shutdown.changed(), if !self.draining => {
                    if r.is_err() || *shutdown.borrow() {
                        self.draining = true;
                    }
                }
                msg = stream.next() => {
                    let r = match msg {
                        None => return End::ClientGone,
                        Some(Err(ProtocolError::Overflow)) => {
                            return End::Close(CloseCode::Size, "message too big");
                        }
                        Some(Err(_)) => return End::Close(CloseCode::Protocol, "protocol error"),
                        Some(Ok(AggregatedMessage::Close(_))) => {
                            return End::Close(CloseCode::Normal, "bye");
                        }
                        Some(Ok(AggregatedMessage::Text(t))) => self.on_text(t.as_bytes()).await,
                        Some(Ok(AggregatedMessage::Binary(_))) => {
                            self.send(&ServerEvent::Error {
                                id: None,
                                error: ws_err("invalid_message", 400, "binary frames are not supported; send JSON text"),
                            })
                            .await
                        }
                        Some(Ok(AggregatedMessage::Ping(b))) => {
                            self.session.pong(&b).await.map_err(|_| End::ClientGone)
                        }
                        Some(Ok(AggregatedMessage::Pong(_))) => Ok(()),
                    };
                    if let Err(end) = r {
                        return end;
                    }
                }
                Some((id, chunk)) = self.streams.next(), if !self.streams.is_empty() => {
                    if let Err(end) = self.on_chunk(id, chunk).await {
                        return end;
                    }
                }
                _ = ping.tick() => {
                    if self.session.ping(b"").await.is_err() {
                        return End::ClientGone;
                    }
                }
            }
        }
    }

    async fn send(&mut self, ev: &ServerEvent) -> Result<(), End> {
        let text =
            serde_json::to_string(ev).map_err(|_| End::Close(CloseCode::Error, "encoding"))?;
        match tokio::time::timeout(STALL_LIMIT, self.session.text(text)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(End::ClientGone),
            Err(_) => Err(End::Close(CloseCode::Policy, "slow consumer")),
        }
    }

    async fn on_text(&mut self, bytes: &[u8]) -> Result<(), End> {
        let ev: ClientEvent = match parse_json_bytes(bytes) {
            Ok(ev) => ev,
            Err(e) => {
                let e = rejected(&self.state, e);
                let id = serde_json::from_slice::<serde_json::Value>(bytes)
                    .ok()
                    .and_then(|v| v.get("id").and_then(|i| i.as_str()).map(str::to_string));
                return self.send(&ServerEvent::Error { id, error: e.ws() }).await;
            }
        };
        match ev {
            ClientEvent::Ping { nonce } => self.send(&ServerEvent::Pong { nonce }).await,
            ClientEvent::Cancel { id } => self.cancel(id).await,
            ClientEvent::Create(c) => self.create(*c).await,
        }
    }

    async fn cancel(&mut self, id: String) -> Result<(), End> {
        let Some(f) = self.inflight.remove(&id) else {
            return self
                .send(&ServerEvent::Error {
                    error: ws_err(
                        "unknown_request",
                        400,
                        format!("no request `{id}` is in flight"),
                    ),
                    id: Some(id),
                })
                .await;
        };
        self.state.engine.cancel(f.engine_seq);
        f.abort.abort();
        let now = Instant::now();
        let first = f.first_token.unwrap_or(now);
        let done = ServerEvent::Done {
            id,
            finish_reason: "cancelled".into(),
            stop_reason: None,
            usage: Usage::new(f.prompt_tokens as u64, f.completion_tokens as u64),
            timings: Timings {
                ttft_ms: (first - f.started).as_secs_f64() * 1e3,
                e2e_ms: (now - f.started).as_secs_f64() * 1e3,
                decode_ms: (now - first).as_secs_f64() * 1e3,
                ..Default::default()
            },
            error: None,
        };
        self.send(&done).await
    }

    async fn create(&mut self, c: CreateRequest) -> Result<(), End> {
        let id = c.id.clone();
        let refuse = |e: WsError| ServerEvent::Error {
            id: Some(id.clone()),
            error: e,
        };
        if self.inflight.contains_key(&id) {
            let e = ws_err(
                "duplicate_id",
                400,
                format!("request `{id}` is already in flight"),
            );
            return self.send(&refuse(e)).await;
        }
        if self.inflight.len() >= self.state.limits.ws_max_inflight {
            let e = ws_err(
                "too_many_requests",
                429,
                format!(
                    "at most {} requests in flight per socket",
                    self.state.limits.ws_max_inflight
                ),
            );
            return self.send(&refuse(e)).await;
        }
        let include_token_ids = c.stream.include_token_ids;
        let r = if self.draining {
            Err(ApiError::Draining)
        } else {
            self.admit(c).await
        };
        let g = match r {
            Ok(g) => g,
            Err(e) => {
                let e = rejected(&self.state, e);
                return self.send(&refuse(e.ws())).await;
            }
        };
        let created = ServerEvent::RequestCreated {
            id: id.clone(),
            request_id: g.request_id.clone(),
            prompt_tokens: g.prompt_tokens as u64,
            queue_position: g.queue_position as u64,
        };
        let (abort, reg) = AbortHandle::new_pair();
        self.inflight.insert(
            id.clone(),
            Inflight {
                abort,
                engine_seq: g.seq,
                seq: 0,
                include_token_ids,
                prompt_tokens: g.prompt_tokens,
                completion_tokens: 0,
                started: Instant::now(),
                first_token: None,
            },
        );
        let key = id;
        let s = futures_util::stream::unfold(g, move |mut g| {
            let key = key.clone();
            async move {
                let c = g.next().await?;
                Some(((key, c), g))
            }
        })
        .boxed_local();
        self.streams.push(Abortable::new(s, reg));
        self.send(&created).await
    }

    async fn admit(&self, c: CreateRequest) -> Result<Generation, ApiError> {
        check_model(&self.state, c.model.as_deref())?;
        let source = match (c.messages, c.prompt, c.input_ids) {
            (Some(m), None, None) => PromptSource::Chat(m),
            (None, Some(p), None) => prompt_source(p)?,
            (None, None, Some(ids)) => PromptSource::Ids(ids),
            _ => {
                return Err(ApiError::invalid(
                    "messages",
                    "give exactly one of `messages`, `prompt` or `input_ids`",
                ));
            }
        };
        let p = c.params;
        if p.logprobs.is_some_and(|n| n > 0) {
            return Err(ApiError::unsupported(
                "params.logprobs",
                "logprobs are not supported",
            ));
        }
        let fields = SamplingFields {
            max_tokens: p.max_tokens,
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: p.top_k,
            seed: p.seed,
            stop: p.stop,
            ignore_eos: p.ignore_eos,
            min_tokens: p.min_tokens,
            ..Default::default()
        };
        let checked = check_sampling(&fields, p.max_tokens, self.state.info().vocab_size)?;
        let prepared = prepare(
            &self.state,
            source,
            checked,
            MaxTokensDefault::RestOfContext,
        )
        .await?;
        Generation::start(&self.state, prepared, Transport::Ws).await
    }

    async fn on_chunk(&mut self, id: String, c: Chunk) -> Result<(), End> {
        let Some(f) = self.inflight.get_mut(&id) else {
            return Ok(());
        };
        if !c.token_ids.is_empty() {
            f.first_token.get_or_insert_with(Instant::now);
            f.completion_tokens += c.token_ids.len();
            if c.token_ids.len() > 1 {
                self.state
                    .metrics()
                    .stream_coalesced_deltas_total
                    .with_label_values(&["ws"])
                    .inc_by(c.token_ids.len() as u64 - 1);
            }
        }
        let want_delta = !c.text.is_empty() || (f.include_token_ids && !c.token_ids.is_empty());
        let delta = want_delta.then(|| {
            let ev = ServerEvent::Delta {
                id: id.clone(),
                seq: f.seq,
                text: c.text,
                token_ids: f.include_token_ids.then_some(c.token_ids),
            };
            f.seq += 1;
            ev
        });
        if let Some(ev) = delta {
            self.send(&ev).await?;
        }
        if let Some(o) = c.done {
            self.inflight.remove(&id);
            let error = o
                .error
                .as_ref()
                .map(|m| ApiError::Internal(m.clone()).detail());
            let done = ServerEvent::Done {
                id,
                finish_reason: o.finish_reason.into(),
                stop_reason: o.stop_reason,
                usage: o.usage,
                timings: o.timings,
                error,
            };
            self.send(&done).await?;
        }
        Ok(())
    }
}

fn rand_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    amdahl_engine::rng::Rng::new(t).next_u64()
}
