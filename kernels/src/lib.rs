//! CUDA kernel sources embedded as text and a typed registry of their entry points. NVRTC
//! compiles each module at startup with [`COMMON`] prepended (see `amdahl-engine`'s
//! `device::cuda`); this crate has no CUDA dependency, so a CPU-only test catches a missing or
//! misspelled entry point and CI compile-checks every module without a GPU.

/// Helpers shared by every module (bf16/fp8/fp4 conversions, reductions, rope).
pub const COMMON: &str = include_str!("../cuda/common.cuh");

/// One `.cu` file, and the module-private headers compiled before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Module {
    pub name: &'static str,
    /// (file name, text) of each header, in order.
    pub headers: &'static [(&'static str, &'static str)],
    pub source: &'static str,
}

/// One `extern "C"` entry point of a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub module: &'static str,
    pub name: &'static str,
}

/// The headers every linear module compiles first: weight formats, then the split workspace
/// and SwiGLU they share.
const LINEAR_HEADERS: &[(&str, &str)] = &[
    (
        "linear_formats.cuh",
        include_str!("../cuda/linear_formats.cuh"),
    ),
    (
        "linear_shared.cuh",
        include_str!("../cuda/linear_shared.cuh"),
    ),
];
/// The register linears' own headers after the shared ones: the MMA core, the persistent
/// linear, the expert kernels, the f32-input router (linear.cu holds their entry points).
const LINEAR_OWN_HEADERS: &[(&str, &str)] = &[
    LINEAR_HEADERS[0],
    LINEAR_HEADERS[1],
    ("linear_core.cuh", include_str!("../cuda/linear_core.cuh")),
    (
        "linear_persist.cuh",
        include_str!("../cuda/linear_persist.cuh"),
    ),
    (
        "linear_experts.cuh",
        include_str!("../cuda/linear_experts.cuh"),
    ),
    (
        "linear_router.cuh",
        include_str!("../cuda/linear_router.cuh"),
    ),
];
pub const LINEAR: Module = Module {
    name: "linear",
    headers: LINEAR_OWN_HEADERS,
    source: include_str!("../cuda/linear.cu"),
};
/// The streamed decode linears (sm_90+).
pub const LINEAR_STREAM: Module = Module {
    name: "linear_stream",
    headers: LINEAR_HEADERS,
    source: include_str!("../cuda/linear_stream.cu"),
};
/// The warpgroup MMAs' descriptors, fences and swizzle (attention_wg.cu, linear_wg.cu).
const WGMMA: (&str, &str) = ("wgmma.cuh", include_str!("../cuda/wgmma.cuh"));
/// The FP8 linears on FP8 warpgroup MMAs (sm_90, compiled as sm_90a), with activations
/// quantized per 1×128 group as the reference's FP8 GEMM.
pub const LINEAR_WG: Module = Module {
    name: "linear_wg",
    headers: &[LINEAR_HEADERS[0], LINEAR_HEADERS[1], WGMMA],
    source: include_str!("../cuda/linear_wg.cu"),
};
/// The tiled GEMM for many tokens.
pub const LINEAR_GEMM: Module = Module {
    name: "linear_gemm",
    headers: LINEAR_HEADERS,
    source: include_str!("../cuda/linear_gemm.cu"),
};
pub const MHC: Module = Module {
    name: "mhc",
    headers: &[],
    source: include_str!("../cuda/mhc.cu"),
};
/// What the two sparse attention modules share: a query row's candidate list, row addresses and
/// q's split into bf16 parts.
const ATTENTION_SHARED: &[(&str, &str)] = &[(
    "attention_shared.cuh",
    include_str!("../cuda/attention_shared.cuh"),
)];
const ATTENTION_WG_HEADERS: &[(&str, &str)] = &[ATTENTION_SHARED[0], WGMMA];
pub const ATTENTION: Module = Module {
    name: "attention",
    headers: ATTENTION_SHARED,
    source: include_str!("../cuda/attention.cu"),
};
/// The sparse decode attention on warpgroup MMAs (sm_90, compiled as sm_90a).
pub const ATTENTION_WG: Module = Module {
    name: "attention_wg",
    headers: ATTENTION_WG_HEADERS,
    source: include_str!("../cuda/attention_wg.cu"),
};
/// The lightning indexer's scores and top-k.
pub const INDEXER: Module = Module {
    name: "indexer",
    headers: &[],
    source: include_str!("../cuda/indexer.cu"),
};
pub const MOE: Module = Module {
    name: "moe",
    headers: &[],
    source: include_str!("../cuda/moe.cu"),
};
pub const SAMPLE: Module = Module {
    name: "sample",
    headers: &[],
    source: include_str!("../cuda/sample.cu"),
};
pub const UTIL: Module = Module {
    name: "util",
    headers: &[],
    source: include_str!("../cuda/util.cu"),
};

