//! A bounded load test through the bench client (500 requests at concurrency 64, short outputs)
//! with zero errors and no leaked slots, over HTTP and WebSocket; and the real binaries:
//! `amdahl serve --port 0` driven by `amdahl bench`, which prints the table, then SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use amdahl::bench::{BenchConfig, TransportArg, run_bench};
use common::*;

fn bench_cfg(url: String, transport: TransportArg, n: usize, c: usize) -> BenchConfig {
    BenchConfig {
        url,
        model: None,
        concurrency: c,
        num_prompts: n,
        input_len: 16,
        output_len: 8,
        transport,
        ignore_eos: true,
        seed: 1,
        api_key: None,
        progress: false,
    }
}

#[actix_web::test]
async fn load_500_requests_at_concurrency_64_without_errors_or_leaks() {
    let dir = model_dir();
    let s = serve(
        dir.path(),
        Opts {
            max_seqs: 64,
            max_queue: 256,
            ..Opts::default()
        },
    );
    let base = s.url();
    let c = client();
    for transport in [TransportArg::Http, TransportArg::Ws] {
        let t0 = Instant::now();
        let out = run_bench(&bench_cfg(base.clone(), transport, 500, 64))
            .await
            .unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let first_error = out
            .results
            .iter()
            .find(|r| !r.success)
            .map(|r| r.error.clone());
        assert_eq!(out.summary.failed, 0, "{transport:?}: {first_error:?}");
        assert_eq!(out.summary.completed, 500);
        assert_eq!(out.summary.total_output, 500 * 8);
        assert_eq!(out.summary.total_input, 500 * 16);
        assert!(out.summary.peak_concurrency <= 64.0);
        assert!(
            out.table
                .starts_with("============ Serving Benchmark Result ============\n")
        );
        eprintln!(
            "{transport:?}: 500 requests (16 in / 8 out) at concurrency 64 in {secs:.2}s: \
             {:.1} req/s, {:.1} output tok/s, mean TTFT {:.1} ms, mean TPOT {:.2} ms",
            out.summary.request_throughput,
            out.summary.output_throughput,
            out.summary.ttft_ms.mean,
            out.summary.tpot_ms.mean
        );
        wait_idle(&c, &base).await;
    }
    let finished = metric(
        &c,
        &base,
        &format!("amdahl_requests_finished_total{{finish_reason=\"length\",model=\"{MODEL}\"}}"),
    )
    .await;
    assert_eq!(finished, 1000.0);
    let ws = metric(&c, &base, "amdahl_ws_connections").await;
    assert_eq!(ws, 0.0);
    s.shutdown().await.unwrap();
}

/// Sends SIGTERM to a child we started (by its pid, never by name).
#[allow(clippy::unwrap_used)]
fn sigterm(pid: u32) {
    let ok = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn serve_and_bench_binaries() {
    let dir = model_dir();
    let exe = env!("CARGO_BIN_EXE_amdahl");
    let mut server = Command::new(exe)
        .args([
            "serve",
            "--port",
            "0",
            "--served-model-name",
            "tiny",
            "--model",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("serve exited before listening")
            .unwrap();
        if let Some(u) = line.strip_prefix("listening on ") {
            break u.to_string();
        }
    };
    let result = dir.path().join("result.json");
    let bench = Command::new(exe)
        .args([
            "bench",
            "--url",
            &url,
            "--concurrency",
            "8",
            "--num-prompts",
            "40",
            "--input-len",
            "12",
            "--output-len",
            "6",
            "--transport",
            "ws",
            "--result-json",
        ])
        .arg(&result)
        .output()
        .unwrap();
    assert!(
        bench.status.success(),
        "{}",
        String::from_utf8_lossy(&bench.stderr)
    );
    let table = String::from_utf8(bench.stdout).unwrap();
    let lines_: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines_[0],
        "============ Serving Benchmark Result ============"
    );
    assert_eq!(
        lines_[1],
        format!("{:<40} {:<10}", "Successful requests:", 40)
    );
    assert_eq!(lines_[2], format!("{:<40} {:<10}", "Failed requests:", 0));
    assert_eq!(
        lines_[3],
        format!("{:<40} {:<10}", "Maximum request concurrency:", 8)
    );
    assert_eq!(
        lines_[6],
        format!("{:<40} {:<10}", "Total generated tokens:", 240)
    );
    assert!(table.contains("---------------Inter-token Latency----------------\n"));
    assert_eq!(*lines_.last().unwrap(), "=".repeat(50));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&result).unwrap()).unwrap();
    assert_eq!(json["completed"], 40);
    assert_eq!(json["total_output_tokens"], 240);
    assert_eq!(json["transport"], "ws");
    assert!(json["mean_ttft_ms"].as_f64().unwrap() > 0.0);

    sigterm(server.id());
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = server.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "serve did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "serve exited with {status}");
}
