//! DeepSeek-V4 attention pieces (model-spec §3.3): the KV compressors (overlapping for CSA,
//! plain for HCA), the lightning indexer that picks compressed entries for CSA layers, and the
//! sparse attention core over a query's candidate rows (window ∪ compressed) with a per-head
//! sink. The layer that strings them together is `model::deepseek_v4::attention`.

pub mod compressor;
pub mod indexer;
pub mod sparse;

pub use compressor::Compressor;
pub use indexer::Indexer;
