//! `amdahl logits`: run the forward pass over token ids read from a safetensors file and write
//! the logits of every position, through one of three paths (one pass, prefill + token-by-token
//! decode, or fixed-size chunks) so parity can be checked on each.

use std::collections::BTreeMap;
use std::path::PathBuf;

use amdahl_engine::checkpoint::{Dtype, OwnedTensor, safetensors};
use amdahl_engine::model::deepseek_v4::{DeepseekV4, LogitRows, SeqInput};
use amdahl_engine::profile::StageClock;
use anyhow::{Context, bail};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Mode {
    /// Every sequence in one pass.
    Full,
    /// Positions < --prefix in one pass, then one token per step.
    Incremental,
    /// Chunks of --chunk tokens.
    Chunked,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input safetensors with `input_ids` (I64 or I32, shape [B,S]).
    #[arg(long)]
    input: PathBuf,
    /// Output safetensors; receives `logits` (F32 [B,S,V]).
    #[arg(long)]
    output: PathBuf,
    #[arg(long, value_enum, default_value = "full")]
    mode: Mode,
    /// Prefill length for --mode incremental.
    #[arg(long, default_value_t = 1)]
    prefix: usize,
    /// Chunk length for --mode chunked.
    #[arg(long, default_value_t = 16)]
    chunk: usize,
    /// Device: cpu or cuda:N (a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn read_ids(path: &PathBuf) -> anyhow::Result<(usize, usize, Vec<u32>)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let (entries, _) = safetensors::parse_header(path, &bytes)?;
    let e = entries
        .get("input_ids")
        .with_context(|| format!("{} has no `input_ids` tensor", path.display()))?;
    let (b, s) = match e.shape[..] {
        [b, s] => (b, s),
        [s] => (1, s),
        _ => bail!("`input_ids` must be [B,S], found {:?}", e.shape),
    };
    let raw = &bytes[e.start..e.end];
    let ids: Vec<i64> = match e.dtype {
        Dtype::I64 => raw
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        Dtype::I32 => raw
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64)
            .collect(),
        other => bail!("`input_ids` must be I64 or I32, found {other}"),
    };
    let ids = ids
        .into_iter()
        .map(|v| u32::try_from(v).with_context(|| format!("token id {v} is negative or too large")))
        .collect::<anyhow::Result<Vec<u32>>>()?;
    Ok((b, s, ids))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = super::model_dir(a.model)?;
    let (b, s, ids) = read_ids(&a.input)?;
    if s == 0 {
        bail!("`input_ids` has no positions");
    }
    let model = DeepseekV4::load(&dir).with_context(|| format!("loading {}", dir.display()))?;
    let v = model.cfg.vocab_size;
    let steps: Vec<(usize, usize)> = match a.mode {
        Mode::Full => vec![(0, s)],
        Mode::Incremental => {
            let p = a.prefix.clamp(1, s);
            std::iter::once((0, p))
                .chain((p..s).map(|t| (t, t + 1)))
                .collect()
        }
        Mode::Chunked => {
            if a.chunk == 0 {
                bail!("--chunk must be > 0");
            }
            (0..s)
                .step_by(a.chunk)
                .map(|t| (t, (t + a.chunk).min(s)))
                .collect()
        }
    };
    let mut logits = vec![0f32; b * s * v];
    if let Some(ordinal) = super::cuda_ordinal(&a.device)? {
        let seqs: Vec<Vec<u32>> = ids.chunks(s).map(<[u32]>::to_vec).collect();
        let chunk = steps.iter().map(|(lo, hi)| hi - lo).max().unwrap_or(1);
        let gpu = amdahl_engine::device::GpuRunner::new(&model, ordinal, b, s, chunk)?;
        for (i, l) in gpu.logits(&seqs, &steps)?.into_iter().enumerate() {
            logits[i * s * v..(i + 1) * s * v].copy_from_slice(&l);
        }
        let t = OwnedTensor::f32("logits", &[b, s, v], &logits);
        safetensors::write_file(&a.output, &[t], &BTreeMap::new())?;
        return Ok(());
    }
    let mut states: Vec<_> = (0..b).map(|_| model.new_state()).collect();
    let mut clock = StageClock::default();
    for (lo, hi) in steps {
        let mut batch: Vec<SeqInput<'_>> = states
            .iter_mut()
            .enumerate()
            .map(|(i, st)| SeqInput {
                tokens: &ids[i * s + lo..i * s + hi],
                state: st,
                logits: LogitRows::All,
            })
            .collect();
        let out = model.forward(&mut batch, &mut clock)?;
        for (i, m) in out.iter().enumerate() {
            let dst = &mut logits[(i * s + lo) * v..(i * s + hi) * v];
            dst.copy_from_slice(&m.data);
        }
    }
    let t = OwnedTensor::f32("logits", &[b, s, v], &logits);
    safetensors::write_file(&a.output, &[t], &BTreeMap::new())?;
    Ok(())
}
