//! `--moe-backend`: a backend the device (or this build) cannot run is refused at startup with
//! the reason and what would work; nothing is rerouted silently. On the CPU only `cpu` runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `amdahl serve --moe-backend B`, expecting it to exit by itself within 30 s; returns
/// (success, stderr). A server that starts instead is killed and reported as accepted.
fn serve(backend: &str) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_amdahl"))
        .args(["serve", "--port", "0", "--moe-backend", backend])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run amdahl");
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.success(), err);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            let _ = child.wait();
            return (true, "the server started".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn unrunnable_moe_backends_are_refused_with_what_would_work() {
    for b in ["dequant", "native-fp4", "fp8", "bf16"] {
        let (ok, err) = serve(b);
        assert!(!ok, "--moe-backend {b} on the CPU was accepted: {err}");
        assert!(err.contains(&format!("MoE backend `{b}`")), "{b}: {err}");
        assert!(err.contains("backends that would work: cpu"), "{b}: {err}");
    }
    let (ok, err) = serve("gpu-magic");
    assert!(!ok && err.contains("is not one of auto"), "{err}");
}
