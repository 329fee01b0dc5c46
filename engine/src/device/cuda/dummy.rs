//! Dummy-weight models at real DeepSeek-V4-Flash widths (model-spec §3.1), generated on the GPU
//! from a seed: no checkpoint and no host copy of the weights. Values are scaled like trained
//! weights (≈ 1/√fan_in) so activations stay finite and the router spreads tokens over experts;
//! attention linears are FP8 with E8M0 128×128 blocks, routed experts in the chosen format,
//! compressors and router BF16, as the official release stores them.

use amdahl_kernels::util as ku;

use crate::config::{AttnKind, MlpKind, ModelConfig};
use crate::error::{EngineError, Result};
use crate::model::deepseek_v4::synthetic::TinySpec;

use super::gpu::{Args, DevBuf, Gpu, Launch};
use super::weights::{
    Fmt, GAttn, GCompressor, GEmbed, GHc, GIndexer, GLayer, GLinear, GMoe, GpuWeights,
};

/// DeepSeek-V4-Flash's config with its first `layers` layers (the [0,0,4,128,4,128,…] pattern).
pub fn v4_flash_config(layers: usize) -> Result<ModelConfig> {
    if layers == 0 || layers > 43 {
        return Err(EngineError::InvalidInput(format!(
            "--layers {layers}: V4-Flash has 1..=43 layers"
        )));
    }
    let kinds: Vec<AttnKind> = (0..layers)
        .map(|l| match l {
            0 | 1 => AttnKind::Sliding,
            l if l % 2 == 0 => AttnKind::Csa { ratio: 4 },
            _ => AttnKind::Hca { ratio: 128 },
        })
        .collect();
    let mlp = (0..layers)
        .map(|l| {
            if l < 3 {
                MlpKind::HashMoe
            } else {
                MlpKind::Moe
            }
        })
        .collect();
    let spec = TinySpec {
        vocab: 129_280,
        hidden: 4096,
        layers: kinds,
        mlp,
        heads: 64,
        head_dim: 512,
        rope_dim: 64,
        q_lora: 1024,
        o_groups: 8,
        o_lora: 1024,
        experts: 256,
        top_k: 6,
        moe_inter: 2048,
        window: 128,
        index_heads: 64,
        index_dim: 128,
        index_topk: 512,
        scoring: "sqrtsoftplus",
        yarn: true,
        hc_mult: 4,
    };
    let mut j = spec.config_json();
    j["max_position_embeddings"] = serde_json::json!(1_048_576);
    j["rope_parameters"]["compress"]["original_max_position_embeddings"] =
        serde_json::json!(65_536);
    ModelConfig::from_json_str(&j.to_string(), "v4-flash (dummy)")
}

/// Fills device memory from a seed.
pub struct Filler<'a> {
    gpu: &'a Gpu,
    seed: u64,
}

impl<'a> Filler<'a> {
    pub fn new(gpu: &'a Gpu, seed: u64) -> Self {
        Self { gpu, seed }
    }

    fn next(&mut self) -> u64 {
        self.seed = self
            .seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.seed
    }

    fn grid(n: usize) -> Launch {
        Launch::new((n.div_ceil(256).clamp(1, 65_535), 1, 1), 256, 0)
    }

    pub fn bytes(&mut self, b: &DevBuf, kind: i32, lo: i32, hi: i32) -> Result<()> {
        let s = self.next();
        let n = b.bytes();
        self.gpu.launch(
            ku::FILL_BYTES,
            Self::grid(n),
            Args::new()
                .buf(b)
                .i64(n as i64)
                .u64(s)
                .i32(kind)
                .i32(lo)
                .i32(hi),
        )
    }

    /// Uniform in [offset − scale, offset + scale): bf16 or f32 elements.
    pub fn values(&mut self, b: &DevBuf, bf16: bool, scale: f32, offset: f32) -> Result<()> {
        let s = self.next();
        let n = b.bytes() / if bf16 { 2 } else { 4 };
        self.gpu.launch(
            ku::FILL_VALUES,
            Self::grid(n),
            Args::new()
                .buf(b)
                .i64(n as i64)
                .u64(s)
                .f32(scale)
                .f32(offset)
                .i32(bf16 as i32),
        )
    }

    pub fn ints(&mut self, b: &DevBuf, modulo: usize) -> Result<()> {
        let s = self.next();
        let n = b.bytes() / 4;
        self.gpu.launch(
            ku::FILL_INTS,
            Self::grid(n),
            Args::new().buf(b).i64(n as i64).u64(s).usize(modulo),
        )
    }

    pub fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Result<DevBuf> {
        let b = self.gpu.alloc(n * 4)?;
        self.values(&b, false, scale, offset)?;
        Ok(b)
    }

