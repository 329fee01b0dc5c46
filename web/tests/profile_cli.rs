//! `amdahl profile --device cpu`: decode steps of the embedded model on the CPU, reported per
//! stage with bytes, bandwidth against the measured peaks and the Amdahl projections.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn cpu_profile_prints_the_stage_table_and_projections() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("p.json");
    let out = Command::new(env!("CARGO_BIN_EXE_amdahl"))
        .args([
            "profile", "--device", "cpu", "--batch", "1,2", "--ctx", "40", "--steps", "3", "--json",
        ])
        .arg(&json)
        .output()
        .expect("run amdahl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("copy bandwidth") && text.contains("batch 1:") && text.contains("batch 2:"),
        "{text}"
    );
    for stage in ["mhc", "attn_proj", "indexer", "attention", "moe", "head"] {
        assert!(
            text.lines().any(|l| l.starts_with(stage)),
            "no {stage} row:\n{text}"
        );
    }
    assert!(text.contains("making it 2× faster gives"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let b = &v["batches"][1];
    assert_eq!(b["batch"], 2);
    let moe = &b["stages"]["moe"];
    assert!(
        moe["seconds"].as_f64().unwrap() > 0.0 && moe["bytes"].as_u64().unwrap() > 0,
        "{b}"
    );
    // Stage times sum to about the step time (the rest is `other`).
    let sum: f64 = [
        "mhc",
        "attn_proj",
        "indexer",
        "attention",
        "moe",
        "head",
        "comm",
        "other",
    ]
    .iter()
    .map(|s| b["stages"][s]["seconds"].as_f64().unwrap())
    .sum();
    let step = b["step_seconds"].as_f64().unwrap();
    assert!(
        (sum - step).abs() <= 0.05 * step,
        "stages {sum} vs step {step}"
    );
}
