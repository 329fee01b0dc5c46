//! Every Prometheus metric amdahl exports: name, type, unit, help text and buckets, in one place
//! (STYLE.md: `amdahl_<subsystem>_<what>_<unit>`; docs/metrics.md lists them and a test keeps the
//! two in step). Each server owns its own [`Registry`], so tests can run several servers in one
//! process. Request-level semantics and buckets follow vLLM's so dashboards port by renaming
//! (docs/serving.md §3). The metric handles are atomics: the telemetry actor and the HTTP layer
//! update them without locks.

use prometheus::{
    CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, core::Collector,
};

use crate::error::{EngineError, Result};

/// vLLM's TTFT buckets.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Finer low end than vLLM's for fast MoE decode (serving.md §3.4).
const ITL_BUCKETS: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
    0.3, 0.5, 1.0, 2.5, 5.0,
];
/// vLLM's request-latency buckets.
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
const STEP_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0,
    2.0,
];
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 1024.0,
];
const STEP_TOKEN_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The `reason` values of `amdahl_requests_rejected_total`.
pub const REJECT_REASONS: [&str; 5] = [
    "queue_full",
    "too_long",
    "invalid",
    "not_ready",
    "unauthorized",
];

/// 1-2-5 buckets up to `max` (vLLM `build_1_2_5_buckets`).
pub fn buckets_1_2_5(max: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut base = 1u64;
    'outer: loop {
        for m in [1, 2, 5] {
            let v = base * m;
            if v > max {
                break 'outer;
            }
            out.push(v as f64);
        }
        base *= 10;
    }
    out
}

/// All metrics of one server.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub requests_running: IntGaugeVec,
    pub requests_waiting: IntGaugeVec,
    pub kv_cache_usage_ratio: prometheus::GaugeVec,
    pub kv_cache_bytes: IntGaugeVec,
    pub prompt_tokens_total: IntCounterVec,
    pub generation_tokens_total: IntCounterVec,
    pub requests_finished_total: IntCounterVec,
    pub requests_rejected_total: IntCounterVec,
    pub time_to_first_token_seconds: HistogramVec,
    pub inter_token_latency_seconds: HistogramVec,
    pub request_time_per_output_token_seconds: HistogramVec,
    pub e2e_request_latency_seconds: HistogramVec,
    pub request_queue_time_seconds: HistogramVec,
    pub request_prefill_time_seconds: HistogramVec,
    pub request_decode_time_seconds: HistogramVec,
    pub request_prompt_tokens: HistogramVec,
    pub request_generation_tokens: HistogramVec,
    pub ws_connections: IntGauge,
    pub stream_coalesced_deltas_total: IntCounterVec,
    pub client_disconnects_total: IntCounterVec,
    pub http_requests_total: IntCounterVec,
    pub http_request_duration_seconds: HistogramVec,
    pub build_info: IntGaugeVec,
    pub step_duration_seconds: HistogramVec,
    pub batch_size: HistogramVec,
    pub step_tokens: HistogramVec,
    pub stage_seconds_total: CounterVec,
    pub stage_bytes_total: IntCounterVec,
    pub stage_flops_total: IntCounterVec,
    pub profiled_steps_total: IntCounterVec,
    pub stage_roofline_efficiency_ratio: GaugeVec,
    pub stage_kernel_launches_total: IntCounterVec,
    pub stage_blocks_total: IntCounterVec,
    pub stage_under_filled_launches_total: IntCounterVec,
    pub profile_overhead_ratio: GaugeVec,
    pub device_peak_bandwidth_bytes_per_second: GaugeVec,
    pub device_peak_flops_per_second: GaugeVec,
    pub device_multiprocessors: IntGaugeVec,
    pub telemetry_subscribers: IntGauge,
}

fn reg<C: Collector + Clone + 'static>(r: &Registry, c: C) -> Result<C> {
    r.register(Box::new(c.clone()))
        .map_err(|e| EngineError::InvalidInput(format!("registering a metric: {e}")))?;
    Ok(c)
}

fn hist(name: &str, help: &str, buckets: &[f64], labels: &[&str]) -> Result<HistogramVec> {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .map_err(|e| EngineError::InvalidInput(format!("metric {name}: {e}")))
}

