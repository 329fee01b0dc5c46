//! HTTP API against a real server on 127.0.0.1:0: non-streamed and streamed chat and
//! completions (SSE checked chunk by chunk), the small endpoints, auth, and every bad-input case
//! with its documented 4xx body.

mod common;

use common::*;
use serde_json::{Value, json};

fn chat_body(stream: bool, usage: bool) -> Value {
    let mut b = json!({"model": MODEL, "messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "hello"}],
                       "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    if stream {
        b["stream"] = json!(true);
    }
    if usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

#[actix_web::test]
async fn chat_and_completions_streamed_and_not() {
    let dir = model_dir();
    let s = serve(dir.path(), Opts::default());
    let base = s.url();
    let c = client();

    // Non-streamed chat.
    let (st, v, h) = post(
        &c,
        &format!("{base}/v1/chat/completions"),
        &chat_body(false, false),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert!(h.get("x-request-id").is_some());
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // "<|bos|><|system|>be brief<|end|><|user|>hello<|end|><|assistant|>": 6 specials + 13 bytes.
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 19, "completion_tokens": 6, "total_tokens": 25})
    );
    let chat_text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();

    // Streamed chat: role chunk first (with the first output), content chunks, finish chunk,
    // usage chunk with empty choices, [DONE]. Same text as the non-streamed run (greedy).
    let events = stream(
        &c,
        &format!("{base}/v1/chat/completions"),
        &chat_body(true, true),
    )
    .await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let id = chunks[0]["id"].clone();
    for ch in &chunks {
        assert_eq!(ch["object"], "chat.completion.chunk");
        assert_eq!(ch["id"], id, "same id on every chunk");
        assert_eq!(ch["model"], MODEL);
        assert!(ch["created"].is_u64());
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(chunks[0]["usage"].is_null());
    let (usage, body) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    assert_eq!(usage["usage"]["prompt_tokens"], 19);
    let (fin, middle) = body.split_last().unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    let mut text = String::new();
    for ch in &middle[1..] {
        assert!(ch["usage"].is_null());
        assert!(ch["choices"][0]["finish_reason"].is_null());
        assert!(ch["choices"][0]["delta"].get("role").is_none());
        let piece = ch["choices"][0]["delta"]["content"].as_str().unwrap();
        assert!(
            !piece.is_empty(),
            "no empty content chunks after the role chunk"
        );
        text.push_str(piece);
    }
    assert_eq!(text, chat_text);

    // Without include_usage: no usage chunk.
    let events = stream(
        &c,
        &format!("{base}/v1/chat/completions"),
        &chat_body(true, false),
    )
    .await;
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");

    // Completions, token-id prompt, non-streamed and streamed.
    let body = greedy_completion(json!([10, 20, 30, 40]), 5);
    let (st, v, _) = post(&c, &format!("{base}/v1/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["usage"]["prompt_tokens"], 4);
    assert_eq!(v["usage"]["completion_tokens"], 5);
    let whole = v["choices"][0]["text"].as_str().unwrap().to_string();
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let events = stream(&c, &format!("{base}/v1/completions"), &sbody).await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let mut text = String::new();
    for ch in &chunks[..chunks.len() - 2] {
        assert_eq!(ch["object"], "text_completion");
        text.push_str(ch["choices"][0]["text"].as_str().unwrap());
    }
    assert_eq!(text, whole);
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );
    assert_eq!(chunks[chunks.len() - 1]["usage"]["completion_tokens"], 5);

    // Default completions max_tokens is 16.
    let (_, v, _) = post(
        &c,
        &format!("{base}/v1/completions"),
        &json!({"prompt": "abc", "temperature": 0, "ignore_eos": true}),
    )
    .await;
    assert_eq!(v["usage"]["completion_tokens"], 16);

    // Seeds: same seed, same text; sampling at temperature 1.
    let seeded = |seed: i64| {
        json!({"prompt": "xyz", "max_tokens": 12, "temperature": 1.0,
                                    "top_p": 0.95, "top_k": 40, "seed": seed, "ignore_eos": true})
    };
    let a = post(&c, &format!("{base}/v1/completions"), &seeded(5))
        .await
        .1;
    let b = post(&c, &format!("{base}/v1/completions"), &seeded(5))
        .await
        .1;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);

    // Stop strings: the output ends before the first occurrence, finish_reason stop.
    let long = post(
        &c,
        &format!("{base}/v1/completions"),
        &greedy_completion(json!("hello"), 40),
    )
    .await
    .1;
    let long_text = long["choices"][0]["text"].as_str().unwrap().to_string();
    // A 2-character stop string taken from the middle of the greedy output (skipping the
    // lossy replacement char, which cannot be matched as text).
    let chars: Vec<char> = long_text.chars().collect();
    let stop: String = (3..chars.len() - 1)
        .map(|i| chars[i..i + 2].iter().collect::<String>())
        .find(|w: &String| !w.contains('\u{FFFD}'))
        .expect("a stop candidate in 40 tokens");
    // A long max_tokens: the engine must still be generating when the edge's stop arrives
    // (one or two steps after the match), or it finishes first and counts the request as
    // `length` (the client sees `stop` either way). Greedy, so the text up to the cut is the
    // 40-token run's.
    let mut body = greedy_completion(json!("hello"), 2000);
    body["stop"] = json!([stop]);
    let v = post(&c, &format!("{base}/v1/completions"), &body).await.1;
    let cut = &long_text[..long_text.find(&stop).unwrap()];
    assert_eq!(v["choices"][0]["text"], cut);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["stop_reason"], json!(stop));
    // The same over SSE: the final chunk says stop, nothing past the cut is streamed.
    body["stream"] = json!(true);
    let events = stream(&c, &format!("{base}/v1/completions"), &body).await;
    let mut text = String::new();
    let mut reason = Value::Null;
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        text.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
        if !v["choices"][0]["finish_reason"].is_null() {
            reason = v["choices"][0]["finish_reason"].clone();
        }
    }
    assert_eq!((text.as_str(), reason), (cut, json!("stop")));
    // The engine records both as `stop`, not as clients that left.
    wait_idle(&c, &base).await;
    let finished = |r: &str| {
        format!("amdahl_requests_finished_total{{finish_reason=\"{r}\",model=\"{MODEL}\"}}")
    };
    assert_eq!(metric(&c, &base, &finished("stop")).await, 2.0);
    assert_eq!(metric(&c, &base, &finished("client_gone")).await, 0.0);

    s.shutdown().await.unwrap();
}

