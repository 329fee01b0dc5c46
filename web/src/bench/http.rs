//! The HTTP/SSE side of the bench: streamed `/v1/completions` with `include_usage`, TTFT at the
//! first chunk that carries text, ITL between text chunks, E2E at the last text chunk, token
//! counts from the usage chunk (vLLM `endpoint_request_func.py` semantics).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::report::RequestResult;
use super::{BenchConfig, Jobs, REQUEST_TIMEOUT, since};

/// An HTTP client with room for `concurrency` connections.
pub fn client(concurrency: usize) -> awc::Client {
    awc::Client::builder()
        .connector(awc::Connector::new().limit(concurrency + 4))
        .timeout(REQUEST_TIMEOUT)
        .finish()
}

fn auth(req: awc::ClientRequest, key: &Option<String>) -> awc::ClientRequest {
    match key {
        Some(k) => req.insert_header(("Authorization", format!("Bearer {k}"))),
        None => req,
    }
}

/// The first model the server lists.
pub async fn first_model(client: &awc::Client, cfg: &BenchConfig) -> anyhow::Result<String> {
    let req = auth(client.get(format!("{}/v1/models", cfg.url)), &cfg.api_key);
    let mut res = req.send().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let v: Value = res.json().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no model in {v}"))
}

/// Runs every job with `concurrency` workers; returns (job index, result).
pub async fn drive(
    client: &awc::Client,
    cfg: &BenchConfig,
    model: &str,
    jobs: &Jobs,
    bar: &ProgressBar,
    t0: Instant,
) -> Vec<(usize, RequestResult)> {
    let workers = (0..cfg.concurrency).map(|_| async {
        let mut out = Vec::new();
        while let Some(job) = jobs.take() {
            let r = one(client, cfg, model, &job.prompt, t0).await;
            bar.inc(1);
            out.push((job.index, r));
        }
        out
    });
    futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn one(
    client: &awc::Client,
    cfg: &BenchConfig,
    model: &str,
    prompt: &str,
    t0: Instant,
) -> RequestResult {
    let start = since(t0);
    let mut r = RequestResult {
        start,
        ..Default::default()
    };
    let body = json!({
        "model": model, "prompt": prompt, "max_tokens": cfg.output_len, "temperature": 0.0,
        "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": cfg.ignore_eos,
    });
    let req = auth(
        client.post(format!("{}/v1/completions", cfg.url)),
        &cfg.api_key,
    );
    let sent = Instant::now();
    let mut res = match req.send_json(&body).await {
        Ok(res) => res,
        Err(e) => {
            r.error = e.to_string();
            return r;
        }
    };
    if !res.status().is_success() {
        let body = res
            .body()
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        r.error = format!("HTTP {}: {}", res.status(), body.unwrap_or_default());
        return r;
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut last: Option<Instant> = None;
    let mut done = false;
    while let Some(chunk) = res.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                r.error = e.to_string();
                return r;
            }
        };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..pos + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let Some(data) = text.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = match serde_json::from_str(data) {
                Ok(v) => v,
                Err(e) => {
                    r.error = format!("bad SSE event: {e}");
                    return r;
                }
            };
            if let Some(err) = v.get("error") {
                r.error = err.to_string();
                return r;
            }
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                r.prompt_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
                r.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
            }
            let piece = v["choices"][0]["text"].as_str().unwrap_or("");
            if !piece.is_empty() {
                let now = Instant::now();
                match last {
                    None => r.ttft = (now - sent).as_secs_f64(),
                    Some(prev) => r.itl.push((now - prev).as_secs_f64()),
                }
                last = Some(now);
                r.text.push_str(piece);
            }
        }
    }
    r.latency = last.map_or(Duration::ZERO, |l| l - sent).as_secs_f64();
    r.success = done && r.output_tokens > 0;
    if !r.success && r.error.is_empty() {
        r.error = "the stream ended without [DONE] or usage".into();
    }
    r
}
