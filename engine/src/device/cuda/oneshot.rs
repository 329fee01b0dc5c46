//! One-shot GPU runs for the CLI (`generate`, `logits`, `eval-arith` with `--device cuda:N`):
//! upload a loaded model, run, return host data.

use crate::error::Result;
use crate::model::deepseek_v4::{DeepseekV4, LogitRows};

use super::gpu::Gpu;
use super::model::{GpuModel, SampleRow, StepSeq};
use super::state::Limits;

/// A model on a GPU for one-shot use: sequences are given slots 0.. in order.
pub struct GpuRunner {
    m: GpuModel,
}

impl std::fmt::Debug for GpuRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.m.fmt(f)
    }
}

impl GpuRunner {
    /// Uploads `model` to GPU `ordinal`, sized for `seqs` sequences of up to `max_len` tokens fed
    /// `chunk` tokens at a time.
    pub fn new(
        model: &DeepseekV4,
        ordinal: usize,
        seqs: usize,
        max_len: usize,
        chunk: usize,
    ) -> Result<Self> {
        let gpu = Gpu::open(ordinal)?;
        let lim = Limits {
            tokens: (chunk * seqs).max(seqs).max(1),
            seqs: seqs.max(1),
            max_len: max_len.max(2),
        };
        Ok(Self {
            m: GpuModel::from_cpu(gpu, model, lim)?,
        })
    }

    /// Greedy decoding of one prompt (slot 0): prefill in chunks, then one token per step, until
    /// `max_tokens` or an EOS id (included).
    pub fn generate_greedy(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        eos: &[u32],
    ) -> Result<Vec<u32>> {
        let chunk = self.m.lim.tokens;
        let mut out = Vec::new();
        let mut pos = 0;
        let mut pending: Vec<u32> = prompt.to_vec();
        while out.len() < max_tokens {
            let n = pending.len().min(chunk);
            let last = n == pending.len();
            let seqs = [StepSeq {
                slot: 0,
                start: pos,
                tokens: &pending[..n],
                logits: if last {
                    LogitRows::Last
                } else {
                    LogitRows::None
                },
                sample: last.then(SampleRow::greedy),
            }];
            let (_, toks) = self.m.forward(&seqs)?;
            pos += n;
            if !last {
                pending.drain(..n);
                continue;
            }
            let t = toks[0].unwrap_or(0);
            out.push(t);
            if eos.contains(&t) {
                break;
            }
            pending = vec![t];
        }
        Ok(out)
    }

    /// Logits of every position of sequences of equal length, fed in the position ranges
    /// `steps` (all sequences together each step): `[seq][pos · vocab]`.
    pub fn logits(&self, ids: &[Vec<u32>], steps: &[(usize, usize)]) -> Result<Vec<Vec<f32>>> {
        let mut out = vec![Vec::new(); ids.len()];
        for &(lo, hi) in steps {
            let seqs: Vec<StepSeq<'_>> = ids
                .iter()
                .enumerate()
                .map(|(i, s)| StepSeq {
                    slot: i,
                    start: lo,
                    tokens: &s[lo..hi],
                    logits: LogitRows::All,
                    sample: None,
                })
                .collect();
            let (mats, _) = self.m.forward(&seqs)?;
            for (o, m) in out.iter_mut().zip(mats) {
                o.extend_from_slice(&m.data);
            }
        }
        Ok(out)
    }
}