#[actix_web::test]
async fn small_endpoints_and_auth() {
    let dir = model_dir();
    let s = serve(
        dir.path(),
        Opts {
            api_key: Some("sekret".into()),
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    // /health and /metrics are open; everything else needs the key.
    let res = c.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let res = c.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut res = c.get(format!("{base}/v1/models")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let res = c
        .get(format!("{base}/v1/models"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let mut res = c
        .get(format!("{base}/v1/models"))
        .bearer_auth("sekret")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], MODEL);
    assert_eq!(v["data"][0]["max_model_len"], 4096);
    let res = awc::Client::new()
        .ws(format!("{}/v1/ws", base.replacen("http", "ws", 1)))
        .connect()
        .await;
    assert!(res.is_err(), "websocket upgrade without the key is refused");

    let mut res = c
        .post(format!("{base}/tokenize"))
        .bearer_auth("sekret")
        .send_json(&json!({"prompt": "héllo"}))
        .await
        .unwrap();
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["count"], 6);
    assert_eq!(v["max_model_len"], 4096);
    let toks = v["tokens"].clone();
    let mut res = c
        .post(format!("{base}/detokenize"))
        .bearer_auth("sekret")
        .send_json(&json!({"tokens": toks}))
        .await
        .unwrap();
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["prompt"], "héllo");
    let mut res = c
        .post(format!("{base}/tokenize"))
        .bearer_auth("sekret")
        .send_json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
        .await
        .unwrap();
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["count"], 6, "bos, user, h, i, end, assistant");
    let rejected = metric(
        &c,
        &base,
        "amdahl_requests_rejected_total{reason=\"unauthorized\"}",
    )
    .await;
    assert_eq!(rejected, 3.0);
    s.shutdown().await.unwrap();
}

