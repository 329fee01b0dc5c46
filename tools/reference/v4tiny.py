"""Tiny random DeepSeek-V4 models built with HF transformers (5.17.0), used as the
independent reference for amdahl's parity fixtures.

Shared by make_fixtures.py (committed fixtures) and check_unseen.py (fresh models).
Everything here runs on CPU in float32 and is deterministic for a given spec.

This module only *uses* transformers (config/model classes, DynamicCache). The one
runtime patch it applies (TieProbe) wraps three forward methods to observe the
top-k decisions; it never changes what they return.
"""

from __future__ import annotations

import copy
import json
import math
import os
from contextlib import contextmanager

import torch
from safetensors.torch import save_file

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.cache_utils import DynamicCache
import transformers.models.deepseek_v4.modeling_deepseek_v4 as tfv4

TRANSFORMERS_VERSION = "5.17.0"
REL_TOL_PATHS = 1e-5  # transformers path-vs-path agreement, per position
TIE_TOL = 1e-5  # top-k boundary gap (relative to max(1, max|score|)) counted as a tie

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"


def check_versions():
    if transformers.__version__ != TRANSFORMERS_VERSION:
        raise SystemExit(
            f"need transformers=={TRANSFORMERS_VERSION} (found {transformers.__version__}); "
            "other versions may change deepseek_v4 numerics or naming"
        )


# ----------------------------------------------------------------------------------------
# Specs
# ----------------------------------------------------------------------------------------
#
# A spec is a plain dict:
#   name, batch, seq, seed (weights), input_seed, cached_prefill (tokens prefilled before
#   token-by-token decode), search_tries (model seeds tried to find one whose indexer/router
#   top-k has no ties on the inputs; 1 = no search), config (DeepseekV4Config kwargs, modern
#   spelling: layer_types / mlp_layer_types / compress_rates / rope_parameters).


def base_config(**over):
    cfg = dict(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        partial_rotary_factor=0.25,
        q_lora_rank=16,
        o_groups=2,
        o_lora_rank=8,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        scoring_func="sqrtsoftplus",
        routed_scaling_factor=1.5,
        sliding_window=8,
        compress_rates={CSA: 4, HCA: 8},
        index_n_heads=4,
        index_head_dim=16,
        index_topk=3,
        rope_theta=10000.0,
        compress_rope_theta=160000.0,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        hc_mult=4,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        swiglu_limit=10.0,
        tie_word_embeddings=False,
    )
    cfg.update(over)
    return cfg


def yarn(factor, original, beta_fast=32, beta_slow=1):
    """rope_parameters for the compress table (transformers copies these onto `compress`
    only; sliding layers keep plain RoPE with rope_theta)."""
    return {
        "rope_type": "yarn",
        "factor": float(factor),
        "original_max_position_embeddings": original,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
    }


def build_config(spec) -> DeepseekV4Config:
    kw = copy.deepcopy(spec["config"])
    n = kw["num_hidden_layers"]
    assert len(kw["layer_types"]) == n and len(kw["mlp_layer_types"]) == n, spec["name"]
    return DeepseekV4Config(**kw)


# ----------------------------------------------------------------------------------------
# Model construction with non-trivial random values everywhere
# ----------------------------------------------------------------------------------------


@torch.no_grad()
def randomize_(model: DeepseekV4ForCausalLM, seed: int):
    """Overwrite every parameter and persistent buffer with seeded random values.

    transformers' _init_weights zeroes sinks, every position_bias, hc base, the router
    bias and tid2eid, and sets norms / hc scales to 1, which would leave those code paths
    untested. Here:
      * matrices ~ N(0, 1/fan_in) (embedding ~ N(0, 1)), so activations stay O(1);
      * RMSNorm weights 1 + 0.1 N; sinks N(0, 1); position_bias (ape) 0.5 N;
      * hc base 0.5 N, hc scale 1 + 0.3 N; router bias (e_score_correction_bias) 0.1 N;
      * tid2eid rows = distinct valid expert ids.
    Unknown tensors raise, so a new transformers parameter cannot silently stay at its init.
    """
    cfg = model.config
    g = torch.Generator().manual_seed(seed)

    def rn(shape):
        return torch.randn(shape, generator=g, dtype=torch.float32)

    for name, p in sorted(model.named_parameters()):
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * rn(p.shape))
        elif name.endswith(".sinks"):
            p.copy_(rn(p.shape))
        elif name.endswith(".position_bias"):
            p.copy_(0.5 * rn(p.shape))
        elif name.endswith("_hc.base") or name.endswith("hc_head.hc_base"):
            p.copy_(0.5 * rn(p.shape))
        elif name.endswith("_hc.scale") or name.endswith("hc_head.hc_scale"):
            p.copy_(1.0 + 0.3 * rn(p.shape))
        elif name.endswith("embed_tokens.weight"):
            p.copy_(rn(p.shape))
        elif p.dim() >= 2:
            p.copy_(rn(p.shape) / math.sqrt(p.shape[-1]))
        else:
            raise RuntimeError(f"randomize_: no rule for parameter {name} {tuple(p.shape)}")
    for name, b in sorted(model.named_buffers()):
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.1 * rn(b.shape))
        elif name.endswith("tid2eid"):
            e, k = cfg.n_routed_experts, b.shape[1]
            rows = [torch.randperm(e, generator=g)[:k] for _ in range(b.shape[0])]
            b.copy_(torch.stack(rows).to(b.dtype))
        elif "rotary_emb" in name:
            pass  # derived from the config, not a weight
        else:
            raise RuntimeError(f"randomize_: no rule for buffer {name}")


