//! One decoder layer on the device: hyper-connection pre-mix and norm, attention (projections,
//! q/kv preparation, compressors, indexer, split-K sparse attention, grouped output
//! projection), post-mix; then the FFN site with the MoE (router, plan, grouped experts, shared
//! expert, combine). Stages are marked for the device-event profiler.

use crate::config::AttnKind;
use crate::error::Result;
use crate::profile::Stage;

use super::super::gpu::{Gpu, PREFETCH_RANGES};
use super::super::launch::{self as k, AttnArgs, CompArgs, Rope, RouteArgs, SeqMeta};
use super::super::state::StepBufs;
use super::super::timer::StageTimer;
use super::super::weights::{GCompressor, GLinear, GMoe};
use super::{GpuModel, Shape};

impl GpuModel {
    pub(super) fn layer(
        &self,
        l: usize,
        shape: Shape,
        meta: SeqMeta,
        cap: bool,
        tm: &mut StageTimer,
    ) -> Result<()> {
        let c = &self.cfg;
        let g = &self.gpu;
        let bf = &self.bufs;
        let lw = &self.w.layers[l];
        let a = &lw.attn;
        let st = &self.kv.layers[l];
        let (t, b, d, hc) = (shape.t, shape.b, c.hidden_size, c.hc_mult);
        let (h, hd) = (c.num_heads, c.head_dim);
        let eps = c.rms_norm_eps;
        let rope = self.rope(a.kind);
        // L2 prefetches ahead (small steps, `AMDAHL_L2_AHEAD`): each large weight is requested
        // on the prefetch stream while the kernels before it — latency chains at small batch,
        // DRAM nearly idle — run: the q path's projections from the end of the previous layer's
        // MoE (here for layer 0), wo_a from wq_b on (across the indexer and the attention), the
        // shared expert from wo_b on (across the post-mix, pre-mix, router and plan). Measured
        // no faster: the streamed FP8 linears are not paced by DRAM (docs/PERF.md, tenth session).
        let ahead = t <= self.l2_ahead_max_tokens;
        if ahead && l == 0 {
            self.prefetch(&[&a.wq_a, &a.wkv, &a.wq_b])?;
        }

        tm.mark(g, Stage::Mhc, cap)?;
        tm.count(k::hc_pre(
            g,
            bf.x.ptr(),
            (
                lw.hc_attn.fn_w.ptr(),
                lw.hc_attn.base.ptr(),
                lw.hc_attn.scale.ptr(),
            ),
            hc,
            d,
            c.hc_eps,
            eps,
            lw.attn_norm.ptr(),
            bf.mix.ptr(),
            bf.mixp.ptr(),
            if l > 0 { k::post_parts(t, d) } else { 0 },
            0,
            bf.u_bf.ptr(),
            t,
        )?);

        tm.mark(g, Stage::AttnProj, cap)?;
        // The kv row and the compressor depend only on the normed input, and the Sinkhorn of
        // this site's comb only on the pre-mix: they run on the side stream while the q path
        // runs here (joined before the attention; `hc_post` reads comb after it).
        let last = sinkhorn_last();
        g.fork(|| {
            if !last {
                self.sinkhorn(t, tm)?;
            }
            tm.count(k::linear(
                g,
                &a.wkv,
                bf.u_bf.ptr(),
                d,
                bf.kv_f32.ptr(),
                hd,
                t,
                false,
            )?);
            tm.count(k::kv_prep(
                g,
                bf.kv_f32.ptr(),
                a.kv_norm.ptr(),
                hd,
                eps,
                meta.row_pos,
                rope,
                bf.kv_bf.ptr(),
                t,
            )?);
            if let (Some(cw), Some(entries), Some(state)) =
                (&a.compressor, &st.entries, &st.comp_state)
            {
                let into = CompInto {
                    u: bf.u_bf.ptr(),
                    d,
                    kv: bf.comp_kv.ptr(),
                    gate: bf.comp_gate.ptr(),
                    state: state.ptr(),
                    entries: entries.ptr(),
                    entries_bf16: true,
                    max_entries: st.max_entries,
                };
                compress(g, cw, into, (eps, meta, rope), shape, tm)?;
            }
            if last {
                self.sinkhorn(t, tm)?;
            }
            Ok(())
        })?;
        let ql = c.q_lora_rank;
        tm.count(k::linear(
            g,
            &a.wq_a,
            bf.u_bf.ptr(),
            d,
            bf.cq_f32.ptr(),
            ql,
            t,
            false,
        )?);
        tm.count(k::norm_rows(
            g,
            bf.cq_f32.ptr(),
            ql,
            a.q_norm.ptr(),
            ql,
            eps,
            0,
            bf.cq_bf.ptr(),
            t,
        )?);
        tm.count(k::linear(
            g,
            &a.wq_b,
            bf.cq_bf.ptr(),
            ql,
            bf.q.ptr(),
            h * hd,
            t,
            false,
        )?);
        if ahead {
            self.prefetch(&a.wo_a.iter().collect::<Vec<_>>())?;
        }
        // The attention's arguments (its top-k list is set after the indexer) decide q's form.
        let (kind, ratio) = match a.kind {
            AttnKind::Sliding => (0, 1),
            AttnKind::Hca { ratio } => (1, ratio),
            AttnKind::Csa { ratio } => (2, ratio),
        };
        let (splits, chunk) = self.attn_geometry(a.kind, t);
        let mut aa = AttnArgs {
            q: bf.q.ptr(),
            kv_step: bf.kv_bf.ptr(),
            ring: st.ring.ptr(),
            entries: st.entries.as_ref().map_or(0, |e| e.ptr()),
            topk_idx: 0,
            topk: 0,
            kind,
            ratio,
            window: c.sliding_window,
            max_entries: st.max_entries,
            heads: h,
            head_dim: hd,
            scale: (hd as f32).powf(-0.5),
            chunk,
            splits,
            o_part: bf.o_part.ptr(),
            ml_part: bf.ml_part.ptr(),
            q_image: false,
        };
        aa.q_image = k::attn_q_image(g, &aa, t);
        tm.count(k::q_prep(
            g,
            bf.q.ptr(),
            h,
            hd,
            eps,
            meta.row_pos,
            rope,
            aa.q_image,
            t,
        )?);
        g.join()?;

        let mut topk_ptr = 0u64;
        let mut topk = 0usize;
        if let (Some(ix), Some(keys), Some(istate)) = (&a.indexer, &st.idx_keys, &st.idx_state) {
            tm.mark(g, Stage::Indexer, cap)?;
            // The indexer's compressor runs on the side stream next to its query projection.
            let cw = &ix.comp;
            g.fork(|| {
                let into = CompInto {
                    u: bf.u_bf.ptr(),
                    d,
                    kv: bf.idx_kv.ptr(),
                    gate: bf.idx_gate.ptr(),
                    state: istate.ptr(),
                    entries: keys.ptr(),
                    entries_bf16: false,
                    max_entries: st.max_entries,
                };
                compress(g, cw, into, (eps, meta, rope), shape, tm)?;
                Ok(())
            })?;
            let (hi, di) = (ix.heads, ix.dim);
            tm.count(k::linear(
                g,
                &ix.wq_b,
                bf.cq_bf.ptr(),
                ql,
                bf.iq.ptr(),
                hi * di,
                t,
                false,
            )?);
            tm.count(k::rope_heads(
                g,
                bf.iq.ptr(),
                hi,
                di,
                meta.row_pos,
                rope,
                t,
            )?);
            tm.count(k::linear(
                g,
                &ix.weights_proj,
                bf.u_bf.ptr(),
                d,
                bf.iw.ptr(),
                hi,
                t,
                false,
            )?);
            g.join()?;
            tm.count(k::indexer_scores(
                g,
                bf.iq.ptr(),
                bf.iw.ptr(),
                keys.ptr(),
                hi,
                di,
                cw.ratio,
                st.max_entries,
                meta,
                bf.scores.ptr(),
                t,
            )?);
            tm.count(k::topk_select(
                g,
                bf.scores.ptr(),
                st.max_entries,
                cw.ratio,
                ix.topk,
                meta.row_pos,
                bf.topk.ptr(),
                t,
            )?);
            topk_ptr = bf.topk.ptr();
            topk = ix.topk;
        }

        tm.mark(g, Stage::Attention, cap)?;
        aa.topk_idx = topk_ptr;
        aa.topk = topk;
        for _ in 0..self.attn_repeat {
            tm.count(k::sparse_attn(g, aa, meta, t)?);
        }
        tm.count(k::attn_combine(
            g,
            aa,
            a.sinks.ptr(),
            meta.row_pos,
            rope,
            bf.attn_out.ptr(),
            t,
        )?);
        tm.mark(g, Stage::AttnProj, cap)?;
        // This step's kv row enters the ring (read by the next step only) next to the output
        // projections.
        g.fork(|| {
            tm.count(k::ring_store(
                g,
                bf.kv_bf.ptr(),
                st.ring.ptr(),
                c.sliding_window,
                hd,
                meta,
                b,
            )?);
            Ok(())
        })?;
        let groups: usize = a.wo_a.iter().map(|w| w.experts).sum();
        let gi = h * hd / groups;
        let ol = c.o_lora_rank;
        let mut first = 0;
        for wg in &a.wo_a {
            tm.count(k::linear(
                g,
                wg,
                bf.attn_out.at(first * gi * 2),
                h * hd,
                bf.z.at(first * ol * 2),
                groups * ol,
                t,
                true,
            )?);
            first += wg.experts;
        }
        tm.count(k::linear(
            g,
            &a.wo_b,
            bf.z.ptr(),
            groups * ol,
            bf.y.ptr(),
            d,
            t,
            false,
        )?);
        if ahead && let Some(sh) = &lw.moe.shared {
            self.prefetch(&sh.iter().collect::<Vec<_>>())?;
        }

        g.join()?;

        tm.mark(g, Stage::Mhc, cap)?;
        tm.count(k::hc_post(
            g,
            bf.x.ptr(),
            bf.y.ptr(),
            bf.mix.ptr(),
            hc,
            d,
            t,
            Some((lw.hc_ffn.fn_w.ptr(), bf.mixp.ptr())),
        )?);
        tm.count(k::hc_pre(
            g,
            bf.x.ptr(),
            (
                lw.hc_ffn.fn_w.ptr(),
                lw.hc_ffn.base.ptr(),
                lw.hc_ffn.scale.ptr(),
            ),
            hc,
            d,
            c.hc_eps,
            eps,
            lw.ffn_norm.ptr(),
            bf.mix.ptr(),
            bf.mixp.ptr(),
            k::post_parts(t, d),
            bf.u_f32.ptr(),
            bf.u_bf.ptr(),
            t,
        )?);

        tm.mark(g, Stage::Moe, cap)?;
        self.moe(l, shape, cap, tm)?;
        if ahead && l + 1 < c.num_layers {
            let na = &self.w.layers[l + 1].attn;
            self.prefetch(&[&na.wq_a, &na.wkv, &na.wq_b])?;
        }

        tm.mark(g, Stage::Mhc, cap)?;
        // The next layer's attention site mixes from the partials this post-mix leaves.
        let next = (l + 1 < c.num_layers)
            .then(|| (self.w.layers[l + 1].hc_attn.fn_w.ptr(), bf.mixp.ptr()));
        tm.count(k::hc_post(
            g,
            bf.x.ptr(),
            bf.moe_out.ptr(),
            bf.mix.ptr(),
            hc,
            d,
            t,
            next,
        )?);
        Ok(())
    }

