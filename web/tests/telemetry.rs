//! Observability against a real server on the CPU backend: stage times of served steps add up
//! to the step time (within 5%), /metrics exposes the stage and peak series after a real
//! request, `/v1/profile` returns the report, the telemetry socket pushes snapshots at ~5 Hz
//! that see the traffic, and `/` serves the dashboard (or the page saying how to build it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

async fn metrics_text(c: &awc::Client, base: &str) -> String {
    let mut res = c.get(format!("{base}/metrics")).send().await.unwrap();
    String::from_utf8(res.body().limit(8 << 20).await.unwrap().to_vec()).unwrap()
}

/// Sum of every sample of `name` whose labels contain all of `with` and none of `without`.
fn sum_series(text: &str, name: &str, with: &[&str], without: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| with.iter().all(|w| l.contains(w)) && !without.iter().any(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn get_json(c: &awc::Client, url: &str) -> Value {
    let mut res = c.get(url).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200, "{url}");
    res.json().limit(8 << 20).await.unwrap()
}

#[actix_web::test]
async fn served_steps_add_up_and_metrics_expose_the_stages() {
    let dir = model_dir();
    let s = serve(dir.path(), Opts::default());
    let base = s.url();
    let c = client();
    for i in 0..3 {
        let body = greedy_completion(json!(format!("12{i}+34=")), 24);
        let (status, v, _) = post(&c, &format!("{base}/v1/completions"), &body).await;
        assert_eq!(status, 200, "{v}");
    }
    let text = metrics_text(&c, &base).await;
    // Every stage label has a decode series, and the peaks are exported.
    for stage in [
        "mhc",
        "attn_proj",
        "indexer",
        "attention",
        "moe",
        "head",
        "comm",
        "other",
    ] {
        let series = format!(
            "amdahl_stage_seconds_total{{device=\"cpu\",phase=\"decode\",stage=\"{stage}\"}}"
        );
        assert!(text.contains(&series), "{series} missing");
    }
    for name in [
        "amdahl_device_peak_bandwidth_bytes_per_second{device=\"cpu\"}",
        "amdahl_device_peak_flops_per_second{device=\"cpu\"}",
        "amdahl_stage_bytes_total{device=\"cpu\",stage=\"moe\"}",
        "amdahl_profiled_steps_total{device=\"cpu\",phase=\"decode\"}",
    ] {
        assert!(
            sum_series(&text, name, &[], &[]) > 0.0,
            "{name} missing or 0"
        );
    }
    // Stage time (without `other`) over every profiled step against those steps' wall time.
    let step_wall = sum_series(&text, "amdahl_step_duration_seconds_sum", &[], &[]);
    let staged = sum_series(
        &text,
        "amdahl_stage_seconds_total",
        &[],
        &["stage=\"other\""],
    );
    let all = sum_series(&text, "amdahl_stage_seconds_total", &[], &[]);
    assert!(step_wall > 0.0);
    assert!(
        (all - step_wall).abs() <= 1e-6 * step_wall.max(1.0),
        "{all} vs {step_wall}"
    );
    assert!(
        staged >= 0.95 * step_wall && staged <= step_wall * (1.0 + 1e-9),
        "stages cover {staged} s of {step_wall} s"
    );
    // The JSON report says the same per phase, and in words.
    let p = get_json(&c, &format!("{base}/v1/profile")).await;
    let dev = &p["devices"][0];
    assert_eq!(dev["device"], "cpu");
    assert!(dev["peaks"]["bandwidth_bytes_per_second"].as_f64().unwrap() > 0.0);
    let decode = dev["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["phase"] == "decode")
        .expect("a decode phase");
    let secs = decode["seconds"].as_f64().unwrap();
    let named: f64 = decode["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["stage"] != "other")
        .map(|x| x["seconds"].as_f64().unwrap())
        .sum();
    assert!(named >= 0.95 * secs, "{named} of {secs}");
    let words: Vec<&str> = p["report"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(words[0].starts_with("decode on cpu:"), "{words:?}");
    assert!(
        words.iter().any(|w| w.contains("2× faster gives +")),
        "{words:?}"
    );
    assert_eq!(p["ttft_ms"]["count"], 3);
    s.shutdown().await.unwrap();
}

async fn next_snapshot(ws: &mut Ws) -> Value {
    let v = tokio::time::timeout(Duration::from_secs(5), ws_next(ws))
        .await
        .expect("a snapshot within 5 s")
        .expect("the socket stays open");
    assert_eq!(v["type"], "telemetry", "{v}");
    v
}

#[actix_web::test]
async fn the_telemetry_socket_pushes_snapshots_that_see_the_traffic() {
    let dir = model_dir();
    let s = serve(dir.path(), Opts::default());
    let base = s.url();
    let url = base.replacen("http", "ws", 1) + "/v1/ws/telemetry";
    let (_, mut tele) = awc::Client::new().ws(url).connect().await.unwrap();
    let first = next_snapshot(&mut tele).await;
    assert_eq!(first["model"], MODEL);
    assert_eq!(first["steps_total"], 0);
    // Traffic over the amdahl.v1 socket while the telemetry socket listens.
    let mut ws = ws_connect(&base).await;
    let hello = ws_next(&mut ws).await.unwrap();
    assert_eq!(hello["type"], "session.created");
    ws_send(
        &mut ws,
        json!({"type":"request.create","id":"a","prompt":"7*8=",
               "params":{"max_tokens":32,"temperature":0,"ignore_eos":true}}),
    )
    .await;
    loop {
        let ev = ws_next(&mut ws).await.unwrap();
        if ev["type"] == "request.done" {
            assert_eq!(ev["usage"]["completion_tokens"], 32);
            break;
        }
    }
    // Snapshots keep arriving at about 5 Hz and soon show the decode steps.
    let t0 = Instant::now();
    let mut n = 0;
    let seen = loop {
        let v = next_snapshot(&mut tele).await;
        n += 1;
        let decode = v["devices"][0]["phases"]
            .as_array()
            .and_then(|p| p.iter().find(|x| x["phase"] == "decode").cloned());
        if let Some(d) = decode
            && v["steps_total"].as_u64().unwrap() >= 32
        {
            break (v, d);
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no decode snapshot");
    };
    let (snap, decode) = seen;
    assert!(decode["steps"].as_u64().unwrap() >= 31);
    assert!(snap["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(snap["itl_ms"]["count"], 31);
    assert!(snap["seq"].as_u64() > first["seq"].as_u64());
    // Rate: count what arrives in 1.2 s (5 Hz gives 6; allow a loaded machine some slack).
    let t1 = Instant::now();
    let mut in_window = 0;
    while t1.elapsed() < Duration::from_millis(1200) {
        next_snapshot(&mut tele).await;
        in_window += 1;
    }
    assert!(
        (4..=9).contains(&in_window),
        "{in_window} snapshots in 1.2 s"
    );
    assert!(n >= 1);
    assert!(
        metric(&client(), &base, "amdahl_telemetry_subscribers").await >= 1.0,
        "the subscriber gauge counts the socket"
    );
    s.shutdown().await.unwrap();
}

#[actix_web::test]
async fn the_dashboard_is_served_at_the_root() {
    let dir = model_dir();
    let s = serve(dir.path(), Opts::default());
    let c = client();
    let mut res = c.get(format!("{}/", s.url())).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let ct = res.headers().get("content-type").unwrap().to_str().unwrap();
    assert!(ct.starts_with("text/html"), "{ct}");
    let page = String::from_utf8(res.body().await.unwrap().to_vec()).unwrap();
    if amdahl::server::dashboard::embedded() {
        assert!(page.contains("/dashboard/amdahl_dashboard.js"), "{page}");
        let mut w = c
            .get(format!("{}/dashboard/amdahl_dashboard_bg.wasm", s.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(w.headers().get("content-type").unwrap(), "application/wasm");
        let bytes = w.body().limit(16 << 20).await.unwrap();
        assert_eq!(&bytes[..4], b"\0asm");
    } else {
        assert!(page.contains("tools/build_dashboard.sh"), "{page}");
    }
    let res = c
        .get(format!("{}/dashboard/nope.js", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    s.shutdown().await.unwrap();
}
