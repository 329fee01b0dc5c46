//! Bad input on the WebSocket, against a real server on 127.0.0.1:0, each with its documented
//! reply (docs/serving-usage.md): bad fields, a binary frame and an unknown event type get an
//! `error` and the socket stays open; a duplicate id gets `duplicate_id`; going past
//! `--ws-max-inflight` gets `too_many_requests` (429); a message over `--max-ws-message-bytes`
//! closes the socket with 1009. Every refused request leaves no trace in the engine and the
//! server keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use awc::ws::{CloseCode, Frame, Message};
use common::*;
use futures_util::SinkExt;
use serde_json::{Value, json};

fn long(id: &str) -> Value {
    json!({"type": "request.create", "id": id, "prompt": "abc",
           "params": {"max_tokens": 3000, "temperature": 0, "ignore_eos": true}})
}

/// The next event that is not a delta of a running request.
async fn next_non_delta(ws: &mut Ws) -> Value {
    loop {
        let ev = ws_next(ws).await.expect("socket open");
        if ev["type"] != "request.delta" {
            return ev;
        }
    }
}

fn assert_error(ev: &Value, id: Option<&str>, code: &str, status: u64) {
    assert_eq!(ev["type"], "error", "{ev}");
    assert_eq!(ev["id"].as_str(), id, "{ev}");
    assert_eq!(ev["error"]["code"], code, "{ev}");
    assert_eq!(ev["error"]["status"], status, "{ev}");
    assert!(
        ev["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
}

#[actix_web::test]
async fn websocket_bad_input_gets_documented_errors_and_the_server_keeps_serving() {
    let dir = model_dir();
    let s = serve(
        dir.path(),
        Opts {
            limits: amdahl::server::Limits {
                max_ws_message_bytes: 1024,
                ws_max_inflight: 2,
                ..Default::default()
            },
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    let mut ws = ws_connect(&base).await;
    let hello = ws_next(&mut ws).await.unwrap();
    assert_eq!(
        hello["limits"],
        json!({"max_inflight": 2, "max_message_bytes": 1024})
    );

    // Two long requests fill the socket's in-flight limit.
    for id in ["a", "b"] {
        ws_send(&mut ws, long(id)).await;
        let ev = next_non_delta(&mut ws).await;
        assert_eq!(
            (ev["type"].as_str(), ev["id"].as_str()),
            (Some("request.created"), Some(id))
        );
    }
    ws_send(&mut ws, long("a")).await;
    assert_error(
        &next_non_delta(&mut ws).await,
        Some("a"),
        "duplicate_id",
        400,
    );
    ws_send(&mut ws, long("c")).await;
    assert_error(
        &next_non_delta(&mut ws).await,
        Some("c"),
        "too_many_requests",
        429,
    );

    // Cancelling `a` makes room again.
    ws_send(&mut ws, json!({"type": "request.cancel", "id": "a"})).await;
    let ev = next_non_delta(&mut ws).await;
    assert_eq!(
        (ev["type"].as_str(), ev["finish_reason"].as_str()),
        (Some("request.done"), Some("cancelled"))
    );
    // Bad fields: out-of-range parameter, no prompt at all, two prompts, unknown event type.
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "d", "prompt": "x", "params": {"temperature": 9}}),
    )
    .await;
    let ev = next_non_delta(&mut ws).await;
    assert_error(&ev, Some("d"), "invalid_parameter", 400);
    ws_send(&mut ws, json!({"type": "request.create", "id": "e"})).await;
    let ev = next_non_delta(&mut ws).await;
    assert_error(&ev, Some("e"), "invalid_parameter", 400);
    assert_eq!(ev["error"]["param"], "messages");
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "f", "prompt": "x", "input_ids": [1]}),
    )
    .await;
    assert_error(
        &next_non_delta(&mut ws).await,
        Some("f"),
        "invalid_parameter",
        400,
    );
    ws_send(&mut ws, json!({"type": "request.frobnicate", "id": "g"})).await;
    let ev = next_non_delta(&mut ws).await;
    assert_eq!(ev["type"], "error", "{ev}");
    assert_eq!(ev["id"], "g");
    ws.send(Message::Binary(bytes::Bytes::from_static(b"\x00\x01")))
        .await
        .unwrap();
    assert_error(&next_non_delta(&mut ws).await, None, "invalid_message", 400);
    // Still open and serving: ping.
    ws_send(&mut ws, json!({"type": "ping", "nonce": "n1"})).await;
    assert_eq!(
        next_non_delta(&mut ws).await,
        json!({"type": "pong", "nonce": "n1"})
    );

    // A message over the limit closes the socket with 1009 (and cancels `b`).
    let big = json!({"type": "request.create", "id": "h", "prompt": "x".repeat(2000)});
    ws_send(&mut ws, big).await;
    let close = loop {
        match ws_frame(&mut ws).await.expect("a close frame") {
            Frame::Close(c) => break c,
            Frame::Text(_) | Frame::Ping(_) | Frame::Pong(_) => {}
            other => panic!("unexpected frame {other:?}"),
        }
    };
    assert_eq!(close.unwrap().code, CloseCode::Size);
    wait_idle(&c, &base).await;

    // Nothing leaked; a new socket and HTTP both work.
    let mut ws = ws_connect(&base).await;
    ws_next(&mut ws).await.unwrap();
    ws_send(
        &mut ws,
        json!({"type": "request.create", "id": "ok", "prompt": "abc",
               "params": {"max_tokens": 3, "temperature": 0, "ignore_eos": true}}),
    )
    .await;
    let done = loop {
        let ev = ws_next(&mut ws).await.unwrap();
        if ev["type"] == "request.done" {
            break ev;
        }
    };
    assert_eq!(done["usage"]["completion_tokens"], 3);
    let (st, _, _) = post(
        &c,
        &format!("{base}/v1/completions"),
        &greedy_completion(json!("ok"), 3),
    )
    .await;
    assert_eq!(st, 200);
    s.shutdown().await.unwrap();
}
