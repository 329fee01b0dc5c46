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

/// The prompt run alone through the engine, greedy, `n` tokens past EOS.
fn alone_greedy(
    m: &amdahl_engine::model::deepseek_v4::DeepseekV4,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
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

/// 32 concurrent streamed completions equal each prompt run alone, compared as text, which on
/// this character-level, all-ASCII vocabulary is the token sequence itself (the tiny test
/// model's byte vocabulary decodes invalid UTF-8 lossily, so there the WebSocket ids are the
/// exact check).
#[actix_web::test]
async fn thirty_two_http_streams_equal_each_prompt_alone_exactly() {
    use amdahl_engine::model::deepseek_v4::DeepseekV4;
    use amdahl_engine::tokenizer::Tokenizer;
    let model = DeepseekV4::load(&arith()).unwrap();
    let tok = Tokenizer::from_model_dir(&arith()).unwrap().unwrap();
    let prompts: Vec<String> = (0..32)
        .map(|i| {
            let worked = format!("{}+{}={}\n", i * 7, 13 + i, i * 7 + 13 + i);
            let q = match i % 3 {
                0 => format!("{}*{}=", 10 + i, 99 - i),
                1 => format!("{}-{}=", 500 - i * 11, i * 37),
                _ => format!("{}+{}=", 999 - i, i * 29),
            };
            if i % 2 == 0 { worked + &q } else { q }
        })
        .collect();
    let n_out = 24;
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| {
            let ids = alone_greedy(&model, &tok.encode(p, true).unwrap(), n_out);
            tok.decode(&ids, true).unwrap()
        })
        .collect();
    for a in &alone {
        assert!(a.is_ascii() && a.chars().count() == n_out, "{a:?}");
    }
    let s = serve(
        &arith(),
        Opts {
            max_step_tokens: 40,
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    let futs = prompts.iter().map(|p| {
        let c = c.clone();
        let url = format!("{base}/v1/completions");
        let mut body = greedy_completion(json!(p), n_out);
        body["stream"] = json!(true);
        async move { stream(&c, &url, &body).await }
    });
    let results = futures_util::future::join_all(futs).await;
    for (i, events) in results.iter().enumerate() {
        assert_eq!(events.last().unwrap(), "[DONE]");
        let text: String = events[..events.len() - 1]
            .iter()
            .map(|e| {
                let v: Value = serde_json::from_str(e).unwrap();
                v["choices"][0]["text"].as_str().unwrap_or("").to_string()
            })
            .collect();
        assert_eq!(text, alone[i], "stream {i} ({:?})", prompts[i]);
    }
    wait_idle(&c, &base).await;
    s.shutdown().await.unwrap();
}