    /// L2 prefetches of the weights `ws` (their codes) on the prefetch stream, in order.
    /// The Sinkhorn of the site whose `hc_pre` just left comb's logits in `mix`: comb for its
    /// `hc_post`, run on the site's side stream.
    fn sinkhorn(&self, t: usize, tm: &mut StageTimer) -> Result<()> {
        let c = &self.cfg;
        tm.count(k::hc_sinkhorn(
            &self.gpu,
            self.bufs.mix.ptr(),
            c.hc_mult,
            c.hc_sinkhorn_iters,
            c.hc_eps,
            t,
        )?);
        Ok(())
    }

    fn prefetch(&self, ws: &[&GLinear]) -> Result<()> {
        let ranges: Vec<(u64, usize)> = ws.iter().map(|w| (w.w.ptr(), w.w.bytes())).collect();
        for part in ranges.chunks(PREFETCH_RANGES) {
            self.gpu.prefetch_l2(part)?;
        }
        Ok(())
    }

    fn moe(&self, l: usize, shape: Shape, _cap: bool, tm: &mut StageTimer) -> Result<()> {
        let e = self.w.layers[l].moe.n_experts;
        // The FFN site's Sinkhorn goes on the MoE's side stream (joined before the combine).
        let sinkhorn = |tm: &mut StageTimer| self.sinkhorn(shape.t, tm);
        moe_forward(
            &self.gpu,
            &self.w.layers[l].moe,
            &self.bufs,
            self.mi(self.layout.tokens),
            shape.t,
            shape.t <= self.l2_ahead_experts_max_tokens,
            &sinkhorn,
            tm,
        )?;
        // Keep the expert histogram of this layer for the analytic byte count.
        self.gpu.copy(
            &self.bufs.hits,
            l * (e + 1) * 4,
            &self.bufs.offsets,
            0,
            (e + 1) * 4,
        )
    }
}

