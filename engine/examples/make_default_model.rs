//! Writes the embedded default model (random tiny DeepSeek-V4 weights, byte-level tokenizer,
//! chat template) into a folder: `cargo run -p amdahl-engine --example make_default_model --
//! models/default`. A web test checks that the committed files equal this output, so the model
//! is reproducible from source. Replacing it with a trained model is a change of this folder.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("models/default"));
    amdahl_engine::testkit::write_default_model(&dir)?;
    println!("wrote {}", dir.display());
    Ok(())
}