/// Every bad input gets its documented status, type, code and param; the server keeps serving.
#[actix_web::test]
async fn bad_inputs_get_documented_errors() {
    let dir = model_dir();
    let s = serve(
        dir.path(),
        Opts {
            max_model_len: Some(64),
            limits: amdahl::server::Limits {
                max_body_bytes: 4096,
                ..Default::default()
            },
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    let chat = format!("{base}/v1/chat/completions");
    let cmpl = format!("{base}/v1/completions");
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let with = |extra: Value| {
        let mut b = json!({"messages": msgs.clone()});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    // (url, body, status, code, param)
    let cases: Vec<(&str, Value, u16, &str, Value)> = vec![
        (
            &chat,
            with(json!({"temperature": 3})),
            400,
            "invalid_parameter",
            json!("temperature"),
        ),
        (
            &chat,
            with(json!({"temperature": "hot"})),
            400,
            "invalid_parameter",
            json!("temperature"),
        ),
        (
            &chat,
            with(json!({"top_p": 0})),
            400,
            "invalid_parameter",
            json!("top_p"),
        ),
        (
            &chat,
            with(json!({"top_k": -5})),
            400,
            "invalid_parameter",
            json!("top_k"),
        ),
        (
            &chat,
            with(json!({"max_tokens": 0})),
            400,
            "invalid_parameter",
            json!("max_tokens"),
        ),
        (
            &chat,
            with(json!({"max_tokens": -1})),
            400,
            "invalid_parameter",
            json!("max_tokens"),
        ),
        (
            &chat,
            with(json!({"min_tokens": 9, "max_tokens": 3})),
            400,
            "invalid_parameter",
            json!("min_tokens"),
        ),
        (
            &chat,
            with(json!({"n": 2})),
            400,
            "unsupported_parameter",
            json!("n"),
        ),
        (
            &chat,
            with(json!({"logprobs": true})),
            400,
            "unsupported_parameter",
            json!("logprobs"),
        ),
        (
            &chat,
            with(json!({"stream_options": {"include_usage": true}})),
            400,
            "invalid_parameter",
            json!("stream_options"),
        ),
        (
            &chat,
            with(json!({"stop_token_ids": [99999]})),
            400,
            "invalid_parameter",
            json!("stop_token_ids"),
        ),
        (
            &chat,
            with(json!({"presence_penalty": 0.5})),
            400,
            "unsupported_parameter",
            json!("presence_penalty"),
        ),
        (
            &chat,
            with(json!({"model": "gpt-9"})),
            404,
            "model_not_found",
            json!("model"),
        ),
        (
            &chat,
            json!({"messages": []}),
            400,
            "invalid_parameter",
            json!("messages"),
        ),
        (
            &chat,
            json!({"messages": "hi"}),
            400,
            "invalid_parameter",
            json!("messages"),
        ),
        (&chat, json!({}), 400, "invalid_parameter", Value::Null),
        (
            &chat,
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            "unsupported_parameter",
            json!("messages[0].content[0]"),
        ),
        (
            &chat,
            json!({"messages": [{"role": "user", "content": "x".repeat(80)}]}),
            400,
            "context_length_exceeded",
            json!("input_tokens"),
        ),
        (
            &chat,
            with(json!({"max_tokens": 60})),
            400,
            "context_length_exceeded",
            json!("max_tokens"),
        ),
        (
            &cmpl,
            json!({"prompt": [1, 2, 99999]}),
            400,
            "invalid_parameter",
            json!("prompt"),
        ),
        (
            &cmpl,
            json!({"prompt": ""}),
            400,
            "invalid_parameter",
            json!("prompt"),
        ),
        (
            &cmpl,
            json!({"prompt": ["a", "b"]}),
            400,
            "unsupported_parameter",
            json!("prompt"),
        ),
        (
            &cmpl,
            json!({"prompt": "a", "logprobs": 1}),
            400,
            "unsupported_parameter",
            json!("logprobs"),
        ),
        (
            &cmpl,
            json!({"prompt": "a", "echo": true}),
            400,
            "unsupported_parameter",
            json!("echo"),
        ),
        (
            &cmpl,
            json!({"prompt": "a", "max_tokens": 1.5}),
            400,
            "invalid_parameter",
            json!("max_tokens"),
        ),
        (
            &cmpl,
            json!({"prompt": "a".repeat(5000)}),
            413,
            "request_too_large",
            Value::Null,
        ),
    ];
    for (url, body, status, code, param) in cases {
        let (st, v, _) = post(&c, url, &body).await;
        assert_eq!(st, status, "{body}: {v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert!(v["error"]["type"].is_string());
    }
    let (st, v) = post_raw(&c, &cmpl, "application/json", b"{\"prompt\": ").await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("invalid_parameter"))
    );
    let (st, v) = post_raw(&c, &cmpl, "application/x-www-form-urlencoded", b"prompt=hi").await;
    assert_eq!(
        (st, v["error"]["param"].as_str()),
        (400, Some("content-type"))
    );
    let mut res = c.get(format!("{base}/v2/nothing")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 404);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "not_found");
    // Still serving.
    let (st, _, _) = post(&c, &cmpl, &greedy_completion(json!("ok"), 3)).await;
    assert_eq!(st, 200);
    let too_long = metric(
        &c,
        &base,
        "amdahl_requests_rejected_total{reason=\"too_long\"}",
    )
    .await;
    assert_eq!(too_long, 2.0);
    s.shutdown().await.unwrap();
}
