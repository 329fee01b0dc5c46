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
pub const ATTENTION: Module = Module {
    name: "attention",
    headers: ATTENTION_SHARED,
    source: include_str!("../cuda/attention.cu"),
};
/// The sparse decode attention on warpgroup MMAs (sm_90, compiled as sm_90a).
pub const ATTENTION_WG: Module = Module {
    name: "attention_wg",
    headers: ATTENTION_SHARED,
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
pub const MODULES: [Module; 10] = [
    LINEAR,
    LINEAR_STREAM,
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

const fn e(module: &'static str, name: &'static str) -> Entry {
    Entry { module, name }
}

/// Weight storage formats of the linear kernels, in the order of `linear_formats.cuh`'s `FMT_*`.
/// `nvfp4t` and `mxfp4t` are the FP4 formats in the tiled layout of `fp4_tiles.rs`.
pub const LINEAR_FORMATS: [&str; 10] = [
    "bf16",
    "f32",
    "f16",
    "fp8b_e8m0",
    "fp8b_f32",
    "fp8t",
    "nvfp4",
    "mxfp4",
    "nvfp4t",
    "mxfp4t",
];

/// Token tiles (×8 tokens) the tensor-core linear kernels are instantiated for.
pub const LINEAR_TILES: [usize; 4] = [1, 2, 4, 8];

/// Linear-family entry points are generated by macros per (format, tile); their names.
pub fn linear_entry(kind: &str, format: &str, tiles: usize) -> String {
    format!("{kind}_{format}_nt{tiles}")
}

/// Formats of the persistent dense linear at two token groups (`linear_{format}_nt2_p`,
/// linear.cu `LINEAR_PERSIST_ENTRY`).
pub const LINEAR_PERSIST_FORMATS: [&str; 3] = ["fp8b_e8m0", "fp8b_f32", "fp8t"];

/// The persistent dense linear of `format` at two token groups.
pub fn linear_persist_entry(format: &str) -> String {
    format!("linear_{format}_nt2_p")
}

/// The warp-per-tile decode variant of a grouped expert kernel (`moe_up_w_*`, `moe_down_w_*`).
pub fn warp_entry(kind: &str, format: &str) -> String {
    format!("{kind}_w_{format}")
}

/// Formats of the streamed decode kernels (`stream_*`, sm_90+): the row-major 2- and 1-byte
/// formats and the tiled FP4 ones.
pub const STREAM_FORMATS: [&str; 7] = [
    "bf16",
    "f16",
    "fp8b_e8m0",
    "fp8b_f32",
    "fp8t",
    "nvfp4t",
    "mxfp4t",
];

/// Token tiles of the streamed dense linear.
pub const STREAM_TILES: [usize; 2] = [1, 2];

/// A streamed decode kernel: `stream_up_{format}`, `stream_down_{format}`.
pub fn stream_entry(kind: &str, format: &str) -> String {
    format!("stream_{kind}_{format}")
}

/// The streamed dense linear for `tiles` token groups.
pub fn stream_linear_entry(format: &str, tiles: usize) -> String {
    format!("stream_linear_{format}_nt{tiles}")
}

/// FP8 formats with a second streamed dense linear that decodes the codes to bf16 by integer
/// ops (`stream_linear_raw_*`, no per-tile conversion of the activations).
pub const STREAM_RAW_FORMATS: [&str; 3] = ["fp8b_e8m0", "fp8b_f32", "fp8t"];

/// The streamed dense linear with FP8 decoded to bf16, for `tiles` token groups.
pub fn stream_raw_entry(format: &str, tiles: usize) -> String {
    format!("stream_linear_raw_{format}_nt{tiles}")
}

/// Formats of the tiled GEMM (`gemm_*`: many tokens, decode batches beyond 32 and prefill).
pub const GEMM_FORMATS: [&str; 4] = ["bf16", "fp8b_e8m0", "fp8b_f32", "fp8t"];

/// Tokens per block of the tiled GEMM's instantiations.
pub const GEMM_TOKENS: [usize; 2] = [64, 128];

/// The split tiled GEMM's ordered sum of partial tiles.
pub const GEMM_REDUCE: Entry = e("linear_gemm", "gemm_reduce");

/// The shared expert's SwiGLU after its paired GEMM.
pub const GEMM_SWIGLU: Entry = e("linear_gemm", "gemm_swiglu");

/// The tiled GEMM for `format` with blocks of `tokens` tokens.
pub fn gemm_entry(format: &str, tokens: usize) -> String {
    format!("gemm_{format}_m{tokens}")
}

/// The macro-generated entry names of linear.cu: `linear_*`, `moe_up_*`, `moe_down_*`, their
/// warp variants, `linear_f32x_*`.
pub fn linear_entries() -> Vec<String> {
    let mut v = Vec::new();
    for f in LINEAR_FORMATS {
        for nt in LINEAR_TILES {
            for kind in ["linear", "moe_up", "moe_down"] {
                v.push(linear_entry(kind, f, nt));
            }
        }
        for kind in ["moe_up", "moe_down"] {
            v.push(warp_entry(kind, f));
        }
        v.push(format!("linear_f32x_{f}"));
    }
    v.extend(
        LINEAR_PERSIST_FORMATS
            .iter()
            .map(|f| linear_persist_entry(f)),
    );
    v
}

/// The macro-generated entry names of linear_stream.cu: `stream_linear_*`, `stream_up_*`,
/// `stream_down_*`.
pub fn stream_entries() -> Vec<String> {
    let mut v = Vec::new();
    for f in STREAM_FORMATS {
        for nt in STREAM_TILES {
            v.push(stream_linear_entry(f, nt));
        }
        for kind in ["up", "down"] {
            v.push(stream_entry(kind, f));
        }
    }
    for f in STREAM_RAW_FORMATS {
        for nt in STREAM_TILES {
            v.push(stream_raw_entry(f, nt));
        }
    }
    v
}

/// The macro-generated entry names of linear_gemm.cu: `gemm_{format}_m{tokens}`.
pub fn gemm_entries() -> Vec<String> {
    GEMM_FORMATS
        .iter()
        .flat_map(|f| GEMM_TOKENS.iter().map(move |&m| gemm_entry(f, m)))
        .collect()
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
    pub const SPARSE_ATTN_COMBINE: Entry = e("attention", "sparse_attn_combine");
    pub const RING_STORE: Entry = e("attention", "ring_store");
    pub const ALL: [Entry; 15] = [
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
    let mut v = vec![GEMM_REDUCE, GEMM_SWIGLU];
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
mod tests {
    use super::*;

    /// Each named entry is defined as `extern "C" __global__ void [bounds] NAME(` in its module.
    #[test]
    fn every_named_entry_is_defined_in_its_module() {
        for e in named_entries() {
            let m = module(e.module).unwrap_or_else(|| panic!("no module {}", e.module));
            let found = m.source.lines().any(|l| {
                l.contains("extern \"C\" __global__ void") && l.contains(&format!(" {}(", e.name))
            });
            assert!(found, "{}.cu does not define `{}`", e.module, e.name);
        }
    }

    /// The macro-generated linear entries: one `LINEAR_FORMAT(name, FMT_*)` and one
    /// `F32X_ENTRY(name, ...)` per format, the tile list matches, and the macros paste the
    /// names `linear_entry` builds.
    #[test]
    fn linear_formats_and_tiles_match_the_macros() {
        let src = LINEAR.source;
        let full = LINEAR.full_source();
        for (i, f) in LINEAR_FORMATS.iter().enumerate() {
            let line = src
                .lines()
                .find(|l| l.starts_with(&format!("LINEAR_FORMAT({f},")))
                .unwrap_or_else(|| panic!("linear.cu has no LINEAR_FORMAT({f}, …)"));
            let fmt = line.split(',').nth(1).unwrap().trim().trim_end_matches(')');
            let def = format!("#define {fmt} {i}");
            assert!(full.contains(&def), "{fmt} must be {i} (`{def}`)");
            assert!(src.contains(&format!("F32X_ENTRY({f}, {fmt})")));
        }
        for nt in LINEAR_TILES {
            assert!(src.contains(&format!("LINEAR_ENTRY(NAME, FMT, {nt})")));
        }
        for kind in ["linear", "moe_up", "moe_down"] {
            assert!(src.contains(&format!("{kind}_##NAME##_nt##NT(")));
        }
        assert!(src.contains("linear_f32x_##NAME("));
        for kind in ["moe_up", "moe_down"] {
            assert!(src.contains(&format!("{kind}_w_##NAME(")));
        }
        assert!(src.contains("    WARP_ENTRY(NAME, FMT)"));
        assert_eq!(
            linear_entries().len(),
            LINEAR_FORMATS.len() * (3 * LINEAR_TILES.len() + 3) + LINEAR_PERSIST_FORMATS.len()
        );
        assert!(src.contains("linear_##NAME##_nt2_p("));
        for f in LINEAR_PERSIST_FORMATS {
            let code = LINEAR_FORMATS.iter().position(|x| *x == f).unwrap();
            let line = src
                .lines()
                .find(|l| l.starts_with(&format!("LINEAR_PERSIST_ENTRY({f},")))
                .unwrap_or_else(|| panic!("linear.cu has no LINEAR_PERSIST_ENTRY({f}, …)"));
            let fmt = line.split(',').nth(1).unwrap().trim().trim_end_matches(')');
            assert!(full.contains(&format!("#define {fmt} {code}")));
        }
    }

    /// `{macro}({f}, FMT_X)` instantiates each format of a linear module's list, and FMT_X is
    /// that format's code.
    fn check_format_macros(m: Module, macro_name: &str, formats: &[&str]) {
        let full = m.full_source();
        for f in formats {
            let code = LINEAR_FORMATS.iter().position(|x| x == f).unwrap();
            let def = m
                .source
                .lines()
                .find(|l| l.starts_with(&format!("{macro_name}({f},")))
                .unwrap_or_else(|| panic!("{}.cu has no {macro_name}({f}, …)", m.name));
            let name = def.split(',').nth(1).unwrap().trim().trim_end_matches(')');
            assert!(full.contains(&format!("#define {name} {code}")));
        }
    }

    /// The streamed and GEMM modules' macros paste the names `stream_entries` and
    /// `gemm_entries` build, for every format of their lists.
    #[test]
    fn stream_and_gemm_macros_match_their_entry_lists() {
        check_format_macros(LINEAR_STREAM, "STREAM_ENTRY", &STREAM_FORMATS);
        for kind in [
            "stream_linear_##NAME##_nt1(",
            "stream_linear_##NAME##_nt2(",
            "stream_up_##NAME(",
            "stream_down_##NAME(",
        ] {
            assert!(LINEAR_STREAM.source.contains(kind), "{kind}");
        }
        check_format_macros(LINEAR_STREAM, "STREAM_RAW_ENTRY", &STREAM_RAW_FORMATS);
        for nt in STREAM_TILES {
            let paste = format!("stream_linear_raw_##NAME##_nt{nt}(");
            assert!(LINEAR_STREAM.source.contains(&paste), "{paste}");
        }
        assert_eq!(
            stream_entries().len(),
            STREAM_FORMATS.len() * (STREAM_TILES.len() + 2)
                + STREAM_RAW_FORMATS.len() * STREAM_TILES.len()
        );
        check_format_macros(LINEAR_GEMM, "GEMM_ENTRY", &GEMM_FORMATS);
        for m in GEMM_TOKENS {
            assert!(LINEAR_GEMM.source.contains(&format!("gemm_##NAME##_m{m}(")));
            assert!(
                LINEAR_GEMM
                    .source
                    .contains(&format!("gemm_kernel<FMT, {m}>"))
            );
        }
        assert_eq!(gemm_entries().len(), GEMM_FORMATS.len() * GEMM_TOKENS.len());
    }

    #[test]
    fn constants_match_the_sources() {
        let checks = [
            (
                ATTENTION.source,
                "#define ATT_HG",
                attention::HEADS_PER_BLOCK,
            ),
            (ATTENTION.source, "#define ATT_TILE", attention::TILE_ROWS),
            (
                INDEXER.source,
                "#define IXM_TK",
                attention::INDEXER_MMA_KEYS,
            ),
            (INDEXER.source, "#define IXM_DI", attention::INDEXER_MMA_DIM),
            (INDEXER.source, "#define IXM_LD", attention::INDEXER_MMA_LD),
            (
                INDEXER.source,
                "#define IXM_HEADS",
                attention::INDEXER_MMA_HEADS,
            ),
            (ATTENTION.source, "#define ATT_THREADS", attention::THREADS),
            (
                ATTENTION.source,
                "#define ATT_MAXD",
                attention::MAX_HEAD_DIM,
            ),
            (ATTENTION.source, "#define ATT_PAD", attention::ROW_PAD),
            (ATTENTION.source, "#define ATT_NBUF", attention::KV_BUFFERS),
            (ATTENTION.source, "#define ATT_SLD", attention::SCORE_LD),
            (ATTENTION_WG.source, "#define AWG_HG", attention::WG_HEADS),
            (ATTENTION_WG.source, "#define AWG_D", attention::WG_HEAD_DIM),
            (
                ATTENTION_WG.source,
                "#define AWG_TILE",
                attention::TILE_ROWS,
            ),
            (
                ATTENTION_WG.source,
                "#define AWG_THREADS",
                attention::WG_THREADS,
            ),
            (ATTENTION_WG.source, "#define AWG_SLD", attention::SCORE_LD),
            (
                INDEXER.source,
                "#define IDX_MAXH",
                attention::INDEXER_MAX_HEADS,
            ),
            (
                INDEXER.source,
                "#define IDX_HW",
                attention::INDEXER_HEADS_PER_WARP,
            ),
            (
                ATTENTION.source,
                "#define ATT_MAX_SPLITS",
                attention::MAX_SPLITS,
            ),
            (MHC.source, "#define MIX_PARTS", mhc::MIX_PARTS),
            (
                LINEAR_HEADERS[1].1,
                "#define SPLIT_TILES",
                linear::SPLIT_TILES,
            ),
            (
                LINEAR_HEADERS[1].1,
                "#define SPLIT_PARTS",
                linear::SPLIT_PARTS,
            ),
            (
                LINEAR_STREAM.source,
                "#define STREAM_WARPS",
                linear::STREAM_WARPS,
            ),
            (LINEAR_GEMM.source, "#define GEMM_BK", linear::GEMM_BK),
            (
                LINEAR_GEMM.source,
                "#define GEMM_STAGES",
                linear::GEMM_STAGES,
            ),
            (MHC.source, "#define PRE_THREADS", mhc::PRE_THREADS),
            (MHC.source, "#define POST_COLS", mhc::POST_COLS),
            (MHC.source, "#define POST_TOK", mhc::POST_TOK),
            (MHC.source, "#define ROWS_COLS", mhc::ROWS_COLS),
            (MHC.source, "#define ROWS_TOK", mhc::ROWS_TOK),
            (MOE.source, "#define ROUTE_MAXE", moe::MAX_EXPERTS),
            (MOE.source, "#define ROUTE_MAXK", moe::MAX_TOP_K),
            (SAMPLE.source, "#define MAX_BANNED", sample::MAX_BANNED),
            (SAMPLE.source, "#define SAMPLE_THREADS", sample::THREADS),
            (COMMON, "#define PREFETCH_PIECE", util::PREFETCH_PIECE),
            (
                UTIL.source,
                "#define PREFETCH_THREADS",
                util::PREFETCH_THREADS,
            ),
        ];
        for (src, key, v) in checks {
            let line = src
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("missing `{key}`"));
            let n: usize = line[key.len()..]
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(n, v, "`{key}` is {n}, the registry says {v}");
        }
    }

    /// The host may launch every kernel as a programmatic dependent (sm_90+, `AMDAHL_PDL=1`),
    /// which is safe only because each kernel body waits for its predecessor first:
    /// `pdl_enter();` is the first statement of every `__global__` function, after nothing but a
    /// weight prefetch (`*_prefetch<FMT>(...)`, empty unless AMDAHL_PDL=2), or, for the streamed
    /// dense linears, `pdl_enter_after_weights();` (in AMDAHL_PDL=2 builds their core waits after
    /// issuing its first weight stages; otherwise it is `pdl_enter()`).
    #[test]
    fn every_kernel_waits_for_its_predecessor_first() {
        let mut kernels = 0;
        for m in MODULES {
            let src = m.source;
            let mut rest = src;
            while let Some(at) = rest.find("__global__") {
                let after = &rest[at..];
                // The body starts at the first `{` after the parameter list's closing `)`.
                let open = after
                    .find(") {")
                    .unwrap_or_else(|| panic!("{}.cu: no body after __global__", m.name));
                let body = after[open + 3..].trim_start_matches([' ', '\\', '\n']);
                let mut stmts = body
                    .split(';')
                    .map(|s| s.trim_start_matches([' ', '\\', '\n']).trim());
                let mut first = stmts.next().unwrap_or("");
                // Before it only weights, which no kernel writes, may be read: L2 prefetches,
                // or mHC mixing weights staged in shared memory (mhc.cu `hc_post_rows`).
                while first.starts_with("linear_prefetch<")
                    || first.starts_with("f32x_prefetch<")
                    || first.starts_with("rows_stage_fn(")
                {
                    first = stmts.next().unwrap_or("");
                }
                if first == "pdl_enter_after_weights()" {
                    assert_eq!(m.name, "linear_stream", "pdl_enter_after_weights() outside");
                    first = "pdl_enter()";
                }
                assert_eq!(
                    first,
                    "pdl_enter()",
                    "{}.cu: a kernel does not start with pdl_enter(): {}",
                    m.name,
                    &after[..open.min(160)]
                );
                kernels += 1;
                rest = &after[open..];
            }
        }
        assert!(kernels >= 38, "found only {kernels} kernels");
    }

    #[test]
    fn full_source_starts_with_the_common_header() {
        for m in MODULES {
            let s = m.full_source();
            assert!(s.starts_with(COMMON));
            assert!(s.contains(&format!("#line 1 \"{}.cu\"", m.name)));
        }
    }
}
