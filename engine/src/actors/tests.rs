//! The actors end to end on a tiny random model: batched greedy streams equal the model run
//! alone, seeds reproduce, cancellation frees slots, the queue bound holds, draining refuses.

use std::path::Path;

use crate::api::*;
use crate::model::deepseek_v4::DeepseekV4;
use crate::testkit;

pub(crate) fn model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    testkit::write_model_dir(dir.path(), &testkit::serving_spec(), 3).unwrap();
    dir
}

pub(crate) fn start(
    dir: &Path,
    max_seqs: usize,
    max_step_tokens: usize,
    max_queue: usize,
) -> EngineHandle {
    start_with(dir, max_seqs, max_step_tokens, max_queue, 1)
}

fn start_with(
    dir: &Path,
    max_seqs: usize,
    max_step_tokens: usize,
    max_queue: usize,
    workers: usize,
) -> EngineHandle {
    EngineHandle::start(EngineConfig {
        model_dir: dir.to_path_buf(),
        model_name: Some("tiny".into()),
        device: DeviceSpec::Cpu,
        scheduler: SchedulerConfig {
            max_seqs,
            max_step_tokens,
            max_queue,
        },
        max_model_len: None,
        profile_every: None,
        moe_backend: None,
        workers: Some(workers),
    })
    .unwrap()
}

pub(crate) fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_tokens,
        ignore_eos: true,
        ..Default::default()
    }
}

pub(crate) async fn collect(mut s: Submission) -> (Vec<u32>, Finished) {
    let mut toks = Vec::new();
    while let Some(ev) = s.events.recv().await {
        match ev {
            StreamEvent::Token(t) => toks.push(t),
            StreamEvent::Done(f) => return (toks, f),
        }
    }
    panic!("stream ended without Done");
}

pub(crate) fn req(prompt: Vec<u32>, params: SamplingParams) -> GenerateRequest {
    GenerateRequest {
        prompt,
        params,
        transport: Transport::Http,
    }
}

#[actix_rt::test]
async fn batched_streams_equal_each_prompt_alone() {
    let dir = model_dir();
    let model = DeepseekV4::load(dir.path()).unwrap();
    // A small token budget forces chunked prefill mixed with decode.
    let h = start(dir.path(), 6, 7, 64);
    let prompts: Vec<Vec<u32>> = (0..10u32)
        .map(|i| {
            (0..(3 + i * 2))
                .map(|j| 5 + (i * 7 + j * 3) % 250)
                .collect()
        })
        .collect();
    let mut subs = Vec::new();
    for p in &prompts {
        subs.push(h.submit(req(p.clone(), greedy(12))).await.unwrap());
    }
    let outs = futures_join(subs).await;
    for (p, (toks, fin)) in prompts.iter().zip(outs) {
        assert_eq!(toks, model.generate_greedy(p, 12).unwrap(), "prompt {p:?}");
        assert_eq!(fin.reason, FinishReason::Length);
        assert_eq!((fin.prompt_tokens, fin.completion_tokens), (p.len(), 12));
    }
    let st = h.stats().await.unwrap();
    assert_eq!((st.running, st.waiting), (0, 0));
    assert!(st.steps > 0);
}

