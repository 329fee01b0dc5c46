#!/usr/bin/env python3
"""Parity check of the amdahl binary against transformers on NEW tiny DeepSeek-V4 models.

    /opt/tfenv/bin/python tools/reference/check_unseen.py --amdahl target/release/amdahl
    /opt/tfenv/bin/python tools/reference/check_unseen.py --dry-run      # generation only

Builds a few random models whose seeds and shapes differ from the committed fixtures
(tests/fixtures/v4), writes each into a temp dir (rotating through the three checkpoint
spellings: save_pretrained, DeepSeek official, HF module names), computes transformers'
prefix goldens + agree mask (v4tiny.three_paths), then runs

    amdahl logits --model DIR --input IN.safetensors --output OUT.safetensors [--mode M ...]

(IN: input_ids I64 [B,S]; OUT: logits F32 [B,S,V]) once per path (`--mode full`,
`incremental --prefix 3`, `chunked --chunk 5`) and requires, for every path at every position
where transformers is self-consistent (agree == 1):  max_v |out - ref| <= 1e-4 * max_v |ref|.
Prints one summary line; exit status 0 = pass, 1 = mismatch/failure, 2 = usage error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import v4tiny as V  # noqa: E402
from v4tiny import CSA, HCA, SWA  # noqa: E402

H, M = "hash_moe", "moe"
REL_TOL = 1e-4

# Shapes/seeds deliberately unlike tests/fixtures/v4 (hidden 48/40/64, rope 16/8/8,
# rates 16/8, windows 10/12/8, other layer orders, 3 index heads, ...).
UNSEEN = [
    dict(
        name="unseen_a", spelling="official", batch=2, seq=80, seed=41000, input_seed=41, cached_prefill=3,
        search_tries=10,
        config=V.base_config(
            vocab_size=160, hidden_size=48, num_hidden_layers=5, head_dim=48, partial_rotary_factor=1 / 3,
            q_lora_rank=24, o_lora_rank=12, moe_intermediate_size=24, sliding_window=10,
            compress_rates={CSA: 4, HCA: 16}, index_n_heads=4, index_head_dim=24, index_topk=4,
            layer_types=[CSA, HCA, SWA, CSA, HCA], mlp_layer_types=[H, H, M, M, M],
            scoring_func="sqrtsoftplus", routed_scaling_factor=1.5,
            rope_parameters=V.yarn(factor=4, original=32), max_position_embeddings=128,
        ),
    ),
    dict(
        name="unseen_b", spelling="hf", batch=2, seq=56, seed=42000, input_seed=42, cached_prefill=1,
        search_tries=10,
        config=V.base_config(
            vocab_size=200, hidden_size=40, num_hidden_layers=4, head_dim=32, partial_rotary_factor=0.25,
            q_lora_rank=20, o_lora_rank=10, moe_intermediate_size=20, sliding_window=12,
            compress_rates={CSA: 4, HCA: 8}, index_n_heads=3, index_head_dim=24, index_topk=3,
            layer_types=[SWA, HCA, CSA, SWA], mlp_layer_types=[H, M, M, M],
            scoring_func="sigmoid", routed_scaling_factor=2.0,
            max_position_embeddings=128,
        ),
    ),
    dict(
        name="unseen_c", spelling="saved", batch=2, seq=72, seed=43000, input_seed=43, cached_prefill=1,
        search_tries=10,
        config=V.base_config(
            vocab_size=128, hidden_size=64, num_hidden_layers=4, head_dim=64, partial_rotary_factor=0.125,
            q_lora_rank=32, o_lora_rank=16, moe_intermediate_size=16, sliding_window=8,
            compress_rates={CSA: 4, HCA: 8}, index_n_heads=4, index_head_dim=32, index_topk=5,
            layer_types=[CSA, CSA, HCA, SWA], mlp_layer_types=[H, H, H, M],
            scoring_func="sqrtsoftplus", routed_scaling_factor=1.5,
            rope_parameters=V.yarn(factor=8, original=16, beta_fast=16, beta_slow=2), max_position_embeddings=128,
        ),
    ),
]


MODES = [
    ("full", ["--mode", "full"]),
    ("incremental", ["--mode", "incremental", "--prefix", "3"]),
    ("chunked", ["--mode", "chunked", "--chunk", "5"]),
]


def run_binary(amdahl, model_dir, in_path, out_path, timeout, mode_args):
    cmd = [amdahl, "logits", "--model", model_dir, "--input", in_path, "--output", out_path, *mode_args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return f"cannot execute {amdahl}"
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout}s: {' '.join(cmd)}"
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        return f"exit {p.returncode}: {' '.join(cmd)}\n      " + "\n      ".join(tail)
    if not os.path.exists(out_path):
        return f"no output file {out_path}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amdahl", help="path to the amdahl binary")
    ap.add_argument("--dry-run", action="store_true", help="only build models + goldens (no binary)")
    ap.add_argument("--seed", type=int, default=0, help="added to every weight/input seed (default 0)")
    ap.add_argument("--keep", help="write the models here instead of a temp dir (kept afterwards)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per binary run")
    args = ap.parse_args()
    if not args.dry_run and not args.amdahl:
        ap.error("--amdahl PATH is required (or use --dry-run)")
    if args.amdahl and not os.path.isfile(args.amdahl):
        print(f"check_unseen: FAIL: {args.amdahl} does not exist", flush=True)
        return 1
    V.check_versions()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    tmp = None
    root = args.keep
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="amdahl-unseen-")
        root = tmp.name
    os.makedirs(root, exist_ok=True)

    failures, compared, total, worst = [], 0, 0, 0.0
    with V.quiet_transformers():
        for spec0 in UNSEEN:
            spec = dict(spec0, seed=spec0["seed"] + 1000 * args.seed, input_seed=spec0["input_seed"] + args.seed)
            model, ids, wseed = V.build_searched(spec, log=lambda s: None)
            res = V.three_paths(model, ids, cached_prefill=spec["cached_prefill"])
            mdir = os.path.join(root, spec["name"])
            os.makedirs(mdir, exist_ok=True)
            V.WRITERS[spec["spelling"]](model, mdir)
            reload_err = V.reload_and_compare(mdir, spec["spelling"], ids, res["logits_full"])
            in_path = os.path.join(root, f"{spec['name']}.in.safetensors")
            out_path = os.path.join(root, f"{spec['name']}.out.safetensors")
            save_file({"input_ids": ids.to(torch.int64).contiguous()}, in_path)
            save_file(V.golden_tensors(ids, res), os.path.join(root, f"{spec['name']}.golden.safetensors"),
                      metadata=V.golden_metadata(spec, wseed, spec["cached_prefill"]))
            agree = res["agree"]
            n_agree = int(agree.sum())
            total += agree.numel()
            print(f"  {spec['name']} ({spec['spelling']} spelling, weight seed {wseed}): "
                  f"transformers agrees at {n_agree}/{agree.numel()} positions; reload max|d| {reload_err:.2g}",
                  flush=True)
            if reload_err != 0.0:
                failures.append(f"{spec['name']}: transformers reload mismatch {reload_err}")
            if args.dry_run:
                continue
            compared += n_agree
            for mode, mode_args in MODES:
                if os.path.exists(out_path):
                    os.remove(out_path)
                err = run_binary(os.path.abspath(args.amdahl), mdir, in_path, out_path, args.timeout, mode_args)
                if err:
                    failures.append(f"{spec['name']} {mode}: {err}")
                    continue
                out = load_file(out_path).get("logits")
                ref = res["logits"]
                if out is None or tuple(out.shape) != tuple(ref.shape):
                    failures.append(f"{spec['name']} {mode}: logits shape "
                                    f"{None if out is None else tuple(out.shape)}, want {tuple(ref.shape)}")
                    continue
                rel = (out.float() - ref).abs().amax(-1) / ref.abs().amax(-1)
                rel = torch.where(agree, rel, torch.zeros_like(rel))
                worst = max(worst, float(rel.max()))
                bad = (rel > REL_TOL) | (agree & ~torch.isfinite(rel))
                if bad.any():
                    b, t = bad.nonzero()[0].tolist()
                    failures.append(f"{spec['name']} {mode}: {int(bad.sum())} positions over {REL_TOL:g}; "
                                    f"first b{b} t{t} rel {float(rel[b, t]):.3e}")
    if args.keep:
        print(f"  models, inputs and goldens kept in {root}", flush=True)
    if tmp is not None:
        tmp.cleanup()

    for f in failures:
        print(f"  FAIL {f}", flush=True)
    status = "FAIL" if failures else "PASS"
    if args.dry_run:
        print(f"check_unseen: {status} (dry run) {len(UNSEEN)} models generated, "
              f"{total} positions, no binary run", flush=True)
    else:
        failed_models = {f.split()[0].rstrip(":") for f in failures}
        print(f"check_unseen: {status} {len(UNSEEN) - len(failed_models)}/{len(UNSEEN)} models x "
              f"{len(MODES)} paths ({', '.join(m for m, _ in MODES)}), "
              f"{compared}/{total} agreeing positions compared per path, worst rel err {worst:.2e} "
              f"(limit {REL_TOL:g})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
