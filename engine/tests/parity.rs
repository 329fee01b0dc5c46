//! Parity with HF transformers 5.17 on the committed tiny fixtures (tools/reference/). The golden
//! for position t is transformers' output at the last position of a prefill of ids[:t+1]; parity
//! is asserted where transformers' own three code paths agree (`agree` mask). Our three paths
//! (one pass, prefill + decode, chunks) must all match it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use amdahl_engine::checkpoint::Checkpoint;
use amdahl_engine::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use amdahl_engine::profile::StageClock;

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/v4");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("fixtures missing at {}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").exists())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no fixtures under {}", root.display());
    dirs
}

struct Golden {
    b: usize,
    s: usize,
    v: usize,
    ids: Vec<u32>,
    logits: Vec<f32>,
    agree: Vec<bool>,
}

/// The fixture's goldens: its own golden.safetensors, or the one named in `golden_from`.
fn golden_path(dir: &Path) -> PathBuf {
    let own = dir.join("golden.safetensors");
    if own.exists() {
        return own;
    }
    let from = std::fs::read_to_string(dir.join("golden_from"))
        .expect("golden.safetensors or golden_from");
    dir.join(from.trim()).join("golden.safetensors")
}

fn load_golden(dir: &Path) -> Golden {
    let ck = Checkpoint::open_file(&golden_path(dir)).unwrap();
    let ids = ck.get("input_ids").unwrap();
    let (b, s) = (ids.shape[0], ids.shape[1]);
    let logits = ck.get("logits").unwrap();
    let v = logits.shape[2];
    Golden {
        b,
        s,
        v,
        ids: ids.to_i64().unwrap().iter().map(|&x| x as u32).collect(),
        logits: logits.to_f32().unwrap(),
        agree: ck
            .get("agree")
            .unwrap()
            .to_i64()
            .unwrap()
            .iter()
            .map(|&x| x != 0)
            .collect(),
    }
}

/// Our logits for every position of every row, feeding chunks of the given sizes per step.
fn ours(m: &DeepseekV4, g: &Golden, chunks: &[usize]) -> Vec<f32> {
    let mut states: Vec<_> = (0..g.b).map(|_| m.new_state()).collect();
    let mut out = vec![f32::NAN; g.b * g.s * g.v];
    let mut at = 0;
    for &n in chunks {
        let mut batch: Vec<SeqInput<'_>> = states
            .iter_mut()
            .enumerate()
            .map(|(i, st)| SeqInput {
                tokens: &g.ids[i * g.s + at..i * g.s + at + n],
                state: st,
                logits: LogitRows::All,
            })
            .collect();
        let res = m.forward(&mut batch, &mut StageClock::default()).unwrap();
        for (i, r) in res.iter().enumerate() {
            out[(i * g.s + at) * g.v..(i * g.s + at + n) * g.v].copy_from_slice(&r.data);
        }
        at += n;
    }
    out
}

/// max|Δ| / max|ref| over the positions where transformers agrees with itself.
fn rel_err(g: &Golden, got: &[f32]) -> (f32, usize) {
    let (mut diff, mut scale, mut n) = (0.0f32, 0.0f32, 0);
    for pos in 0..g.b * g.s {
        if !g.agree[pos] {
            continue;
        }
        n += 1;
        for k in 0..g.v {
            let (r, o) = (g.logits[pos * g.v + k], got[pos * g.v + k]);
            scale = scale.max(r.abs());
            diff = diff.max((r - o).abs());
        }
    }
    (diff / scale, n)
}

#[test]
fn logits_match_transformers_on_every_fixture_and_path() {
    for dir in fixtures() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let m = DeepseekV4::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = load_golden(&dir);
        let s = g.s;
        let mut inc = vec![3.min(s)];
        inc.extend(std::iter::repeat_n(1, s - inc[0]));
        let chunk = 7;
        let mut chunks = vec![chunk; s / chunk];
        if !s.is_multiple_of(chunk) {
            chunks.push(s % chunk);
        }
        for (path, sizes) in [("full", vec![s]), ("incremental", inc), ("chunked", chunks)] {
            let (err, n) = rel_err(&g, &ours(&m, &g, &sizes));
            println!("{name} {path}: rel err {err:.2e} over {n} agreeing positions");
            assert!(n > 0, "{name}: no agreeing positions");
            assert!(err <= 1e-4, "{name} {path}: max|Δ|/max|ref| = {err:.3e}");
        }
    }
}