/// Every module, in load order.
pub const MODULES: [Module; 11] = [
    LINEAR,
    LINEAR_STREAM,
    LINEAR_WG,
    LINEAR_GEMM,
    MHC,
    ATTENTION,
    ATTENTION_WG,
    INDEXER,
    MOE,
    SAMPLE,
    UTIL,
];

impl Module {
    /// The text NVRTC compiles: the common header, the module's headers, then the module (line
    /// numbers of errors refer to each file).
    pub fn full_source(&self) -> String {
        let mut s = COMMON.to_string();
        for (file, text) in self.headers {
            s += &format!("\n#line 1 \"{file}\"\n{text}");
        }
        s + &format!("\n#line 1 \"{}.cu\"\n{}", self.name, self.source)
    }
}

mod linear_names;
pub use linear_names::*;

const fn e(module: &'static str, name: &'static str) -> Entry {
    Entry { module, name }
}

/// Layout facts of the linear kernels the launchers share.
pub mod linear {
    /// Split-K workspace: tile arrival counters, and f32 partials.
    pub const SPLIT_TILES: usize = 4096;
    pub const SPLIT_PARTS: usize = 1 << 20;
    /// K columns per step of the tiled GEMM (`GEMM_BK`), and its stages (`GEMM_STAGES`).
    pub const GEMM_BK: usize = 64;
    pub const GEMM_STAGES: usize = 3;
    /// Weight rows per tiled-GEMM block (`GemmGeo::BN`): FP8 at 64 tokens puts all 8 warps
    /// along rows (256), otherwise 4 warps (128).
    pub fn gemm_rows(format: &str, tokens: usize) -> usize {
        if format.starts_with("fp8") && tokens == 64 {
            256
        } else {
            128
        }
    }
    /// Dynamic shared memory of a tiled-GEMM block: its stages of `gemm_rows` weight rows
    /// (`GEMM_WLD`: 96 bytes for FP8, 192 for bf16) and `tokens` x rows of 192 bytes.
    pub fn gemm_smem(format: &str, tokens: usize) -> usize {
        let wld = if format.starts_with("fp8") { 96 } else { 192 };
        GEMM_STAGES * (gemm_rows(format, tokens) * wld + tokens * 192)
    }
    /// The FP8 warpgroup-MMA linear (linear_wg.cu): weight rows per tile, stages in its ring
    /// (64 rows × 128 columns, 8 KiB each), threads per block.
    pub const WG_ROWS: usize = 64;
    pub const WG_STAGES: usize = 8;
    /// Stages at 64 tokens, whose 64 KiB of activations sit beside the ring.
    pub const WG_STAGES_N64: usize = 5;
    pub const WG_THREADS: usize = 128;
    /// Stages of the `linear_wg` instantiation for `tokens` (its N).
    pub fn wg_stages(tokens: usize) -> usize {
        if tokens >= 64 {
            WG_STAGES_N64
        } else {
            WG_STAGES
        }
    }
    /// Dynamic shared memory of a `linear_wg` block for `tokens` and `kc` columns per K split:
    /// the ring, the quantized activations and their scales, and up to 1024 bytes to align the
    /// base.
    pub fn wg_smem(tokens: usize, kc: usize) -> usize {
        1024 + wg_stages(tokens) * WG_ROWS * 128 + tokens * kc + tokens * (kc / 128) * 4
    }
    /// Warps of a streamed-kernel block, each with its own ring.
    pub const STREAM_WARPS: usize = 8;
    /// Shared-memory bytes of one stage of one matrix (`Stream<FMT>::BYTES`): 4 KiB of tiled
    /// FP4 codes and their scale bytes (NVFP4T 512, MXFP4T 256), or 16 row-major rows of 256 B
    /// at a 320-byte stride.
    pub fn stream_stage_bytes(format: &str) -> usize {
        match format {
            "nvfp4t" => 4096 + 512,
            "mxfp4t" => 4096 + 256,
            _ => 16 * 320,
        }
    }
}