def build_model(spec, seed=None) -> DeepseekV4ForCausalLM:
    cfg = build_config(spec)
    torch.manual_seed(0)
    model = DeepseekV4ForCausalLM(cfg).eval().to(torch.float32)
    randomize_(model, spec["seed"] if seed is None else seed)
    return model


def make_inputs(spec) -> torch.Tensor:
    g = torch.Generator().manual_seed(spec["input_seed"])
    return torch.randint(0, spec["config"]["vocab_size"], (spec["batch"], spec["seq"]), generator=g)


# ----------------------------------------------------------------------------------------
# Tie probe: observe every data-dependent top-k (indexer, non-hash router)
# ----------------------------------------------------------------------------------------


class TieProbe:
    """Context manager recording (kind, layer, batch, position) for every top-k whose
    k-th and (k+1)-th candidates are tied (gap <= TIE_TOL * max(1, max|score|)).

    With a tie, torch.topk's choice is implementation-defined (it depends on the row
    length and tensor shape), so the result at that position -- and, through later
    layers, at every later position -- is not a well-defined golden. See
    docs/transformers-v4-divergence.md.
    """

    def __init__(self, model):
        self.events = []
        self._saved = None
        for name, mod in model.named_modules():
            if isinstance(mod, (tfv4.DeepseekV4Indexer, tfv4.DeepseekV4TopKRouter)):
                mod._amdahl_layer = int(name.split("layers.")[1].split(".")[0])

    def __enter__(self):
        probe = self
        ind_fwd = tfv4.DeepseekV4Indexer.forward
        sc_fwd = tfv4.DeepseekV4IndexerScorer.forward
        rt_fwd = tfv4.DeepseekV4TopKRouter.forward
        self._saved = (ind_fwd, sc_fwd, rt_fwd)

        def indexer_forward(self, hidden_states, q_residual, position_ids, past_key_values, layer_idx):
            self.scorer._amdahl_ctx = (layer_idx, position_ids, self.compress_rate, self.index_topk)
            return ind_fwd(self, hidden_states, q_residual, position_ids, past_key_values, layer_idx)

        def scorer_forward(self, q, compressed_kv, hidden_states):
            scores = sc_fwd(self, q, compressed_kv, hidden_states)
            layer, pos, rate, k = self._amdahl_ctx
            probe._check(scores, (pos[0] + 1) // rate, k, "indexer", layer)
            return scores

        def router_forward(self, hidden_states):
            logits, weights, indices = rt_fwd(self, hidden_states)
            b, s = hidden_states.shape[:2]
            sel = (self.score_fn(logits) + self.e_score_correction_bias).view(b, s, -1)
            probe._check(sel, None, self.top_k, "router", self._amdahl_layer)
            return logits, weights, indices

        tfv4.DeepseekV4Indexer.forward = indexer_forward
        tfv4.DeepseekV4IndexerScorer.forward = scorer_forward
        tfv4.DeepseekV4TopKRouter.forward = router_forward
        return self

    def __exit__(self, *exc):
        (tfv4.DeepseekV4Indexer.forward, tfv4.DeepseekV4IndexerScorer.forward,
         tfv4.DeepseekV4TopKRouter.forward) = self._saved
        return False

    def _check(self, scores, visible, k, kind, layer):
        # scores [B, S, T]; visible [S] (entries visible per query) or None (all).
        scores = scores.detach().float()
        b, s, t = scores.shape
        if visible is None:
            visible = torch.full((s,), t, dtype=torch.long)
        visible = visible.to(torch.long).cpu()
        idx = torch.arange(t)
        masked = scores.masked_fill(idx.view(1, 1, t) >= visible.view(1, s, 1), float("-inf"))
        if t <= k:
            return
        top = masked.sort(dim=-1, descending=True).values
        scale = masked.masked_fill(torch.isinf(masked), 0).abs().amax(-1).clamp(min=1.0)
        gap = top[..., k - 1] - top[..., k]
        tie = (visible.view(1, s) > k) & torch.isfinite(top[..., k]) & (gap <= TIE_TOL * scale)
        for bi, si in tie.nonzero().tolist():
            self.events.append((kind, layer, bi, si))


# ----------------------------------------------------------------------------------------
# The three transformers paths
# ----------------------------------------------------------------------------------------


def rel_err(a, b, ref):
    """Per position max|a-b| / max|ref| over the vocab axis."""
    return (a - b).abs().amax(-1) / ref.abs().amax(-1)


@torch.no_grad()
def three_paths(model, ids, cached_prefill=1):
    """Return dict with
    logits        [B,S,V] golden: position t = last position of a prefill of ids[:, :t+1]
    logits_full   [B,S,V] one pass over ids
    logits_cached [B,S,V] DynamicCache: prefill ids[:, :cached_prefill], then one token/step
    ambiguous     [B,S] bool: an indexer/router top-k tie in the golden run for t reaches t
    agree         [B,S] bool: the three paths agree within REL_TOL_PATHS and not ambiguous
    """
    bsz, seq = ids.shape
    n_layers = model.config.num_hidden_layers
    pref = []
    ambiguous = torch.zeros(bsz, seq, dtype=torch.bool)
    for t in range(seq):
        with TieProbe(model) as probe:
            pref.append(model(ids[:, : t + 1], use_cache=False).logits[:, -1])
        for _kind, layer, b, s in probe.events:
            # a tie at (layer, s) changes the layer output at s; later layers carry it to t > s.
            if s == t or (s < t and layer < n_layers - 1):
                ambiguous[b, t] = True
    pref = torch.stack(pref, 1)
    full = model(ids, use_cache=False).logits
    cache = DynamicCache(config=model.config)
    p0 = max(1, min(cached_prefill, seq))
    outs = [model(ids[:, :p0], past_key_values=cache, use_cache=True).logits]
    for t in range(p0, seq):
        outs.append(model(ids[:, t : t + 1], past_key_values=cache, use_cache=True).logits)
    cached = torch.cat(outs, 1)
    e_full = rel_err(full, pref, pref)
    e_cached = rel_err(cached, pref, pref)
    e_fc = rel_err(full, cached, pref)
    paths_agree = (e_full <= REL_TOL_PATHS) & (e_cached <= REL_TOL_PATHS) & (e_fc <= REL_TOL_PATHS)
    return dict(
        logits=pref.contiguous(),
        logits_full=full.contiguous(),
        logits_cached=cached.contiguous(),
        paths_agree=paths_agree,
        ambiguous=ambiguous,
        agree=paths_agree & ~ambiguous,
        max_rel_full=e_full,
        max_rel_cached=e_cached,
    )


@torch.no_grad()
def count_ties(model, ids):
    """Cheap screen (one causal pass) used by the seed search."""
    with TieProbe(model) as probe:
        model(ids, use_cache=False)
    return len(probe.events)


def build_searched(spec, log=print):
    """Build the spec's model; with search_tries > 1 try seeds spec.seed, spec.seed+1, ...
    and keep the first whose top-k decisions have no ties on the spec's inputs (else the
    one with fewest). Deterministic."""
    ids = make_inputs(spec)
    best = None
    for i in range(spec.get("search_tries", 1)):
        seed = spec["seed"] + i
        model = build_model(spec, seed)
        n = count_ties(model, ids)
        if best is None or n < best[0]:
            best = (n, seed, model)
        if n == 0:
            break
    n, seed, model = best
    if spec.get("search_tries", 1) > 1:
        log(f"  [{spec['name']}] weight seed {seed} ({n} top-k ties on the inputs)")
    return model, ids, seed


def summarize(res):
    agree, paths = res["agree"], res["paths_agree"]
    lines = []
    for b in range(agree.shape[0]):
        bad = (~agree[b]).nonzero().flatten().tolist()
        pbad = (~paths[b]).nonzero().flatten().tolist()
        amb = res["ambiguous"][b].nonzero().flatten().tolist()
        lines.append(
            f"    b{b}: agree {int(agree[b].sum())}/{agree.shape[1]}"
            f"; first disagreement {bad[0] if bad else '-'}"
            f"; path mismatches {len(pbad)} (first {pbad[0] if pbad else '-'})"
            f"; tie-ambiguous {len(amb)} (first {amb[0] if amb else '-'})"
        )
    unexplained = int((~paths & ~res["ambiguous"]).sum())
    lines.append(f"    path mismatches not explained by a top-k tie: {unexplained}")
    good = agree
    ef = res["max_rel_full"][good].max().item() if good.any() else float("nan")
    ec = res["max_rel_cached"][good].max().item() if good.any() else float("nan")
    lines.append(f"    max rel diff at agreeing positions: full {ef:.2e}, cached {ec:.2e}")
    return "\n".join(lines)


def golden_tensors(ids, res):
    return {
        "input_ids": ids.to(torch.int64).contiguous(),
        "logits": res["logits"].float().contiguous(),
        "logits_full": res["logits_full"].float().contiguous(),
        "logits_cached": res["logits_cached"].float().contiguous(),
        "agree": res["agree"].to(torch.uint8).contiguous(),
        "ambiguous": res["ambiguous"].to(torch.uint8).contiguous(),
    }


def one_key_metadata(info: dict) -> dict:
    """safetensors writes multi-key metadata in hash order; one JSON-valued key keeps the
    files byte-identical across runs."""
    return {"reference": json.dumps(info, sort_keys=True)}


def golden_metadata(spec, weight_seed, cached_prefill, **extra):
    return one_key_metadata({
        "generator": "tools/reference/make_fixtures.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "spec": spec["name"],
        "weight_seed": str(weight_seed),
        "input_seed": str(spec["input_seed"]),
        "cached_prefill": str(cached_prefill),
        "path_rel_tol": str(REL_TOL_PATHS),
        "logits": "prefix golden: last position of a prefill of input_ids[:, :t+1]",
        **extra,
    })


# ----------------------------------------------------------------------------------------
# Greedy
# ----------------------------------------------------------------------------------------


@torch.no_grad()
def greedy_no_cache(model, prompt, n_new):
    """Re-run the whole prefix each step; argmax of the last position. Also returns the
    smallest top1-top2 logit margin (relative to max|logit|) over the steps."""
    ids = prompt.clone()
    margin = float("inf")
    for _ in range(n_new):
        last = model(ids, use_cache=False).logits[:, -1]
        top2 = last.topk(2, dim=-1).values
        margin = min(margin, ((top2[:, 0] - top2[:, 1]) / last.abs().amax(-1)).min().item())
        ids = torch.cat([ids, last.argmax(-1, keepdim=True)], 1)
    return ids[:, prompt.shape[1]:], margin


# ----------------------------------------------------------------------------------------
# Checkpoint spellings
# ----------------------------------------------------------------------------------------
#
# (1) "saved": whatever model.save_pretrained writes (transformers 5.17 reverses its
#     load-time renames only partially -> hybrid names; see README.md).
# (2) "official": DeepSeek's own names (no `model.` prefix) + DeepSeek-style config.json.
# (3) "hf": transformers' in-memory module names (state_dict), fused experts.

_ATTN = {
    "q_a_proj.weight": "wq_a.weight",
    "q_a_norm.weight": "q_norm.weight",
    "q_b_proj.weight": "wq_b.weight",
    "kv_proj.weight": "wkv.weight",
    "kv_norm.weight": "kv_norm.weight",
    "o_a_proj.weight": "wo_a.weight",
    "o_b_proj.weight": "wo_b.weight",
    "sinks": "attn_sink",
}
_COMP = {
    "kv_proj.weight": "wkv.weight",
    "gate_proj.weight": "wgate.weight",
    "position_bias": "ape",
    "kv_norm.weight": "norm.weight",
}
_TOP = {
    "model.embed_tokens.weight": "embed.weight",
    "lm_head.weight": "head.weight",
    "model.norm.weight": "norm.weight",
    "model.hc_head.hc_fn": "hc_head_fn",
    "model.hc_head.hc_base": "hc_head_base",
    "model.hc_head.hc_scale": "hc_head_scale",
}
_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "attn_hc.fn": "hc_attn_fn",
    "attn_hc.base": "hc_attn_base",
    "attn_hc.scale": "hc_attn_scale",
    "ffn_hc.fn": "hc_ffn_fn",
    "ffn_hc.base": "hc_ffn_base",
    "ffn_hc.scale": "hc_ffn_scale",
    "mlp.gate.weight": "ffn.gate.weight",
    "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
    "mlp.gate.tid2eid": "ffn.gate.tid2eid",
    "mlp.shared_experts.gate_proj.weight": "ffn.shared_experts.w1.weight",
    "mlp.shared_experts.down_proj.weight": "ffn.shared_experts.w2.weight",
    "mlp.shared_experts.up_proj.weight": "ffn.shared_experts.w3.weight",
}