    /// A random linear (or `experts` stacked) of `fmt`, weights ≈ U(±√(3/cols)).
    pub fn linear(
        &mut self,
        fmt: Fmt,
        rows: usize,
        cols: usize,
        experts: usize,
    ) -> Result<GLinear> {
        let g = self.gpu;
        let amp = (3.0 / cols as f32).sqrt();
        let log2 = |x: f32| x.log2().round() as i32;
        let n = rows * cols;
        // Random codes are as random in the tiled layout, which the GPU stores FP4 in wherever
        // the shape allows; only NVFP4's scale bytes are coded differently there.
        let fmt = match fmt.tiled() {
            Some((t, _)) if crate::quant::fp4_tiles::tileable(rows, cols) => t,
            _ => fmt,
        };
        let (w_stride, s_stride, s_ld, gval) = match fmt {
            Fmt::Bf16 | Fmt::F16 => (2 * n, 0, 0, 1.0),
            Fmt::F32 => (4 * n, 0, 0, 1.0),
            Fmt::Fp8BlockE8m0 => (
                n,
                rows.div_ceil(128) * cols.div_ceil(128),
                cols.div_ceil(128),
                1.0,
            ),
            Fmt::Fp8BlockF32 => (
                n,
                4 * rows.div_ceil(128) * cols.div_ceil(128),
                cols.div_ceil(128),
                1.0,
            ),
            Fmt::Fp8Tensor => (n, 0, 0, amp),
            Fmt::Nvfp4 | Fmt::Nvfp4Tiled => (n / 2, n / 16, cols / 16, amp / 3.0),
            Fmt::Mxfp4 | Fmt::Mxfp4Tiled => (n / 2, n / 32, cols / 32, 1.0),
        };
        let w = g.alloc(w_stride * experts)?;
        let s = if s_stride > 0 {
            Some(g.alloc(s_stride * experts)?)
        } else {
            None
        };
        match fmt {
            Fmt::Bf16 => self.values(&w, true, amp, 0.0)?,
            Fmt::F32 => self.values(&w, false, amp, 0.0)?,
            Fmt::F16 => {
                return Err(EngineError::InvalidInput(
                    "dummy weights are not generated in f16".into(),
                ));
            }
            // E4M3 codes with exponent field 4..8 (|v| ≈ 0.125..3.75), scale 2^-k with 2^-k ≈ amp.
            Fmt::Fp8BlockE8m0 => {
                self.bytes(&w, 1, 4, 8)?;
                let e = 127 + log2(amp);
                if let Some(s) = &s {
                    self.bytes(s, 2, e, e)?;
                }
            }
            Fmt::Fp8BlockF32 => {
                self.bytes(&w, 1, 4, 8)?;
                if let Some(s) = &s {
                    self.values(s, false, 0.0, amp)?;
                }
            }
            Fmt::Fp8Tensor => self.bytes(&w, 1, 4, 8)?,
            // E2M1 codes average |v| ≈ 2.6; E4M3 block scales 1.0..1.5 (bytes 0x38..0x3c).
            Fmt::Nvfp4 | Fmt::Nvfp4Tiled => {
                self.bytes(&w, 0, 0, 0)?;
                let (lo, hi) = if fmt == Fmt::Nvfp4Tiled {
                    let code = |b| crate::quant::fp4_tiles::nvfp4_scale_code(b).unwrap_or(1);
                    (code(0x38), code(0x3c))
                } else {
                    (0x38, 0x3c)
                };
                if let Some(s) = &s {
                    self.bytes(s, 3, lo as i32, hi as i32)?;
                }
            }
            Fmt::Mxfp4 | Fmt::Mxfp4Tiled => {
                self.bytes(&w, 0, 0, 0)?;
                let e = 127 + log2(amp / 3.0);
                if let Some(s) = &s {
                    self.bytes(s, 2, e - 1, e)?;
                }
            }
        }
        let gv = g.upload(&vec![gval; experts])?;
        Ok(GLinear {
            fmt,
            rows,
            cols,
            experts,
            w,
            s,
            g: gv,
            s_ld,
            row_phase: 0,
            w_stride,
            s_stride,
        })
    }

    fn hc(&mut self, mix: usize, width: usize) -> Result<GHc> {
        Ok(GHc {
            fn_w: self.vec(mix * width, 0.02, 0.0)?,
            base: self.vec(mix, 0.5, 0.0)?,
            scale: self.vec(3, 0.2, 1.0)?,
        })
    }

    fn compressor(
        &mut self,
        d: usize,
        dim: usize,
        ratio: usize,
        overlap: bool,
    ) -> Result<GCompressor> {
        let width = if overlap { 2 * dim } else { dim };
        Ok(GCompressor {
            wkv: self.linear(Fmt::Bf16, width, d, 1)?,
            wgate: self.linear(Fmt::Bf16, width, d, 1)?,
            ape: self.vec(ratio * width, 0.5, 0.0)?,
            norm: self.vec(dim, 0.1, 1.0)?,
            ratio,
            dim,
            overlap,
        })
    }
}

