//! Model weights on the GPU, in the formats the checkpoint stores them (the linear kernels
//! dequantize in registers). A [`GLinear`] holds one linear or the stacked experts of one
//! projection (`[E][N][K]` codes, `[E][…]` scales, one global scale per expert). Built from the
//! CPU model's weights ([`GpuWeights::upload`]) or from random bytes generated on the device for
//! dummy-weight benchmarks (`dummy.rs`).

use crate::config::{AttnKind, ModelConfig, ScoringFunc};
use crate::error::{EngineError, Result};
use crate::model::deepseek_v4::ModelWeights;
use crate::model::deepseek_v4::weights::AttentionWeights;
use crate::ops::attention::Compressor;
use crate::ops::linear::{Linear, WeightData};
use crate::ops::mhc::HyperConnection;
use crate::ops::moe::{MoeBlock, Selection};
use crate::quant::{BlockScales, QuantWeight};

use super::gpu::{DevBuf, Gpu};

/// Weight format codes of `linear_formats.cuh` (`FMT_*`), the index into
/// `amdahl_kernels::LINEAR_FORMATS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fmt {
    Bf16 = 0,
    F32 = 1,
    F16 = 2,
    Fp8BlockE8m0 = 3,
    Fp8BlockF32 = 4,
    Fp8Tensor = 5,
    Nvfp4 = 6,
    Mxfp4 = 7,
    /// NVFP4 and MXFP4 in the tiled layout of `quant::fp4_tiles` (decode's cheaper unpacking).
    Nvfp4Tiled = 8,
    Mxfp4Tiled = 9,
}

impl Fmt {
    pub fn name(self) -> &'static str {
        amdahl_kernels::LINEAR_FORMATS[self as usize]
    }

    /// Columns of one superchunk of linear.cu (32 lanes' worth of 16-byte loads, `32·V`):
    /// fp8 64, FP4 128, the rest 32.
    pub fn superchunk_cols(self) -> usize {
        match self {
            Fmt::F32 | Fmt::Bf16 | Fmt::F16 => 32,
            Fmt::Fp8BlockE8m0 | Fmt::Fp8BlockF32 | Fmt::Fp8Tensor => 64,
            _ => 128,
        }
    }

    /// Stored bytes of a `rows × cols` weight (codes + scales).
    pub fn bytes(self, rows: usize, cols: usize) -> usize {
        let n = rows * cols;
        match self {
            Fmt::Bf16 | Fmt::F16 => 2 * n,
            Fmt::F32 => 4 * n,
            Fmt::Fp8BlockE8m0 => n + rows.div_ceil(128) * cols.div_ceil(128),
            Fmt::Fp8BlockF32 => n + 4 * rows.div_ceil(128) * cols.div_ceil(128),
            Fmt::Fp8Tensor => n,
            Fmt::Nvfp4 | Fmt::Nvfp4Tiled => n / 2 + n / 16,
            Fmt::Mxfp4 | Fmt::Mxfp4Tiled => n / 2 + n / 32,
        }
    }

    /// Weights per 16-byte load of the kernels (8 × this many per lane load group).
    pub fn per_load(self) -> usize {
        match self {
            Fmt::Nvfp4 | Fmt::Mxfp4 | Fmt::Nvfp4Tiled | Fmt::Mxfp4Tiled => 4,
            Fmt::Fp8BlockE8m0 | Fmt::Fp8BlockF32 | Fmt::Fp8Tensor => 2,
            _ => 1,
        }
    }

    /// The tiled form of this format (`quant::fp4_tiles`), FP4 only.
    pub fn tiled(self) -> Option<(Fmt, crate::quant::fp4_tiles::Fp4)> {
        use crate::quant::fp4_tiles::Fp4;
        // AMDAHL_FP4_TILES=0 keeps the row-major layout (to measure one against the other).
        if std::env::var("AMDAHL_FP4_TILES").is_ok_and(|v| v == "0") {
            return None;
        }
        match self {
            Fmt::Nvfp4 => Some((Fmt::Nvfp4Tiled, Fp4::Nvfp4)),
            Fmt::Mxfp4 => Some((Fmt::Mxfp4Tiled, Fp4::Mxfp4)),
            _ => None,
        }
    }
}

/// The kernels' `WDesc` (linear_formats.cuh), passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WDesc {
    pub w: u64,
    pub s: u64,
    pub g: u64,
    pub w_stride: i64,
    pub s_stride: i64,
    pub s_ld: i32,
    pub row_phase: i32,
}

