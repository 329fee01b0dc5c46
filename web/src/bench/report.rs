//! Benchmark statistics and the two outputs: the "Serving Benchmark Result" table, byte for byte
//! as `vllm bench serve` prints it (docs/serving.md §5.3: `{:<40} {:<10}` rows, centred headers),
//! and a vLLM-style result JSON. Percentiles interpolate linearly like numpy's default.

use serde_json::{Value, json};

/// What one request measured (times in seconds, relative to the benchmark start).
#[derive(Debug, Clone, Default)]
pub struct RequestResult {
    pub success: bool,
    pub error: String,
    pub start: f64,
    pub ttft: f64,
    /// Gaps between successive content chunks.
    pub itl: Vec<f64>,
    pub latency: f64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub text: String,
    /// Server-reported timings (WebSocket `request.done`), ms.
    pub server_ttft_ms: Option<f64>,
    pub server_tpot_ms: Option<f64>,
}

/// Aggregates of a run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub completed: usize,
    pub failed: usize,
    pub concurrency: Option<usize>,
    pub duration: f64,
    pub total_input: u64,
    pub total_output: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub peak_output_throughput: f64,
    pub peak_concurrency: f64,
    pub total_token_throughput: f64,
    pub ttft_ms: Stats,
    pub tpot_ms: Stats,
    pub itl_ms: Stats,
    pub e2el_ms: Stats,
}

/// Mean, median, standard deviation and 99th percentile.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub p99: f64,
}

/// numpy.percentile with linear interpolation; 0 for an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

impl Stats {
    /// Stats of values given in seconds, reported in ms.
    pub fn of_seconds(xs: &[f64]) -> Self {
        let mut v: Vec<f64> = xs.iter().map(|x| x * 1e3).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return Self::default();
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        Self {
            mean,
            median: percentile(&v, 50.0),
            std: var.sqrt(),
            p99: percentile(&v, 99.0),
        }
    }
}