/// Random weights for `cfg` on the GPU; routed experts in `expert_fmt`.
pub fn dummy_weights(
    gpu: &Gpu,
    cfg: &ModelConfig,
    expert_fmt: Fmt,
    seed: u64,
) -> Result<GpuWeights> {
    let c = cfg;
    let mut f = Filler::new(gpu, seed);
    let (d, h, hd) = (c.hidden_size, c.num_heads, c.head_dim);
    let fp8 = Fmt::Fp8BlockE8m0;
    let mut layers = Vec::with_capacity(c.num_layers);
    for l in 0..c.num_layers {
        let kind = c.layer_kinds[l];
        let gi = h * hd / c.o_groups;
        let (compressor, indexer) = match kind {
            AttnKind::Sliding => (None, None),
            AttnKind::Hca { ratio } => (Some(f.compressor(d, hd, ratio, false)?), None),
            AttnKind::Csa { ratio } => (
                Some(f.compressor(d, hd, ratio, true)?),
                Some(GIndexer {
                    comp: f.compressor(d, c.index_head_dim, ratio, true)?,
                    wq_b: f.linear(fp8, c.index_n_heads * c.index_head_dim, c.q_lora_rank, 1)?,
                    weights_proj: f.linear(Fmt::Bf16, c.index_n_heads, d, 1)?,
                    heads: c.index_n_heads,
                    dim: c.index_head_dim,
                    topk: c.index_topk,
                }),
            ),
        };
        let attn = GAttn {
            kind,
            wq_a: f.linear(fp8, c.q_lora_rank, d, 1)?,
            q_norm: f.vec(c.q_lora_rank, 0.1, 1.0)?,
            wq_b: f.linear(fp8, h * hd, c.q_lora_rank, 1)?,
            wkv: f.linear(fp8, hd, d, 1)?,
            kv_norm: f.vec(hd, 0.1, 1.0)?,
            wo_a: vec![f.linear(fp8, c.o_lora_rank, gi, c.o_groups)?],
            wo_b: f.linear(fp8, d, c.o_groups * c.o_lora_rank, 1)?,
            sinks: f.vec(h, 1.0, 0.0)?,
            compressor,
            indexer,
        };
        let e = c.n_routed_experts;
        let inter = c.moe_intermediate_size;
        let hash = matches!(c.mlp_kinds[l], MlpKind::HashMoe);
        let tid2eid = if hash {
            let b = gpu.alloc(c.vocab_size * c.num_experts_per_tok * 4)?;
            f.ints(&b, e)?;
            Some(b)
        } else {
            None
        };
        let sh = c.shared_intermediate_size();
        let moe = GMoe {
            router: f.linear(Fmt::Bf16, e, d, 1)?,
            bias: if hash {
                None
            } else {
                Some(f.vec(e, 0.01, 0.0)?)
            },
            tid2eid,
            scoring: super::weights::scoring_code(c.scoring_func),
            top_k: c.num_experts_per_tok,
            scaling: c.routed_scaling_factor,
            norm_topk: c.norm_topk_prob,
            n_experts: e,
            w1: f.linear(expert_fmt, inter, d, e)?,
            w3: f.linear(expert_fmt, inter, d, e)?,
            w2: f.linear(expert_fmt, d, inter, e)?,
            shared: if sh > 0 {
                Some([
                    f.linear(fp8, sh, d, 1)?,
                    f.linear(fp8, sh, d, 1)?,
                    f.linear(fp8, d, sh, 1)?,
                ])
            } else {
                None
            },
            limit: c.swiglu_limit,
        };
        layers.push(GLayer {
            attn_norm: f.vec(d, 0.1, 1.0)?,
            ffn_norm: f.vec(d, 0.1, 1.0)?,
            hc_attn: f.hc(c.hc_mix(), c.hc_dim())?,
            hc_ffn: f.hc(c.hc_mix(), c.hc_dim())?,
            attn,
            moe,
        });
    }
    let embed = gpu.alloc(c.vocab_size * d * 2)?;
    f.values(&embed, true, 1.7, 0.0)?;
    let w = GpuWeights {
        embed: GEmbed {
            data: embed,
            fmt: 0,
        },
        head: f.linear(Fmt::Bf16, c.vocab_size, d, 1)?,
        norm: f.vec(d, 0.1, 1.0)?,
        hc_head_fn: f.vec(c.hc_mult * c.hc_dim(), 0.02, 0.0)?,
        hc_head_base: f.vec(c.hc_mult, 0.5, 0.0)?,
        hc_head_scale: 1.0,
        layers,
    };
    gpu.sync()?;
    Ok(w)
}

/// Fills every slot's cache as if `ctx` tokens had been processed (random rows in the ring, the
/// compressed entries and the indexer keys).
pub fn fill_cache(gpu: &Gpu, kv: &super::state::KvState, seed: u64) -> Result<()> {
    let mut f = Filler::new(gpu, seed);
    for l in &kv.layers {
        f.values(&l.ring, true, 1.7, 0.0)?;
        if let Some(e) = &l.entries {
            f.values(e, true, 1.7, 0.0)?;
        }
        if let Some(k) = &l.idx_keys {
            f.values(k, false, 1.7, 0.0)?;
        }
    }
    gpu.sync()
}
