//! One admitted request seen from the edge: engine token events turned into UTF-8-complete text
//! chunks (stop strings applied) and one final [`Outcome`]. Both HTTP/SSE and WebSocket use it.
//! Each `next()` waits for one engine event; when the reader has fallen behind by
//! [`MERGE_BACKLOG`] events or more it also takes every event already buffered, so a slow reader
//! gets fewer, larger chunks instead of a growing backlog while a reader that keeps up sees one
//! chunk per token (serving.md, WebSocket rule 6: merge above a high-water mark). Dropping a
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

/// Buffered engine events (beyond the one just received) at which `next()` merges the backlog
/// into one chunk. Below it a reader a few tokens behind still streams token by token: on two
/// loaded cores a short answer's 4–5 tokens can all be buffered before the socket task first
/// runs, and merging those would send the whole answer as one delta.
pub const MERGE_BACKLOG: usize = 8;

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
        if sub.events.len() >= MERGE_BACKLOG {
            while let Ok(ev) = sub.events.try_recv() {
                events.push(Some(ev));
            }
        }
        let mut chunk = Chunk::default();
        let mut stopped = false;
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
                                stopped = true;
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
        if stopped {
            // End it as `stop` before the receiver goes, or the engine may see the closed
            // channel first and count a client that left.
            self.engine.stop(self.seq).await;
        }
        if chunk.done.is_some() {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use amdahl_engine::api::{
        DeviceSpec, EngineConfig, EngineHandle, SamplingParams, SchedulerConfig, Tokenizer,
    };

    use super::*;
    use crate::server::state::Limits;

    /// A CPU engine on the serving test model, written to a temporary directory (kept alive
    /// by the returned handle).
    fn state() -> (tempfile::TempDir, AppState) {
        let dir = tempfile::tempdir().unwrap();
        amdahl_engine::testkit::write_model_dir(
            dir.path(),
            &amdahl_engine::testkit::serving_spec(),
            7,
        )
        .unwrap();
        let st = state_in(dir.path());
        (dir, st)
    }

    fn state_in(dir: &std::path::Path) -> AppState {
        let engine = EngineHandle::start(EngineConfig {
            model_dir: dir.to_path_buf(),
            model_name: Some("tiny".into()),
            device: DeviceSpec::Cpu,
            scheduler: SchedulerConfig {
                max_seqs: 4,
                max_step_tokens: 64,
                max_queue: 4,
            },
            max_model_len: None,
            profile_every: None,
            moe_backend: None,
            workers: None,
        })
        .unwrap();
        AppState {
            engine,
            tok: Arc::new(Tokenizer::from_model_dir(dir).unwrap().unwrap()),
            template: None,
            limits: Limits::default(),
            api_key: None,
            shutdown: tokio::sync::watch::channel(false).1,
            started: 0,
        }
    }

    fn greedy(n: usize) -> Prepared {
        Prepared {
            prompt: vec![11, 42, 97, 5, 200],
            params: SamplingParams {
                temperature: 0.0,
                max_tokens: n,
                ignore_eos: true,
                ..Default::default()
            },
            stops: Vec::new(),
            include_stop: false,
            skip_special: true,
        }
    }

    /// Waits (at most 10 s) until the engine runs and queues nothing: every event of the
    /// requests started so far is buffered.
    async fn wait_idle(st: &AppState) {
        for _ in 0..2000 {
            let s = st.engine.stats().await.unwrap();
            if s.running == 0 && s.waiting == 0 {
                return;
            }
            actix_rt::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the engine did not finish the request");
    }

    /// A reader that falls behind (here: reads nothing until the engine has finished) gets the
    /// whole backlog as one chunk, with the same tokens, text and outcome as a prompt reader.
    #[actix_web::test]
    async fn a_reader_that_falls_behind_gets_the_backlog_merged() {
        let (_dir, st) = state();
        let n = 48;

        let mut prompt_reader = Generation::start(&st, greedy(n), Transport::Ws)
            .await
            .unwrap();
        let mut live = Vec::new();
        while let Some(c) = prompt_reader.next().await {
            live.push(c);
        }

        let mut slow = Generation::start(&st, greedy(n), Transport::Ws)
            .await
            .unwrap();
        wait_idle(&st).await;
        let backlog = slow.next().await.unwrap();
        assert!(
            slow.next().await.is_none(),
            "one chunk holds the whole backlog"
        );

        let ids: Vec<u32> = live.iter().flat_map(|c| c.token_ids.clone()).collect();
        let text: String = live.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(ids.len(), n);
        assert_eq!(
            backlog.token_ids, ids,
            "no token lost, duplicated or reordered"
        );
        assert_eq!(backlog.text, text);
        assert_eq!(text, st.tok.decode(&ids, true).unwrap());
        let (a, b) = (live.last().unwrap().done.clone(), backlog.done.clone());
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.finish_reason, b.finish_reason), ("length", "length"));
        assert_eq!(a.usage, b.usage);
        assert_eq!(b.usage.completion_tokens, n as u64);
    }

    /// A reader only a few events behind (fewer than [`MERGE_BACKLOG`] buffered) still gets one
    /// chunk per token: a short answer is not sent as one delta just because the engine was quick.
    #[actix_web::test]
    async fn a_reader_a_few_tokens_behind_still_streams_token_by_token() {
        let (_dir, st) = state();
        // n tokens and the end: n + 1 events, all buffered before the first read.
        let n = MERGE_BACKLOG - 2;
        let mut g = Generation::start(&st, greedy(n), Transport::Ws)
            .await
            .unwrap();
        wait_idle(&st).await;
        let mut chunks = Vec::new();
        while let Some(c) = g.next().await {
            chunks.push(c);
        }
        let per_chunk: Vec<usize> = chunks.iter().map(|c| c.token_ids.len()).collect();
        let mut want = vec![1; n];
        want.push(0);
        assert_eq!(per_chunk, want, "one token per chunk, then the end");
        let done = chunks.last().unwrap().done.clone().unwrap();
        assert_eq!(done.finish_reason, "length");
        assert_eq!(done.usage.completion_tokens, n as u64);
        assert!(chunks[..n].iter().all(|c| c.done.is_none()));
    }
}