async fn futures_join(subs: Vec<Submission>) -> Vec<(Vec<u32>, Finished)> {
    let handles: Vec<_> = subs
        .into_iter()
        .map(|s| actix_rt::spawn(collect(s)))
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[actix_rt::test]
async fn seeds_reproduce_and_stop_rules_apply() {
    let dir = model_dir();
    let h = start(dir.path(), 4, 64, 16);
    let sampled = |seed| SamplingParams {
        temperature: 1.0,
        top_k: 50,
        top_p: 0.9,
        seed: Some(seed),
        max_tokens: 20,
        ignore_eos: true,
        ..Default::default()
    };
    let a = collect(h.submit(req(vec![7, 8, 9], sampled(1))).await.unwrap()).await;
    let b = collect(h.submit(req(vec![7, 8, 9], sampled(1))).await.unwrap()).await;
    let c = collect(h.submit(req(vec![7, 8, 9], sampled(2))).await.unwrap()).await;
    assert_eq!(a.0, b.0);
    assert_ne!(a.0, c.0);
    // A stop token id ends the request with `stop` and reports the id.
    let stop_at = a.0[4];
    let first = a.0.iter().position(|&t| t == stop_at).unwrap();
    let p = SamplingParams {
        stop_token_ids: vec![stop_at],
        ..sampled(1)
    };
    let (toks, fin) = collect(h.submit(req(vec![7, 8, 9], p)).await.unwrap()).await;
    assert_eq!(toks, a.0[..=first]);
    assert_eq!(
        (fin.reason, fin.stop_token),
        (FinishReason::Stop, Some(stop_at))
    );
    // min_tokens masks the stop id until reached.
    let p = SamplingParams {
        stop_token_ids: vec![stop_at],
        min_tokens: 20,
        ..sampled(1)
    };
    let (toks, fin) = collect(h.submit(req(vec![7, 8, 9], p)).await.unwrap()).await;
    assert_eq!(toks.len(), 20);
    assert!(toks[..19].iter().all(|&t| t != stop_at));
    assert_eq!(fin.reason, FinishReason::Length);
    // Invalid input is refused before admission.
    assert!(matches!(
        h.submit(req(vec![], greedy(1))).await,
        Err(crate::EngineError::InvalidInput(_))
    ));
    assert!(matches!(
        h.submit(req(vec![100_000], greedy(1))).await,
        Err(crate::EngineError::InvalidInput(_))
    ));
}

#[actix_rt::test]
async fn dropped_receivers_free_slots_and_the_queue_is_bounded() {
    let dir = model_dir();
    let h = start(dir.path(), 1, 64, 1);
    let long = || req(vec![5, 6, 7], greedy(4000));
    let mut a = h.submit(long()).await.unwrap();
    // Wait until `a` streams, so it holds the only slot.
    assert!(matches!(a.events.recv().await, Some(StreamEvent::Token(_))));
    let b = h.submit(long()).await.unwrap();
    assert_eq!(b.queue_position, 0);
    match h.submit(long()).await {
        Err(crate::EngineError::Overloaded { retry_after_ms, .. }) => {
            assert!(retry_after_ms >= 100)
        }
        other => panic!("expected Overloaded, got {other:?}"),
    }
    drop(a);
    drop(b);
    let mut idle = false;
    for _ in 0..200 {
        let st = h.stats().await.unwrap();
        if st.running == 0 && st.waiting == 0 {
            idle = true;
            break;
        }
        actix_rt::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(idle, "slots were not freed");
    let (toks, _) = collect(h.submit(req(vec![5], greedy(3))).await.unwrap()).await;
    assert_eq!(toks.len(), 3);
    h.drain().await.unwrap();
    assert!(matches!(
        h.submit(req(vec![5], greedy(3))).await,
        Err(crate::EngineError::Draining)
    ));
}

/// Expert-parallel CPU workers (2 and 4, collectives in memory) behind the real actors stream the
/// single-worker greedy tokens, with chunked prefill mixed into decode.
#[actix_rt::test]
async fn expert_parallel_workers_stream_the_single_worker_tokens() {
    let dir = model_dir();
    let model = DeepseekV4::load(dir.path()).unwrap();
    let prompts: Vec<Vec<u32>> = (0..6u32)
        .map(|i| {
            (0..(4 + i * 3))
                .map(|j| 5 + (i * 11 + j * 7) % 250)
                .collect()
        })
        .collect();
    for workers in [2usize, 4] {
        let h = start_with(dir.path(), 4, 9, 64, workers);
        let mut subs = Vec::new();
        for p in &prompts {
            subs.push(h.submit(req(p.clone(), greedy(10))).await.unwrap());
        }
        let outs = futures_join(subs).await;
        for (p, (toks, fin)) in prompts.iter().zip(outs) {
            assert_eq!(
                fin.reason,
                FinishReason::Length,
                "{workers} workers: {:?}",
                fin.error
            );
            assert_eq!(
                toks,
                model.generate_greedy(p, 10).unwrap(),
                "{workers} workers, prompt {p:?}"
            );
        }
    }
}