def hf_state_dict(model):
    """transformers' in-memory names (persistent tensors only)."""
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def official_state_dict(model):
    """DeepSeek-native names, written independently from transformers' conversion table."""
    out = {}
    inter = model.config.moe_intermediate_size
    for name, v in model.state_dict().items():
        v = v.detach().clone().contiguous()
        if name in _TOP:
            out[_TOP[name]] = v
            continue
        assert name.startswith("model.layers."), name
        rest = name[len("model.layers."):]
        layer, rest = rest.split(".", 1)
        pre = f"layers.{layer}."
        if rest in _LAYER:
            out[pre + _LAYER[rest]] = v
        elif rest.startswith("self_attn.compressor.indexer.scorer."):
            assert rest.endswith("weights_proj.weight"), name
            out[pre + "attn.indexer.weights_proj.weight"] = v
        elif rest == "self_attn.compressor.indexer.q_b_proj.weight":
            out[pre + "attn.indexer.wq_b.weight"] = v
        elif rest.startswith("self_attn.compressor.indexer."):
            out[pre + "attn.indexer.compressor." + _COMP[rest[len("self_attn.compressor.indexer."):]]] = v
        elif rest.startswith("self_attn.compressor."):
            out[pre + "attn.compressor." + _COMP[rest[len("self_attn.compressor."):]]] = v
        elif rest.startswith("self_attn."):
            out[pre + "attn." + _ATTN[rest[len("self_attn."):]]] = v
        elif rest == "mlp.experts.gate_up_proj":  # [E, 2I, D] = [w1 ; w3]
            for e in range(v.shape[0]):
                out[pre + f"ffn.experts.{e}.w1.weight"] = v[e, :inter].clone().contiguous()
                out[pre + f"ffn.experts.{e}.w3.weight"] = v[e, inter:].clone().contiguous()
        elif rest == "mlp.experts.down_proj":  # [E, D, I]
            for e in range(v.shape[0]):
                out[pre + f"ffn.experts.{e}.w2.weight"] = v[e].clone().contiguous()
        else:
            raise RuntimeError(f"official_state_dict: no rule for {name}")
    return out


