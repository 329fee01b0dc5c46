//! One DeepSeek-V4 attention block over a batch of sequence chunks (model-spec §3.3, §3.3b;
//! transformers `DeepseekV4Attention`). Dense projections run once over all rows of the step;
//! the compressors, the indexer and the sparse core then run per sequence against its cache.
//!
//! Query at position p sees: the raw rows of positions max(0, p−W+1)..=p (window, from the ring
//! for positions before this chunk, from the chunk itself after), plus compressed entries
//! w < (p+1) div m — all of them for HCA, the indexer's top-k of them for CSA. The output's
//! rope slice is rotated back by −p (K = V carried rope into V), then the grouped output
//! projection mixes heads.

use std::ops::Range;

use rayon::prelude::*;

use super::weights::AttentionWeights;
use crate::config::{AttnKind, ModelConfig};
use crate::kv_cache::LayerCache;
use crate::ops::attention::sparse::attend;
use crate::ops::norm::{rms_norm_rows, rms_norm_unweighted};
use crate::ops::rope::{self, RopeAngles, RopeTable};
use crate::profile::{Stage, StageClock};
use crate::tensor::Mat;

/// The rows of one sequence in this step and its cache for this layer.
pub(crate) struct SeqSpan<'a> {
    pub rows: Range<usize>,
    pub start: usize,
    pub cache: &'a mut LayerCache,
}

/// Rope angles of each row of the step for this layer's table.
fn row_angles(table: &RopeTable, spans: &[SeqSpan<'_>], n: usize) -> Vec<RopeAngles> {
    let mut pos = vec![0usize; n];
    for s in spans {
        for (i, r) in s.rows.clone().enumerate() {
            pos[r] = s.start + i;
        }
    }
    pos.par_iter().map(|&p| table.angles(p)).collect()
}

pub(crate) fn forward(
    w: &AttentionWeights,
    cfg: &ModelConfig,
    table: &RopeTable,
    u: &Mat,
    spans: &mut [SeqSpan<'_>],
    clock: &mut StageClock,
) -> Mat {
    let (h, hd) = (cfg.num_heads, cfg.head_dim);
    let angles = row_angles(table, spans, u.rows);

    // Projections of every row.
    let (qr, q, kv, comp) = clock.time(Stage::AttnProj, || {
        let mut qr = w.wq_a.forward(u);
        rms_norm_rows(&mut qr.data, &w.q_norm, cfg.rms_norm_eps);
        let mut q = w.wq_b.forward(&qr);
        q.data
            .par_chunks_mut(h * hd)
            .zip(&angles)
            .for_each(|(row, a)| {
                for head in row.chunks_exact_mut(hd) {
                    rms_norm_unweighted(head, cfg.rms_norm_eps);
                    rope::apply(head, a, false);
                }
            });
        let mut kv = w.wkv.forward(u);
        kv.data
            .par_chunks_mut(hd)
            .zip(&angles)
            .for_each(|(row, a)| {
                crate::ops::norm::rms_norm(row, &w.kv_norm, cfg.rms_norm_eps);
                rope::apply(row, a, false);
            });
        let comp = w
            .compressor
            .as_ref()
            .map(|c| (c.wkv.forward(u), c.wgate.forward(u)));
        (qr, q, kv, comp)
    });
    let idx = w.indexer.as_ref().map(|ix| {
        clock.time(Stage::Indexer, || {
            let c = &ix.compressor;
            let mut iq = ix.wq_b.forward(&qr);
            iq.data
                .par_chunks_mut(ix.heads * ix.dim)
                .zip(&angles)
                .for_each(|(row, a)| rope::apply_heads(row, ix.dim, a, false));
            (
                c.wkv.forward(u),
                c.wgate.forward(u),
                iq,
                ix.weights_proj.forward(u),
            )
        })
    });

    let t = u.rows;
    let add = |a: (u64, u64), b: (u64, u64)| (a.0 + b.0, a.1 + b.1);
    let mut proj = add(
        add(w.wq_a.work(t), w.wq_b.work(t)),
        add(w.wkv.work(t), w.wo_b.work(t)),
    );
    for g in &w.wo_a {
        proj = add(proj, g.work(t));
    }
    if let Some(c) = &w.compressor {
        proj = add(proj, add(c.wkv.work(t), c.wgate.work(t)));
    }
    clock.charge(Stage::AttnProj, proj.0, proj.1);
    if let Some(ix) = &w.indexer {
        let c = &ix.compressor;
        let iw = add(
            add(ix.wq_b.work(t), ix.weights_proj.work(t)),
            add(c.wkv.work(t), c.wgate.work(t)),
        );
        clock.charge(Stage::Indexer, iw.0, iw.1);
    }

    let mut out = Mat::zeros(u.rows, h * hd);
    for span in spans.iter_mut() {
        let (start, rows) = (span.start, span.rows.clone());
        let cache = &mut *span.cache;
        // Feed the chunk's tokens to the compressors, in order.
        if let (Some(c), Some((ckv, cgate)), Some(st)) =
            (&w.compressor, &comp, cache.compressor.as_mut())
        {
            clock.time(Stage::AttnProj, || {
                for (i, r) in rows.clone().enumerate() {
                    c.push(st, ckv.row(r), cgate.row(r), start + i, table);
                }
            });
        }
        let mut selected: Vec<Vec<usize>> = Vec::new();
        let mut key_work = (0u64, 0u64);
        if let (Some(ix), Some((ikv, igate, iq, iw)), Some(st)) =
            (&w.indexer, &idx, cache.indexer.as_mut())
        {
            clock.time(Stage::Indexer, || {
                for (i, r) in rows.clone().enumerate() {
                    ix.compressor
                        .push(st, ikv.row(r), igate.row(r), start + i, table);
                }
                let ratio = ix.compressor.ratio;
                let keys_read: u64 = (0..rows.len())
                    .map(|i| ((start + i + 1) / ratio) as u64)
                    .sum();
                let dim = ix.dim as u64;
                key_work = (keys_read * dim * 4, keys_read * dim * 2 * ix.heads as u64);
                let ties = crate::ops::ties::enabled();
                let picked: Vec<(Vec<usize>, f32)> = rows
                    .clone()
                    .into_par_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let n_vis = (start + i + 1) / ratio;
                        if ties {
                            ix.select_with_margin(iq.row(r), iw.row(r), &st.entries, n_vis)
                        } else {
                            (
                                ix.select(iq.row(r), iw.row(r), &st.entries, n_vis),
                                f32::INFINITY,
                            )
                        }
                    })
                    .collect();
                for (r, (_, m)) in rows.clone().zip(&picked) {
                    crate::ops::ties::record(r, *m);
                }
                selected = picked.into_iter().map(|(s, _)| s).collect();
            });
        }
        clock.time(Stage::Attention, || {
            core(
                w,
                cfg,
                span_view(&kv, rows.clone()),
                start,
                cache,
                &selected,
                &q,
                rows.clone(),
                &angles,
                &mut out,
            );
        });
    }

    clock.time(Stage::AttnProj, || {
        let groups = w.wo_a.len();
        let gi = h * hd / groups;
        let parts: Vec<Mat> = w
            .wo_a
            .par_iter()
            .enumerate()
            .map(|(g, lin)| {
                let mut x = Mat::zeros(out.rows, gi);
                for t in 0..out.rows {
                    x.row_mut(t)
                        .copy_from_slice(&out.row(t)[g * gi..(g + 1) * gi]);
                }
                lin.forward(&x)
            })
            .collect();
        let ol = parts.first().map_or(0, |p| p.cols);
        let mut z = Mat::zeros(out.rows, groups * ol);
        for (g, p) in parts.iter().enumerate() {
            for t in 0..out.rows {
                z.row_mut(t)[g * ol..(g + 1) * ol].copy_from_slice(p.row(t));
            }
        }
        w.wo_b.forward(&z)
    })
}

