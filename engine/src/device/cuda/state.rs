//! Device-resident state of a model: per-layer KV caches for a fixed number of sequence slots,
//! the activation buffers of one step (sized for the largest step), and the per-step metadata
//! arrays every kernel reads (their addresses never change, so a captured graph replays with new
//! contents). Slot `slots - 1` is a scratch slot that pads decode batches up to a graph bucket.

use amdahl_kernels::attention as ka;
use amdahl_kernels::sample as ks;

use crate::config::{AttnKind, ModelConfig};
use crate::error::Result;

use super::gpu::{DevBuf, Gpu};

/// Sizes everything is allocated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Token rows per step.
    pub tokens: usize,
    /// Sequences per step (= usable slots).
    pub seqs: usize,
    /// Longest sequence.
    pub max_len: usize,
}

impl Limits {
    /// Slots including the padding slot.
    pub fn slots(&self) -> usize {
        self.seqs + 1
    }
}

/// Compressed entries a slot holds for ratio `m`.
pub fn max_entries(max_len: usize, m: usize) -> usize {
    (max_len / m.max(1)).max(1)
}

/// Candidate rows of one query at most, for a layer kind.
pub fn max_candidates(cfg: &ModelConfig, kind: AttnKind, max_len: usize) -> usize {
    cfg.sliding_window
        + match kind {
            AttnKind::Sliding => 0,
            AttnKind::Hca { ratio } => max_entries(max_len, ratio),
            AttnKind::Csa { ratio } => cfg.index_topk.min(max_entries(max_len, ratio)),
        }
}

/// Split count of the sparse attention for `t` query rows: one block per SM (each holds ~205 KB
/// of shared memory at d = 512) and no second wave, at least one 32-row tile per split. More
/// splits would only add partial rows for the combine to read. The count is then cut to the splits the tile-rounded
/// chunk leaves rows for, so that no split of a full-length query is empty (128 window rows in
/// 3 splits are chunks of 64: two splits, not a third empty one whose blocks start, write `-inf`
/// and have their partials read by the combine).
pub fn attn_splits(
    cfg: &ModelConfig,
    kind: AttnKind,
    max_len: usize,
    t: usize,
    sms: usize,
) -> usize {
    let cand = max_candidates(cfg, kind, max_len);
    let groups = cfg.num_heads.div_ceil(ka::HEADS_PER_BLOCK);
    let rows = (t * groups).max(1);
    let want = if splits_in_one_wave() {
        (sms / rows).max(1)
    } else {
        sms.div_ceil(rows)
    };
    let s = want
        .clamp(1, cand.div_ceil(ka::TILE_ROWS).max(1))
        .min(ka::MAX_SPLITS);
    cand.div_ceil(attn_chunk(cfg, kind, max_len, s)).max(1)
}

/// Whether the split count is rounded down, to at most one block per SM in all (the default),
/// or up with `AMDAHL_ATTN_SPLITS=fill` (read once): the first wave filled, at 64 rows 192
/// blocks for 132 SMs, a second wave of 60. H100, batch 64: attention 0.2013 → 0.1712–0.1726 ms
/// per step rounded down (CSA 55 → 41 µs per launch by ncu), batches 1 and 16 unchanged.
fn splits_in_one_wave() -> bool {
    static WAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WAVE.get_or_init(|| std::env::var("AMDAHL_ATTN_SPLITS").as_deref() != Ok("fill"))
}

/// Rows per split for `splits` splits (a multiple of the tile).
pub fn attn_chunk(cfg: &ModelConfig, kind: AttnKind, max_len: usize, splits: usize) -> usize {
    let cand = max_candidates(cfg, kind, max_len);
    cand.div_ceil(splits).div_ceil(ka::TILE_ROWS) * ka::TILE_ROWS
}