/// One compressor step's buffers: the normed input `u` (width `d`), the projection scratch
/// rows, the compressor state and its entries.
struct CompInto {
    u: u64,
    d: usize,
    kv: u64,
    gate: u64,
    state: u64,
    entries: u64,
    entries_bf16: bool,
    max_entries: usize,
}

/// One compressor step (the attention's or the indexer's): its kv and gate projections of the
/// normed input, then the pooling update of every sequence's state and entries.
fn compress(
    g: &Gpu,
    cw: &GCompressor,
    into: CompInto,
    (eps, meta, rope): (f32, SeqMeta, Rope),
    shape: Shape,
    tm: &mut StageTimer,
) -> Result<()> {
    let wd = cw.width();
    let (u, d) = (into.u, into.d);
    tm.count(k::linear(g, &cw.wkv, u, d, into.kv, wd, shape.t, false)?);
    tm.count(k::linear(
        g, &cw.wgate, u, d, into.gate, wd, shape.t, false,
    )?);
    tm.count(k::compressor_update(
        g,
        CompArgs {
            ckv: into.kv,
            cgate: into.gate,
            width: wd,
            ape: cw.ape.ptr(),
            norm_w: cw.norm.ptr(),
            dim: cw.dim,
            ratio: cw.ratio,
            overlap: cw.overlap,
            state: into.state,
            entries: into.entries,
            entries_bf16: into.entries_bf16,
            max_entries: into.max_entries,
        },
        eps,
        meta,
        rope,
        shape.b,
    )?);
    Ok(())
}

