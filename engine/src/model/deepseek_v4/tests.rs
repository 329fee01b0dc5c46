//! Properties every correct engine has, checked on random configurations: causality and path
//! consistency (one pass = incremental decode = any chunking), and batching independence.

use super::synthetic::TinySpec;
use super::*;
use crate::config::MlpKind;
use crate::rng::Rng;

fn build(spec: &TinySpec, seed: u64) -> DeepseekV4 {
    let dir = tempfile::tempdir().unwrap();
    spec.write(dir.path(), seed).unwrap();
    DeepseekV4::load(dir.path()).unwrap()
}

/// Feeds `tokens` in chunks of the given sizes; returns the logits of every position.
fn run_chunks(m: &DeepseekV4, tokens: &[u32], chunks: &[usize]) -> Mat {
    let mut st = m.new_state();
    let mut rows = Vec::new();
    let mut at = 0;
    for &n in chunks {
        let mut clock = StageClock::default();
        let mut batch = [SeqInput {
            tokens: &tokens[at..at + n],
            state: &mut st,
            logits: LogitRows::All,
        }];
        rows.push(m.forward(&mut batch, &mut clock).unwrap().remove(0));
        at += n;
    }
    assert_eq!(at, tokens.len());
    Mat::vstack(&rows)
}

fn max_rel_diff(a: &Mat, b: &Mat) -> f32 {
    assert_eq!((a.rows, a.cols), (b.rows, b.cols));
    let scale = a.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = a
        .data
        .iter()
        .zip(&b.data)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale
}

fn random_tokens(rng: &mut Rng, vocab: usize, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(vocab) as u32).collect()
}

fn specs() -> Vec<TinySpec> {
    let base = TinySpec::default();
    vec![
        base.clone(),
        TinySpec {
            layers: vec![
                AttnKind::Csa { ratio: 4 },
                AttnKind::Hca { ratio: 4 },
                AttnKind::Csa { ratio: 4 },
            ],
            window: 5,
            index_topk: 2,
            scoring: "sigmoid",
            yarn: false,
            ..base.clone()
        },
        TinySpec {
            layers: vec![AttnKind::Hca { ratio: 16 }, AttnKind::Sliding],
            mlp: vec![MlpKind::Moe, MlpKind::HashMoe],
            window: 12,
            scoring: "softmax",
            hc_mult: 2,
            o_groups: 4,
            ..base
        },
    ]
}

#[test]
fn one_pass_incremental_and_chunked_agree() {
    let mut rng = Rng::new(11);
    for (i, spec) in specs().iter().enumerate() {
        let m = build(spec, 100 + i as u64);
        let n = 45 + rng.below(20);
        let tokens = random_tokens(&mut rng, spec.vocab, n);
        let full = run_chunks(&m, &tokens, &[n]);
        let prefix = 1 + rng.below(n / 2);
        let mut inc = vec![prefix];
        inc.extend(std::iter::repeat_n(1, n - prefix));
        let incremental = run_chunks(&m, &tokens, &inc);
        let mut chunks = Vec::new();
        let mut left = n;
        while left > 0 {
            let c = (1 + rng.below(13)).min(left);
            chunks.push(c);
            left -= c;
        }
        let chunked = run_chunks(&m, &tokens, &chunks);
        let (a, b) = (
            max_rel_diff(&full, &incremental),
            max_rel_diff(&full, &chunked),
        );
        assert!(
            a <= 1e-5 && b <= 1e-5,
            "spec {i}: incremental {a}, chunked {b} ({chunks:?})"
        );
    }
}

#[test]
fn positions_do_not_see_the_future() {
    let mut rng = Rng::new(5);
    for (i, spec) in specs().iter().enumerate() {
        let m = build(spec, 200 + i as u64);
        let n = 50;
        let a = random_tokens(&mut rng, spec.vocab, n);
        let cut = 17 + rng.below(20);
        let mut b = a.clone();
        for t in b.iter_mut().skip(cut) {
            *t = rng.below(spec.vocab) as u32;
        }
        let (la, lb) = (run_chunks(&m, &a, &[n]), run_chunks(&m, &b, &[n]));
        let head = |x: &Mat| x.slice_rows(0, cut);
        assert_eq!(
            head(&la),
            head(&lb),
            "spec {i}: a change at {cut} leaked backwards"
        );
        assert_ne!(la.slice_rows(cut, n), lb.slice_rows(cut, n));
    }
}

