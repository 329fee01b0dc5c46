//! Per-sequence decode state of DeepSeek-V4 (model-spec §3.3b): for every layer a ring of the
//! last `sliding_window` raw K=V rows, the compressed entries emitted so far, the compressor's
//! partial window (and, for overlapping CSA compressors, the previous window's first half), and
//! for CSA layers the indexer's own compressed keys and compressor state. A sequence's state is
//! only ever advanced by whole tokens in order, so prefill, chunked prefill and decode reach the
//! same state by construction.

/// Streaming state of one compressor (main or indexer).
#[derive(Debug, Clone, Default)]
pub struct CompressorState {
    /// Raw projections of the tokens of the current, incomplete window: `[count, width]` each,
    /// width = 2·dim for overlapping compressors.
    pub pending_kv: Vec<f32>,
    pub pending_gate: Vec<f32>,
    /// First-half (Ca) kv and biased gate of the last completed window, `[m, dim]` each
    /// (overlapping compressors only; empty before the first window completes).
    pub prev_a_kv: Vec<f32>,
    pub prev_a_gate: Vec<f32>,
    /// Emitted entries, normalized and roped, `[n, dim]`.
    pub entries: Vec<f32>,
}

impl CompressorState {
    pub fn n_entries(&self, dim: usize) -> usize {
        self.entries.len() / dim
    }

    pub fn bytes(&self) -> usize {
        4 * (self.pending_kv.len()
            + self.pending_gate.len()
            + self.prev_a_kv.len()
            + self.prev_a_gate.len()
            + self.entries.len())
    }
}

/// State of one layer for one sequence.
#[derive(Debug, Clone, Default)]
pub struct LayerCache {
    /// `[window, head_dim]`; slot `p mod window` holds position p.
    pub ring: Vec<f32>,
    pub compressor: Option<CompressorState>,
    pub indexer: Option<CompressorState>,
}

impl LayerCache {
    pub fn bytes(&self) -> usize {
        4 * self.ring.len()
            + self.compressor.as_ref().map_or(0, CompressorState::bytes)
            + self.indexer.as_ref().map_or(0, CompressorState::bytes)
    }
}

/// Decode state of one sequence: how many tokens it has consumed and each layer's cache.
#[derive(Debug, Clone, Default)]
pub struct SeqState {
    pub pos: usize,
    pub layers: Vec<LayerCache>,
}

impl SeqState {
    /// Host bytes held by this sequence's cache.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(LayerCache::bytes).sum()
    }
}