pub mod mhc {
    use super::{Entry, e};
    pub const EMBED_ROWS: Entry = e("mhc", "embed_rows");
    pub const HC_MIX_PARTIAL: Entry = e("mhc", "hc_mix_partial");
    pub const HC_PRE: Entry = e("mhc", "hc_pre");
    pub const HC_SINKHORN: Entry = e("mhc", "hc_sinkhorn");
    pub const HC_POST: Entry = e("mhc", "hc_post");
    pub const HC_POST_ROWS: Entry = e("mhc", "hc_post_rows");
    pub const HC_HEAD: Entry = e("mhc", "hc_head");
    pub const NORM_ROWS: Entry = e("mhc", "norm_rows");
    pub const ALL: [Entry; 8] = [
        EMBED_ROWS,
        HC_MIX_PARTIAL,
        HC_PRE,
        HC_SINKHORN,
        HC_POST,
        HC_POST_ROWS,
        HC_HEAD,
        NORM_ROWS,
    ];
    /// Parts the mixing dot products of one token are split into, and the floats per part.
    pub const MIX_PARTS: usize = 128;
    /// Parts of the standalone `hc_mix_partial` pass (layer 0 and the head).
    pub const MIX_PASS_PARTS: usize = 32;
    pub const MIX_STRIDE: usize = 25;
    /// Threads of an `hc_pre` block (`PRE_THREADS` in mhc.cu).
    pub const PRE_THREADS: usize = 1024;
    /// Columns per `hc_post` block when it leaves mixing partials.
    pub const POST_COLS: usize = 32;
    /// Most tokens one `hc_post` block takes (sharing the next site's mixing weights).
    pub const POST_TOK: usize = 4;
    /// Tokens per `hc_post` block for a step of `t` tokens: [`POST_TOK`] when blocks may share
    /// tokens (`share`) and there are 8 or more, else one (below 8 the blocks of one token each
    /// fill the GPU and the weights are re-read few times).
    pub fn post_tokens(t: usize, share: bool) -> usize {
        if share && t >= 8 { POST_TOK } else { 1 }
    }
    /// Blocks per token of `hc_post`, and so the partials it leaves for the next `hc_pre`.
    pub fn post_parts(d: usize) -> usize {
        d.div_ceil(POST_COLS).clamp(1, MIX_PARTS)
    }
    /// Columns per `hc_post_rows` block (a float4 per lane) and tokens (a warp each).
    pub const ROWS_COLS: usize = 128;
    pub const ROWS_TOK: usize = 8;
    /// Blocks per token of `hc_post_rows`, and so the partials it leaves (`d` ≤ 128 · 128).
    pub fn rows_parts(d: usize) -> usize {
        d.div_ceil(ROWS_COLS).clamp(1, MIX_PARTS)
    }
}