def official_config(cfg: DeepseekV4Config) -> dict:
    """DeepSeek-style (legacy) config.json: per-layer `compress_ratios` (+1 trailing entry
    for the MTP layer, as DeepSeek ships), `num_hash_layers`, `qk_rope_head_dim`,
    `rope_theta` / `compress_rope_theta`, `rope_scaling` {type: yarn, ...}."""
    rate = {SWA: 0, CSA: cfg.compress_rates[CSA], HCA: cfg.compress_rates[HCA]}
    ratios = [rate[t] for t in cfg.layer_types]
    n_hash = sum(1 for t in cfg.mlp_layer_types if t == "hash_moe")
    assert cfg.mlp_layer_types == ["hash_moe"] * n_hash + ["moe"] * (len(ratios) - n_hash)
    comp = cfg.rope_parameters["compress"]
    out = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "qk_rope_head_dim": cfg.qk_rope_head_dim,
        "q_lora_rank": cfg.q_lora_rank,
        "o_groups": cfg.o_groups,
        "o_lora_rank": cfg.o_lora_rank,
        "n_routed_experts": cfg.n_routed_experts,
        "n_shared_experts": cfg.n_shared_experts,
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "scoring_func": cfg.scoring_func,
        "topk_method": "noaux_tc",
        "norm_topk_prob": cfg.norm_topk_prob,
        "routed_scaling_factor": cfg.routed_scaling_factor,
        "swiglu_limit": cfg.swiglu_limit,
        "num_hash_layers": n_hash,
        "sliding_window": cfg.sliding_window,
        "compress_ratios": ratios + [0],  # + trailing MTP-layer entry, as DeepSeek ships
        "index_n_heads": cfg.index_n_heads,
        "index_head_dim": cfg.index_head_dim,
        "index_topk": cfg.index_topk,
        "hc_mult": cfg.hc_mult,
        "hc_sinkhorn_iters": cfg.hc_sinkhorn_iters,
        "hc_eps": cfg.hc_eps,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_parameters["main"]["rope_theta"],
        "compress_rope_theta": comp["rope_theta"],
        "max_position_embeddings": cfg.max_position_embeddings,
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "torch_dtype": "float32",
    }
    if comp.get("rope_type") == "yarn":
        out["rope_scaling"] = {
            "type": "yarn",
            "factor": comp["factor"],
            "original_max_position_embeddings": comp["original_max_position_embeddings"],
            "beta_fast": comp["beta_fast"],
            "beta_slow": comp["beta_slow"],
        }
    return out


