//! Attention pieces at V4-Flash widths (64 heads × 512, window 128, top-512 of CSA entries,
//! 64 × 128 indexer) against the CPU reference: split-K sparse attention with sinks and the
//! inverse rope, for decode batches and a prefill chunk whose window straddles the ring; the
//! streaming compressor fed in a prefill chunk then token by token; indexer scores and top-k.

use super::super::{gpu, rel_l2, to_bf16_bits};
use super::randn;
use crate::config::{AttnKind, ModelConfig, RopeConfig};
use crate::device::cuda::gpu::{DevBuf, Gpu};
use crate::device::cuda::launch::{self as k, AttnArgs, CompArgs, Rope, SeqMeta};
use crate::device::cuda::state::{attn_chunk, attn_splits};
use crate::kv_cache::CompressorState;
use crate::model::deepseek_v4::synthetic::TinySpec;
use crate::ops::attention::indexer::top_k;
use crate::ops::attention::sparse::attend;
use crate::ops::attention::{Compressor, Indexer};
use crate::ops::linear::Linear;
use crate::ops::rope::{self, RopeTable};
use crate::rng::Rng;
use amdahl_kernels::attention as ka;

const RD: usize = 64;

fn table() -> RopeTable {
    RopeTable::new(
        &RopeConfig {
            theta: 160_000.0,
            yarn: None,
            attention_factor: 1.0,
        },
        RD,
    )
}

fn rope_dev(g: &Gpu) -> (DevBuf, Rope) {
    let cfg = RopeConfig {
        theta: 160_000.0,
        yarn: None,
        attention_factor: 1.0,
    };
    let inv: Vec<f32> = cfg.inv_freq(RD).iter().map(|&f| f as f32).collect();
    let b = g.upload(&inv).unwrap();
    let r = Rope {
        inv_freq: b.ptr(),
        dim: RD,
        scale: 1.0,
    };
    (b, r)
}

fn bf(v: &[f32]) -> Vec<f32> {
    super::super::bf16_round(v)
}

/// Step metadata: per sequence (slot, start, n); rows laid out in order.
struct Meta {
    bufs: Vec<DevBuf>,
    rows: Vec<(usize, usize)>, // (seq, pos) per row
}

impl Meta {
    fn new(g: &Gpu, seqs: &[(usize, usize, usize)]) -> Self {
        let (mut row_seq, mut row_pos, mut slot, mut start, mut n, mut row0) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut rows = vec![];
        let mut r = 0;
        for (i, &(s, st, cnt)) in seqs.iter().enumerate() {
            slot.push(s as i32);
            start.push(st as i32);
            n.push(cnt as i32);
            row0.push(r as i32);
            for j in 0..cnt {
                row_seq.push(i as i32);
                row_pos.push((st + j) as i32);
                rows.push((i, st + j));
            }
            r += cnt;
        }
        let bufs = [row_seq, row_pos, slot, start, n, row0]
            .iter()
            .map(|v| g.upload(v).unwrap())
            .collect();
        Self { bufs, rows }
    }

    fn seq(&self) -> SeqMeta {
        SeqMeta {
            row_seq: self.bufs[0].ptr(),
            row_pos: self.bufs[1].ptr(),
            seq_slot: self.bufs[2].ptr(),
            seq_start: self.bufs[3].ptr(),
            seq_n: self.bufs[4].ptr(),
            seq_row0: self.bufs[5].ptr(),
        }
    }
}

/// q rows [rows][heads][d] f32 as `q_prep`'s image: per head its bf16 part, then the bf16 of
/// the remainder (`q_split4`), 2·d bf16 in the head's f32 span.
fn q_image(q: &[f32], d: usize) -> Vec<u16> {
    let mut img = Vec::with_capacity(2 * q.len());
    for head in q.chunks(d) {
        let hi: Vec<half::bf16> = head.iter().map(|&x| half::bf16::from_f32(x)).collect();
        img.extend(hi.iter().map(|b| b.to_bits()));
        img.extend(
            head.iter()
                .zip(&hi)
                .map(|(&x, b)| half::bf16::from_f32(x - b.to_f32()).to_bits()),
        );
    }
    img
}

