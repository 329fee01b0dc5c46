//! The committed arithmetic model (models/arith) behind a real server on 127.0.0.1:0: the
//! README's two requests answer as documented, and the length rules that need a model which
//! really emits EOS: EOS ends a request with `stop`; `ignore_eos` runs past it to `max_tokens`;
//! `min_tokens` holds EOS back; chat's `max_completion_tokens` wins over `max_tokens`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

fn arith() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/arith")
}

fn text(v: &Value) -> &str {
    v["choices"][0]["text"]
        .as_str()
        .or_else(|| v["choices"][0]["message"]["content"].as_str())
        .unwrap()
}

#[actix_web::test]
async fn readme_requests_and_length_rules_on_the_arithmetic_model() {
    let s = serve(&arith(), Opts::default());
    let base = s.url();
    let c = client();
    let cmpl = format!("{base}/v1/completions");
    let chat = format!("{base}/v1/chat/completions");

    // README: completions, greedy; the newline is EOS, so the request stops right after it.
    let (st, v, _) = post(
        &c,
        &cmpl,
        &json!({"prompt": "17*23=", "max_tokens": 8, "temperature": 0}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(text(&v), "391\n");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 4);

    // README: streamed chat (default temperature 1, so only the shape and the end are fixed);
    // at temperature 0 the chat template turns "999+999" into the question `999+999=`.
    let events = stream(
        &c,
        &chat,
        &json!({"messages": [{"role": "user", "content": "999+999"}], "max_tokens": 8,
                "stream": true}),
    )
    .await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let (st, v, _) = post(
        &c,
        &chat,
        &json!({"messages": [{"role": "user", "content": "999 + 999"}], "max_tokens": 8,
                "temperature": 0}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(text(&v), "1998\n");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // ignore_eos: past the newline to max_tokens.
    let (_, v, _) = post(
        &c,
        &cmpl,
        &json!({"prompt": "17*23=", "max_tokens": 8, "temperature": 0, "ignore_eos": true}),
    )
    .await;
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(text(&v).starts_with("391\n"), "{v}");

    // min_tokens: EOS cannot end the request before 6 tokens; the answer is still first.
    let (_, v, _) = post(
        &c,
        &cmpl,
        &json!({"prompt": "17*23=", "max_tokens": 8, "min_tokens": 6, "temperature": 0}),
    )
    .await;
    let n = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((6..=8).contains(&n), "{v}");
    assert!(text(&v).starts_with("391"), "{v}");
    assert!(
        !text(&v)[..5].contains('\n'),
        "EOS came before min_tokens: {v}"
    );

    // Chat: max_completion_tokens (2) takes precedence over max_tokens (8).
    let (_, v, _) = post(
        &c,
        &chat,
        &json!({"messages": [{"role": "user", "content": "17*23"}], "max_tokens": 8,
                "max_completion_tokens": 2, "temperature": 0}),
    )
    .await;
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(text(&v), "39");

    wait_idle(&c, &base).await;
    s.shutdown().await.unwrap();
}