impl WDesc {
    pub fn as_bytes(&self) -> [u8; 48] {
        let mut b = [0u8; 48];
        b[0..8].copy_from_slice(&self.w.to_le_bytes());
        b[8..16].copy_from_slice(&self.s.to_le_bytes());
        b[16..24].copy_from_slice(&self.g.to_le_bytes());
        b[24..32].copy_from_slice(&self.w_stride.to_le_bytes());
        b[32..40].copy_from_slice(&self.s_stride.to_le_bytes());
        b[40..44].copy_from_slice(&self.s_ld.to_le_bytes());
        b[44..48].copy_from_slice(&self.row_phase.to_le_bytes());
        b
    }
}

/// One linear layer (or `experts` stacked ones of the same shape and format) on the device.
#[derive(Debug)]
pub struct GLinear {
    pub fmt: Fmt,
    pub rows: usize,
    pub cols: usize,
    pub experts: usize,
    pub w: DevBuf,
    pub s: Option<DevBuf>,
    pub g: DevBuf,
    pub s_ld: usize,
    pub row_phase: usize,
    pub w_stride: usize,
    pub s_stride: usize,
}

/// Host bytes of one weight: (codes, scales, global scale, fmt, scale row length, row phase).
struct Parts<'a> {
    w: Vec<u8>,
    s: Vec<u8>,
    g: f32,
    fmt: Fmt,
    s_ld: usize,
    row_phase: usize,
    _l: std::marker::PhantomData<&'a ()>,
}

fn words_le(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn parts(l: &Linear) -> Parts<'_> {
    let cols = l.in_features;
    let mk = |w, s, g, fmt, s_ld, row_phase| Parts {
        w,
        s,
        g,
        fmt,
        s_ld,
        row_phase,
        _l: std::marker::PhantomData,
    };
    match &l.data {
        WeightData::F32(v) => mk(
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            vec![],
            1.0,
            Fmt::F32,
            0,
            0,
        ),
        WeightData::Bf16(v) => mk(words_le(v), vec![], 1.0, Fmt::Bf16, 0, 0),
        WeightData::F16(v) => mk(words_le(v), vec![], 1.0, Fmt::F16, 0, 0),
        WeightData::Quant(QuantWeight::Fp8Block(b)) => {
            let (s, fmt) = match &b.scales {
                BlockScales::E8m0(s) => (s.clone(), Fmt::Fp8BlockE8m0),
                BlockScales::F32(s) => (
                    s.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    Fmt::Fp8BlockF32,
                ),
            };
            mk(
                b.codes.clone(),
                s,
                1.0,
                fmt,
                cols.div_ceil(128),
                b.row_phase,
            )
        }
        WeightData::Quant(QuantWeight::Fp8Tensor(t)) => {
            mk(t.codes.clone(), vec![], t.scale, Fmt::Fp8Tensor, 0, 0)
        }
        WeightData::Quant(QuantWeight::Nvfp4(q)) => mk(
            q.packed.clone(),
            q.scales.clone(),
            q.global,
            Fmt::Nvfp4,
            cols / 16,
            0,
        ),
        WeightData::Quant(QuantWeight::Mxfp4(q)) => mk(
            q.packed.clone(),
            q.scales.clone(),
            1.0,
            Fmt::Mxfp4,
            cols / 32,
            0,
        ),
    }
}

impl GLinear {
    /// Whether these linears can be stacked into one `GLinear` (same shape, format, scale
    /// layout and FP8 row phase): then they run as one grouped launch.
    pub fn stackable(ls: &[&Linear]) -> bool {
        let ps: Vec<Parts<'_>> = ls.iter().map(|l| parts(l)).collect();
        ps.iter().zip(ls).all(|(p, l)| {
            l.out_features == ls[0].out_features
                && l.in_features == ls[0].in_features
                && p.fmt == ps[0].fmt
                && p.w.len() == ps[0].w.len()
                && p.s.len() == ps[0].s.len()
                && p.row_phase == ps[0].row_phase
        })
    }

