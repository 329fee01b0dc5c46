#!/usr/bin/env python3
"""Minimal reproduction: why transformers 5.17's DeepSeek-V4 disagrees with itself.

    /opt/tfenv/bin/python tools/reference/repro_divergence.py

See docs/transformers-v4-divergence.md for the write-up and this script's output.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import v4tiny as V  # noqa: E402
from v4tiny import CSA, SWA  # noqa: E402
import transformers.models.deepseek_v4.modeling_deepseek_v4 as tfv4  # noqa: E402

torch.set_num_threads(1)
V.check_versions()
NEG_INF = float("-inf")

print("1) torch.topk breaks exact ties differently depending on the row length")
row = torch.tensor([0.84, 0.0, 1.07, 0.0])
padded = torch.cat([row, torch.full((12,), NEG_INF)])
print(f"   scores [0.84, 0.0, 1.07, 0.0]          topk(3) -> {sorted(row.topk(3).indices.tolist())}")
print(f"   same row + 12 x -inf (masked future) topk(3) -> {sorted(padded.topk(3).indices.tolist())}")

# 4 layers, CSA at 1 and 3, 2 index heads, index_topk 3, window 8, CSA rate 4.
spec = dict(
    name="repro", batch=2, seq=64, seed=0, input_seed=5, cached_prefill=1,
    config=V.base_config(
        layer_types=[SWA, CSA, SWA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        index_n_heads=2, index_head_dim=16, index_topk=3,
    ),
)
with V.quiet_transformers():
    model = V.build_model(spec)
ids = V.make_inputs(spec)

# Record the indexer's picks (query rows) and scores per path.
picks = []
_orig = tfv4.DeepseekV4Indexer.forward
_orig_sc = tfv4.DeepseekV4IndexerScorer.forward


def _rec_indexer(self, hs, qr, pos, pkv, layer_idx):
    out = _orig(self, hs, qr, pos, pkv, layer_idx)
    picks.append((layer_idx, pos[0].clone(), out.clone(), self.scorer._last.clone()))
    return out


def _rec_scorer(self, q, kv, hs):
    s = _orig_sc(self, q, kv, hs)
    self._last = s
    return s


print("\n2) stock transformers, tiny model (CSA layers 1 and 3, 2 index heads, index_topk 3), B=2 S=64")
res = V.three_paths(model, ids, cached_prefill=1)
for name, key in (("full pass", "max_rel_full"), ("cached decode", "max_rel_cached")):
    ok = res[key] <= V.REL_TOL_PATHS
    first = [(~ok[b]).nonzero().flatten().tolist()[:1] for b in range(2)]
    print(f"   {name:13s} vs prefix golden: {int(ok.sum())}/128 positions agree; first mismatch per row {first}")
pm = ~res["paths_agree"]
print(f"   positions where the paths disagree: {int(pm.sum())}; of those, with an indexer/router top-k tie "
      f"(k-th == (k+1)-th score) reaching them: {int((pm & res['ambiguous']).sum())}")

# Show the first tie that changes a decision between the full pass and the decode (row 0).
tfv4.DeepseekV4Indexer.forward = _rec_indexer
tfv4.DeepseekV4IndexerScorer.forward = _rec_scorer
with torch.no_grad():
    picks.clear()
    model(ids, use_cache=False)
    full_picks = {layer: (idx, sc) for layer, _, idx, sc in picks}
    picks.clear()
    cache = V.DynamicCache(config=model.config)
    for t in range(ids.shape[1]):
        model(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
    dec_picks = {}
    for layer, pos, idx, sc in picks:
        dec_picks.setdefault(layer, []).append((int(pos[0]), idx[:, 0], sc[:, 0]))
tfv4.DeepseekV4Indexer.forward = _orig
tfv4.DeepseekV4IndexerScorer.forward = _orig_sc
done = False
for t in range(ids.shape[1]):
    for layer in sorted(full_picks):
        f_idx, f_sc = full_picks[layer]
        _, d_idx, d_sc = dec_picks[layer][t]
        fs = sorted(i for i in f_idx[0, t].tolist() if i >= 0)
        ds = sorted(i for i in d_idx[0].tolist() if i >= 0)
        if fs != ds and not done:
            vis = (t + 1) // 4
            print(f"   first differing pick: row 0, query t={t}, layer {layer}: {vis} visible entries,")
            print(f"     index scores (full pass) {[round(x, 4) for x in f_sc[0, t, :vis].tolist()]}")
            print(f"     index scores (decode)    {[round(x, 4) for x in d_sc[0, :vis].tolist()]}")
            print(f"     full pass keeps {fs}, cached decode keeps {ds}")
            done = True

print("\n3) same model, exact index-score ties broken deterministically (lowest entry index wins)")


def _tiebreak_scorer(self, q, kv, hs):
    s = _orig_sc(self, q, kv, hs)
    # only exact zeros (ReLU floor) tie in practice; nudge them by < any real gap
    ramp = (torch.arange(s.shape[-1], dtype=s.dtype) + 1) * 1e-30
    return torch.where(s == 0, -ramp, s)


tfv4.DeepseekV4IndexerScorer.forward = _tiebreak_scorer
res2 = V.three_paths(model, ids, cached_prefill=1)
tfv4.DeepseekV4IndexerScorer.forward = _orig_sc
for name, key in (("full pass", "max_rel_full"), ("cached decode", "max_rel_cached")):
    ok = res2[key] <= V.REL_TOL_PATHS
    print(f"   {name:13s} vs prefix golden: {int(ok.sum())}/128 positions agree; "
          f"max rel diff {float(res2[key].max()):.1e}")