/// One layer's cache for every slot.
#[derive(Debug)]
pub struct LayerState {
    pub ring: DevBuf,
    pub entries: Option<DevBuf>,
    pub comp_state: Option<DevBuf>,
    pub idx_keys: Option<DevBuf>,
    pub idx_state: Option<DevBuf>,
    pub max_entries: usize,
}

#[derive(Debug)]
pub struct KvState {
    pub layers: Vec<LayerState>,
}

impl KvState {
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, lim: Limits) -> Result<Self> {
        let slots = lim.slots();
        let (w, d) = (cfg.sliding_window, cfg.head_dim);
        let layers = cfg
            .layer_kinds
            .iter()
            .map(|&k| -> Result<LayerState> {
                let ring = gpu.zeros(slots * w * d * 2)?;
                let (m, overlap) = match k {
                    AttnKind::Sliding => (0, false),
                    AttnKind::Hca { ratio } => (ratio, false),
                    AttnKind::Csa { ratio } => (ratio, true),
                };
                if m == 0 {
                    return Ok(LayerState {
                        ring,
                        entries: None,
                        comp_state: None,
                        idx_keys: None,
                        idx_state: None,
                        max_entries: 0,
                    });
                }
                let me = max_entries(lim.max_len, m);
                let nacc = if overlap { 3 } else { 1 };
                let (ik, is) = if overlap {
                    let di = cfg.index_head_dim;
                    (
                        Some(gpu.zeros(slots * me * di * 4)?),
                        Some(gpu.zeros(slots * 3 * 3 * di * 4)?),
                    )
                } else {
                    (None, None)
                };
                Ok(LayerState {
                    ring,
                    entries: Some(gpu.zeros(slots * me * d * 2)?),
                    comp_state: Some(gpu.zeros(slots * nacc * 3 * d * 4)?),
                    idx_keys: ik,
                    idx_state: is,
                    max_entries: me,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self { layers })
    }

    pub fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| {
                [
                    &Some(&l.ring),
                    &l.entries.as_ref(),
                    &l.comp_state.as_ref(),
                    &l.idx_keys.as_ref(),
                    &l.idx_state.as_ref(),
                ]
                .iter()
                .filter_map(|b| b.map(|b| b.bytes() as u64))
                .sum::<u64>()
            })
            .sum()
    }
}

/// Offsets (in i32 / f32 elements) of the per-step metadata inside `meta_i` / `meta_f`.
#[derive(Debug, Clone, Copy)]
pub struct MetaLayout {
    pub tokens: usize,
    pub row_seq: usize,
    pub row_pos: usize,
    pub seq_slot: usize,
    pub seq_start: usize,
    pub seq_n: usize,
    pub seq_row0: usize,
    pub sel: usize,
    pub top_k: usize,
    pub banned: usize,
    pub ints: usize,
    pub temp: usize,
    pub top_p: usize,
    pub u: usize,
    pub floats: usize,
}

impl MetaLayout {
    pub fn new(lim: Limits) -> Self {
        let (t, b) = (lim.tokens, lim.seqs);
        let mut at = 0;
        let mut take = |n: usize| {
            let o = at;
            at += n;
            o
        };
        let tokens = take(t);
        let row_seq = take(t);
        let row_pos = take(t);
        let seq_slot = take(b);
        let seq_start = take(b);
        let seq_n = take(b);
        let seq_row0 = take(b);
        let sel = take(t);
        let top_k = take(b);
        let banned = take(b * ks::MAX_BANNED);
        let ints = at;
        Self {
            tokens,
            row_seq,
            row_pos,
            seq_slot,
            seq_start,
            seq_n,
            seq_row0,
            sel,
            top_k,
            banned,
            ints,
            temp: 0,
            top_p: b,
            u: 2 * b,
            floats: 3 * b,
        }
    }
}

