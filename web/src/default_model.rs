//! The default model served when `--model` is absent: the tiny DeepSeek-V4 trained on arithmetic
//! (`models/arith/`, made by tools/train_tiny/), embedded in the binary. Run from a checkout, the
//! folder is used in place; elsewhere the files are unpacked once into a cache folder named by
//! their content hash. Swapping in another default model is a change of that folder.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The name clients use for the default model.
pub const NAME: &str = "amdahl-default";

const FILES: [(&str, &[u8]); 4] = [
    (
        "config.json",
        include_bytes!("../../models/arith/config.json"),
    ),
    (
        "model.safetensors",
        include_bytes!("../../models/arith/model.safetensors"),
    ),
    (
        "tokenizer.json",
        include_bytes!("../../models/arith/tokenizer.json"),
    ),
    (
        "tokenizer_config.json",
        include_bytes!("../../models/arith/tokenizer_config.json"),
    ),
];

/// Where the folder lives in a checkout.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/arith")
}

/// FNV-1a over every embedded file (name and bytes).
fn content_hash() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, bytes) in FILES {
        for b in name.as_bytes().iter().chain(bytes.iter()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("AMDAHL_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("amdahl");
    }
    if let Some(d) = std::env::var_os("HOME") {
        return PathBuf::from(d).join(".cache/amdahl");
    }
    std::env::temp_dir().join("amdahl")
}

/// The embedded files, unpacked under `root` (idempotent; written to a temporary folder and
/// renamed, so a half-written copy is never used).
pub fn unpack_into(root: &Path) -> anyhow::Result<PathBuf> {
    let dir = root.join(format!("default-model-{:016x}", content_hash()));
    if FILES
        .iter()
        .all(|(n, b)| std::fs::metadata(dir.join(n)).is_ok_and(|m| m.len() == b.len() as u64))
    {
        return Ok(dir);
    }
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let tmp = root.join(format!(
        ".unpack-{}-{:x}",
        std::process::id(),
        content_hash()
    ));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    for (name, bytes) in FILES {
        std::fs::write(tmp.join(name), bytes)
            .with_context(|| format!("writing {}", tmp.join(name).display()))?;
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another process won the race; its copy is complete.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(dir)
}

/// The default model's folder: the checkout's copy if present, else the unpacked cache.
pub fn dir() -> anyhow::Result<PathBuf> {
    let repo = repo_dir();
    if repo.join("config.json").exists() && repo.join("model.safetensors").exists() {
        return Ok(repo);
    }
    unpack_into(&cache_root())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_model_matches_the_checkout_and_unpacks() {
        for (name, bytes) in FILES {
            let on_disk = std::fs::read(repo_dir().join(name)).unwrap();
            assert!(
                on_disk == bytes,
                "{name}: embedded copy differs from models/arith"
            );
        }
        let root = tempfile::tempdir().unwrap();
        let d = unpack_into(root.path()).unwrap();
        assert_eq!(unpack_into(root.path()).unwrap(), d);
        for (name, bytes) in FILES {
            assert_eq!(std::fs::read(d.join(name)).unwrap(), bytes);
        }
    }
}
