//! The CUDA backend behind the real actors: batched greedy streams on the GPU (graphs for the
//! decode steps, eager chunked prefill) equal each prompt run alone on the CPU; seeded sampling
//! on the GPU repeats itself.

use std::path::Path;

use crate::api::*;
use crate::model::deepseek_v4::DeepseekV4;

fn start(dir: &Path, device: DeviceSpec) -> EngineHandle {
    EngineHandle::start(EngineConfig {
        model_dir: dir.to_path_buf(),
        model_name: Some("tiny".into()),
        device,
        scheduler: SchedulerConfig {
            max_seqs: 6,
            max_step_tokens: 9,
            max_queue: 64,
        },
        max_model_len: Some(128),
        profile_every: Some(4),
    })
    .unwrap()
}

async fn collect(mut s: Submission) -> Vec<u32> {
    let mut toks = Vec::new();
    while let Some(ev) = s.events.recv().await {
        match ev {
            StreamEvent::Token(t) => toks.push(t),
            StreamEvent::Done(f) => {
                assert_ne!(f.reason, FinishReason::Error, "{:?}", f.error);
                return toks;
            }
        }
    }
    panic!("stream ended without Done");
}

fn req(prompt: Vec<u32>, params: SamplingParams) -> GenerateRequest {
    GenerateRequest {
        prompt,
        params,
        transport: Transport::Http,
    }
}

#[actix_rt::test]
async fn gpu_engine_streams_equal_the_cpu_greedy_loop() {
    if super::gpu().is_none() {
        return;
    }
    // The trained model: its greedy choices have clear margins, so GPU and CPU must agree.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/arith");
    let model = DeepseekV4::load(&dir).unwrap();
    let tok = crate::tokenizer::Tokenizer::from_model_dir(&dir)
        .unwrap()
        .unwrap();
    let h = start(&dir, DeviceSpec::Cuda(0));
    let problems = [
        "17*23=",
        "999+999=",
        "5-9=",
        "12+5=17\n40*71=",
        "123-456=",
        "7*8=",
        "300+45=",
        "88*99=",
        "1-1=",
        "64+64=",
    ];
    let prompts: Vec<Vec<u32>> = problems
        .iter()
        .map(|q| tok.encode(q, false).unwrap())
        .collect();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_tokens: 12,
        ignore_eos: true,
        ..Default::default()
    };
    let mut subs = Vec::new();
    for p in &prompts {
        subs.push(h.submit(req(p.clone(), greedy.clone())).await.unwrap());
    }
    let mut outs = Vec::new();
    for s in subs {
        outs.push(collect(s).await);
    }
    for (p, toks) in prompts.iter().zip(&outs) {
        let mut want = Vec::new();
        let mut ctx = p.clone();
        for _ in 0..12 {
            let t = model.generate_greedy(&ctx, 1).unwrap()[0];
            want.push(t);
            ctx.push(t);
        }
        assert_eq!(toks, &want, "prompt {:?}", tok.decode(p, false).unwrap());
    }
    // Seeded sampling: the same seed gives the same tokens, alone or in a batch.
    let sampled = SamplingParams {
        temperature: 0.9,
        top_p: 0.9,
        top_k: 20,
        seed: Some(77),
        max_tokens: 10,
        ignore_eos: true,
        ..Default::default()
    };
    let a = collect(
        h.submit(req(prompts[3].clone(), sampled.clone()))
            .await
            .unwrap(),
    )
    .await;
    let mut subs = Vec::new();
    for p in prompts.iter().take(4) {
        subs.push(h.submit(req(p.clone(), sampled.clone())).await.unwrap());
    }
    let mut batch = Vec::new();
    for s in subs {
        batch.push(collect(s).await);
    }
    assert_eq!(
        a, batch[3],
        "seeded sampling differs between alone and batched"
    );
    assert_eq!(a.len(), 10);
}