fn cfg_for(heads: usize, head_dim: usize, window: usize, topk: usize) -> ModelConfig {
    let spec = TinySpec {
        heads,
        head_dim,
        rope_dim: RD,
        window,
        index_topk: topk,
        index_dim: RD,
        hidden: 64,
        ..TinySpec::default()
    };
    ModelConfig::from_json_str(&spec.config_json().to_string(), "test").unwrap()
}

#[test]
fn sparse_attention_matches_the_cpu_at_v4_widths() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(21);
    let (h, d, w, max_len) = (64usize, 512usize, 128usize, 8192usize);
    let slots = 4;
    let (_rb, rope) = rope_dev(&g);
    let tab = table();
    let sinks = randn(&mut rng, h, 1.0);
    let sinks_b = g.upload(&sinks).unwrap();
    // (A top-1024 CSA row has 36 splits: more than the combine holds in registers.)
    for (label, kind, seqs, topk) in [
        (
            "csa decode",
            AttnKind::Csa { ratio: 4 },
            vec![(0usize, 4000usize, 1usize), (1, 130, 1), (2, 7, 1)],
            512usize,
        ),
        (
            "csa decode top-1024",
            AttnKind::Csa { ratio: 4 },
            vec![(3, 8000, 1)],
            1024,
        ),
        (
            "hca prefill chunk",
            AttnKind::Hca { ratio: 128 },
            vec![(1, 300, 64)],
            512,
        ),
        (
            "sliding decode x16",
            AttnKind::Sliding,
            (0..16).map(|i| (i % 3, 50 + 40 * i, 1)).collect(),
            512,
        ),
    ] {
        let ratio = kind.ratio().max(1);
        let max_e = max_len / ratio;
        let ring = bf(&randn(&mut rng, slots * w * d, 1.0));
        let entries = bf(&randn(&mut rng, slots * max_e * d, 1.0));
        let meta = Meta::new(&g, &seqs);
        let t = meta.rows.len();
        let kv_step = bf(&randn(&mut rng, t * d, 1.0));
        let q = randn(&mut rng, t * h * d, 0.05);
        // Top-k entry lists (CSA): distinct random visible entries.
        let mut tk = vec![-1i32; t * topk];
        for (r, &(_, p)) in meta.rows.iter().enumerate() {
            let n_vis = ((p + 1) / ratio).min(max_e);
            let mut idx: Vec<usize> = (0..n_vis).collect();
            for i in (1..idx.len()).rev() {
                idx.swap(i, rng.below(i + 1));
            }
            for (j, &e) in idx.iter().take(topk.min(n_vis)).enumerate() {
                tk[r * topk + j] = e as i32;
            }
        }
        // CPU reference.
        let mut want = vec![0f32; t * h * d];
        for (r, &(si, p)) in meta.rows.iter().enumerate() {
            let (slot, start, _) = seqs[si];
            let row0: usize = seqs[..si].iter().map(|s| s.2).sum();
            let n_win = w.min(p + 1);
            let mut cand: Vec<&[f32]> = Vec::new();
            for pos in p + 1 - n_win..=p {
                cand.push(if pos >= start {
                    &kv_step[(row0 + pos - start) * d..(row0 + pos - start + 1) * d]
                } else {
                    let s = (slot * w + pos % w) * d;
                    &ring[s..s + d]
                });
            }
            let n_vis = ((p + 1) / ratio).min(max_e);
            let comp: Vec<usize> = match kind {
                AttnKind::Sliding => vec![],
                AttnKind::Hca { .. } => (0..n_vis).collect(),
                AttnKind::Csa { .. } => tk[r * topk..(r + 1) * topk]
                    .iter()
                    .filter(|&&x| x >= 0)
                    .map(|&x| x as usize)
                    .collect(),
            };
            for e in comp {
                let s = (slot * max_e + e) * d;
                cand.push(&entries[s..s + d]);
            }
            let a = tab.angles(p);
            for hh in 0..h {
                let o = &mut want[(r * h + hh) * d..(r * h + hh + 1) * d];
                attend(
                    &q[(r * h + hh) * d..(r * h + hh + 1) * d],
                    &cand,
                    sinks[hh],
                    (d as f32).powf(-0.5),
                    o,
                );
                rope::apply(o, &a, true);
            }
        }
        // GPU.
        let cfg = cfg_for(h, d, w, topk);
        let (splits, chunk) = {
            let s = attn_splits(&cfg, kind, max_len, t, g.info.sms);
            (s, attn_chunk(&cfg, kind, max_len, s))
        };
        let ring_b = g.upload(&to_bf16_bits(&ring)).unwrap();
        let ent_b = g.upload(&to_bf16_bits(&entries)).unwrap();
        let kv_b = g.upload(&to_bf16_bits(&kv_step)).unwrap();
        let q_b = g.upload(&q).unwrap();
        let qi_b = g.upload(&q_image(&q, d)).unwrap();
        let tk_b = g.upload(&tk).unwrap();
        let o_part = super::poisoned(&g, t * splits * h * d * 4);
        let ml_part = super::poisoned(&g, t * splits * h * 2 * 4);
        let out = super::poisoned(&g, t * h * d * 2);
        let aa = AttnArgs {
            q: q_b.ptr(),
            kv_step: kv_b.ptr(),
            ring: ring_b.ptr(),
            entries: ent_b.ptr(),
            topk_idx: tk_b.ptr(),
            topk,
            kind: match kind {
                AttnKind::Sliding => 0,
                AttnKind::Hca { .. } => 1,
                AttnKind::Csa { .. } => 2,
            },
            ratio,
            window: w,
            max_entries: max_e,
            heads: h,
            head_dim: d,
            scale: (d as f32).powf(-0.5),
            chunk,
            splits,
            o_part: o_part.ptr(),
            ml_part: ml_part.ptr(),
            q_image: false,
        };
        // Every kernel: 64 heads per block on warpgroup MMAs (sm_90; q as f32 rows and as
        // q_prep's image) and on m16n8k16 MMAs, and 16 heads per block (what batch 1 gets).
        let wg = g.info.compute_capability == (9, 0);
        let kernels = [
            (ka::HEADS_PER_BLOCK, true, true),
            (ka::HEADS_PER_BLOCK, true, false),
            (ka::HEADS_PER_BLOCK, false, false),
            (ka::NARROW_HEADS, false, false),
        ];
        for (hg, on, image) in kernels.into_iter().filter(|&(_, on, _)| wg || !on) {
            k::force_attn_heads(Some(hg));
            k::force_attn_wg(on);
            assert_eq!(k::attn_heads_per_block(&g, &aa, t), hg);
            assert_eq!(k::attn_uses_wg(&g, &aa, hg), on);
            let hg = match (on, image) {
                (true, true) => "64 (wgmma, q image)".to_string(),
                (true, false) => "64 (wgmma)".to_string(),
                _ => hg.to_string(),
            };
            let aa = AttnArgs {
                q: if image { qi_b.ptr() } else { q_b.ptr() },
                q_image: image,
                ..aa
            };
            g.memset(&out, 0xff).unwrap();
            k::sparse_attn(&g, aa, meta.seq(), t).unwrap();
            k::attn_combine(
                &g,
                aa,
                sinks_b.ptr(),
                meta.seq().row_pos,
                rope,
                out.ptr(),
                t,
            )
            .unwrap();
            let raw: Vec<u16> = g.read(&out, 0, t * h * d).unwrap();
            let got: Vec<f32> = raw
                .iter()
                .map(|&b| half::bf16::from_bits(b).to_f32())
                .collect();
            let e = rel_l2(&got, &want);
            println!(
                "attention {label} ({hg} heads per block): {t} rows, {splits} splits of {chunk}: rel l2 {e:.2e}"
            );
            assert!(
                e <= super::TOL,
                "attention {label}, {hg} heads per block: {e:.3e}"
            );
        }
        // An image where the blocks would not run sparse_attn_wg is refused, not misread.
        k::force_attn_wg(false);
        let img = AttnArgs {
            q_image: true,
            ..aa
        };
        assert!(k::sparse_attn(&g, img, meta.seq(), t).is_err());
        k::force_attn_heads(None);
        k::force_attn_wg(true);
    }
}

