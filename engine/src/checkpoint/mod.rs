//! Checkpoints: one `*.safetensors` file or a sharded set with `model.safetensors.index.json`,
//! memory-mapped, with every tensor reachable by its official DeepSeek name whatever spelling the
//! file uses (see [`names`]). Fused expert tensors (transformers' in-memory layout, and gpt-oss
//! MXFP4 `_blocks`/`_scales`) are exposed as per-expert views without copying: `[E, rows, …]`
//! becomes `experts.X.w{1,3,2}.{weight,scale}` of shape `[rows (/2 for gate_up), ∏ rest]`. Quantized element types are returned as raw bytes; the
//! quantization layer interprets them.

pub mod names;
pub mod safetensors;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;

pub use self::safetensors::{Dtype, OwnedTensor};
use crate::error::{EngineError, Result};
use names::{FusedExperts, canonical_name, fused_experts, fused_mxfp4};

/// Where one tensor's bytes live.
#[derive(Debug, Clone)]
struct Entry {
    file: usize,
    stored_name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// An opened checkpoint.
pub struct Checkpoint {
    dir: PathBuf,
    files: Vec<(PathBuf, Mmap)>,
    entries: HashMap<String, Entry>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("files", &self.files.len())
            .field("tensors", &self.entries.len())
            .finish()
    }
}

/// A borrowed view of one tensor.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    pub name: &'a str,
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

fn map_file(path: &Path) -> Result<Mmap> {
    let file = File::open(path).map_err(|e| EngineError::io(path, e))?;
    // SAFETY: the mapping is read-only and lives as long as the Checkpoint. Like every engine
    // that maps weights, we rely on the file not being truncated while the server runs.
    #[allow(unsafe_code)]
    let map = unsafe { Mmap::map(&file) }.map_err(|e| EngineError::io(path, e))?;
    Ok(map)
}

