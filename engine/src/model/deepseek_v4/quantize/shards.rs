//! Sharded safetensors output: tensors accumulate until a shard would exceed its byte limit,
//! then the shard is written. One shard is `model.safetensors`; several are
//! `model-0000i-of-0000n.safetensors` with a `model.safetensors.index.json` weight map.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::checkpoint::OwnedTensor;
use crate::checkpoint::safetensors::write_file;
use crate::error::{EngineError, Result};

pub struct Shards {
    dir: PathBuf,
    limit: usize,
    current: Vec<OwnedTensor>,
    size: usize,
    /// Written shards: temporary path and the tensor names it holds.
    written: Vec<(PathBuf, Vec<String>)>,
    total: usize,
}

impl Shards {
    pub fn new(dir: &Path, limit: usize) -> Self {
        Self {
            dir: dir.to_path_buf(),
            limit: limit.max(1),
            current: Vec::new(),
            size: 0,
            written: Vec::new(),
            total: 0,
        }
    }

    pub fn push(&mut self, t: OwnedTensor) -> Result<()> {
        if self.size + t.data.len() > self.limit && !self.current.is_empty() {
            self.flush()?;
        }
        self.size += t.data.len();
        self.total += t.data.len();
        self.current.push(t);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let path = self.dir.join(format!(
            "partial-{:05}.safetensors.tmp",
            self.written.len() + 1
        ));
        write_file(&path, &self.current, &BTreeMap::new())?;
        let names = self.current.drain(..).map(|t| t.name).collect();
        self.written.push((path, names));
        self.size = 0;
        Ok(())
    }

    /// Writes the last shard, names the files and the index; returns the files and the bytes
    /// of tensor data written.
    pub fn finish(mut self) -> Result<(Vec<PathBuf>, usize)> {
        if !self.current.is_empty() || self.written.is_empty() {
            self.flush()?;
        }
        let n = self.written.len();
        let mut files = Vec::with_capacity(n);
        let mut map = serde_json::Map::new();
        for (i, (tmp, names)) in self.written.iter().enumerate() {
            let file = if n == 1 {
                "model.safetensors".to_string()
            } else {
                format!("model-{:05}-of-{n:05}.safetensors", i + 1)
            };
            let path = self.dir.join(&file);
            std::fs::rename(tmp, &path).map_err(|e| EngineError::io(tmp, e))?;
            for name in names {
                map.insert(name.clone(), json!(file));
            }
            files.push(path);
        }
        if n > 1 {
            let index = json!({"metadata": {"total_size": self.total}, "weight_map": map});
            let path = self.dir.join("model.safetensors.index.json");
            std::fs::write(&path, index.to_string()).map_err(|e| EngineError::io(&path, e))?;
        }
        Ok((files, self.total))
    }
}