def config_from_official(legacy: dict) -> DeepseekV4Config:
    """Our own legacy -> transformers translation (what the Rust loader must do too).

    transformers' own legacy path maps compress_ratios only through {0, 4, 128}; the tiny
    fixtures use HCA rates 8/16, so we translate: 0 -> sliding, 4 -> CSA (overlap +
    indexer, as in DeepSeek's reference `compress_ratio == 4`), other m > 0 -> HCA."""
    kw = {k: v for k, v in legacy.items() if k not in (
        "architectures", "model_type", "compress_ratios", "num_hash_layers", "qk_rope_head_dim",
        "rope_scaling", "topk_method", "torch_dtype", "num_nextn_predict_layers")}
    n = legacy["num_hidden_layers"]
    ratios = legacy["compress_ratios"][:n]
    kw["layer_types"] = [SWA if r == 0 else CSA if r == 4 else HCA for r in ratios]
    hca = sorted({r for r in ratios if r not in (0, 4)})
    assert len(hca) <= 1, "one HCA rate per model"
    kw["compress_rates"] = {CSA: 4, HCA: hca[0] if hca else 128}
    nh = legacy["num_hash_layers"]
    kw["mlp_layer_types"] = ["hash_moe"] * min(n, nh) + ["moe"] * max(0, n - nh)
    kw["partial_rotary_factor"] = legacy["qk_rope_head_dim"] / legacy["head_dim"]
    if "rope_scaling" in legacy:
        rs = dict(legacy["rope_scaling"])
        rs["rope_type"] = rs.pop("type")
        kw["rope_parameters"] = rs
    return DeepseekV4Config(**kw)


