//! The safetensors container: an 8-byte little-endian header length, a JSON header mapping names
//! to `{dtype, shape, data_offsets}`, then the data. Reading parses only the header (the data is
//! memory-mapped by the caller); writing is used by CLI outputs and tests.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::Value;

use crate::error::{EngineError, Result};

/// Element types found in DeepSeek-family checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    F8E4M3,
    F8E5M2,
    F8E8M0,
}

impl Dtype {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "F64" => Dtype::F64,
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            "I64" => Dtype::I64,
            "I32" => Dtype::I32,
            "I16" => Dtype::I16,
            "I8" => Dtype::I8,
            "U8" => Dtype::U8,
            "BOOL" => Dtype::Bool,
            "F8_E4M3" => Dtype::F8E4M3,
            "F8_E5M2" => Dtype::F8E5M2,
            "F8_E8M0" => Dtype::F8E8M0,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::F64 => "F64",
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I64 => "I64",
            Dtype::I32 => "I32",
            Dtype::I16 => "I16",
            Dtype::I8 => "I8",
            Dtype::U8 => "U8",
            Dtype::Bool => "BOOL",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E8M0 => "F8_E8M0",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 2,
            Dtype::I8 | Dtype::U8 | Dtype::Bool | Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::F8E8M0 => {
                1
            }
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One header entry: byte range relative to the start of the data section.
#[derive(Debug, Clone)]
pub struct HeaderEntry {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub start: usize,
    pub end: usize,
}

/// Parses the header of a safetensors buffer. Returns the entries (with ranges made absolute
/// in `bytes`) and the optional `__metadata__` map.
pub fn parse_header(
    path: &Path,
    bytes: &[u8],
) -> Result<(BTreeMap<String, HeaderEntry>, BTreeMap<String, String>)> {
    let bad = |message: String| EngineError::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    if bytes.len() < 8 {
        return Err(bad(format!(
            "file is {} bytes, too short for a header",
            bytes.len()
        )));
    }
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(&bytes[..8]);
    let header_len = u64::from_le_bytes(len8) as usize;
    let data_start = 8usize
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad(format!("header length {header_len} exceeds the file")))?;
    let header: Value = serde_json::from_slice(&bytes[8..data_start])
        .map_err(|e| bad(format!("header is not valid JSON: {e}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| bad("header is not a JSON object".into()))?;
    let data_len = bytes.len() - data_start;
    let mut entries = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            if let Some(m) = v.as_object() {
                for (k, v) in m {
                    metadata.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
                }
            }
            continue;
        }
        let dtype_s = v["dtype"].as_str().unwrap_or_default();
        let dtype = Dtype::parse(dtype_s)
            .ok_or_else(|| bad(format!("tensor `{name}`: unknown dtype `{dtype_s}`")))?;
        let shape = v["shape"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .map(|d| d.as_u64().map(|d| d as usize))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| bad(format!("tensor `{name}`: bad shape")))?;
        let offs = v["data_offsets"]
            .as_array()
            .filter(|a| a.len() == 2)
            .and_then(|a| Some((a[0].as_u64()? as usize, a[1].as_u64()? as usize)))
            .ok_or_else(|| bad(format!("tensor `{name}`: bad data_offsets")))?;
        let numel: usize = shape.iter().product();
        if offs.1 < offs.0 || offs.1 > data_len || offs.1 - offs.0 != numel * dtype.size() {
            return Err(bad(format!(
                "tensor `{name}`: data_offsets {offs:?} do not fit shape {shape:?} of {dtype} \
                 in a data section of {data_len} bytes"
            )));
        }
        entries.insert(
            name.clone(),
            HeaderEntry {
                dtype,
                shape,
                start: data_start + offs.0,
                end: data_start + offs.1,
            },
        );
    }
    Ok((entries, metadata))
}

/// A tensor to write: name, dtype, shape and raw little-endian bytes.
#[derive(Debug, Clone)]
pub struct OwnedTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl OwnedTensor {
    pub fn f32(name: &str, shape: &[usize], values: &[f32]) -> Self {
        Self {
            name: name.to_string(),
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    pub fn i64(name: &str, shape: &[usize], values: &[i64]) -> Self {
        Self {
            name: name.to_string(),
            dtype: Dtype::I64,
            shape: shape.to_vec(),
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// Serializes tensors (sorted by name, as the reference writer does) into safetensors bytes.
pub fn serialize(tensors: &[OwnedTensor], metadata: &BTreeMap<String, String>) -> Vec<u8> {
    let mut sorted: Vec<&OwnedTensor> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert(
            "__metadata__".into(),
            Value::Object(
                metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                    .collect(),
            ),
        );
    }
    let mut offset = 0usize;
    for t in &sorted {
        header.insert(
            t.name.clone(),
            serde_json::json!({
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "data_offsets": [offset, offset + t.data.len()],
            }),
        );
        offset += t.data.len();
    }
    let mut head = Value::Object(header).to_string().into_bytes();
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + head.len() + offset);
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    for t in &sorted {
        out.extend_from_slice(&t.data);
    }
    out
}

/// Writes tensors to a safetensors file.
pub fn write_file(
    path: &Path,
    tensors: &[OwnedTensor],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let bytes = serialize(tensors, metadata);
    let mut f = std::fs::File::create(path).map_err(|e| EngineError::io(path, e))?;
    f.write_all(&bytes).map_err(|e| EngineError::io(path, e))
}
