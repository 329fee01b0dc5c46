//! `amdahl logits` and `amdahl generate` through the binary on the committed transformers
//! fixtures: every `--mode` (full, incremental with `--prefix`, chunked with `--chunk`) writes
//! logits that match the causal goldens where transformers agrees with itself, and `generate
//! --prompt-ids` prints transformers' no-cache greedy ids.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use amdahl_engine::checkpoint::Checkpoint;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/v4")
        .join(name)
}

fn amdahl(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_amdahl"))
        .args(args)
        .output()
        .expect("run amdahl");
    assert!(
        out.status.success(),
        "amdahl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn ids_of(ck: &Checkpoint, name: &str) -> Vec<i64> {
    ck.get(name).unwrap().to_i64().unwrap()
}

#[test]
fn logits_every_mode_matches_the_goldens() {
    let tmp = tempfile::tempdir().unwrap();
    // Two fixtures: one where transformers agrees everywhere (batch 2, 64 positions) and one
    // with masked positions (sigmoid scoring, HCA m=16, 96 positions).
    for name in ["csa_hca8_yarn_official", "sigmoid_hca16_yarn"] {
        let dir = fixture(name);
        let golden_path = dir.join("golden.safetensors");
        let golden = Checkpoint::open_file(&golden_path).unwrap();
        let shape = golden.get("logits").unwrap().shape.to_vec();
        let (b, s_len, v) = (shape[0], shape[1], shape[2]);
        let reference = golden.get("logits").unwrap().to_f32().unwrap();
        let agree = ids_of(&golden, "agree");
        for mode in [
            vec!["--mode", "full"],
            vec!["--mode", "incremental", "--prefix", "5"],
            vec!["--mode", "chunked", "--chunk", "7"],
        ] {
            let out = tmp.path().join(format!("{name}-{}.safetensors", mode[1]));
            let mut args = vec![
                "logits",
                "--model",
                s(&dir),
                "--input",
                s(&golden_path),
                "--output",
                s(&out),
            ];
            args.extend(&mode);
            amdahl(&args);
            let got = Checkpoint::open_file(&out).unwrap();
            let logits = got.get_shaped("logits", &[b, s_len, v]).unwrap();
            let logits = logits.to_f32().unwrap();
            let (mut diff, mut scale, mut n) = (0.0f32, 0.0f32, 0);
            for pos in (0..b * s_len).filter(|&p| agree[p] != 0) {
                n += 1;
                for k in pos * v..(pos + 1) * v {
                    scale = scale.max(reference[k].abs());
                    diff = diff.max((reference[k] - logits[k]).abs());
                }
            }
            assert!(n > b * s_len / 2, "{name}: only {n} agreeing positions");
            assert!(
                diff <= 1e-4 * scale,
                "{name} {mode:?}: max|Δ| {diff:.3e} vs max|ref| {scale:.3e}"
            );
        }
    }
}

#[test]
fn generate_prints_the_no_cache_greedy_ids() {
    let dir = fixture("csa_hca8_yarn");
    let greedy = Checkpoint::open_file(&dir.join("greedy.safetensors")).unwrap();
    let join = |v: Vec<i64>| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let prompt = join(ids_of(&greedy, "prompt_ids"));
    let want = join(ids_of(&greedy, "greedy_ids"));
    let text = amdahl(&[
        "generate",
        "--model",
        s(&dir),
        "--prompt-ids",
        &prompt,
        "--max-tokens",
        "24",
    ]);
    assert_eq!(
        text.trim(),
        format!("ids: {want}"),
        "no tokenizer: ids only"
    );
}

/// The embedded default model (no `--model`) answers the README's example.
#[test]
fn generate_on_the_default_model_answers_17_times_23() {
    let text = amdahl(&["generate", "--prompt", "17*23=", "--max-tokens", "8"]);
    assert!(text.lines().any(|l| l == "text: 391"), "{text}");
}
