//! A quantized weight in any supported format, kept packed: rows are dequantized on demand into
//! a caller's buffer (the CPU linear does it a tile at a time), so a checkpoint is never
//! expanded to f32 as a whole.

use super::fp8::{BlockScales, Fp8Block, Fp8Tensor};
use super::mxfp4::Mxfp4;
use super::nvfp4::Nvfp4;

/// How a linear layer's weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    F32,
    Bf16,
    F16,
    /// DeepSeek 128×128 block-scaled FP8 with E8M0 scales (V4 `.scale`).
    Fp8BlockE8m0,
    /// DeepSeek 128×128 block-scaled FP8 with f32 scales (V3 `weight_scale_inv`).
    Fp8BlockF32,
    /// ModelOpt FP8, one f32 scale per tensor.
    Fp8Tensor,
    /// ModelOpt NVFP4.
    Nvfp4,
    /// MXFP4 (OCP; DeepSeek FP4 experts; gpt-oss blocks).
    Mxfp4,
}

/// Format families, the unit quantization configs speak in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Dense,
    Fp8Block,
    Fp8Tensor,
    Nvfp4,
    Mxfp4,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::F32 => "f32",
            Format::Bf16 => "bf16",
            Format::F16 => "f16",
            Format::Fp8BlockE8m0 => "fp8-block(e8m0)",
            Format::Fp8BlockF32 => "fp8-block(f32)",
            Format::Fp8Tensor => "fp8-tensor",
            Format::Nvfp4 => "nvfp4",
            Format::Mxfp4 => "mxfp4",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Format::F32 | Format::Bf16 | Format::F16 => Kind::Dense,
            Format::Fp8BlockE8m0 | Format::Fp8BlockF32 => Kind::Fp8Block,
            Format::Fp8Tensor => Kind::Fp8Tensor,
            Format::Nvfp4 => Kind::Nvfp4,
            Format::Mxfp4 => Kind::Mxfp4,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dense => "dense (BF16/F16/F32)",
            Kind::Fp8Block => "FP8 block-scaled (E4M3 weight + `.scale` / `weight_scale_inv`)",
            Kind::Fp8Tensor => "FP8 per-tensor (E4M3 weight + f32 `weight_scale`)",
            Kind::Nvfp4 => "NVFP4 (U8 weight + E4M3 `weight_scale` + f32 `weight_scale_2`)",
            Kind::Mxfp4 => "MXFP4 (packed FP4 weight + E8M0 `.scale` per 32)",
        }
    }
}

/// A packed quantized weight `[rows, cols]`.
#[derive(Debug, Clone, PartialEq)]
pub enum QuantWeight {
    Fp8Block(Fp8Block),
    Fp8Tensor(Fp8Tensor),
    Nvfp4(Nvfp4),
    Mxfp4(Mxfp4),
}

impl QuantWeight {
    pub fn rows(&self) -> usize {
        match self {
            QuantWeight::Fp8Block(w) => w.rows,
            QuantWeight::Fp8Tensor(w) => w.rows,
            QuantWeight::Nvfp4(w) => w.rows,
            QuantWeight::Mxfp4(w) => w.rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            QuantWeight::Fp8Block(w) => w.cols,
            QuantWeight::Fp8Tensor(w) => w.cols,
            QuantWeight::Nvfp4(w) => w.cols,
            QuantWeight::Mxfp4(w) => w.cols,
        }
    }

    pub fn format(&self) -> Format {
        match self {
            QuantWeight::Fp8Block(w) => match w.scales {
                BlockScales::E8m0(_) => Format::Fp8BlockE8m0,
                BlockScales::F32(_) => Format::Fp8BlockF32,
            },
            QuantWeight::Fp8Tensor(_) => Format::Fp8Tensor,
            QuantWeight::Nvfp4(_) => Format::Nvfp4,
            QuantWeight::Mxfp4(_) => Format::Mxfp4,
        }
    }

    /// Bytes held in memory (codes, scales and scalars), as stored in the checkpoint.
    pub fn bytes(&self) -> usize {
        match self {
            QuantWeight::Fp8Block(w) => w.bytes(),
            QuantWeight::Fp8Tensor(w) => w.bytes(),
            QuantWeight::Nvfp4(w) => w.bytes(),
            QuantWeight::Mxfp4(w) => w.bytes(),
        }
    }

    /// Appends rows `start..start+n` dequantized to f32 to `out`.
    pub fn dequant_rows(&self, start: usize, n: usize, out: &mut Vec<f32>) {
        match self {
            QuantWeight::Fp8Block(w) => w.dequant_rows(start, n, out),
            QuantWeight::Fp8Tensor(w) => w.dequant_rows(start, n, out),
            QuantWeight::Nvfp4(w) => w.dequant_rows(start, n, out),
            QuantWeight::Mxfp4(w) => w.dequant_rows(start, n, out),
        }
    }

    /// The whole weight in f32 (tests, `quantize` twins; never on the serving path).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows() * self.cols());
        self.dequant_rows(0, self.rows(), &mut out);
        out
    }

    /// Splits into `parts` equal consecutive row ranges (`rows` must divide evenly).
    pub fn split_rows(&self, parts: usize) -> Vec<QuantWeight> {
        match self {
            QuantWeight::Fp8Block(w) => w
                .split_rows(parts)
                .into_iter()
                .map(QuantWeight::Fp8Block)
                .collect(),
            QuantWeight::Fp8Tensor(w) => w
                .split_rows(parts)
                .into_iter()
                .map(QuantWeight::Fp8Tensor)
                .collect(),
            QuantWeight::Nvfp4(w) => w
                .split_rows(parts)
                .into_iter()
                .map(QuantWeight::Nvfp4)
                .collect(),
            QuantWeight::Mxfp4(w) => w
                .split_rows(parts)
                .into_iter()
                .map(QuantWeight::Mxfp4)
                .collect(),
        }
    }

    /// The static activation scale, for formats that carry one.
    pub fn input_scale(&self) -> Option<f32> {
        match self {
            QuantWeight::Fp8Tensor(w) => w.input_scale,
            QuantWeight::Nvfp4(w) => w.input_scale,
            _ => None,
        }
    }
}