pub mod attention {
    use super::{Entry, e};
    pub const Q_PREP: Entry = e("attention", "q_prep");
    pub const ROPE_HEADS: Entry = e("attention", "rope_heads");
    pub const KV_PREP: Entry = e("attention", "kv_prep");
    pub const COMPRESSOR_UPDATE: Entry = e("attention", "compressor_update");
    pub const INDEXER_SCORES: Entry = e("indexer", "indexer_scores");
    pub const INDEXER_SCORES_K1: Entry = e("indexer", "indexer_scores_k1");
    pub const INDEXER_SCORES_K4: Entry = e("indexer", "indexer_scores_k4");
    pub const INDEXER_SCORES_MMA: Entry = e("indexer", "indexer_scores_mma");
    pub const TOPK_SELECT: Entry = e("indexer", "topk_select");
    pub const TOPK_SELECT_WARP: Entry = e("indexer", "topk_select_warp");
    pub const SPARSE_ATTN_PARTIAL: Entry = e("attention", "sparse_attn_partial");
    pub const SPARSE_ATTN_PARTIAL_H16: Entry = e("attention", "sparse_attn_partial_h16");
    pub const SPARSE_ATTN_WG: Entry = e("attention_wg", "sparse_attn_wg");
    /// `sparse_attn_wg` on q's bf16 image (`q_prep` with image = 1).
    pub const SPARSE_ATTN_WG_QI: Entry = e("attention_wg", "sparse_attn_wg_qi");
    pub const SPARSE_ATTN_COMBINE: Entry = e("attention", "sparse_attn_combine");
    pub const RING_STORE: Entry = e("attention", "ring_store");
    pub const ALL: [Entry; 16] = [
        Q_PREP,
        ROPE_HEADS,
        KV_PREP,
        COMPRESSOR_UPDATE,
        INDEXER_SCORES,
        INDEXER_SCORES_K1,
        INDEXER_SCORES_K4,
        INDEXER_SCORES_MMA,
        TOPK_SELECT,
        TOPK_SELECT_WARP,
        SPARSE_ATTN_PARTIAL,
        SPARSE_ATTN_PARTIAL_H16,
        SPARSE_ATTN_WG,
        SPARSE_ATTN_WG_QI,
        SPARSE_ATTN_COMBINE,
        RING_STORE,
    ];
    /// Heads per block, candidate rows per tile and threads of `sparse_attn_partial`, its
    /// largest head dim (which must also be a multiple of 16) and shared-row padding (bf16);
    /// `sparse_attn_partial_h16` takes `NARROW_HEADS` heads per block.
    pub const HEADS_PER_BLOCK: usize = 64;
    pub const NARROW_HEADS: usize = 16;
    pub const TILE_ROWS: usize = 32;
    pub const THREADS: usize = 512;
    pub const MAX_HEAD_DIM: usize = 512;
    pub const ROW_PAD: usize = 8;
    /// Most splits `sparse_attn_combine` merges (its shared weights).
    pub const MAX_SPLITS: usize = 256;
    /// KV tiles in flight per block and the padded score-row length (floats).
    pub const KV_BUFFERS: usize = 2;
    pub const SCORE_LD: usize = 40;
    /// `sparse_attn_wg` (sm_90): its head count per block and head dim (the only shape it
    /// takes), threads, and shared memory before the split's top-k indices (q's two parts, two
    /// KV tiles, two score partials; plus up to 1024 bytes to align the base).
    pub const WG_HEADS: usize = 64;
    pub const WG_HEAD_DIM: usize = 512;
    pub const WG_THREADS: usize = 256;
    pub const WG_SMEM_FIXED: usize = 2 * WG_HEADS * WG_HEAD_DIM * 2
        + 2 * TILE_ROWS * WG_HEAD_DIM * 2
        + 2 * WG_HEADS * SCORE_LD * 4
        + 1024;
    /// Largest indexer head count the row kernel `indexer_scores` holds in registers.
    pub const INDEXER_MAX_HEADS: usize = 64;
    /// Indexer heads per warp in the tiled `indexer_scores_k*` (a group of query heads whose
    /// scores one warp accumulates in registers, KPL keys per lane).
    pub const INDEXER_HEADS_PER_WARP: usize = 8;
    /// `indexer_scores_mma`: keys per tile, the head dim it takes, its padded shared row
    /// (bf16) and most heads (tiles of 16).
    pub const INDEXER_MMA_KEYS: usize = 64;
    pub const INDEXER_MMA_DIM: usize = 128;
    pub const INDEXER_MMA_LD: usize = 136;
    pub const INDEXER_MMA_HEADS: usize = 64;
}