/// `q_prep` with image = 1 writes, bit for bit, the image of what it writes as f32 (the
/// rows normalized and roped in place, then split on the host), at V4-Flash widths, and
/// refuses widths it cannot hold.
#[test]
fn q_prep_image_is_its_f32_rows_split() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(8);
    let (h, d, t) = (64usize, 512usize, 3usize);
    let (_rb, rope) = rope_dev(&g);
    let q = randn(&mut rng, t * h * d, 1.0);
    let pos = g.upload(&[0i32, 77, 8191]).unwrap();
    let f32_b = g.upload(&q).unwrap();
    let img_b = g.upload(&q).unwrap();
    k::q_prep(&g, f32_b.ptr(), h, d, 1e-6, pos.ptr(), rope, false, t).unwrap();
    k::q_prep(&g, img_b.ptr(), h, d, 1e-6, pos.ptr(), rope, true, t).unwrap();
    let rows: Vec<f32> = g.read(&f32_b, 0, t * h * d).unwrap();
    let img: Vec<u16> = g.read(&img_b, 0, 2 * t * h * d).unwrap();
    let want = q_image(&rows, d);
    let diff = img.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{diff} of {} image halves differ", want.len());
    // The rows did change (normalized and roped), so the check compares real work.
    assert!(rows.iter().zip(&q).any(|(a, b)| a != b));
    assert!(k::q_prep(&g, img_b.ptr(), h, 514, 1e-6, pos.ptr(), rope, true, t).is_err());
}

