//! Concurrency and lifecycle against a real server: 32 concurrent requests over one WebSocket and
//! 32 over HTTP each equal the same prompt run alone (greedy), with no token lost, duplicated or
//! reordered; cancel and client disconnect mid-stream free the slot; overload gives 503 and the
//! server recovers; graceful shutdown finishes in-flight work and closes sockets with 1001.

mod common;

use std::time::Duration;

use amdahl_engine::model::deepseek_v4::DeepseekV4;
use amdahl_engine::tokenizer::Tokenizer;
use awc::ws::{CloseCode, Frame};
use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

fn prompt(i: usize) -> Vec<u32> {
    (0..(3 + i % 11))
        .map(|j| (10 + (i * 31 + j * 7) % 250) as u32)
        .collect()
}

/// The prompt run alone, greedy, past EOS (the requests use `ignore_eos`).
#[allow(clippy::unwrap_used)]
fn alone_greedy(m: &DeepseekV4, prompt: &[u32], n: usize) -> Vec<u32> {
    use amdahl_engine::model::deepseek_v4::{LogitRows, SeqInput};
    let mut state = m.new_state();
    let mut clock = amdahl_engine::profile::StageClock::default();
    let (mut out, mut next) = (Vec::new(), prompt.to_vec());
    while out.len() < n {
        let mut batch = [SeqInput {
            tokens: &next,
            state: &mut state,
            logits: LogitRows::Last,
        }];
        let logits = m.forward(&mut batch, &mut clock).unwrap();
        let t = amdahl_engine::ops::sampling::argmax(logits[0].row(0));
        out.push(t);
        next = vec![t];
    }
    out
}

#[actix_web::test]
async fn thirty_two_streams_each_equal_the_prompt_alone() {
    let dir = model_dir();
    let model = DeepseekV4::load(dir.path()).unwrap();
    let tok = Tokenizer::from_model_dir(dir.path()).unwrap().unwrap();
    // A small step budget forces chunked prefill mixed with decode across the 32.
    let s = serve(
        dir.path(),
        Opts {
            max_step_tokens: 40,
            ..Opts::default()
        },
    );
    let base = s.url();
    let n_out = 24;
    let alone: Vec<Vec<u32>> = (0..32)
        .map(|i| alone_greedy(&model, &prompt(i), n_out))
        .collect();

    // 32 over one WebSocket, with token ids.
    let mut ws = ws_connect(&base).await;
    let hello = ws_next(&mut ws).await.unwrap();
    assert_eq!(hello["type"], "session.created");
    assert_eq!(hello["protocol"], "amdahl.v1");
    assert_eq!(hello["model"], MODEL);
    for i in 0..32 {
        ws_send(
            &mut ws,
            json!({"type": "request.create", "id": format!("r{i}"), "input_ids": prompt(i),
            "params": {"max_tokens": n_out, "temperature": 0, "ignore_eos": true},
            "stream": {"include_token_ids": true}}),
        )
        .await;
    }
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); 32];
    let mut seqs = vec![0u64; 32];
    let mut created = [false; 32];
    let mut done = 0;
    while done < 32 {
        let ev = ws_next(&mut ws).await.unwrap();
        let i: usize = ev["id"].as_str().unwrap()[1..].parse().unwrap();
        match ev["type"].as_str().unwrap() {
            "request.created" => {
                assert!(!created[i]);
                created[i] = true;
                assert_eq!(ev["prompt_tokens"], prompt(i).len());
                assert!(ev["request_id"].as_str().unwrap().starts_with("req-"));
            }
            "request.delta" => {
                assert!(created[i], "delta before request.created");
                assert_eq!(ev["seq"], seqs[i], "seq increments by one per delta");
                seqs[i] += 1;
                for t in ev["token_ids"].as_array().unwrap() {
                    ids[i].push(t.as_u64().unwrap() as u32);
                }
            }
            "request.done" => {
                done += 1;
                assert_eq!(ev["finish_reason"], "length");
                assert_eq!(ev["usage"]["completion_tokens"], n_out);
                assert_eq!(ev["usage"]["prompt_tokens"], prompt(i).len());
                let t = &ev["timings"];
                assert!(t["ttft_ms"].as_f64().unwrap() > 0.0);
                assert!(t["e2e_ms"].as_f64().unwrap() >= t["ttft_ms"].as_f64().unwrap());
                assert!(t["tpot_ms"].as_f64().unwrap() > 0.0);
            }
            other => panic!("unexpected event {other}: {ev}"),
        }
    }
    for i in 0..32 {
        assert_eq!(ids[i], alone[i], "websocket stream {i}");
    }

    // 32 over HTTP (streamed completions with token-id prompts), compared as text.
    let c = client();
    let futs = (0..32).map(|i| {
        let c = c.clone();
        let url = format!("{base}/v1/completions");
        async move {
            let mut body = greedy_completion(json!(prompt(i)), n_out);
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
            stream(&c, &url, &body).await
        }
    });
    let results = futures_util::future::join_all(futs).await;
    for (i, events) in results.iter().enumerate() {
        assert_eq!(events.last().unwrap(), "[DONE]");
        let mut text = String::new();
        let mut usage = Value::Null;
        for e in &events[..events.len() - 1] {
            let v: Value = serde_json::from_str(e).unwrap();
            if let Some(t) = v["choices"][0]["text"].as_str() {
                text.push_str(t);
            }
            if !v["usage"].is_null() {
                usage = v["usage"].clone();
            }
        }
        assert_eq!(
            text,
            tok.decode(&alone[i], true).unwrap(),
            "http stream {i}"
        );
        assert_eq!(usage["completion_tokens"], n_out);
    }
    wait_idle(&c, &base).await;
    s.shutdown().await.unwrap();
}

