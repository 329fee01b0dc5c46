//! Continuous-batching scheduler: a plain CPU object, no I/O, tested without a model. One rule
//! covers prefill, chunked prefill and decode (vLLM v1's "computed vs known tokens"): every
//! running sequence wants `known - computed` tokens fed; a step feeds as many as the per-step token
//! budget allows, decoding sequences first (their latency is what users see), then sequences in
//! prefill in admission order, then newly admitted ones from the FIFO queue while cache slots are
//! free. A sequence asks for logits only when its chunk reaches its last known token.
//!
//! Invariants: a sequence is either waiting (holds no slot) or running (holds exactly one slot);
//! `running.len() <= max_seqs`; `waiting.len() <= max_queue`; `computed <= known`.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};

/// Identifies a sequence inside the engine.
pub type SeqId = u64;

/// Scheduler limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Cache slots: sequences that may be running at once.
    pub max_seqs: usize,
    /// Tokens fed to the model in one step (prefill chunks + decodes).
    pub max_step_tokens: usize,
    /// Admitted sequences that may wait for a slot.
    pub max_queue: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_seqs: 64,
            max_step_tokens: 512,
            max_queue: 256,
        }
    }
}

/// Why a sequence was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    QueueFull,
    Duplicate,
    EmptyPrompt,
}

/// One sequence's share of a step: feed tokens `start..start+len` of its known tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanItem {
    pub seq: SeqId,
    pub start: usize,
    pub len: usize,
    /// The chunk ends at the last known token: sample the next one from its logits.
    pub sample: bool,
    /// The sequence had finished its prompt before this step (a decode token).
    pub decode: bool,
}

/// What one step runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    pub items: Vec<PlanItem>,
    /// Sequences that moved from the queue to a slot in this plan.
    pub admitted: Vec<SeqId>,
}

impl StepPlan {
    pub fn tokens(&self) -> usize {
        self.items.iter().map(|i| i.len).sum()
    }
}

#[derive(Debug, Clone, Copy)]
struct Progress {
    prompt_len: usize,
    known: usize,
    computed: usize,
}

/// The scheduler's state.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    seqs: HashMap<SeqId, Progress>,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig) -> Self {
        Self {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            seqs: HashMap::new(),
        }
    }

    pub fn config(&self) -> SchedulerConfig {
        self.cfg
    }

    /// Queues a new sequence; returns its 0-based queue position.
    pub fn enqueue(&mut self, seq: SeqId, prompt_len: usize) -> Result<usize, Rejection> {
        if prompt_len == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        if self.seqs.contains_key(&seq) {
            return Err(Rejection::Duplicate);
        }
        if self.waiting.len() >= self.cfg.max_queue {
            return Err(Rejection::QueueFull);
        }
        self.seqs.insert(
            seq,
            Progress {
                prompt_len,
                known: prompt_len,
                computed: 0,
            },
        );
        self.waiting.push_back(seq);
        Ok(self.waiting.len() - 1)
    }

    /// Plans the next step. Moves queued sequences into free slots as budget allows.
    pub fn plan(&mut self) -> StepPlan {
        let mut budget = self.cfg.max_step_tokens;
        let mut plan = StepPlan::default();
        for decode_pass in [true, false] {
            for &seq in &self.running {
                let Some(p) = self.seqs.get(&seq) else {
                    continue;
                };
                let decoding = p.computed >= p.prompt_len;
                if decoding != decode_pass || budget == 0 {
                    continue;
                }
                if let Some(item) = Self::chunk(seq, p, budget) {
                    budget -= item.len;
                    plan.items.push(item);
                }
            }
        }
        while budget > 0 && self.running.len() < self.cfg.max_seqs {
            let Some(seq) = self.waiting.pop_front() else {
                break;
            };
            self.running.push(seq);
            plan.admitted.push(seq);
            if let Some(p) = self.seqs.get(&seq)
                && let Some(item) = Self::chunk(seq, p, budget)
            {
                budget -= item.len;
                plan.items.push(item);
            }
        }
        plan
    }

    fn chunk(seq: SeqId, p: &Progress, budget: usize) -> Option<PlanItem> {
        let want = p.known - p.computed;
        let len = want.min(budget);
        (len > 0).then_some(PlanItem {
            seq,
            start: p.computed,
            len,
            sample: p.computed + len == p.known,
            decode: p.computed >= p.prompt_len,
        })
    }

    /// Records that a planned chunk ran.
    pub fn on_computed(&mut self, seq: SeqId, len: usize) {
        if let Some(p) = self.seqs.get_mut(&seq) {
            p.computed = (p.computed + len).min(p.known);
        }
    }

    /// Records a sampled token appended to the sequence (it will be fed next step).
    pub fn on_token(&mut self, seq: SeqId) {
        if let Some(p) = self.seqs.get_mut(&seq) {
            p.known += 1;
        }
    }

    /// Forgets a sequence (finished or cancelled), freeing its slot or queue place. Returns
    /// whether it held a slot.
    pub fn remove(&mut self, seq: SeqId) -> bool {
        self.seqs.remove(&seq);
        if let Some(i) = self.running.iter().position(|&s| s == seq) {
            self.running.remove(i);
            return true;
        }
        if let Some(i) = self.waiting.iter().position(|&s| s == seq) {
            self.waiting.remove(i);
        }
        false
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether any sequence is known (waiting or running).
    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Fraction of cache slots in use, 0..=1.
    pub fn slot_usage(&self) -> f64 {
        self.running.len() as f64 / self.cfg.max_seqs.max(1) as f64
    }
}
