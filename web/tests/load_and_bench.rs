//! A bounded load test through the bench client (500 requests at concurrency 64, short outputs)
//! with zero errors and no leaked slots, over HTTP and WebSocket; and the real binaries:
//! `amdahl serve --port 0` driven by `amdahl bench`, which prints the table, then SIGTERM; and
//! SIGINT while a request streams: it finishes, then the process exits.

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
fn sigterm(pid: u32) {
    signal(pid, "-TERM");
}

/// Sends a signal to a child we started (by its pid, never by name).
#[allow(clippy::unwrap_used)]
fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Waits for a child to exit (20 s at most) and returns whether it exited with success.
#[allow(clippy::unwrap_used)]
fn exited_ok(child: &mut std::process::Child, what: &str) -> bool {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.success();
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `amdahl serve` on SIGINT (Ctrl-C) drains like on SIGTERM: the request streaming when the
/// signal arrives runs to its end (`[DONE]`), then the process exits with success.
#[test]
fn serve_drains_on_sigint() {
    use std::io::{Read, Write};
    let dir = model_dir();
    let mut server = Command::new(env!("CARGO_BIN_EXE_amdahl"))
        .args(["serve", "--port", "0", "--model"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if let Some(u) = line.strip_prefix("listening on ") {
            break u.to_string();
        }
    };
    let host = url.trim_start_matches("http://").to_string();
    let body =
        r#"{"prompt":"abc","max_tokens":300,"temperature":0,"ignore_eos":true,"stream":true}"#;
    let mut sock = std::net::TcpStream::connect(&host).unwrap();
    write!(
        sock,
        "POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: ") {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before its first event");
        got.extend_from_slice(&buf[..n]);
    }
    signal(server.id(), "-INT");
    sock.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
    assert!(
        text.contains("data: [DONE]"),
        "in-flight request finished: {text}"
    );
    assert!(exited_ok(&mut server, "serve did not exit on SIGINT"));
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
    assert!(
        exited_ok(&mut server, "serve did not exit on SIGTERM"),
        "serve exited with failure"
    );
}