#[test]
fn a_batch_of_different_lengths_equals_each_alone() {
    let spec = &specs()[0];
    let m = build(spec, 300);
    let mut rng = Rng::new(3);
    let prompts: Vec<Vec<u32>> = [7, 31, 19]
        .iter()
        .map(|&n| random_tokens(&mut rng, spec.vocab, n))
        .collect();
    let mut states: Vec<SeqState> = prompts.iter().map(|_| m.new_state()).collect();
    let mut batch: Vec<SeqInput<'_>> = prompts
        .iter()
        .zip(states.iter_mut())
        .map(|(p, s)| SeqInput {
            tokens: p,
            state: s,
            logits: LogitRows::All,
        })
        .collect();
    let together = m.forward(&mut batch, &mut StageClock::default()).unwrap();
    for (p, got) in prompts.iter().zip(&together) {
        let alone = run_chunks(&m, p, &[p.len()]);
        assert!(max_rel_diff(&alone, got) <= 1e-6);
    }
    // Then decode one token for each, mixed with a fresh prompt.
    let fresh = random_tokens(&mut rng, spec.vocab, 9);
    let mut fresh_state = m.new_state();
    let next: Vec<u32> = (0..3).map(|i| i as u32 + 2).collect();
    let mut batch: Vec<SeqInput<'_>> = states
        .iter_mut()
        .zip(&next)
        .map(|(s, t)| SeqInput {
            tokens: std::slice::from_ref(t),
            state: s,
            logits: LogitRows::Last,
        })
        .collect();
    batch.push(SeqInput {
        tokens: &fresh,
        state: &mut fresh_state,
        logits: LogitRows::Last,
    });
    let step = m.forward(&mut batch, &mut StageClock::default()).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let mut seq = p.clone();
        seq.push(next[i]);
        let alone = run_chunks(&m, &seq, &[seq.len()]);
        assert!(max_rel_diff(&alone.slice_rows(seq.len() - 1, seq.len()), &step[i]) <= 1e-6);
    }
    let alone = run_chunks(&m, &fresh, &[fresh.len()]);
    assert!(max_rel_diff(&alone.slice_rows(8, 9), &step[3]) <= 1e-6);
}

#[test]
fn out_of_vocabulary_tokens_are_refused() {
    let spec = TinySpec::default();
    let m = build(&spec, 1);
    let mut st = m.new_state();
    let bad = [spec.vocab as u32];
    let mut batch = [SeqInput {
        tokens: &bad,
        state: &mut st,
        logits: LogitRows::Last,
    }];
    let err = m
        .forward(&mut batch, &mut StageClock::default())
        .unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
}

/// From first principles: when the indexer may keep at least every visible entry, a CSA layer
/// attends to all compressed entries visible to the query — the same as running that layer with
/// the selection bypassed (every entry w < (t+1) div m).
#[test]
fn csa_with_topk_at_least_visible_attends_to_all_visible_entries() {
    let spec = TinySpec {
        layers: vec![AttnKind::Csa { ratio: 4 }, AttnKind::Csa { ratio: 4 }],
        mlp: vec![MlpKind::Moe, MlpKind::Moe],
        index_topk: 1000,
        window: 6,
        ..TinySpec::default()
    };
    let mut rng = Rng::new(9);
    let tokens = random_tokens(&mut rng, spec.vocab, 60);
    let selected = build(&spec, 77);
    let mut bypassed = build(&spec, 77);
    for l in &mut bypassed.weights.layers {
        l.attn.kind = AttnKind::Hca { ratio: 4 };
    }
    let a = run_chunks(&selected, &tokens, &[60]);
    let b = run_chunks(&bypassed, &tokens, &[60]);
    assert!(max_rel_diff(&a, &b) <= 1e-5);
    // And with a small top-k the selection really prunes: the logits move once more than k
    // entries are visible, and not before.
    let mut pruned = build(&spec, 77);
    for l in &mut pruned.weights.layers {
        if let Some(ix) = l.attn.indexer.as_mut() {
            ix.topk = 2;
        }
    }
    let c = run_chunks(&pruned, &tokens, &[60]);
    // 2 entries are visible up to position 11 ((11+1) div 4 = 3 > 2 first at t = 11).
    assert!(max_rel_diff(&a.slice_rows(0, 11), &c.slice_rows(0, 11)) <= 1e-5);
    assert!(max_rel_diff(&a.slice_rows(11, 60), &c.slice_rows(11, 60)) > 1e-4);
}

/// A random configuration: 2–4 layers of any attention kind (one CSA rate and one HCA rate, as a
/// config can only say), MoE kinds in any order, and random window, top-k, scoring, YaRN, mHC
/// width and output groups.
fn random_spec(rng: &mut Rng) -> TinySpec {
    let csa = [2, 4][rng.below(2)];
    let hca = [4, 8, 16][rng.below(3)];
    let n = 2 + rng.below(3);
    let layers: Vec<AttnKind> = (0..n)
        .map(|_| match rng.below(3) {
            0 => AttnKind::Sliding,
            1 => AttnKind::Csa { ratio: csa },
            _ => AttnKind::Hca { ratio: hca },
        })
        .collect();
    let mlp = (0..n)
        .map(|_| {
            if rng.below(2) == 0 {
                MlpKind::HashMoe
            } else {
                MlpKind::Moe
            }
        })
        .collect();
    TinySpec {
        layers,
        mlp,
        window: 3 + rng.below(14),
        index_topk: 1 + rng.below(6),
        scoring: ["sqrtsoftplus", "sigmoid", "softmax"][rng.below(3)],
        yarn: rng.below(2) == 0,
        hc_mult: [2, 4][rng.below(2)],
        o_groups: [1, 2, 4][rng.below(3)],
        ..TinySpec::default()
    }
}

