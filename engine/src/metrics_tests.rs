//! metrics.rs: buckets, and the table in docs/metrics.md against the registered metrics.

use super::*;

#[test]
fn one_two_five_buckets() {
    assert_eq!(buckets_1_2_5(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    assert_eq!(buckets_1_2_5(1), vec![1.0]);
}

/// Every registered metric appears in docs/metrics.md and every documented one exists.
#[test]
fn every_metric_is_documented() {
    let m = Metrics::new(4096).unwrap();
    let mut declared = std::collections::BTreeSet::new();
    for c in [
        &m.requests_running.desc(),
        &m.requests_waiting.desc(),
        &m.kv_cache_usage_ratio.desc(),
        &m.kv_cache_bytes.desc(),
        &m.prompt_tokens_total.desc(),
        &m.generation_tokens_total.desc(),
        &m.requests_finished_total.desc(),
        &m.requests_rejected_total.desc(),
        &m.time_to_first_token_seconds.desc(),
        &m.inter_token_latency_seconds.desc(),
        &m.request_time_per_output_token_seconds.desc(),
        &m.e2e_request_latency_seconds.desc(),
        &m.request_queue_time_seconds.desc(),
        &m.request_prefill_time_seconds.desc(),
        &m.request_decode_time_seconds.desc(),
        &m.request_prompt_tokens.desc(),
        &m.request_generation_tokens.desc(),
        &m.ws_connections.desc(),
        &m.stream_coalesced_deltas_total.desc(),
        &m.client_disconnects_total.desc(),
        &m.http_requests_total.desc(),
        &m.http_request_duration_seconds.desc(),
        &m.build_info.desc(),
        &m.step_duration_seconds.desc(),
        &m.batch_size.desc(),
        &m.step_tokens.desc(),
        &m.stage_seconds_total.desc(),
        &m.stage_bytes_total.desc(),
        &m.stage_flops_total.desc(),
        &m.profiled_steps_total.desc(),
        &m.stage_roofline_efficiency_ratio.desc(),
        &m.stage_kernel_launches_total.desc(),
        &m.stage_blocks_total.desc(),
        &m.stage_under_filled_launches_total.desc(),
        &m.profile_overhead_ratio.desc(),
        &m.device_peak_bandwidth_bytes_per_second.desc(),
        &m.device_peak_flops_per_second.desc(),
        &m.device_multiprocessors.desc(),
        &m.telemetry_subscribers.desc(),
    ] {
        for d in c.iter() {
            declared.insert(d.fq_name.clone());
        }
    }
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md"),
    )
    .unwrap();
    let documented: std::collections::BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `amdahl_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("amdahl_{n}"))
        .collect();
    assert_eq!(
        declared, documented,
        "docs/metrics.md and metrics.rs disagree"
    );
    for n in &declared {
        assert!(n.starts_with("amdahl_"), "{n}: prefix");
    }
}