#[actix_web::test]
async fn cancel_and_disconnect_free_the_slot() {
    let dir = model_dir();
    let s = serve(
        dir.path(),
        Opts {
            max_seqs: 1,
            max_queue: 4,
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    let running = format!("amdahl_requests_running{{model=\"{MODEL}\"}}");
    let long = json!({"max_tokens": 3000, "temperature": 0, "ignore_eos": true});

    // WebSocket cancel mid-stream.
    let mut ws = ws_connect(&base).await;
    ws_next(&mut ws).await.unwrap();
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "a", "prompt": "abc", "params": long}),
    )
    .await;
    let mut deltas = 0;
    while deltas < 3 {
        let ev = ws_next(&mut ws).await.unwrap();
        if ev["type"] == "request.delta" {
            deltas += 1;
        }
    }
    assert_eq!(metric(&c, &base, &running).await, 1.0);
    ws_send(&mut ws, json!({"type": "request.cancel", "id": "a"})).await;
    let done = loop {
        let ev = ws_next(&mut ws).await.unwrap();
        if ev["type"] == "request.done" {
            break ev;
        }
        assert_eq!(ev["type"], "request.delta");
    };
    assert_eq!(done["finish_reason"], "cancelled");
    assert!(done["usage"]["completion_tokens"].as_u64().unwrap() >= 3);
    wait_idle(&c, &base).await;
    let cancelled =
        format!("amdahl_requests_finished_total{{finish_reason=\"cancelled\",model=\"{MODEL}\"}}");
    assert_eq!(metric(&c, &base, &cancelled).await, 1.0);
    // Cancelling again: unknown_request, socket unaffected.
    ws_send(&mut ws, json!({"type": "request.cancel", "id": "a"})).await;
    let ev = ws_next(&mut ws).await.unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["error"]["code"].as_str()),
        (Some("error"), Some("unknown_request"))
    );
    ws_send(&mut ws, json!({"type": "ping", "nonce": "7"})).await;
    assert_eq!(
        ws_next(&mut ws).await.unwrap(),
        json!({"type": "pong", "nonce": "7"})
    );
    // Bad frames give an error event; the socket stays open.
    ws.send(awc::ws::Message::Text("{nope".into()))
        .await
        .unwrap();
    let ev = ws_next(&mut ws).await.unwrap();
    assert_eq!(ev["type"], "error");
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "d", "prompt": "x", "params": {"max_tokens": 0}}),
    )
    .await;
    let ev = ws_next(&mut ws).await.unwrap();
    assert_eq!(
        (ev["id"].as_str(), ev["error"]["param"].as_str()),
        (Some("d"), Some("max_tokens"))
    );

    // Socket closed mid-stream.
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "b", "prompt": "abc", "params": long}),
    )
    .await;
    loop {
        if ws_next(&mut ws).await.unwrap()["type"] == "request.delta" {
            break;
        }
    }
    drop(ws);
    wait_idle(&c, &base).await;

    // HTTP client disconnect mid-stream.
    let mut body = json!({"prompt": "abc", "stream": true});
    for (k, v) in long.as_object().unwrap() {
        body[k] = v.clone();
    }
    let mut res = c
        .post(format!("{base}/v1/completions"))
        .send_json(&body)
        .await
        .unwrap();
    let mut seen = 0;
    while seen < 3 {
        let chunk = res.next().await.unwrap().unwrap();
        seen += chunk.windows(6).filter(|w| w == b"data: ").count();
    }
    assert_eq!(metric(&c, &base, &running).await, 1.0);
    drop(res);
    wait_idle(&c, &base).await;
    let gone = metric(
        &c,
        &base,
        "amdahl_client_disconnects_total{phase=\"decode\",transport=\"http\"}",
    )
    .await;
    assert_eq!(gone, 1.0);

    // The only slot is free: the next request is admitted and completes.
    let (st, v, _) = post(
        &c,
        &format!("{base}/v1/completions"),
        &greedy_completion(json!("ok"), 4),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    s.shutdown().await.unwrap();
}