/// Activation buffers of one step.
#[derive(Debug)]
pub struct StepBufs {
    pub meta_i: DevBuf,
    pub meta_f: DevBuf,
    pub x: DevBuf,
    pub mix: DevBuf,
    /// Split mixing dot products of the hyper-connections, `[T][MIX_PARTS][MIX_STRIDE]`.
    pub mixp: DevBuf,
    pub u_f32: DevBuf,
    pub u_bf: DevBuf,
    pub cq_f32: DevBuf,
    pub cq_bf: DevBuf,
    pub q: DevBuf,
    pub kv_f32: DevBuf,
    pub kv_bf: DevBuf,
    pub comp_kv: DevBuf,
    pub comp_gate: DevBuf,
    pub idx_kv: DevBuf,
    pub idx_gate: DevBuf,
    pub iq: DevBuf,
    pub iw: DevBuf,
    pub scores: DevBuf,
    pub topk: DevBuf,
    pub o_part: DevBuf,
    pub ml_part: DevBuf,
    pub attn_out: DevBuf,
    pub z: DevBuf,
    pub y: DevBuf,
    pub logits_r: DevBuf,
    pub ids: DevBuf,
    pub wts: DevBuf,
    pub offsets: DevBuf,
    /// Active experts of the step: [count, ids...] (moe_plan).
    pub act_list: DevBuf,
    pub tok_of: DevBuf,
    pub wt_of: DevBuf,
    pub slot_of: DevBuf,
    pub act: DevBuf,
    pub y_slot: DevBuf,
    pub sh_offsets: DevBuf,
    pub sh_act_list: DevBuf,
    /// Arrival counter of `moe_route_plan` (zero between launches: its last block resets it).
    pub route_done: DevBuf,
    pub sh_tok: DevBuf,
    pub sh_wt: DevBuf,
    pub sh_act: DevBuf,
    pub sh_y: DevBuf,
    pub moe_out: DevBuf,
    pub head_in: DevBuf,
    pub logits: DevBuf,
    pub sampled: DevBuf,
    /// Per MoE layer, a copy of the expert offsets of the last profiled step.
    pub hits: DevBuf,
}