    /// Uploads one linear, or several of identical shape and format stacked as experts.
    pub fn upload(gpu: &Gpu, name: &str, ls: &[&Linear]) -> Result<Self> {
        let first = ls
            .first()
            .ok_or_else(|| EngineError::Device(format!("{name}: no weights to upload")))?;
        let (rows, cols) = (first.out_features, first.in_features);
        if cols % 8 != 0 {
            return Err(EngineError::Device(format!(
                "{name}: the GPU linear kernels need in_features divisible by 8, got {cols}"
            )));
        }
        let mut ps: Vec<Parts<'_>> = ls.iter().map(|l| parts(l)).collect();
        // FP4 is stored tiled when every matrix allows it (one format per GLinear).
        let same_fmt = ps.iter().all(|p| p.fmt == ps[0].fmt);
        if let Some((t, kind)) = ps[0].fmt.tiled().filter(|_| same_fmt) {
            let tiles: Option<Vec<(Vec<u8>, Vec<u8>)>> = ps
                .iter()
                .map(|p| crate::quant::fp4_tiles::tile(&p.w, &p.s, rows, cols, kind))
                .collect();
            if let Some(tiles) = tiles {
                for (p, (w, s)) in ps.iter_mut().zip(tiles) {
                    (p.w, p.s, p.fmt) = (w, s, t);
                }
            }
        }
        let p0 = &ps[0];
        for (i, (l, p)) in ls.iter().zip(&ps).enumerate() {
            if l.out_features != rows
                || l.in_features != cols
                || p.fmt != p0.fmt
                || p.w.len() != p0.w.len()
                || p.s.len() != p0.s.len()
                || p.row_phase != p0.row_phase
            {
                return Err(EngineError::Device(format!(
                    "{name}: expert {i} differs in shape or format from expert 0 ({} vs {})",
                    p.fmt.name(),
                    p0.fmt.name()
                )));
            }
        }
        let w: Vec<u8> = ps.iter().flat_map(|p| p.w.iter().copied()).collect();
        let s: Vec<u8> = ps.iter().flat_map(|p| p.s.iter().copied()).collect();
        let g: Vec<f32> = ps.iter().map(|p| p.g).collect();
        Ok(Self {
            fmt: p0.fmt,
            rows,
            cols,
            experts: ls.len(),
            w_stride: p0.w.len(),
            s_stride: p0.s.len(),
            s_ld: p0.s_ld,
            row_phase: p0.row_phase,
            w: gpu.upload(&w)?,
            s: if s.is_empty() {
                None
            } else {
                Some(gpu.upload(&s)?)
            },
            g: gpu.upload(&g)?,
        })
    }

    pub fn desc(&self) -> WDesc {
        WDesc {
            w: self.w.ptr(),
            s: self.s.as_ref().map_or(0, DevBuf::ptr),
            g: self.g.ptr(),
            w_stride: self.w_stride as i64,
            s_stride: self.s_stride as i64,
            s_ld: self.s_ld as i32,
            row_phase: self.row_phase as i32,
        }
    }

    /// Stored bytes of one expert (or of the whole linear).
    pub fn expert_bytes(&self) -> u64 {
        (self.w_stride + self.s_stride) as u64
    }
}

/// An f32 vector on the device.
fn vecf(gpu: &Gpu, v: &[f32]) -> Result<DevBuf> {
    gpu.upload(v)
}

#[derive(Debug)]
pub struct GHc {
    pub fn_w: DevBuf,
    pub base: DevBuf,
    pub scale: DevBuf,
}

impl GHc {
    pub(crate) fn upload(gpu: &Gpu, h: &HyperConnection) -> Result<Self> {
        Ok(Self {
            fn_w: vecf(gpu, &h.fn_w)?,
            base: vecf(gpu, &h.base)?,
            scale: vecf(gpu, &h.scale)?,
        })
    }
}

#[derive(Debug)]
pub struct GCompressor {
    pub wkv: GLinear,
    pub wgate: GLinear,
    pub ape: DevBuf,
    pub norm: DevBuf,
    pub ratio: usize,
    pub dim: usize,
    pub overlap: bool,
}

impl GCompressor {
    pub(crate) fn upload(gpu: &Gpu, name: &str, c: &Compressor) -> Result<Self> {
        Ok(Self {
            wkv: GLinear::upload(gpu, &format!("{name}.wkv"), &[&c.wkv])?,
            wgate: GLinear::upload(gpu, &format!("{name}.wgate"), &[&c.wgate])?,
            ape: vecf(gpu, &c.ape)?,
            norm: vecf(gpu, &c.norm)?,
            ratio: c.ratio,
            dim: c.dim,
            overlap: c.overlap,
        })
    }

    pub fn width(&self) -> usize {
        if self.overlap { 2 * self.dim } else { self.dim }
    }
}