/// Computes the summary of a finished run.
pub fn summarize(results: &[RequestResult], duration: f64, concurrency: Option<usize>) -> Summary {
    let ok: Vec<&RequestResult> = results.iter().filter(|r| r.success).collect();
    let total_input: u64 = ok.iter().map(|r| r.prompt_tokens).sum();
    let total_output: u64 = ok.iter().map(|r| r.output_tokens).sum();
    let ttfts: Vec<f64> = ok.iter().map(|r| r.ttft).collect();
    let tpots: Vec<f64> = ok
        .iter()
        .filter(|r| r.output_tokens > 1)
        .map(|r| (r.latency - r.ttft) / (r.output_tokens - 1) as f64)
        .collect();
    let itls: Vec<f64> = ok.iter().flat_map(|r| r.itl.iter().copied()).collect();
    let e2el: Vec<f64> = ok.iter().map(|r| r.latency).collect();
    // Peak output tok/s: tokens per 1-second bucket (token times = start + ttft + cumulative
    // ITL), as vLLM computes it; peak concurrency from the request intervals.
    let secs = duration.ceil().max(1.0) as usize;
    let mut buckets = vec![0u64; secs + 1];
    for r in &ok {
        let mut t = r.start + r.ttft;
        let per_chunk = if r.itl.is_empty() {
            r.output_tokens as f64
        } else {
            r.output_tokens as f64 / (r.itl.len() + 1) as f64
        };
        let mut add = |t: f64, n: f64| {
            let b = (t.max(0.0) as usize).min(secs);
            buckets[b] += n.round() as u64;
        };
        add(t, per_chunk);
        for gap in &r.itl {
            t += gap;
            add(t, per_chunk);
        }
    }
    let mut edges: Vec<(f64, i64)> = ok
        .iter()
        .flat_map(|r| [(r.start, 1), (r.start + r.latency, -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut cur, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        cur += d;
        peak = peak.max(cur);
    }
    let d = duration.max(1e-9);
    Summary {
        completed: ok.len(),
        failed: results.len() - ok.len(),
        concurrency,
        duration,
        total_input,
        total_output,
        request_throughput: ok.len() as f64 / d,
        output_throughput: total_output as f64 / d,
        peak_output_throughput: buckets.iter().copied().max().unwrap_or(0) as f64,
        peak_concurrency: peak as f64,
        total_token_throughput: (total_input + total_output) as f64 / d,
        ttft_ms: Stats::of_seconds(&ttfts),
        tpot_ms: Stats::of_seconds(&tpots),
        itl_ms: Stats::of_seconds(&itls),
        e2el_ms: Stats::of_seconds(&e2el),
    }
}

fn int(out: &mut String, label: &str, v: impl std::fmt::Display) {
    out.push_str(&format!("{:<40} {:<10}\n", label, v));
}

fn float(out: &mut String, label: &str, v: f64) {
    out.push_str(&format!("{:<40} {:<10.2}\n", label, v));
}

fn section(out: &mut String, title: &str, short: &str, s: &Stats) {
    out.push_str(&format!("{:-^50}\n", title));
    float(out, &format!("Mean {short} (ms):"), s.mean);
    float(out, &format!("Median {short} (ms):"), s.median);
    float(out, &format!("P99 {short} (ms):"), s.p99);
}

/// The table, exactly as vLLM prints it with default options (ttft, tpot, itl).
pub fn table(s: &Summary) -> String {
    let mut out = String::new();
    out.push_str(&format!("{:=^50}\n", " Serving Benchmark Result "));
    int(&mut out, "Successful requests:", s.completed);
    int(&mut out, "Failed requests:", s.failed);
    if let Some(c) = s.concurrency {
        int(&mut out, "Maximum request concurrency:", c);
    }
    float(&mut out, "Benchmark duration (s):", s.duration);
    int(&mut out, "Total input tokens:", s.total_input);
    int(&mut out, "Total generated tokens:", s.total_output);
    float(
        &mut out,
        "Request throughput (req/s):",
        s.request_throughput,
    );
    float(
        &mut out,
        "Output token throughput (tok/s):",
        s.output_throughput,
    );
    float(
        &mut out,
        "Peak output token throughput (tok/s):",
        s.peak_output_throughput,
    );
    float(&mut out, "Peak concurrent requests:", s.peak_concurrency);
    float(
        &mut out,
        "Total token throughput (tok/s):",
        s.total_token_throughput,
    );
    section(&mut out, "Time to First Token", "TTFT", &s.ttft_ms);
    section(
        &mut out,
        "Time per Output Token (excl. 1st token)",
        "TPOT",
        &s.tpot_ms,
    );
    section(&mut out, "Inter-token Latency", "ITL", &s.itl_ms);
    out.push_str(&"=".repeat(50));
    out.push('\n');
    out
}

/// vLLM's result-file keys, plus what only the WebSocket transport reports.
pub fn result_json(s: &Summary, results: &[RequestResult], extra: Value) -> Value {
    let ok =
        |f: &dyn Fn(&RequestResult) -> Value| -> Vec<Value> { results.iter().map(f).collect() };
    let mut v = json!({
        "duration": s.duration,
        "completed": s.completed,
        "failed": s.failed,
        "max_concurrency": s.concurrency,
        "total_input_tokens": s.total_input,
        "total_output_tokens": s.total_output,
        "request_throughput": s.request_throughput,
        "output_throughput": s.output_throughput,
        "total_token_throughput": s.total_token_throughput,
        "max_output_tokens_per_s": s.peak_output_throughput,
        "max_concurrent_requests": s.peak_concurrency,
        "input_lens": ok(&|r| json!(r.prompt_tokens)),
        "output_lens": ok(&|r| json!(r.output_tokens)),
        "ttfts": ok(&|r| json!(r.ttft)),
        "itls": ok(&|r| json!(r.itl)),
        "latencies": ok(&|r| json!(r.latency)),
        "start_times": ok(&|r| json!(r.start)),
        "generated_texts": ok(&|r| json!(r.text)),
        "errors": ok(&|r| json!(r.error)),
        "server_ttft_ms": ok(&|r| json!(r.server_ttft_ms)),
        "server_tpot_ms": ok(&|r| json!(r.server_tpot_ms)),
    });
    for (name, st) in [
        ("ttft", s.ttft_ms),
        ("tpot", s.tpot_ms),
        ("itl", s.itl_ms),
        ("e2el", s.e2el_ms),
    ] {
        v[format!("mean_{name}_ms")] = json!(st.mean);
        v[format!("median_{name}_ms")] = json!(st.median);
        v[format!("std_{name}_ms")] = json!(st.std);
        v[format!("p99_{name}_ms")] = json!(st.p99);
    }
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy() {
        // numpy.percentile([1, 2, 3, 4], [50, 99]) == [2.5, 3.97]
        let v = [1.0, 2.0, 3.0, 4.0];
        assert!((percentile(&v, 50.0) - 2.5).abs() < 1e-12);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn table_bytes_match_vllm_format() {
        let s = Summary {
            completed: 10,
            failed: 0,
            concurrency: Some(4),
            duration: 1.5,
            total_input: 320,
            total_output: 160,
            request_throughput: 6.666,
            ..Default::default()
        };
        let t = table(&s);
        let lines: Vec<&str> = t.lines().collect();
        // Python: "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")
        assert_eq!(
            lines[0],
            "============ Serving Benchmark Result ============"
        );
        // Python: "{:<40} {:<10}".format("Successful requests:", 10)
        assert_eq!(
            lines[1],
            format!("Successful requests:{} 10{}", " ".repeat(20), " ".repeat(8))
        );
        assert_eq!(
            lines[3],
            format!(
                "Maximum request concurrency:{} 4{}",
                " ".repeat(12),
                " ".repeat(9)
            )
        );
        // Python: "{:<40} {:<10.2f}".format("Benchmark duration (s):", 1.5)
        assert_eq!(
            lines[4],
            format!(
                "Benchmark duration (s):{} 1.50{}",
                " ".repeat(17),
                " ".repeat(6)
            )
        );
        assert_eq!(
            lines[7],
            format!(
                "Request throughput (req/s):{} 6.67{}",
                " ".repeat(13),
                " ".repeat(6)
            )
        );
        assert_eq!(
            lines[12],
            "---------------Time to First Token----------------"
        );
        assert_eq!(
            lines[16],
            "-----Time per Output Token (excl. 1st token)------"
        );
        assert_eq!(
            lines[20],
            "---------------Inter-token Latency----------------"
        );
        assert_eq!(*lines.last().unwrap(), "=".repeat(50));
        assert_eq!(lines.len(), 25);
        assert!(lines.iter().all(|l| l.len() == 50 || l.len() == 51));
    }

    #[test]
    fn summary_counts_peaks_and_tpot() {
        let r = |start: f64, out: u64| RequestResult {
            success: true,
            start,
            ttft: 0.1,
            itl: vec![0.1; out as usize - 1],
            latency: 0.1 + 0.1 * (out - 1) as f64,
            prompt_tokens: 5,
            output_tokens: out,
            ..Default::default()
        };
        let rs = vec![r(0.0, 5), r(0.05, 5), RequestResult::default()];
        let s = summarize(&rs, 1.0, Some(2));
        assert_eq!((s.completed, s.failed), (2, 1));
        assert_eq!((s.total_input, s.total_output), (10, 10));
        assert!((s.tpot_ms.mean - 100.0).abs() < 1e-9);
        assert!((s.ttft_ms.median - 100.0).abs() < 1e-9);
        assert_eq!(s.peak_concurrency, 2.0);
        assert_eq!(s.peak_output_throughput, 10.0);
    }
}
