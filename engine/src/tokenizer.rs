//! The model folder's `tokenizer.json`, loaded with the `tokenizers` crate. Encoding and decoding
//! run at the edge (CLI, HTTP workers), never inside the step loop.

use std::path::Path;

use crate::error::{EngineError, Result};

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish()
    }
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json` if the folder has one.
    pub fn from_model_dir(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Ok(None);
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| EngineError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Some(Self { inner }))
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