#[test]
fn greedy_ids_match_transformers_no_cache_loop() {
    let mut checked = 0;
    for dir in fixtures() {
        let path = dir.join("greedy.safetensors");
        if !path.exists() {
            continue;
        }
        let ck = Checkpoint::open_file(&path).unwrap();
        let prompt: Vec<u32> = ck
            .get("prompt_ids")
            .unwrap()
            .to_i64()
            .unwrap()
            .iter()
            .map(|&x| x as u32)
            .collect();
        let expect: Vec<u32> = ck
            .get("greedy_ids")
            .unwrap()
            .to_i64()
            .unwrap()
            .iter()
            .map(|&x| x as u32)
            .collect();
        let m = DeepseekV4::load(&dir).unwrap();
        // Generation must not stop early at EOS: compare the full run.
        let mut got = Vec::new();
        let mut st = m.new_state();
        let mut next = prompt.clone();
        while got.len() < expect.len() {
            let mut batch = [SeqInput {
                tokens: &next,
                state: &mut st,
                logits: LogitRows::Last,
            }];
            let l = m.forward(&mut batch, &mut StageClock::default()).unwrap();
            let tok = amdahl_engine::ops::sampling::argmax(l[0].row(0));
            got.push(tok);
            next = vec![tok];
        }
        assert_eq!(got, expect, "{}", dir.display());
        checked += 1;
    }
    assert!(checked > 0, "no greedy fixture found");
}

/// Rewrites a fixture with one tensor dropped or reshaped, and a config with a bad field; each
/// load must fail with an error naming exactly what is wrong.
#[test]
fn malformed_checkpoints_give_precise_errors() {
    use amdahl_engine::EngineError;
    use amdahl_engine::checkpoint::{OwnedTensor, safetensors};
    let src = fixtures()
        .into_iter()
        .find(|d| d.ends_with("csa_hca8_yarn"))
        .unwrap();
    let ck = Checkpoint::open(&src).unwrap();
    let all: Vec<OwnedTensor> = ck
        .names()
        .iter()
        .map(|n| {
            let t = ck.get(n).unwrap();
            OwnedTensor {
                name: n.to_string(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                data: t.bytes.to_vec(),
            }
        })
        .collect();
    let write = |tensors: Vec<OwnedTensor>, config: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        safetensors::write_file(
            &dir.path().join("model.safetensors"),
            &tensors,
            &Default::default(),
        )
        .unwrap();
        dir
    };
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    let victim = "layers.2.attn.compressor.ape";

    let missing: Vec<OwnedTensor> = all.iter().filter(|t| t.name != victim).cloned().collect();
    match DeepseekV4::load(write(missing, &config).path()) {
        Err(EngineError::MissingTensor { name, .. }) => assert_eq!(name, victim),
        other => panic!("expected MissingTensor, got {other:?}"),
    }

    let mut reshaped = all.clone();
    let t = reshaped.iter_mut().find(|t| t.name == victim).unwrap();
    let (a, b) = (t.shape[0], t.shape[1]);
    t.shape = vec![b, a];
    match DeepseekV4::load(write(reshaped, &config).path()) {
        Err(EngineError::ShapeMismatch {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, victim);
            assert_eq!((expected, found), (vec![a, b], vec![b, a]));
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }

    let mut v: serde_json::Value = serde_json::from_str(&config).unwrap();
    v["hc_mult"] = serde_json::json!(-1);
    match DeepseekV4::load(write(all, &v.to_string()).path()) {
        Err(EngineError::Config { field, .. }) => assert_eq!(field, "hc_mult"),
        other => panic!("expected a config error, got {other:?}"),
    }
}