fn span_view(kv: &Mat, rows: Range<usize>) -> &[f32] {
    &kv.data[rows.start * kv.cols..rows.end * kv.cols]
}

/// Sparse attention of one sequence's rows; writes `out` rows and updates the window ring.
/// Returns the number of candidate rows summed over the queries.
#[allow(clippy::too_many_arguments)]
fn core(
    w: &AttentionWeights,
    cfg: &ModelConfig,
    new_kv: &[f32],
    start: usize,
    cache: &mut LayerCache,
    selected: &[Vec<usize>],
    q: &Mat,
    rows: Range<usize>,
    angles: &[RopeAngles],
    out: &mut Mat,
) -> u64 {
    let (h, hd, win) = (cfg.num_heads, cfg.head_dim, cfg.sliding_window);
    let scale = (hd as f32).powf(-0.5);
    let n = rows.len();
    let entries: &[f32] = cache.compressor.as_ref().map_or(&[], |c| &c.entries);
    let ring = &cache.ring;
    let ratio = w.kind.ratio();
    let row_of = |p: usize| -> &[f32] {
        if p >= start {
            &new_kv[(p - start) * hd..(p - start + 1) * hd]
        } else {
            let s = p % win;
            &ring[s * hd..(s + 1) * hd]
        }
    };
    let out_rows = &mut out.data[rows.start * h * hd..rows.end * h * hd];
    let rows_read: u64 = out_rows
        .par_chunks_mut(h * hd)
        .enumerate()
        .map(|(i, o)| {
            let p = start + i;
            let mut cand: Vec<&[f32]> = (p + 1 - win.min(p + 1)..=p).map(row_of).collect();
            match w.kind {
                AttnKind::Sliding => {}
                AttnKind::Hca { .. } => {
                    let n_vis = (p + 1) / ratio;
                    cand.extend((0..n_vis).map(|e| &entries[e * hd..(e + 1) * hd]));
                }
                AttnKind::Csa { .. } => {
                    cand.extend(selected[i].iter().map(|&e| &entries[e * hd..(e + 1) * hd]));
                }
            }
            let qrow = q.row(rows.start + i);
            let a = &angles[rows.start + i];
            for hh in 0..h {
                let oh = &mut o[hh * hd..(hh + 1) * hd];
                attend(&qrow[hh * hd..(hh + 1) * hd], &cand, w.sinks[hh], scale, oh);
                rope::apply(oh, a, true);
            }
            cand.len() as u64
        })
        .sum();
    // Keep the last `win` raw rows for later steps.
    let end = start + n;
    let cache_ring = &mut cache.ring;
    for p in end.saturating_sub(win).max(start)..end {
        let s = p % win;
        cache_ring[s * hd..(s + 1) * hd]
            .copy_from_slice(&new_kv[(p - start) * hd..(p - start + 1) * hd]);
    }
    rows_read
}