#[derive(Debug)]
pub struct GIndexer {
    pub comp: GCompressor,
    pub wq_b: GLinear,
    pub weights_proj: GLinear,
    pub heads: usize,
    pub dim: usize,
    pub topk: usize,
}

#[derive(Debug)]
pub struct GAttn {
    pub kind: AttnKind,
    pub wq_a: GLinear,
    pub q_norm: DevBuf,
    pub wq_b: GLinear,
    pub wkv: GLinear,
    pub kv_norm: DevBuf,
    /// The output groups' first projections, in group order: one stacked `GLinear` (a grouped
    /// launch) when the groups stack, else one per group.
    pub wo_a: Vec<GLinear>,
    pub wo_b: GLinear,
    pub sinks: DevBuf,
    pub compressor: Option<GCompressor>,
    pub indexer: Option<GIndexer>,
}

impl GAttn {
    fn upload(gpu: &Gpu, l: usize, a: &AttentionWeights) -> Result<Self> {
        let p = format!("layers.{l}.attn");
        let compressor = a
            .compressor
            .as_ref()
            .map(|c| GCompressor::upload(gpu, &format!("{p}.compressor"), c))
            .transpose()?;
        let indexer = a
            .indexer
            .as_ref()
            .map(|ix| -> Result<GIndexer> {
                Ok(GIndexer {
                    comp: GCompressor::upload(
                        gpu,
                        &format!("{p}.indexer.compressor"),
                        &ix.compressor,
                    )?,
                    wq_b: GLinear::upload(gpu, &format!("{p}.indexer.wq_b"), &[&ix.wq_b])?,
                    weights_proj: GLinear::upload(
                        gpu,
                        &format!("{p}.indexer.weights_proj"),
                        &[&ix.weights_proj],
                    )?,
                    heads: ix.heads,
                    dim: ix.dim,
                    topk: ix.topk,
                })
            })
            .transpose()?;
        Ok(Self {
            kind: a.kind,
            wq_a: GLinear::upload(gpu, &format!("{p}.wq_a"), &[&a.wq_a])?,
            q_norm: vecf(gpu, &a.q_norm)?,
            wq_b: GLinear::upload(gpu, &format!("{p}.wq_b"), &[&a.wq_b])?,
            wkv: GLinear::upload(gpu, &format!("{p}.wkv"), &[&a.wkv])?,
            kv_norm: vecf(gpu, &a.kv_norm)?,
            wo_a: {
                let groups: Vec<&Linear> = a.wo_a.iter().collect();
                if GLinear::stackable(&groups) {
                    vec![GLinear::upload(gpu, &format!("{p}.wo_a"), &groups)?]
                } else {
                    groups
                        .iter()
                        .enumerate()
                        .map(|(g, w)| GLinear::upload(gpu, &format!("{p}.wo_a[{g}]"), &[w]))
                        .collect::<Result<_>>()?
                }
            },
            wo_b: GLinear::upload(gpu, &format!("{p}.wo_b"), &[&a.wo_b])?,
            sinks: vecf(gpu, &a.sinks)?,
            compressor,
            indexer,
        })
    }
}

/// Routed experts (and the shared expert) of one MoE layer.
#[derive(Debug)]
pub struct GMoe {
    pub router: GLinear,
    pub bias: Option<DevBuf>,
    pub tid2eid: Option<DevBuf>,
    pub scoring: i32,
    pub top_k: usize,
    pub scaling: f32,
    pub norm_topk: bool,
    pub n_experts: usize,
    pub w1: GLinear,
    pub w3: GLinear,
    pub w2: GLinear,
    pub shared: Option<[GLinear; 3]>,
    pub limit: f32,
}

pub fn scoring_code(s: ScoringFunc) -> i32 {
    match s {
        ScoringFunc::SqrtSoftplus => 0,
        ScoringFunc::Sigmoid => 1,
        ScoringFunc::Softmax => 2,
    }
}