impl StepBufs {
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, lim: Limits, sms: usize) -> Result<Self> {
        let (t, b) = (lim.tokens, lim.seqs);
        let c = cfg;
        let (d, hc, h, hd) = (c.hidden_size, c.hc_mult, c.num_heads, c.head_dim);
        let k = c.num_experts_per_tok;
        let e = c.n_routed_experts;
        let inter = c.moe_intermediate_size;
        let sh_inter = c.shared_intermediate_size().max(1);
        let di = c.index_head_dim;
        let hi = c.index_n_heads;
        let max_e = c
            .layer_kinds
            .iter()
            .map(|&kd| match kd {
                AttnKind::Csa { ratio } => max_entries(lim.max_len, ratio),
                _ => 1,
            })
            .max()
            .unwrap_or(1);
        // Largest rows × splits over every step size and layer kind.
        let mut part_rows = 1;
        for &kd in &c.layer_kinds {
            for tt in 1..=t {
                part_rows = part_rows.max(tt * attn_splits(c, kd, lim.max_len, tt, sms));
            }
        }
        let meta = MetaLayout::new(lim);
        let f = 4;
        let bf = 2;
        Ok(Self {
            meta_i: gpu.zeros(meta.ints * 4)?,
            meta_f: gpu.zeros(meta.floats * 4)?,
            x: gpu.zeros(t * hc * d * f)?,
            mix: gpu.zeros(t * (hc + hc * hc) * f)?,
            mixp: gpu
                .zeros(t * amdahl_kernels::mhc::MIX_PARTS * amdahl_kernels::mhc::MIX_STRIDE * f)?,
            u_f32: gpu.zeros(t * d * f)?,
            u_bf: gpu.zeros(t * d * bf)?,
            cq_f32: gpu.zeros(t * c.q_lora_rank * f)?,
            cq_bf: gpu.zeros(t * c.q_lora_rank * bf)?,
            q: gpu.zeros(t * h * hd * f)?,
            kv_f32: gpu.zeros(t * hd * f)?,
            kv_bf: gpu.zeros(t * hd * bf)?,
            comp_kv: gpu.zeros(t * 2 * hd * f)?,
            comp_gate: gpu.zeros(t * 2 * hd * f)?,
            idx_kv: gpu.zeros(t * 2 * di * f)?,
            idx_gate: gpu.zeros(t * 2 * di * f)?,
            iq: gpu.zeros(t * hi * di * f)?,
            iw: gpu.zeros(t * hi * f)?,
            scores: gpu.zeros(t * max_e * f)?,
            topk: gpu.zeros(t * c.index_topk.max(1) * 4)?,
            o_part: gpu.zeros(part_rows * h * hd * f)?,
            ml_part: gpu.zeros(part_rows * h * 2 * f)?,
            attn_out: gpu.zeros(t * h * hd * bf)?,
            z: gpu.zeros(t * c.o_groups * c.o_lora_rank * bf)?,
            y: gpu.zeros(t * d * f)?,
            logits_r: gpu.zeros(t * e.max(1) * f)?,
            ids: gpu.zeros(t * k.max(1) * 4)?,
            wts: gpu.zeros(t * k.max(1) * f)?,
            offsets: gpu.zeros((e + 1) * 4)?,
            act_list: gpu.zeros((e + 1) * 4)?,
            tok_of: gpu.zeros(t * k.max(1) * 4)?,
            wt_of: gpu.zeros(t * k.max(1) * f)?,
            slot_of: gpu.zeros(t * k.max(1) * 4)?,
            act: gpu.zeros(t * k.max(1) * inter * bf)?,
            y_slot: gpu.zeros(t * k.max(1) * d * f)?,
            sh_offsets: gpu.zeros(2 * 4)?,
            sh_act_list: gpu.zeros(2 * 4)?,
            route_done: gpu.zeros(4)?,
            sh_tok: gpu.zeros(t * 4)?,
            sh_wt: gpu.zeros(t * f)?,
            sh_act: gpu.zeros(t * sh_inter * bf)?,
            sh_y: gpu.zeros(t * d * f)?,
            moe_out: gpu.zeros(t * d * f)?,
            head_in: gpu.zeros(t * d * bf)?,
            logits: gpu.zeros(t * c.vocab_size * f)?,
            sampled: gpu.zeros(b * 4)?,
            hits: gpu.zeros(c.num_layers * (e + 1) * 4)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{attn_chunk, attn_splits, max_candidates};
    use crate::config::AttnKind;
    use crate::device::cuda::dummy::v4_flash_config;

    #[test]
    fn attention_splits_leave_no_split_of_a_full_query_empty() {
        let cfg = v4_flash_config(4).unwrap();
        let csa = AttnKind::Csa { ratio: 4 };
        let hca = AttnKind::Hca { ratio: 128 };
        // 132 SMs, ctx 8192: the window (128 rows) at 64 tokens in 2 chunks of 64, not 3 of
        // which the last is empty; CSA's 640 rows at 16 tokens in 7 chunks of 96, not 9.
        assert_eq!(attn_splits(&cfg, AttnKind::Sliding, 8192, 64, 132), 2);
        assert_eq!(attn_splits(&cfg, csa, 8192, 16, 132), 7);
        assert_eq!(attn_chunk(&cfg, csa, 8192, 7), 96);
        for kind in [AttnKind::Sliding, csa, hca] {
            let cand = max_candidates(&cfg, kind, 8192);
            for t in [1, 2, 5, 16, 33, 64, 200] {
                let s = attn_splits(&cfg, kind, 8192, t, 132);
                let chunk = attn_chunk(&cfg, kind, 8192, s);
                assert!(s * chunk >= cand, "{kind:?} t {t}: {s} × {chunk} < {cand}");
                assert!((s - 1) * chunk < cand, "{kind:?} t {t}: split {s} empty");
                assert_eq!(chunk % 32, 0);
            }
        }
    }
}
