//! The WebSocket side of the bench: requests multiplexed over `amdahl.v1` sockets (up to 64 in
//! flight per socket), TTFT at the first `request.delta`, ITL between deltas, token counts and
//! server-side timings from `request.done`.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::anyhow;
use awc::ws::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::report::RequestResult;
use super::{BenchConfig, Jobs, since};

const PER_SOCKET: usize = 64;

/// Runs every job over `ceil(concurrency / 64)` sockets.
pub async fn drive(
    cfg: &BenchConfig,
    model: &str,
    jobs: &Jobs,
    bar: &ProgressBar,
    t0: Instant,
) -> anyhow::Result<Vec<(usize, RequestResult)>> {
    let sockets = cfg.concurrency.div_ceil(PER_SOCKET);
    let shares: Vec<usize> = (0..sockets)
        .map(|i| cfg.concurrency / sockets + usize::from(i < cfg.concurrency % sockets))
        .collect();
    let runs = shares
        .into_iter()
        .map(|share| socket(cfg, model, jobs, bar, t0, share));
    let mut out = Vec::new();
    for r in futures_util::future::join_all(runs).await {
        out.extend(r?);
    }
    Ok(out)
}

struct Pending {
    index: usize,
    sent: Instant,
    last: Option<Instant>,
    r: RequestResult,
}

async fn socket(
    cfg: &BenchConfig,
    model: &str,
    jobs: &Jobs,
    bar: &ProgressBar,
    t0: Instant,
    share: usize,
) -> anyhow::Result<Vec<(usize, RequestResult)>> {
    let url = cfg.url.replacen("http", "ws", 1) + "/v1/ws";
    let mut req = awc::Client::new()
        .ws(url)
        .protocols(["amdahl.v1"])
        .max_frame_size(16 << 20);
    if let Some(k) = &cfg.api_key {
        req = req.bearer_auth(k);
    }
    let (_, mut ws) = req
        .connect()
        .await
        .map_err(|e| anyhow!("websocket connect: {e}"))?;
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut out = Vec::new();
    loop {
        while pending.len() < share {
            let Some(job) = jobs.take() else { break };
            let id = format!("b{}", job.index);
            let ev = json!({
                "type": "request.create", "id": id, "model": model, "prompt": job.prompt,
                "params": {"max_tokens": cfg.output_len, "temperature": 0.0,
                           "ignore_eos": cfg.ignore_eos},
            });
            pending.insert(
                id,
                Pending {
                    index: job.index,
                    sent: Instant::now(),
                    last: None,
                    r: RequestResult {
                        start: since(t0),
                        ..Default::default()
                    },
                },
            );
            ws.send(Message::Text(ev.to_string().into()))
                .await
                .map_err(|e| anyhow!("websocket send: {e}"))?;
        }
        if pending.is_empty() {
            break;
        }
        let frame = match ws.next().await {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(anyhow!("websocket: {e}")),
            None => return Err(anyhow!("the server closed the websocket")),
        };
        let text = match frame {
            Frame::Text(t) => t,
            Frame::Ping(p) => {
                let _ = ws.send(Message::Pong(p)).await;
                continue;
            }
            Frame::Close(c) => return Err(anyhow!("the server closed the websocket: {c:?}")),
            _ => continue,
        };
        let v: Value = serde_json::from_slice(&text)?;
        let Some(id) = v["id"].as_str() else { continue };
        let Some(p) = pending.get_mut(id) else {
            continue;
        };
        match v["type"].as_str() {
            Some("request.delta") => {
                let now = Instant::now();
                match p.last {
                    None => p.r.ttft = (now - p.sent).as_secs_f64(),
                    Some(prev) => p.r.itl.push((now - prev).as_secs_f64()),
                }
                p.last = Some(now);
                p.r.text.push_str(v["text"].as_str().unwrap_or(""));
            }
            Some("request.done") | Some("error") => {
                let Some(mut p) = pending.remove(id) else {
                    continue;
                };
                if v["type"] == "error" || v["finish_reason"] == "error" {
                    p.r.error = v["error"].to_string();
                } else {
                    p.r.success = true;
                    p.r.prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
                    p.r.output_tokens = v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
                    p.r.server_ttft_ms = v["timings"]["ttft_ms"].as_f64();
                    p.r.server_tpot_ms = v["timings"]["tpot_ms"].as_f64();
                    p.r.latency = p.last.map_or(0.0, |l| (l - p.sent).as_secs_f64());
                }
                bar.inc(1);
                out.push((p.index, p.r));
            }
            _ => {}
        }
    }
    let _ = ws.send(Message::Close(None)).await;
    Ok(out)
}
