//! `amdahl generate`: greedy decoding from token ids or text; prints the ids and, when the model
//! folder has a tokenizer, the text.

use std::path::PathBuf;

use amdahl_engine::model::deepseek_v4::DeepseekV4;
use amdahl_engine::tokenizer::Tokenizer;
use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors [+ tokenizer.json]).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt as comma-separated token ids.
    #[arg(long, value_delimiter = ',', conflicts_with = "prompt")]
    prompt_ids: Option<Vec<u32>>,
    /// Prompt text (needs tokenizer.json in the model folder).
    #[arg(long)]
    prompt: Option<String>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 16)]
    max_tokens: usize,
    /// Device: cpu or cuda:N (a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = super::model_dir(a.model)?;
    let tok = Tokenizer::from_model_dir(&dir)?;
    let prompt: Vec<u32> = match (a.prompt_ids, a.prompt) {
        (Some(ids), _) => ids,
        (None, Some(text)) => {
            let Some(tok) = &tok else {
                bail!(
                    "--prompt needs tokenizer.json in {}; use --prompt-ids",
                    dir.display()
                );
            };
            tok.encode(&text, false)?
        }
        (None, None) => bail!("give --prompt-ids 1,2,3 or --prompt TEXT"),
    };
    let model = DeepseekV4::load(&dir).with_context(|| format!("loading {}", dir.display()))?;
    let ids = match super::cuda_ordinal(&a.device)? {
        None => model.generate_greedy(&prompt, a.max_tokens)?,
        Some(ordinal) => {
            let max_len = (prompt.len() + a.max_tokens + 1).min(model.cfg.max_position_embeddings);
            let gpu = amdahl_engine::device::GpuRunner::new(&model, ordinal, 1, max_len, 256)?;
            gpu.generate_greedy(&prompt, a.max_tokens, &model.cfg.eos_token_ids)?
        }
    };
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("ids: {}", list.join(","));
    if let Some(tok) = &tok {
        println!("text: {}", tok.decode(&ids, true)?);
    }
    Ok(())
}