def write_sharded(sd: dict, out_dir: str, n_shards=2):
    """Split into n_shards files (greedy by bytes, keys sorted) + model.safetensors.index.json."""
    os.makedirs(out_dir, exist_ok=True)
    keys = sorted(sd)
    total = sum(sd[k].numel() * sd[k].element_size() for k in keys)
    target = total / n_shards
    shards, cur, acc = [], [], 0
    for k in keys:
        cur.append(k)
        acc += sd[k].numel() * sd[k].element_size()
        if acc >= target * (len(shards) + 1) and len(shards) < n_shards - 1:
            shards.append(cur)
            cur = []
    shards.append(cur)
    weight_map = {}
    for i, ks in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: sd[k] for k in ks}, os.path.join(out_dir, fn), metadata={"format": "pt"})
        for k in ks:
            weight_map[k] = fn
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def write_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_saved(model, out_dir):
    """transformers' own save_pretrained spelling (config.json + model.safetensors)."""
    model.save_pretrained(out_dir, safe_serialization=True)


def write_official(model, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    write_sharded(official_state_dict(model), out_dir, 2)
    write_json(official_config(model.config), os.path.join(out_dir, "config.json"))


def write_hf(model, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    save_file(hf_state_dict(model), os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    model.config.to_json_file(os.path.join(out_dir, "config.json"))


WRITERS = {"saved": write_saved, "official": write_official, "hf": write_hf}


@torch.no_grad()
def reload_and_compare(model_dir, spelling, ids, ref_logits):
    """Load a written checkpoint back with transformers.from_pretrained and return
    max|Δ| of the full-pass logits vs ref_logits (None if transformers cannot load it)."""
    kwargs = {}
    if spelling == "official":
        with open(os.path.join(model_dir, "config.json")) as f:
            kwargs["config"] = config_from_official(json.load(f))
    m2 = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kwargs).eval()
    out = m2(ids, use_cache=False).logits
    return (out - ref_logits).abs().max().item()


@contextmanager
def quiet_transformers():
    from transformers.utils import logging as tlog

    old = tlog.get_verbosity()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        tlog.set_verbosity(old)