fn counter(name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec> {
    IntCounterVec::new(Opts::new(name, help), labels)
        .map_err(|e| EngineError::InvalidInput(format!("metric {name}: {e}")))
}

fn gauge(name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec> {
    IntGaugeVec::new(Opts::new(name, help), labels)
        .map_err(|e| EngineError::InvalidInput(format!("metric {name}: {e}")))
}

fn fgauge(name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec> {
    GaugeVec::new(Opts::new(name, help), labels)
        .map_err(|e| EngineError::InvalidInput(format!("metric {name}: {e}")))
}

impl Metrics {
    /// Builds and registers every metric. `max_model_len` sizes the token-count buckets.
    pub fn new(max_model_len: u64) -> Result<Self> {
        let r = Registry::new();
        let tok = buckets_1_2_5(max_model_len.max(1));
        let m = "model";
        let bad = |e: prometheus::Error| EngineError::InvalidInput(format!("metric: {e}"));
        let metrics = Self {
            requests_running: reg(
                &r,
                gauge(
                    "amdahl_requests_running",
                    "Requests holding a cache slot (prefill or decode).",
                    &[m],
                )?,
            )?,
            requests_waiting: reg(
                &r,
                gauge(
                    "amdahl_requests_waiting",
                    "Admitted requests waiting for a cache slot.",
                    &[m],
                )?,
            )?,
            kv_cache_usage_ratio: reg(
                &r,
                prometheus::GaugeVec::new(
                    Opts::new(
                        "amdahl_kv_cache_usage_ratio",
                        "Fraction of sequence cache slots in use (0-1).",
                    ),
                    &[m],
                )
                .map_err(bad)?,
            )?,
            kv_cache_bytes: reg(
                &r,
                gauge(
                    "amdahl_kv_cache_bytes",
                    "Bytes held by the per-sequence caches of running requests.",
                    &[m, "device"],
                )?,
            )?,
            prompt_tokens_total: reg(
                &r,
                counter(
                    "amdahl_prompt_tokens_total",
                    "Prompt tokens of finished requests.",
                    &[m],
                )?,
            )?,
            generation_tokens_total: reg(
                &r,
                counter("amdahl_generation_tokens_total", "Tokens generated.", &[m])?,
            )?,
            requests_finished_total: reg(
                &r,
                counter(
                    "amdahl_requests_finished_total",
                    "Requests finished, by reason (stop, length, cancelled, error, client_gone).",
                    &[m, "finish_reason"],
                )?,
            )?,
            requests_rejected_total: reg(
                &r,
                counter(
                    "amdahl_requests_rejected_total",
                    "Requests refused before admission, by reason (queue_full, too_long, invalid, not_ready, unauthorized).",
                    &["reason"],
                )?,
            )?,
            time_to_first_token_seconds: reg(
                &r,
                hist(
                    "amdahl_time_to_first_token_seconds",
                    "Time from submission to the first generated token.",
                    TTFT_BUCKETS,
                    &[m, "transport"],
                )?,
            )?,
            inter_token_latency_seconds: reg(
                &r,
                hist(
                    "amdahl_inter_token_latency_seconds",
                    "Time between consecutive generated tokens of a request.",
                    ITL_BUCKETS,
                    &[m],
                )?,
            )?,
            request_time_per_output_token_seconds: reg(
                &r,
                hist(
                    "amdahl_request_time_per_output_token_seconds",
                    "Mean time per output token after the first, per request.",
                    ITL_BUCKETS,
                    &[m],
                )?,
            )?,
            e2e_request_latency_seconds: reg(
                &r,
                hist(
                    "amdahl_e2e_request_latency_seconds",
                    "Time from submission to the last event of a request.",
                    REQUEST_BUCKETS,
                    &[m],
                )?,
            )?,
            request_queue_time_seconds: reg(
                &r,
                hist(
                    "amdahl_request_queue_time_seconds",
                    "Time a request waited for a cache slot.",
                    REQUEST_BUCKETS,
                    &[m],
                )?,
            )?,
            request_prefill_time_seconds: reg(
                &r,
                hist(
                    "amdahl_request_prefill_time_seconds",
                    "Time from first scheduling to the first token.",
                    REQUEST_BUCKETS,
                    &[m],
                )?,
            )?,
            request_decode_time_seconds: reg(
                &r,
                hist(
                    "amdahl_request_decode_time_seconds",
                    "Time from the first token to the last.",
                    REQUEST_BUCKETS,
                    &[m],
                )?,
            )?,
            request_prompt_tokens: reg(
                &r,
                hist(
                    "amdahl_request_prompt_tokens",
                    "Prompt length per request (tokens).",
                    &tok,
                    &[m],
                )?,
            )?,
            request_generation_tokens: reg(
                &r,
                hist(
                    "amdahl_request_generation_tokens",
                    "Generated tokens per request.",
                    &tok,
                    &[m],
                )?,
            )?,
            ws_connections: reg(
                &r,
                IntGauge::new("amdahl_ws_connections", "Open WebSocket connections.")
                    .map_err(bad)?,
            )?,
            stream_coalesced_deltas_total: reg(
                &r,
                counter(
                    "amdahl_stream_coalesced_deltas_total",
                    "Deltas merged into an earlier pending delta for a slow reader.",
                    &["transport"],
                )?,
            )?,
            client_disconnects_total: reg(
                &r,
                counter(
                    "amdahl_client_disconnects_total",
                    "Requests whose client went away before the end, by phase (queued, prefill, decode).",
                    &["transport", "phase"],
                )?,
            )?,
            http_requests_total: reg(
                &r,
                counter(
                    "amdahl_http_requests_total",
                    "HTTP requests answered, by handler and status.",
                    &["handler", "status"],
                )?,
            )?,
            http_request_duration_seconds: reg(
                &r,
                hist(
                    "amdahl_http_request_duration_seconds",
                    "Time to the response head (streams: to the first byte).",
                    HTTP_BUCKETS,
                    &["handler"],
                )?,
            )?,
            build_info: reg(
                &r,
                gauge(
                    "amdahl_build_info",
                    "Always 1; the labels describe the build and the served model.",
                    &["version", m, "device"],
                )?,
            )?,
            step_duration_seconds: reg(
                &r,
                hist(
                    "amdahl_step_duration_seconds",
                    "Wall time of one engine step.",
                    STEP_BUCKETS,
                    &["phase"],
                )?,
            )?,
            batch_size: reg(
                &r,
                hist(
                    "amdahl_batch_size",
                    "Sequences in one step.",
                    BATCH_BUCKETS,
                    &["phase"],
                )?,
            )?,
            step_tokens: reg(
                &r,
                hist(
                    "amdahl_step_tokens",
                    "Tokens fed to the model in one step.",
                    STEP_TOKEN_BUCKETS,
                    &["phase"],
                )?,
            )?,
            stage_seconds_total: reg(
                &r,
                CounterVec::new(
                    Opts::new(
                        "amdahl_stage_seconds_total",
                        "Busy time per forward-pass stage (ARCHITECTURE.md stage labels).",
                    ),
                    &["stage", "device", "phase"],
                )
                .map_err(bad)?,
            )?,
            stage_bytes_total: reg(
                &r,
                counter(
                    "amdahl_stage_bytes_total",
                    "Analytic bytes moved per stage (weights, cache rows, activations).",
                    &["stage", "device"],
                )?,
            )?,
            stage_flops_total: reg(
                &r,
                counter(
                    "amdahl_stage_flops_total",
                    "Analytic floating-point operations per stage.",
                    &["stage", "device"],
                )?,
            )?,
            profiled_steps_total: reg(
                &r,
                counter(
                    "amdahl_profiled_steps_total",
                    "Steps sampled for stage timing (--profile-every); the stage counters cover these.",
                    &["device", "phase"],
                )?,
            )?,
            stage_roofline_efficiency_ratio: reg(
                &r,
                fgauge(
                    "amdahl_stage_roofline_efficiency_ratio",
                    "Roofline floor over measured stage time in the rolling window (0-1).",
                    &["stage", "device", "phase"],
                )?,
            )?,
            stage_kernel_launches_total: reg(
                &r,
                counter(
                    "amdahl_stage_kernel_launches_total",
                    "Kernel launches per stage on profiled steps (GPU backends).",
                    &["stage", "device"],
                )?,
            )?,
            stage_blocks_total: reg(
                &r,
                counter(
                    "amdahl_stage_blocks_total",
                    "Thread blocks launched per stage on profiled steps (GPU backends).",
                    &["stage", "device"],
                )?,
            )?,
            stage_under_filled_launches_total: reg(
                &r,
                counter(
                    "amdahl_stage_under_filled_launches_total",
                    "Launches with fewer blocks than the device has SMs (GPU backends).",
                    &["stage", "device"],
                )?,
            )?,
            profile_overhead_ratio: reg(
                &r,
                fgauge(
                    "amdahl_profile_overhead_ratio",
                    "Estimated stage-timing cost over profiled step time in the rolling window.",
                    &["device"],
                )?,
            )?,
            device_peak_bandwidth_bytes_per_second: reg(
                &r,
                fgauge(
                    "amdahl_device_peak_bandwidth_bytes_per_second",
                    "Copy bandwidth (read + write) measured at startup.",
                    &["device"],
                )?,
            )?,
            device_peak_flops_per_second: reg(
                &r,
                fgauge(
                    "amdahl_device_peak_flops_per_second",
                    "Matrix-multiply FLOP rate measured at startup.",
                    &["device"],
                )?,
            )?,
            device_multiprocessors: reg(
                &r,
                gauge(
                    "amdahl_device_multiprocessors",
                    "Streaming multiprocessors of a GPU (absent on the CPU).",
                    &["device"],
                )?,
            )?,
            telemetry_subscribers: reg(
                &r,
                IntGauge::new(
                    "amdahl_telemetry_subscribers",
                    "Open /v1/ws/telemetry sockets.",
                )
                .map_err(bad)?,
            )?,
            registry: r,
        };
        // Known rejection reasons exist from the start at 0, so rate() and dashboards see them
        // before the first rejection.
        for reason in REJECT_REASONS {
            metrics.requests_rejected_total.with_label_values(&[reason]);
        }
        Ok(metrics)
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail on I/O; a malformed family would be a bug here.
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!("encoding metrics: {e}");
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