impl Checkpoint {
    /// Opens the checkpoint in `dir`: the shards named by `model.safetensors.index.json`, else
    /// `model.safetensors`, else every `*.safetensors` file in the folder.
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let mut files: Vec<PathBuf> = if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(|e| EngineError::io(&index, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| EngineError::Checkpoint {
                    path: index.clone(),
                    message: format!("not valid JSON: {e}"),
                })?;
            let map = v["weight_map"]
                .as_object()
                .ok_or_else(|| EngineError::Checkpoint {
                    path: index.clone(),
                    message: "missing `weight_map` object".into(),
                })?;
            let mut shards: Vec<PathBuf> = map
                .values()
                .filter_map(|f| f.as_str())
                .map(|f| dir.join(f))
                .collect();
            shards.sort();
            shards.dedup();
            shards
        } else if dir.join("model.safetensors").is_file() {
            vec![dir.join("model.safetensors")]
        } else {
            let rd = std::fs::read_dir(dir).map_err(|e| EngineError::io(dir, e))?;
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect()
        };
        files.sort();
        if files.is_empty() {
            return Err(EngineError::Checkpoint {
                path: dir.to_path_buf(),
                message: "no *.safetensors files found".into(),
            });
        }
        Self::from_files(dir, files)
    }

    /// Opens one safetensors file (outputs, goldens) with the same name normalization.
    pub fn open_file(path: &Path) -> Result<Self> {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Self::from_files(&dir, vec![path.to_path_buf()])
    }

    fn from_files(dir: &Path, files: Vec<PathBuf>) -> Result<Self> {
        let mut ck = Checkpoint {
            dir: dir.to_path_buf(),
            files: Vec::with_capacity(files.len()),
            entries: HashMap::new(),
        };
        for path in files {
            if !path.exists() {
                return Err(EngineError::Checkpoint {
                    path: path.clone(),
                    message: "shard named in the index does not exist".into(),
                });
            }
            let map = map_file(&path)?;
            let (header, _meta) = self::safetensors::parse_header(&path, &map)?;
            let file = ck.files.len();
            for (stored, h) in header {
                ck.insert(file, &path, stored, h)?;
            }
            ck.files.push((path, map));
        }
        Ok(ck)
    }

    fn insert(
        &mut self,
        file: usize,
        path: &Path,
        stored: String,
        h: self::safetensors::HeaderEntry,
    ) -> Result<()> {
        let canonical = canonical_name(&stored);
        let mut add = |name: String, entry: Entry| -> Result<()> {
            if let Some(prev) = self.entries.get(&name) {
                return Err(EngineError::Checkpoint {
                    path: path.to_path_buf(),
                    message: format!(
                        "tensors `{}` and `{}` both map to `{name}`",
                        prev.stored_name, entry.stored_name
                    ),
                });
            }
            self.entries.insert(name, entry);
            Ok(())
        };
        let fused = fused_mxfp4(&canonical)
            .or_else(|| fused_experts(&canonical).map(|(prefix, kind)| (prefix, kind, "weight")));
        if let Some((prefix, kind, leaf)) = fused {
            if h.shape.len() < 3 {
                return Err(EngineError::BadTensor {
                    name: stored,
                    message: format!("fused experts need at least 3 dims, found {:?}", h.shape),
                });
            }
            let (e, rows) = (h.shape[0], h.shape[1]);
            let cols: usize = h.shape[2..].iter().product();
            let expert_bytes = rows * cols * h.dtype.size();
            for x in 0..e {
                let base = h.start + x * expert_bytes;
                let part = |half: usize, parts: usize| Entry {
                    file,
                    stored_name: stored.clone(),
                    dtype: h.dtype,
                    shape: vec![rows / parts, cols],
                    start: base + half * expert_bytes / parts,
                    end: base + (half + 1) * expert_bytes / parts,
                };
                match kind {
                    FusedExperts::GateUp => {
                        if rows % 2 != 0 {
                            return Err(EngineError::BadTensor {
                                name: stored,
                                message: format!("gate_up rows {rows} are not even"),
                            });
                        }
                        add(format!("{prefix}.{x}.w1.{leaf}"), part(0, 2))?;
                        add(format!("{prefix}.{x}.w3.{leaf}"), part(1, 2))?;
                    }
                    FusedExperts::Down => add(format!("{prefix}.{x}.w2.{leaf}"), part(0, 1))?,
                }
            }
            return Ok(());
        }
        add(
            canonical,
            Entry {
                file,
                stored_name: stored,
                dtype: h.dtype,
                shape: h.shape,
                start: h.start,
                end: h.end,
            },
        )
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Official names of every tensor, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The tensor with this official name, or an error naming it.
    pub fn get(&self, name: &str) -> Result<TensorRef<'_>> {
        let (key, e) = self.entries.get_key_value(name).ok_or_else(|| {
            let hint = self
                .similar(name)
                .map(|s| format!(" (found `{s}`)"))
                .unwrap_or_default();
            EngineError::MissingTensor {
                name: name.to_string(),
                hint,
            }
        })?;
        Ok(TensorRef {
            name: key,
            dtype: e.dtype,
            shape: &e.shape,
            bytes: &self.files[e.file].1[e.start..e.end],
        })
    }

    /// A tensor that must have exactly this shape.
    pub fn get_shaped(&self, name: &str, shape: &[usize]) -> Result<TensorRef<'_>> {
        let t = self.get(name)?;
        t.expect_shape(shape)?;
        Ok(t)
    }

    /// Total bytes of stored tensor data, per dtype.
    pub fn bytes_by_dtype(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for e in self.entries.values() {
            *m.entry(e.dtype.name()).or_default() += e.end - e.start;
        }
        m
    }

    fn similar(&self, name: &str) -> Option<&str> {
        // The closest name sharing the layer prefix helps spot a spelling we do not map.
        let stem = name.rsplit_once('.').map(|(s, _)| s).unwrap_or(name);
        self.entries
            .keys()
            .filter(|k| k.starts_with(stem))
            .min_by_key(|k| k.len())
            .map(String::as_str)
    }
}

impl TensorRef<'_> {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn expect_shape(&self, shape: &[usize]) -> Result<()> {
        if self.shape != shape {
            return Err(EngineError::ShapeMismatch {
                name: self.name.to_string(),
                expected: shape.to_vec(),
                found: self.shape.to_vec(),
            });
        }
        Ok(())
    }

    fn unsupported(&self, message: &str) -> EngineError {
        EngineError::UnsupportedDtype {
            name: self.name.to_string(),
            dtype: self.dtype.name().to_string(),
            message: message.to_string(),
        }
    }

    /// Converts a floating-point tensor (F32, BF16, F16, F64) to f32.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let b = self.bytes;
        Ok(match self.dtype {
            Dtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::BF16 => b
                .chunks_exact(2)
                .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
            Dtype::F16 => b
                .chunks_exact(2)
                .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
            Dtype::F64 => b
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    f64::from_le_bytes(a) as f32
                })
                .collect(),
            _ => return Err(self.unsupported("expected a floating-point tensor")),
        })
    }

    /// Converts an integer tensor (I64, I32, I16, I8, U8) to i64.
    pub fn to_i64(&self) -> Result<Vec<i64>> {
        let b = self.bytes;
        Ok(match self.dtype {
            Dtype::I64 => b
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    i64::from_le_bytes(a)
                })
                .collect(),
            Dtype::I32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
            Dtype::I16 => b
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
            Dtype::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
            Dtype::U8 => b.iter().map(|&x| x as i64).collect(),
            _ => return Err(self.unsupported("expected an integer tensor")),
        })
    }
}

#[cfg(test)]
mod tests;