#[test]
fn compressors_match_the_cpu_fed_in_chunks_then_tokens() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng::new(5);
    let (_rb, rope) = rope_dev(&g);
    let tab = table();
    for (dim, m, overlap, bf16_entries) in [
        (512usize, 4usize, true, true),
        (512, 128, false, true),
        (128, 4, true, false),
    ] {
        let width = if overlap { 2 * dim } else { dim };
        let comp = Compressor {
            wkv: Linear::from_f32(width, 8, vec![0.0; width * 8]),
            wgate: Linear::from_f32(width, 8, vec![0.0; width * 8]),
            ape: randn(&mut rng, m * width, 0.5),
            norm: randn(&mut rng, dim, 1.0),
            ratio: m,
            dim,
            overlap,
            eps: 1e-6,
        };
        let n_tok = 300;
        let kv = randn(&mut rng, n_tok * width, 1.0);
        let gate = randn(&mut rng, n_tok * width, 1.0);
        let mut st = CompressorState::default();
        for p in 0..n_tok {
            comp.push(
                &mut st,
                &kv[p * width..(p + 1) * width],
                &gate[p * width..(p + 1) * width],
                p,
                &tab,
            );
        }
        let max_e = 512;
        let slot = 2;
        let slots = 3;
        let nacc = if overlap { 3 } else { 1 };
        let state = super::poisoned(&g, slots * nacc * 3 * dim * 4);
        let esize = if bf16_entries { 2 } else { 4 };
        let entries = g.zeros(slots * max_e * dim * esize).unwrap();
        let ape = g.upload(&comp.ape).unwrap();
        let nw = g.upload(&comp.norm).unwrap();
        // A prefill chunk of 200 tokens, then one token per step.
        let mut at = 0;
        while at < n_tok {
            let n = if at == 0 { 200 } else { 1 };
            let meta = Meta::new(&g, &[(slot, at, n)]);
            let kb = g.upload(&kv[at * width..(at + n) * width]).unwrap();
            let gb = g.upload(&gate[at * width..(at + n) * width]).unwrap();
            k::compressor_update(
                &g,
                CompArgs {
                    ckv: kb.ptr(),
                    cgate: gb.ptr(),
                    width,
                    ape: ape.ptr(),
                    norm_w: nw.ptr(),
                    dim,
                    ratio: m,
                    overlap,
                    state: state.ptr(),
                    entries: entries.ptr(),
                    entries_bf16: bf16_entries,
                    max_entries: max_e,
                },
                1e-6,
                meta.seq(),
                rope,
                1,
            )
            .unwrap();
            g.sync().unwrap();
            at += n;
        }
        let ne = st.n_entries(dim);
        assert_eq!(ne, n_tok / m);
        let off = slot * max_e * dim;
        let got: Vec<f32> = if bf16_entries {
            let raw: Vec<u16> = g.read(&entries, off * 2, ne * dim).unwrap();
            raw.iter()
                .map(|&b| half::bf16::from_bits(b).to_f32())
                .collect()
        } else {
            g.read(&entries, off * 4, ne * dim).unwrap()
        };
        let e = rel_l2(&got, &st.entries);
        println!("compressor dim {dim} m {m} overlap {overlap}: {ne} entries, rel l2 {e:.2e}");
        assert!(
            e <= if bf16_entries { super::TOL } else { 1e-5 },
            "compressor {dim}/{m}: {e:.3e}"
        );
    }
}

