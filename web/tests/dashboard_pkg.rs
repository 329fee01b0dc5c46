//! The committed dashboard build (dashboard/pkg/) is what the sources give: its SOURCES.sha1
//! stamp, written by tools/build_dashboard.sh, must match a hash of the dashboard's and the
//! protocol's sources now, so a change to either without a rebuild fails here (rebuild with
//! `bash tools/build_dashboard.sh` and commit dashboard/pkg). And this binary embedded it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use sha1::{Digest, Sha1};

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The same hash as `stamp()` in tools/build_dashboard.sh: sha1 over `path\0content\0` for
/// each source file, paths relative to the repository root, in byte order.
fn sources_hash(root: &Path) -> String {
    let mut files: Vec<PathBuf> = [
        "dashboard/Cargo.toml",
        "dashboard/Cargo.lock",
        "protocol/Cargo.toml",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    rs_files(&root.join("dashboard/src"), &mut files);
    rs_files(&root.join("protocol/src"), &mut files);
    let mut rel: Vec<String> = files
        .iter()
        .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
        .collect();
    rel.sort();
    let mut h = Sha1::new();
    for f in &rel {
        h.update(f.as_bytes());
        h.update([0]);
        h.update(std::fs::read(root.join(f)).unwrap());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_committed_dashboard_build_matches_its_sources() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stamp = std::fs::read_to_string(root.join("dashboard/pkg/SOURCES.sha1"))
        .expect("dashboard/pkg/SOURCES.sha1: run tools/build_dashboard.sh");
    assert_eq!(
        stamp.trim(),
        sources_hash(&root),
        "dashboard/pkg is stale: run `bash tools/build_dashboard.sh` and commit dashboard/pkg"
    );
    let wasm = std::fs::read(root.join("dashboard/pkg/amdahl_dashboard_bg.wasm")).unwrap();
    assert_eq!(&wasm[..4], b"\0asm");
    assert!(
        amdahl::server::dashboard::embedded(),
        "the server binary was built without the dashboard"
    );
}
