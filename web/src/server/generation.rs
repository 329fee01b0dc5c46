//! One admitted request seen from the edge: engine token events turned into UTF-8-complete text
//! chunks (stop strings applied) and one final [`Outcome`]. Both HTTP/SSE and WebSocket use it.
//! Each `next()` waits for one engine event and then takes every event already buffered, so a
//! reader that falls behind gets fewer, larger chunks instead of a growing backlog. Dropping a
//! `Generation` drops the engine receiver, which cancels the request and frees its slot.

use std::time::Instant;

use amdahl_engine::api::{
    FinishReason, Finished, GenerateRequest, StreamEvent, Submission, TextStream, Transport,
};
use amdahl_protocol::openai::Usage;
use amdahl_protocol::ws::Timings;
use serde_json::Value;

use super::error::ApiError;
use super::state::AppState;
use super::validate::Prepared;

/// How a request ended, in wire terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `stop`, `length`, `cancelled` or `error`.
    pub finish_reason: &'static str,
    /// The matched stop string or stop token id (vLLM's `stop_reason`).
    pub stop_reason: Option<Value>,
    pub usage: Usage,
    pub timings: Timings,
    pub error: Option<String>,
}

/// A piece of output: text that is final, the tokens it came from (a chunk may carry tokens and
/// no text while a code point or a possible stop string is incomplete), and the end if reached.
#[derive(Debug, Clone, Default)]
pub struct Chunk {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub done: Option<Outcome>,
}

/// A running request.
#[derive(Debug)]
pub struct Generation {
    pub request_id: String,
    pub seq: amdahl_engine::api::SeqId,
    engine: amdahl_engine::api::EngineHandle,
    pub queue_position: usize,
    pub prompt_tokens: usize,
    sub: Option<Submission>,
    text: TextStream,
    completion_tokens: usize,
    started: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn timings(t: &amdahl_engine::api::Timings, tokens: usize) -> Timings {
    Timings {
        queue_ms: ms(t.queue),
        prefill_ms: ms(t.prefill),
        ttft_ms: ms(t.ttft),
        decode_ms: ms(t.decode),
        e2e_ms: ms(t.e2e),
        tpot_ms: if tokens > 1 {
            ms(t.decode) / (tokens - 1) as f64
        } else {
            0.0
        },
    }
}

impl Generation {
    /// Submits a prepared request.
    pub async fn start(
        state: &AppState,
        p: Prepared,
        transport: Transport,
    ) -> Result<Self, ApiError> {
        let prompt_tokens = p.prompt.len();
        let text = TextStream::new(state.tok.clone(), p.stops, p.include_stop, p.skip_special);
        let sub = state
            .engine
            .submit(GenerateRequest {
                prompt: p.prompt,
                params: p.params,
                transport,
            })
            .await?;
        Ok(Self {
            request_id: sub.request_id.clone(),
            seq: sub.seq,
            engine: state.engine.clone(),
            queue_position: sub.queue_position,
            prompt_tokens,
            sub: Some(sub),
            text,
            completion_tokens: 0,
            started: Instant::now(),
            first_token: None,
            last_token: None,
        })
    }

    /// The next chunk, or None after the final one.
    pub async fn next(&mut self) -> Option<Chunk> {
        let sub = self.sub.as_mut()?;
        let first = sub.events.recv().await;
        let mut events = vec![first];
        while let Ok(ev) = sub.events.try_recv() {
            events.push(Some(ev));
        }
        let mut chunk = Chunk::default();
        for ev in events {
            match ev {
                Some(StreamEvent::Token(id)) => {
                    let now = Instant::now();
                    self.first_token.get_or_insert(now);
                    self.last_token = Some(now);
                    self.completion_tokens += 1;
                    chunk.token_ids.push(id);
                    match self.text.push(id) {
                        Ok(d) => {
                            chunk.text.push_str(&d.text);
                            if let Some(stop) = d.stop {
                                self.engine.stop(self.seq).await;
                                chunk.done = Some(self.stopped_by_string(stop.0));
                                break;
                            }
                        }
                        Err(e) => {
                            chunk.done = Some(self.failed(e.to_string()));
                            break;
                        }
                    }
                }
                Some(StreamEvent::Done(f)) => {
                    match self.text.finish() {
                        Ok(d) => chunk.text.push_str(&d.text),
                        Err(e) => {
                            chunk.done = Some(self.failed(e.to_string()));
                            break;
                        }
                    }
                    chunk.done = Some(self.finished(&f));
                    break;
                }
                None => {
                    chunk.done = Some(self.failed("the engine stopped".into()));
                    break;
                }
            }
        }
        if chunk.done.is_some() {
            // Dropping the receiver cancels the request if it is still running (stop string).
            self.sub = None;
        }
        Some(chunk)
    }

    fn usage(&self) -> Usage {
        Usage::new(self.prompt_tokens as u64, self.completion_tokens as u64)
    }

    fn local_timings(&self) -> Timings {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let last = self.last_token.unwrap_or(first);
        let t = amdahl_engine::api::Timings {
            queue: Default::default(),
            prefill: first - self.started,
            ttft: first - self.started,
            decode: last - first,
            e2e: now - self.started,
        };
        timings(&t, self.completion_tokens)
    }

    fn stopped_by_string(&self, s: String) -> Outcome {
        Outcome {
            finish_reason: "stop",
            stop_reason: Some(Value::String(s)),
            usage: self.usage(),
            timings: self.local_timings(),
            error: None,
        }
    }

    fn failed(&self, msg: String) -> Outcome {
        Outcome {
            finish_reason: "error",
            stop_reason: None,
            usage: self.usage(),
            timings: self.local_timings(),
            error: Some(msg),
        }
    }

    fn finished(&self, f: &Finished) -> Outcome {
        Outcome {
            finish_reason: f.reason.label(),
            stop_reason: f.stop_token.map(Value::from),
            usage: Usage::new(f.prompt_tokens as u64, f.completion_tokens as u64),
            timings: timings(&f.timings, f.completion_tokens),
            error: match f.reason {
                FinishReason::Error => f.error.clone(),
                _ => None,
            },
        }
    }
}