#[test]
fn indexer_scores_and_topk_match_the_cpu() {
    let Some(g) = gpu() else { return };
    // Four rows and forty (of the FP32 tiled scores, four rows take the 32-key tiles, forty the
    // 128-key ones, blocks walking two tiles; the tensor-core blocks walk several 64-key tiles).
    let few = [
        (0usize, 8191usize, 1usize),
        (1, 5000, 1),
        (2, 2047, 1),
        (3, 100, 1),
    ];
    let many: Vec<(usize, usize, usize)> = (0..40)
        .map(|i| {
            (
                i,
                [8191, 6000, 4095, 2047, 1300, 511, 100, 40][i % 8] - i / 8,
                1,
            )
        })
        .collect();
    // Each kernel set (`Mma`: the scores on tensor cores, 64 heads × 128 fit them).
    assert!(k::indexer_mma_fits(64, 128));
    for v in [
        k::IndexerKernels::Rows,
        k::IndexerKernels::Tiles,
        k::IndexerKernels::Mma,
    ] {
        k::force_indexer_kernels(Some(v));
        println!("indexer kernels {v:?}");
        let mut kpls = Vec::new();
        // The tensor-core scores carry ~2^-17 relative error per q·k (bf16 high and low parts,
        // lo·lo dropped): up to ~1e-5 rel l2 on rows of few keys (9.8e-6 measured, H100), still
        // four orders below the reference's own FP4 fake-quant of q and k (model-spec §3.3);
        // the selection checks below are the same for every kernel set.
        let tol = if v == k::IndexerKernels::Mma {
            3e-5
        } else {
            1e-5
        };
        for (i, seqs) in [&few[..], &many[..]].into_iter().enumerate() {
            kpls.push(indexer_case(&g, seqs, 8 + i as u64, tol));
        }
        if v == k::IndexerKernels::Tiles {
            assert_eq!(kpls, [1, 4], "both indexer tile shapes ran");
        }
    }
    k::force_indexer_kernels(None);
}