/// Most bytes of active experts' down projections [`moe_forward`] prefetches into L2 (of
/// the H100's and H200's 50 MB): V4-Flash's six at one token (~28 MB in NVFP4).
const L2_AHEAD_EXPERT_BYTES: usize = 32 << 20;

/// Whether each site's comb Sinkhorn (`hc_sinkhorn`) runs last on its side stream, after the
/// kv path or the shared expert (`AMDAHL_SINKHORN_AT=last`), or first (`first`).
pub(crate) fn sinkhorn_last() -> bool {
    static LAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| std::env::var("AMDAHL_SINKHORN_AT").as_deref() != Ok("first"))
}

/// The MoE of one layer over `t` rows: `u_f32`/`u_bf` (the normed FFN input) → `moe_out`;
/// `ahead`: prefetch the active experts' down projections into L2 where they fit; `side`
/// runs on the side stream too, before or after the shared expert ([`sinkhorn_last`]: the FFN
/// site's Sinkhorn).
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_forward(
    g: &Gpu,
    m: &GMoe,
    bf: &StepBufs,
    tokens: u64,
    t: usize,
    ahead: bool,
    side: &dyn Fn(&mut StageTimer) -> Result<()>,
    tm: &mut StageTimer,
) -> Result<()> {
    let d = m.w1.cols;
    let kk = m.top_k;
    let e = m.n_experts;
    let mut shared = 0u64;
    // The shared expert needs only the normed input: it runs on the side stream next to the
    // router, the plan and the routed experts, and joins before the combine.
    let last = sinkhorn_last();
    g.fork(|| {
        if !last {
            side(tm)?;
        }
        if let Some([w1, w3, w2]) = &m.shared
            && 2 * w1.rows <= d
            && k::gemm::pair_applies(w1, w3, t, d, bf.u_bf.ptr())
            && k::gemm::gemm_applies(w2, t, w1.rows, bf.sh_act.ptr())
        {
            // Many tokens: the tiled GEMM for both up projections in one launch into sh_y (free
            // until the down projection, [t, 2·inter] ≤ [t, d]), the SwiGLU, and the down projection.
            let (xq, ldq) = k::linear_wg::fp8_rows(g, w1.fmt, bf.u_bf.ptr(), d, t, d, d)?;
            tm.count(k::gemm::gemm_pair(g, w1, w3, xq, ldq, bf.sh_y.ptr(), t)?);
            tm.count(k::gemm::swiglu_rows(
                g,
                bf.sh_y.ptr(),
                bf.sh_act.ptr(),
                t,
                w1.rows,
                m.limit,
            )?);
            tm.count(k::linear(
                g,
                w2,
                bf.sh_act.ptr(),
                w1.rows,
                bf.sh_y.ptr(),
                d,
                t,
                false,
            )?);
            shared = bf.sh_y.ptr();
        } else if let Some([w1, w3, w2]) = &m.shared {
            tm.count(k::plan_identity(
                g,
                t,
                bf.sh_offsets.ptr(),
                bf.sh_tok.ptr(),
                bf.sh_wt.ptr(),
                bf.sh_act_list.ptr(),
            )?);
            let sh = k::MoePlan {
                offsets: bf.sh_offsets.ptr(),
                act_list: bf.sh_act_list.ptr(),
                slots: 1,
                tokens: t,
            };
            let (xq, ldq) = k::linear_wg::fp8_rows(g, w1.fmt, bf.u_bf.ptr(), d, t, d, d)?;
            tm.count(k::moe_up(
                g,
                w1,
                w3,
                xq,
                ldq,
                sh,
                bf.sh_tok.ptr(),
                bf.sh_act.ptr(),
                m.limit,
            )?);
            let (aq, _) =
                k::linear_wg::fp8_rows(g, w2.fmt, bf.sh_act.ptr(), w2.cols, t, w2.cols, w2.cols)?;
            tm.count(k::moe_down(g, w2, aq, sh, bf.sh_wt.ptr(), bf.sh_y.ptr())?);
            shared = bf.sh_y.ptr();
        }
        if last {
            side(tm)?;
        }
        Ok(())
    })?;
    tm.count(k::linear_f32x(
        g,
        &m.router,
        bf.u_f32.ptr(),
        d,
        bf.logits_r.ptr(),
        t,
    )?);
    let route = RouteArgs {
        logits: bf.logits_r.ptr(),
        experts: e,
        scoring: m.scoring,
        bias: m.bias.as_ref().map_or(0, |b| b.ptr()),
        tid2eid: m.tid2eid.as_ref().map_or(0, |b| b.ptr()),
        tokens,
        k: kk,
        scaling: m.scaling,
        norm_topk: m.norm_topk,
        ids: bf.ids.ptr(),
        wts: bf.wts.ptr(),
    };
    let out = k::PlanOut {
        offsets: bf.offsets.ptr(),
        tok_of: bf.tok_of.ptr(),
        wt_of: bf.wt_of.ptr(),
        slot_of: bf.slot_of.ptr(),
        act_list: bf.act_list.ptr(),
    };
    if k::route_plan_fused() && k::route_plan_fits(g, e, kk, t) {
        tm.count(k::moe_route_plan(g, route, out, bf.route_done.ptr(), t)?);
    } else {
        tm.count(k::moe_route(g, route, t)?);
        tm.count(k::moe_plan(
            g,
            bf.ids.ptr(),
            bf.wts.ptr(),
            t * kk,
            kk,
            e,
            out.offsets,
            out.tok_of,
            out.wt_of,
            out.slot_of,
            out.act_list,
        )?);
    }
    let plan = k::MoePlan {
        offsets: bf.offsets.ptr(),
        act_list: bf.act_list.ptr(),
        slots: e.min(t * kk).max(1),
        tokens: t,
    };
    // The active experts' down projections, requested once the plan names them: they load
    // into L2 while the up projection runs (at one token a latency chain that leaves DRAM half
    // idle), when they fit it beside the up projection's stream.
    let w2 = &m.w2;
    if ahead && plan.slots * (w2.w_stride + w2.s_stride) <= L2_AHEAD_EXPERT_BYTES {
        g.prefetch_l2_experts(
            plan.act_list,
            plan.slots,
            (w2.w.ptr(), w2.w_stride),
            (w2.s.as_ref().map_or(0, |b| b.ptr()), w2.s_stride),
        )?;
    }
    // FP8 experts with the FP8 activations on: their inputs quantized first (quant/act.rs).
    let (xq, ldq) = k::linear_wg::fp8_rows(g, m.w1.fmt, bf.u_bf.ptr(), d, t, d, d)?;
    tm.count(k::moe_up(
        g,
        &m.w1,
        &m.w3,
        xq,
        ldq,
        plan,
        bf.tok_of.ptr(),
        bf.act.ptr(),
        m.limit,
    )?);
    let (aq, _) =
        k::linear_wg::fp8_rows(g, m.w2.fmt, bf.act.ptr(), w2.cols, t * kk, w2.cols, w2.cols)?;
    tm.count(k::moe_down(
        g,
        &m.w2,
        aq,
        plan,
        bf.wt_of.ptr(),
        bf.y_slot.ptr(),
    )?);
    g.join()?;
    tm.count(k::moe_combine(
        g,
        bf.y_slot.ptr(),
        bf.slot_of.ptr(),
        kk,
        shared,
        d,
        bf.moe_out.ptr(),
        t,
    )?);
    Ok(())
}
