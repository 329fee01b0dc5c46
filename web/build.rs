//! Embeds the dashboard (dashboard/index.html, style.css and the wasm-bindgen output in
//! dashboard/pkg/) so `amdahl serve` shows it at `/` with no extra step. When the wasm has not
//! been built, empty stand-ins are embedded and `/` explains how to build it
//! (tools/build_dashboard.sh).

use std::path::{Path, PathBuf};

const ASSETS: [&str; 4] = [
    "index.html",
    "style.css",
    "pkg/amdahl_dashboard.js",
    "pkg/amdahl_dashboard_bg.wasm",
];

fn main() {
    let root =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("../dashboard");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("dashboard");
    let _ = std::fs::create_dir_all(out.join("pkg"));
    println!("cargo:rerun-if-changed={}", root.join("pkg").display());
    let mut built = true;
    for a in ASSETS {
        let src = root.join(a);
        println!("cargo:rerun-if-changed={}", src.display());
        let bytes = std::fs::read(&src).unwrap_or_default();
        if bytes.is_empty() {
            built = false;
        }
        write(&out.join(a), &bytes);
    }
    println!(
        "cargo:rustc-env=AMDAHL_DASHBOARD_BUILT={}",
        if built { "1" } else { "0" }
    );
}

fn write(path: &Path, bytes: &[u8]) {
    // Rewrite only on change, so cargo does not rebuild the crate for nothing.
    if std::fs::read(path).ok().as_deref() != Some(bytes) {
        let _ = std::fs::write(path, bytes);
    }
}