/// The indexer scores (rel l2 within `tol`) and top-k of one decode row per sequence (slot,
/// position) against the CPU; returns the keys per lane the launcher chose.
fn indexer_case(g: &Gpu, seqs: &[(usize, usize, usize)], seed: u64, tol: f64) -> usize {
    let mut rng = Rng::new(seed);
    let (hi, di, m, topk, max_e) = (64usize, 128usize, 4usize, 512usize, 2048usize);
    let slots = seqs.len();
    let keys = randn(&mut rng, slots * max_e * di, 1.0);
    let meta = Meta::new(g, seqs);
    let t = seqs.len();
    let q = randn(&mut rng, t * hi * di, 1.0);
    let w = randn(&mut rng, t * hi, 1.0);
    let ix = Indexer {
        compressor: Compressor {
            wkv: Linear::from_f32(8, 8, vec![0.0; 64]),
            wgate: Linear::from_f32(8, 8, vec![0.0; 64]),
            ape: vec![],
            norm: vec![],
            ratio: m,
            dim: di,
            overlap: true,
            eps: 1e-6,
        },
        wq_b: Linear::from_f32(8, 8, vec![0.0; 64]),
        weights_proj: Linear::from_f32(8, 8, vec![0.0; 64]),
        heads: hi,
        dim: di,
        topk,
    };
    let kb = g.upload(&keys).unwrap();
    let qb = g.upload(&q).unwrap();
    let wb = g.upload(&w).unwrap();
    let scores = super::poisoned(g, t * max_e * 4);
    let out = super::poisoned(g, t * topk * 4);
    k::indexer_scores(
        g,
        qb.ptr(),
        wb.ptr(),
        kb.ptr(),
        hi,
        di,
        m,
        max_e,
        meta.seq(),
        scores.ptr(),
        t,
    )
    .unwrap();
    k::topk_select(
        g,
        scores.ptr(),
        max_e,
        m,
        topk,
        meta.seq().row_pos,
        out.ptr(),
        t,
    )
    .unwrap();
    let got_s: Vec<f32> = g.read(&scores, 0, t * max_e).unwrap();
    let got_i: Vec<i32> = g.read(&out, 0, t * topk).unwrap();
    for (r, &(slot, p, _)) in seqs.iter().enumerate() {
        let n_vis = (p + 1) / m;
        let ks = &keys[slot * max_e * di..(slot + 1) * max_e * di];
        let want = ix.scores(
            &q[r * hi * di..(r + 1) * hi * di],
            &w[r * hi..(r + 1) * hi],
            ks,
            n_vis,
        );
        let gs = &got_s[r * max_e..r * max_e + n_vis];
        let row = &got_i[r * topk..(r + 1) * topk];
        assert!(
            row[topk.min(n_vis)..].iter().all(|&x| x == -1),
            "row {r}: entries past the {} selected are not -1",
            topk.min(n_vis)
        );
        let e = rel_l2(gs, &want);
        println!("indexer row {r} ({n_vis} visible): scores rel l2 {e:.2e}");
        assert!(e <= tol, "indexer scores row {r}: {e:.3e}");
        // Selection on the GPU's own scores must be exactly the top-k (ties to the lower index).
        let mut sel: Vec<i32> = got_i[r * topk..(r + 1) * topk]
            .iter()
            .copied()
            .filter(|&x| x >= 0)
            .collect();
        sel.sort_unstable();
        let mut exp: Vec<i32> = top_k(gs, topk).into_iter().map(|x| x as i32).collect();
        exp.sort_unstable();
        assert_eq!(sel, exp, "top-k of row {r}");
        // And on the CPU's scores it agrees up to near-ties.
        let mut cpu: Vec<i32> = top_k(&want, topk).into_iter().map(|x| x as i32).collect();
        cpu.sort_unstable();
        let same = sel.iter().filter(|x| cpu.binary_search(x).is_ok()).count();
        println!(
            "indexer row {r}: {same}/{} of the CPU's top-k selected",
            cpu.len()
        );
        assert!(
            same + 2 >= cpu.len(),
            "row {r}: only {same} of {} agree",
            cpu.len()
        );
    }
    k::indexer_keys_per_lane(g, t, max_e)
}
