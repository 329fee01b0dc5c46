//! `amdahl quantize` and `amdahl info` end to end through the binary: every format is written,
//! described and generated from; an impossible MoE backend choice is refused with what works.

// Helpers outside #[test] fns are not exempt from the workspace's expect lint; a failed spawn
// or a non-UTF-8 temp path should fail the test loudly.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use amdahl_engine::model::deepseek_v4::synthetic::TinySpec;

fn amdahl(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_amdahl"))
        .args(args)
        .output()
        .expect("run amdahl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn quantize_info_and_generate_for_every_format() {
    let root = tempfile::tempdir().unwrap();
    let dense = root.path().join("dense");
    TinySpec {
        q_lora: 32,
        moe_inter: 32,
        ..TinySpec::default()
    }
    .write(&dense, 7)
    .unwrap();
    for (format, expert_fmt) in [
        ("nvfp4", "nvfp4"),
        ("mxfp4", "mxfp4"),
        ("deepseek-fp4", "mxfp4"),
        ("fp8", "fp8-block(e8m0)"),
        ("fp8-v3", "fp8-block(f32)"),
    ] {
        let out = root.path().join(format);
        let (ok, text) = amdahl(&[
            "quantize",
            "--format",
            format,
            "--in",
            s(&dense),
            "--out",
            s(&out),
            "--calib-tokens",
            "8",
        ]);
        assert!(ok, "{format}: {text}");
        let (ok, text) = amdahl(&["info", "--model", s(&out), "--gpu", "sm_90,sm_120"]);
        assert!(ok, "{format}: {text}");
        assert!(
            text.contains(&format!("routed experts stored as {expert_fmt}")),
            "{format}: {text}"
        );
        assert!(
            text.contains(&format!("linear {expert_fmt}")),
            "{format}: {text}"
        );
        assert!(text.contains("B/token"), "{text}");
        let (ok, text) = amdahl(&[
            "generate",
            "--model",
            s(&out),
            "--prompt-ids",
            "3,4,5",
            "--max-tokens",
            "4",
        ]);
        assert!(ok && text.contains("ids: "), "{format}: {text}");
    }
    let nv = root.path().join("nvfp4");
    let (ok, text) = amdahl(&["info", "--model", s(&nv), "--gpu", "sm_120"]);
    assert!(ok);
    assert!(text.contains("native-fp4  yes (auto)"), "{text}");
    let (ok, text) = amdahl(&[
        "info",
        "--model",
        s(&nv),
        "--gpu",
        "sm_90",
        "--moe-backend",
        "native-fp4",
    ]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("native-fp4")
            && text.contains("sm_90")
            && text.contains("would work: dequant"),
        "{text}"
    );
    // The f32 twin is dense again; a quantized input is refused.
    let twin = root.path().join("twin");
    let (ok, text) = amdahl(&[
        "quantize",
        "--format",
        "f32",
        "--in",
        s(&nv),
        "--out",
        s(&twin),
    ]);
    assert!(ok, "{text}");
    let (ok, text) = amdahl(&["info", "--model", s(&twin)]);
    assert!(ok && text.contains("quantization: none (dense)"), "{text}");
    let (ok, text) = amdahl(&[
        "quantize",
        "--format",
        "fp8",
        "--in",
        s(&nv),
        "--out",
        s(&root.path().join("x")),
    ]);
    assert!(!ok && text.contains("already quantized"), "{text}");
}