#[actix_web::test]
async fn overload_gives_503_then_recovers() {
    let dir = model_dir();
    let s = serve(
        dir.path(),
        Opts {
            max_seqs: 1,
            max_queue: 1,
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    let body = json!({"prompt": "abc", "stream": true, "max_tokens": 3000, "temperature": 0, "ignore_eos": true});
    // A holds the slot (streaming), B waits in the queue, C is refused.
    let mut a = c
        .post(format!("{base}/v1/completions"))
        .send_json(&body)
        .await
        .unwrap();
    a.next().await.unwrap().unwrap();
    let b = c
        .post(format!("{base}/v1/completions"))
        .send_json(&body)
        .await
        .unwrap();
    assert_eq!(b.status().as_u16(), 200);
    let (st, v, h) = post(&c, &format!("{base}/v1/completions"), &body).await;
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["error"]["code"], "server_overloaded");
    assert_eq!(v["error"]["type"], "overloaded_error");
    let retry: u64 = h
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    // Same over the WebSocket: an error event with retry_after_ms.
    let mut ws = ws_connect(&base).await;
    ws_next(&mut ws).await.unwrap();
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "w", "prompt": "abc"}),
    )
    .await;
    let ev = ws_next(&mut ws).await.unwrap();
    assert_eq!(ev["type"], "error");
    assert_eq!(ev["id"], "w");
    assert_eq!(ev["error"]["code"], "server_overloaded");
    assert_eq!(ev["error"]["status"], 503);
    assert!(ev["error"]["retry_after_ms"].as_u64().unwrap() >= 100);
    let rejected = metric(
        &c,
        &base,
        "amdahl_requests_rejected_total{reason=\"queue_full\"}",
    )
    .await;
    assert_eq!(rejected, 2.0);
    drop(a);
    drop(b);
    wait_idle(&c, &base).await;
    let (st, _, _) = post(
        &c,
        &format!("{base}/v1/completions"),
        &greedy_completion(json!("ok"), 3),
    )
    .await;
    assert_eq!(st, 200);
    s.shutdown().await.unwrap();
}

#[actix_web::test]
async fn graceful_shutdown_finishes_work_and_closes_sockets_1001() {
    let dir = model_dir();
    let s = serve(dir.path(), Opts::default());
    let base = s.url();
    let mut ws = ws_connect(&base).await;
    ws_next(&mut ws).await.unwrap();
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "a", "prompt": "abc",
        "params": {"max_tokens": 1500, "temperature": 0, "ignore_eos": true}}),
    )
    .await;
    loop {
        if ws_next(&mut ws).await.unwrap()["type"] == "request.delta" {
            break;
        }
    }
    let base2 = base.clone();
    let stopper = actix_rt::spawn(async move { s.shutdown().await });
    // Wait until the server reports draining, while request `a` is still streaming.
    let c = client();
    let mut draining = false;
    for _ in 0..500 {
        let res = c.get(format!("{base2}/health")).send().await.unwrap();
        if res.status().as_u16() == 503 {
            draining = true;
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(draining, "/health turns 503 while draining");
    // New work is refused while draining.
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "b", "prompt": "abc"}),
    )
    .await;
    let mut refused = false;
    let mut finished = None;
    let close = loop {
        match ws_frame(&mut ws)
            .await
            .expect("socket ended without a close frame")
        {
            Frame::Text(t) => {
                let ev: Value = serde_json::from_slice(&t).unwrap();
                match (ev["type"].as_str().unwrap(), ev["id"].as_str()) {
                    ("error", Some("b")) => {
                        assert_eq!(ev["error"]["code"], "draining");
                        refused = true;
                    }
                    ("request.done", Some("a")) => finished = Some(ev),
                    ("request.delta", Some("a")) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            Frame::Close(c) => break c,
            _ => {}
        }
    };
    assert!(refused);
    let finished = finished.expect("in-flight request finished before the close");
    assert_eq!(finished["finish_reason"], "length");
    assert_eq!(finished["usage"]["completion_tokens"], 1500);
    assert_eq!(close.unwrap().code, CloseCode::Away);
    stopper.await.unwrap().unwrap();
    assert!(
        client()
            .get(format!("{base2}/health"))
            .send()
            .await
            .is_err(),
        "listener closed"
    );
}