/// The property of the issue, over random configurations, lengths and chunkings: for L > t,
/// position t's logits are the same whether ids[:L] is computed in one pass, prefill + decode,
/// or random chunks, and the same as the last position of ids[:t+1] alone.
#[test]
fn random_configs_are_causal_and_path_consistent() {
    let mut rng = Rng::new(2024);
    for case in 0..6 {
        let spec = random_spec(&mut rng);
        let m = build(&spec, 500 + case);
        let n = 24 + rng.below(40);
        let tokens = random_tokens(&mut rng, spec.vocab, n);
        let full = run_chunks(&m, &tokens, &[n]);
        let prefix = 1 + rng.below(n - 1);
        let mut inc = vec![prefix];
        inc.extend(std::iter::repeat_n(1, n - prefix));
        let mut chunks = Vec::new();
        let mut left = n;
        while left > 0 {
            let c = (1 + rng.below(17)).min(left);
            chunks.push(c);
            left -= c;
        }
        let what = format!("case {case} {spec:?} n {n}");
        let inc_err = max_rel_diff(&full, &run_chunks(&m, &tokens, &inc));
        let chunk_err = max_rel_diff(&full, &run_chunks(&m, &tokens, &chunks));
        assert!(
            inc_err <= 1e-5,
            "{what}: incremental (prefix {prefix}) {inc_err}"
        );
        assert!(chunk_err <= 1e-5, "{what}: chunks {chunks:?} {chunk_err}");
        for _ in 0..3 {
            let t = rng.below(n - 1);
            let alone = run_chunks(&m, &tokens[..=t], &[t + 1]);
            let err = max_rel_diff(&alone.slice_rows(t, t + 1), &full.slice_rows(t, t + 1));
            assert!(err <= 1e-5, "{what}: position {t} alone vs in {n}: {err}");
        }
    }
}

/// Checkpoints stored in BF16 or F16 (every float tensor: linears, norms, mHC, sinks, biases)
/// load and compute exactly what an F32 checkpoint holding the same rounded values computes.
#[test]
fn bf16_and_f16_checkpoints_equal_f32_with_the_same_values() {
    use crate::checkpoint::{Checkpoint, Dtype, OwnedTensor};
    use half::{bf16, f16};
    let spec = TinySpec::default();
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("f32");
    spec.write(&src, 41).unwrap();
    let ck = Checkpoint::open(&src).unwrap();
    let tokens = random_tokens(&mut Rng::new(8), spec.vocab, 40);
    type Half = (Dtype, fn(f32) -> u16, fn(u16) -> f32);
    let halves: [Half; 2] = [
        (
            Dtype::BF16,
            |v| bf16::from_f32(v).to_bits(),
            |b| bf16::from_bits(b).to_f32(),
        ),
        (
            Dtype::F16,
            |v| f16::from_f32(v).to_bits(),
            |b| f16::from_bits(b).to_f32(),
        ),
    ];
    for (dtype, encode, decode) in halves {
        let (mut stored, mut rounded) = (Vec::new(), Vec::new());
        for name in ck.names() {
            let t = ck.get(name).unwrap();
            if t.dtype != Dtype::F32 {
                let same = OwnedTensor {
                    name: name.to_string(),
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                    data: t.bytes.to_vec(),
                };
                stored.push(same.clone());
                rounded.push(same);
                continue;
            }
            let bits: Vec<u16> = t.to_f32().unwrap().into_iter().map(encode).collect();
            let values: Vec<f32> = bits.iter().map(|&b| decode(b)).collect();
            stored.push(OwnedTensor {
                name: name.to_string(),
                dtype,
                shape: t.shape.to_vec(),
                data: bits.iter().flat_map(|b| b.to_le_bytes()).collect(),
            });
            rounded.push(OwnedTensor::f32(name, t.shape, &values));
        }
        let mut logits = Vec::new();
        for (tag, tensors) in [("stored", &stored), ("rounded", &rounded)] {
            let dir = root.path().join(format!("{dtype:?}-{tag}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
            crate::checkpoint::safetensors::write_file(
                &dir.join("model.safetensors"),
                tensors,
                &Default::default(),
            )
            .unwrap();
            let m = DeepseekV4::load(&dir).unwrap();
            logits.push(run_chunks(&m, &tokens, &[tokens.len()]));
        }
        assert_eq!(logits[0], logits[1], "{dtype:?} checkpoint");
    }
}