pub mod moe {
    use super::{Entry, e};
    pub const MOE_ROUTE: Entry = e("moe", "moe_route");
    pub const MOE_PLAN: Entry = e("moe", "moe_plan");
    pub const PLAN_IDENTITY: Entry = e("moe", "plan_identity");
    pub const MOE_COMBINE: Entry = e("moe", "moe_combine");
    pub const MOE_ROUTE_PLAN: Entry = e("moe", "moe_route_plan");
    pub const ALL: [Entry; 5] = [
        MOE_ROUTE,
        MOE_PLAN,
        PLAN_IDENTITY,
        MOE_COMBINE,
        MOE_ROUTE_PLAN,
    ];
    /// Limits of `moe_route`.
    pub const MAX_EXPERTS: usize = 384;
    pub const MAX_TOP_K: usize = 16;
}

pub mod sample {
    use super::{Entry, e};
    pub const SAMPLE_ROWS: Entry = e("sample", "sample_rows");
    pub const ALL: [Entry; 1] = [SAMPLE_ROWS];
    pub const MAX_BANNED: usize = 32;
    pub const THREADS: usize = 1024;
}

pub mod util {
    use super::{Entry, e};
    pub const FILL_BYTES: Entry = e("util", "fill_bytes");
    pub const FILL_VALUES: Entry = e("util", "fill_values");
    pub const FILL_INTS: Entry = e("util", "fill_ints");
    pub const COPY_U128: Entry = e("util", "copy_u128");
    pub const PREFETCH_L2: Entry = e("util", "prefetch_l2_ranges");
    pub const PREFETCH_L2_EXPERTS: Entry = e("util", "prefetch_l2_experts");
    pub const PROBE_READ: Entry = e("util", "probe_read");
    pub const ALL: [Entry; 7] = [
        FILL_BYTES,
        FILL_VALUES,
        FILL_INTS,
        COPY_U128,
        PREFETCH_L2,
        PREFETCH_L2_EXPERTS,
        PROBE_READ,
    ];
    /// Bytes per bulk L2 prefetch of the prefetch kernels (common.cuh PREFETCH_PIECE).
    pub const PREFETCH_PIECE: usize = 4096;
    /// Threads per block of `prefetch_l2_ranges` (util.cu PREFETCH_THREADS; one piece each).
    pub const PREFETCH_THREADS: usize = 256;
}

/// Every hand-written (not macro-generated) entry point.
pub fn named_entries() -> Vec<Entry> {
    let mut v = vec![GEMM_REDUCE, GEMM_SWIGLU, ACT_QUANT_ROWS];
    v.extend(mhc::ALL);
    v.extend(attention::ALL);
    v.extend(moe::ALL);
    v.extend(sample::ALL);
    v.extend(util::ALL);
    v
}

/// Every entry point of every module, with its module name.
pub fn all_entries() -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = Vec::new();
    for (m, names) in [
        (LINEAR, linear_entries()),
        (LINEAR_STREAM, stream_entries()),
        (LINEAR_GEMM, gemm_entries()),
        (LINEAR_WG, linear_wg_entries()),
    ] {
        v.extend(names.into_iter().map(|n| (m.name, n)));
    }
    v.extend(
        named_entries()
            .into_iter()
            .map(|e| (e.module, e.name.to_string())),
    );
    v
}

pub fn module(name: &str) -> Option<Module> {
    MODULES.iter().copied().find(|m| m.name == name)
}

#[cfg(test)]
mod tests;