impl GMoe {
    pub(crate) fn upload(gpu: &Gpu, l: usize, m: &MoeBlock) -> Result<Self> {
        let p = format!("layers.{l}.ffn");
        let r = &m.router;
        let (bias, tid2eid) = match &r.selection {
            Selection::TopK { bias } => (Some(vecf(gpu, bias)?), None),
            Selection::Hash { tid2eid, .. } => {
                let ids: Vec<i32> = tid2eid.iter().map(|&x| x as i32).collect();
                (None, Some(gpu.upload(&ids)?))
            }
        };
        let e: Vec<&crate::ops::moe::Expert> = m.experts.iter().collect();
        let limit = e.first().map_or(f32::INFINITY, |x| x.limit);
        let shared = m
            .shared
            .as_ref()
            .map(|s| -> Result<[GLinear; 3]> {
                Ok([
                    GLinear::upload(gpu, &format!("{p}.shared_experts.w1"), &[&s.w1])?,
                    GLinear::upload(gpu, &format!("{p}.shared_experts.w3"), &[&s.w3])?,
                    GLinear::upload(gpu, &format!("{p}.shared_experts.w2"), &[&s.w2])?,
                ])
            })
            .transpose()?;
        Ok(Self {
            router: GLinear::upload(gpu, &format!("{p}.gate"), &[&r.weight])?,
            bias,
            tid2eid,
            scoring: scoring_code(r.scoring),
            top_k: r.top_k,
            scaling: r.routed_scaling_factor,
            norm_topk: r.norm_topk_prob,
            n_experts: m.experts.len(),
            w1: GLinear::upload(
                gpu,
                &format!("{p}.experts.w1"),
                &e.iter().map(|x| &x.w1).collect::<Vec<_>>(),
            )?,
            w3: GLinear::upload(
                gpu,
                &format!("{p}.experts.w3"),
                &e.iter().map(|x| &x.w3).collect::<Vec<_>>(),
            )?,
            w2: GLinear::upload(
                gpu,
                &format!("{p}.experts.w2"),
                &e.iter().map(|x| &x.w2).collect::<Vec<_>>(),
            )?,
            shared,
            limit,
        })
    }
}

#[derive(Debug)]
pub struct GLayer {
    pub attn_norm: DevBuf,
    pub ffn_norm: DevBuf,
    pub hc_attn: GHc,
    pub hc_ffn: GHc,
    pub attn: GAttn,
    pub moe: GMoe,
}

/// The embedding table: bf16 (0), f32 (1) or f16 (2) rows.
#[derive(Debug)]
pub struct GEmbed {
    pub data: DevBuf,
    pub fmt: i32,
}

#[derive(Debug)]
pub struct GpuWeights {
    pub embed: GEmbed,
    pub head: GLinear,
    pub norm: DevBuf,
    pub hc_head_fn: DevBuf,
    pub hc_head_base: DevBuf,
    pub hc_head_scale: f32,
    pub layers: Vec<GLayer>,
}

impl GpuWeights {
    /// Uploads a loaded model's weights.
    pub fn upload(gpu: &Gpu, cfg: &ModelConfig, w: &ModelWeights) -> Result<Self> {
        let embed = match &w.embed.data {
            WeightData::Bf16(v) => GEmbed {
                data: gpu.upload(v)?,
                fmt: 0,
            },
            WeightData::F32(v) => GEmbed {
                data: gpu.upload(v)?,
                fmt: 1,
            },
            WeightData::F16(v) => GEmbed {
                data: gpu.upload(v)?,
                fmt: 2,
            },
            WeightData::Quant(q) => {
                return Err(EngineError::Device(format!(
                    "embed.weight is stored as {}; the GPU backend reads BF16/F16/F32 embeddings",
                    q.format()
                )));
            }
        };
        if cfg.hc_mult > 4 {
            return Err(EngineError::Device(format!(
                "hc_mult {} > 4 is not supported by the GPU kernels",
                cfg.hc_mult
            )));
        }
        let layers = w
            .layers
            .iter()
            .enumerate()
            .map(|(l, lw)| -> Result<GLayer> {
                Ok(GLayer {
                    attn_norm: vecf(gpu, &lw.attn_norm)?,
                    ffn_norm: vecf(gpu, &lw.ffn_norm)?,
                    hc_attn: GHc::upload(gpu, &lw.hc_attn)?,
                    hc_ffn: GHc::upload(gpu, &lw.hc_ffn)?,
                    attn: GAttn::upload(gpu, l, &lw.attn)?,
                    moe: GMoe::upload(gpu, l, &lw.moe)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            embed,
            head: GLinear::upload(gpu, "head", &[&w.head])?,
            norm: vecf(gpu, &w.norm)?,
            hc_head_fn: vecf(gpu, &w.hc_head.fn_w)?,
            hc_head_base: vecf(gpu, &w.hc_head.base)?,
            hc_head_scale: w.hc_head.scale,
            layers,
        })
    }
}
