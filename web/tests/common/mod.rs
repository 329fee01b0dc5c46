//! Shared helpers for the server tests: a tiny random model folder, an in-process server on
//! 127.0.0.1 port 0, and small HTTP / SSE / WebSocket client helpers (awc).

#![allow(dead_code, clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use amdahl::server::{Limits, Server, ServerConfig, start};
use amdahl_engine::api::{DeviceSpec, EngineConfig, SchedulerConfig};
use awc::ws::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

pub const MODEL: &str = "tiny";

/// A servable tiny model (random weights, byte-level tokenizer, chat template).
pub fn model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    amdahl_engine::testkit::write_model_dir(dir.path(), &amdahl_engine::testkit::serving_spec(), 7)
        .unwrap();
    dir
}

pub struct Opts {
    pub max_seqs: usize,
    pub max_queue: usize,
    pub max_step_tokens: usize,
    pub api_key: Option<String>,
    pub limits: Limits,
    pub max_model_len: Option<usize>,
    pub grace: Duration,
    pub profile_every: Option<u32>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            max_seqs: 64,
            max_queue: 256,
            max_step_tokens: 256,
            api_key: None,
            limits: Limits::default(),
            max_model_len: None,
            grace: Duration::from_secs(10),
            profile_every: None,
        }
    }
}

pub fn serve(dir: &Path, o: Opts) -> Server {
    start(ServerConfig {
        engine: EngineConfig {
            model_dir: dir.to_path_buf(),
            model_name: Some(MODEL.into()),
            device: DeviceSpec::Cpu,
            scheduler: SchedulerConfig {
                max_seqs: o.max_seqs,
                max_step_tokens: o.max_step_tokens,
                max_queue: o.max_queue,
            },
            max_model_len: o.max_model_len,
            profile_every: o.profile_every,
            moe_backend: None,
            workers: None,
        },
        host: "127.0.0.1".into(),
        port: 0,
        api_key: o.api_key,
        limits: o.limits,
        workers: 2,
        shutdown_grace: o.grace,
    })
    .unwrap()
}

pub fn client() -> awc::Client {
    awc::Client::builder()
        .connector(awc::Connector::new().limit(256))
        .timeout(Duration::from_secs(60))
        .finish()
}

/// POSTs JSON; returns (status, parsed body or the raw text as a JSON string, headers).
pub async fn post(
    c: &awc::Client,
    url: &str,
    body: &Value,
) -> (u16, Value, awc::http::header::HeaderMap) {
    let mut res = c.post(url).send_json(body).await.unwrap();
    let headers = res.headers().clone();
    let bytes = res.body().limit(64 << 20).await.unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (res.status().as_u16(), v, headers)
}

pub async fn post_raw(c: &awc::Client, url: &str, ct: &str, body: &'static [u8]) -> (u16, Value) {
    let mut res = c
        .post(url)
        .insert_header(("Content-Type", ct))
        .send_body(body)
        .await
        .unwrap();
    let bytes = res.body().await.unwrap();
    (
        res.status().as_u16(),
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Splits a complete SSE body into its `data:` payloads.
pub fn sse_data(body: &str) -> Vec<String> {
    assert!(body.ends_with("\n\n"), "SSE body ends with a blank line");
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event without `data: `: {e:?}"))
                .to_string()
        })
        .collect()
}

/// POSTs a streaming request and returns the SSE payloads.
pub async fn stream(c: &awc::Client, url: &str, body: &Value) -> Vec<String> {
    let mut res = c.post(url).send_json(body).await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let bytes = res.body().limit(64 << 20).await.unwrap();
    sse_data(std::str::from_utf8(&bytes).unwrap())
}

/// Reads one gauge or counter sample (no labels other than the given text) from /metrics.
pub async fn metric(c: &awc::Client, base: &str, series: &str) -> f64 {
    let mut res = c.get(format!("{base}/metrics")).send().await.unwrap();
    let text = String::from_utf8(res.body().limit(8 << 20).await.unwrap().to_vec()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Polls until the running and waiting gauges are both 0.
pub async fn wait_idle(c: &awc::Client, base: &str) {
    for _ in 0..400 {
        let running = metric(
            c,
            base,
            &format!("amdahl_requests_running{{model=\"{MODEL}\"}}"),
        )
        .await;
        let waiting = metric(
            c,
            base,
            &format!("amdahl_requests_waiting{{model=\"{MODEL}\"}}"),
        )
        .await;
        if running == 0.0 && waiting == 0.0 {
            return;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the server did not return to idle (slots leaked)");
}

pub type Ws = actix_codec::Framed<awc::BoxedSocket, awc::ws::Codec>;

pub async fn ws_connect(base: &str) -> Ws {
    let url = base.replacen("http", "ws", 1) + "/v1/ws";
    let (res, ws) = awc::Client::new()
        .ws(url)
        .protocols(["amdahl.v1"])
        .connect()
        .await
        .unwrap();
    assert_eq!(
        res.headers().get("sec-websocket-protocol").unwrap(),
        "amdahl.v1"
    );
    ws
}

pub async fn ws_send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

/// The next JSON text frame (pings answered, other frames skipped); None on close.
pub async fn ws_next(ws: &mut Ws) -> Option<Value> {
    loop {
        match ws.next().await? {
            Ok(Frame::Text(t)) => return Some(serde_json::from_slice(&t).unwrap()),
            Ok(Frame::Ping(p)) => ws.send(Message::Pong(p)).await.unwrap(),
            Ok(Frame::Close(_)) => return None,
            Ok(_) => {}
            Err(e) => panic!("websocket error: {e}"),
        }
    }
}

/// The next frame of any kind (for close-code checks).
pub async fn ws_frame(ws: &mut Ws) -> Option<Frame> {
    ws.next().await.map(|f| f.unwrap())
}

pub fn greedy_completion(prompt: Value, max_tokens: usize) -> Value {
    json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
           "ignore_eos": true})
}
