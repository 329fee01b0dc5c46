//! CPU checks that the kernel sources and this crate agree: every entry point is defined, the
//! macro-generated names match, the constants mirror the `#define`s.

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
    check_format_macros(LINEAR_WG, "LWG_FORMAT", &LINEAR_WG_FORMATS);
    for n in LINEAR_WG_TOKENS {
        assert!(
            LINEAR_WG
                .source
                .contains(&format!("LWG_ENTRY(NAME, FMT, {n})"))
        );
    }
    assert!(LINEAR_WG.source.contains("linear_wg_##NAME##_n##NB("));
    assert_eq!(
        linear_wg_entries().len(),
        LINEAR_WG_FORMATS.len() * LINEAR_WG_TOKENS.len()
    );
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
        (LINEAR_WG.source, "#define LWG_ROWS", linear::WG_ROWS),
        (LINEAR_WG.source, "#define LWG_STAGES", linear::WG_STAGES),
        (
            LINEAR_WG.source,
            "#define LWG_STAGES_N64",
            linear::WG_STAGES_N64,
        ),
        (LINEAR_WG.source, "#define LWG_THREADS", linear::WG_THREADS),
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
