//! Telemetry over real engine steps on a tiny model: the stage times of served steps add up to
//! the step time, the snapshot carries peaks, shares, projections and latency percentiles, the
//! sampling knob leaves the right steps unprofiled, and subscribers get pushed snapshots.

use std::time::Duration;

use crate::actors::tests::{collect, greedy, model_dir, req};
use crate::api::*;

fn start(dir: &std::path::Path, profile_every: Option<u32>) -> EngineHandle {
    EngineHandle::start(EngineConfig {
        model_dir: dir.to_path_buf(),
        model_name: Some("tiny".into()),
        device: DeviceSpec::Cpu,
        scheduler: SchedulerConfig {
            max_seqs: 8,
            max_step_tokens: 64,
            max_queue: 64,
        },
        max_model_len: None,
        profile_every,
        moe_backend: None,
        workers: None,
    })
    .unwrap()
}

async fn run_some(h: &EngineHandle, n: usize) {
    let mut subs = Vec::new();
    for i in 0..n as u32 {
        let prompt = (0..6 + i).map(|j| 5 + (i * 11 + j * 3) % 200).collect();
        subs.push(h.submit(req(prompt, greedy(16))).await.unwrap());
    }
    for s in subs {
        let (toks, _) = collect(s).await;
        assert_eq!(toks.len(), 16);
    }
}

#[actix_rt::test]
async fn stage_times_sum_to_the_step_time_and_the_report_is_complete() {
    let dir = model_dir();
    let h = start(dir.path(), None);
    run_some(&h, 4).await;
    let s = h.snapshot().await.unwrap();
    assert_eq!(s.model, "tiny");
    assert_eq!(s.profile.every, 1);
    let dev = &s.devices[0];
    assert_eq!(dev.device, "cpu");
    let peaks = dev.peaks.expect("the CPU backend measured its peaks");
    assert!(peaks.bandwidth_bytes_per_second > 1e8 && peaks.flops_per_second > 1e7);
    assert_eq!(dev.multiprocessors, None);
    let decode = s
        .phase("cpu", "decode")
        .expect("decode steps in the window");
    assert!(decode.steps >= 10, "{}", decode.steps);
    // Stages other than `other` cover the worker's step time within 5%.
    let named: f64 = decode
        .stages
        .iter()
        .filter(|x| x.stage != "other")
        .map(|x| x.seconds)
        .sum();
    assert!(
        named >= 0.95 * decode.seconds && named <= decode.seconds * 1.0001,
        "stages {named} s of {} s",
        decode.seconds
    );
    let shares: f64 = decode.stages.iter().map(|x| x.share).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    // Every stage that did work has bytes, a bandwidth and an efficiency against the peaks.
    let moe = decode.stages.iter().find(|x| x.stage == "moe").unwrap();
    assert!(moe.bytes > 0 && moe.bandwidth_bytes_per_second > 0.0);
    let eff = moe.efficiency.unwrap();
    assert!(eff > 0.0 && eff <= 1.0);
    assert!(moe.gain_if_2x > 0.0 && moe.gain_if_2x < 1.0);
    assert!(decode.occupancy.is_empty(), "the CPU launches no kernels");
    assert!(
        decode
            .sentences
            .iter()
            .any(|w| w.contains("of decode: making it 2× faster gives")),
        "{:?}",
        decode.sentences
    );
    assert!(s.report[0].starts_with("decode on cpu:"), "{:?}", s.report);
    assert!(s.tokens_per_second > 0.0);
    assert_eq!(s.ttft_ms.count, 4);
    assert_eq!(s.itl_ms.count, 4 * 15);
    assert!(s.itl_ms.p50 > 0.0 && s.itl_ms.p50 <= s.itl_ms.p99);
    assert!(s.batch.max >= 1 && s.batch.max <= 4);
    // Wall-clock marks cost next to nothing next to a step.
    assert!(s.profile.overhead_ratio > 0.0 && s.profile.overhead_ratio < 0.03);
    let text = h.metrics().encode();
    for series in [
        "amdahl_stage_seconds_total{device=\"cpu\",phase=\"decode\",stage=\"moe\"}",
        "amdahl_device_peak_bandwidth_bytes_per_second{device=\"cpu\"}",
        "amdahl_profiled_steps_total{device=\"cpu\",phase=\"decode\"}",
    ] {
        assert!(text.contains(series), "{series} missing");
    }
}

#[actix_rt::test]
async fn profile_every_samples_every_nth_step_and_subscribers_get_snapshots() {
    let dir = model_dir();
    let h = start(dir.path(), Some(4));
    let mut rx = h.subscribe_telemetry().await.unwrap();
    let first = rx.borrow_and_update().seq;
    run_some(&h, 2).await;
    let s = h.snapshot().await.unwrap();
    assert_eq!(s.profile.every, 4);
    let profiled = s.profile.profiled_steps;
    // Steps 0, 4, 8, ... are profiled.
    assert_eq!(profiled, s.steps_total.div_ceil(4), "{s:?}");
    let in_phases: u64 = s.devices[0].phases.iter().map(|p| p.steps).sum();
    assert_eq!(in_phases, profiled);
    // Pushed snapshots keep coming (~5 Hz); one that has seen the steps arrives soon.
    let pushed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            rx.changed().await.unwrap();
            let snap = rx.borrow_and_update().clone();
            if snap.steps_total == s.steps_total {
                return snap;
            }
        }
    })
    .await
    .expect("a pushed snapshot within 5 s");
    assert!(pushed.seq > first);
    assert_eq!(pushed.profile.profiled_steps, profiled);
}
