"""Proves v4torch.py computes what amdahl's Rust engine computes, and that it is causal.

For a few random tiny DeepSeek-V4 configs (all three attention types, hash and top-k MoE, mHC,
YaRN on the compress table, windows and compressed entries well inside the sequence, index_topk
smaller than the visible entries), it
  1. draws random weights (every parameter non-zero: sinks, position biases, router bias, mHC),
  2. writes them in official DeepSeek names + config.json (f32, and once in bf16),
  3. runs `amdahl logits --mode full` and `--mode incremental` on random ids,
  4. compares with this implementation's logits: max|d| <= 1e-4 * max|ref|,
  5. checks causality: logits of ids[:, :t] equal the first t positions of the full pass.

Usage: python parity.py --amdahl target/release/amdahl [--keep DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
import v4torch  # noqa: E402


def tiny_config(layers, mlp, window, csa, hca, topk, vocab=64, yarn=True):
    partial = 8 / 16
    compress = {"rope_type": "default", "rope_theta": 160000.0, "partial_rotary_factor": partial}
    if yarn:
        compress = {
            "rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0,
            "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
            "attention_factor": 1.0, "partial_rotary_factor": partial,
        }
    return {
        "model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"],
        "vocab_size": vocab, "hidden_size": 32, "num_hidden_layers": len(layers),
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
        "partial_rotary_factor": partial, "q_lora_rank": 16, "o_groups": 2, "o_lora_rank": 8,
        "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "moe_intermediate_size": 16, "scoring_func": "sqrtsoftplus", "norm_topk_prob": True,
        "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "sliding_window": window,
        "layer_types": layers, "mlp_layer_types": mlp,
        "compress_rates": {"compressed_sparse_attention": csa, "heavily_compressed_attention": hca},
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial},
            "compress": compress,
        },
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
        "index_n_heads": 2, "index_head_dim": 16, "index_topk": topk,
        "max_position_embeddings": 4096, "bos_token_id": 0, "eos_token_id": 1,
        "tie_word_embeddings": False,
    }


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm") or name.endswith("norm.weight") or name.endswith("scale"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2 and "embed" not in name and "fn" not in name and "ape" not in name:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)
            else:
                scale = 0.1 if "fn" in name else (1.0 if "embed" in name else 0.5)
                p.copy_(scale * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith(".bias"):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))


def run_engine(amdahl, model_dir, ids, mode, tmp):
    inp = os.path.join(tmp, "in.safetensors")
    out = os.path.join(tmp, f"out_{mode}.safetensors")
    save_file({"input_ids": ids.long().contiguous()}, inp)
    cmd = [amdahl, "logits", "--model", model_dir, "--input", inp, "--output", out,
           "--mode", mode]
    if mode == "incremental":
        cmd += ["--prefix", "5"]
    subprocess.run(cmd, check=True)
    return load_file(out)["logits"]


def check(name, cfg_dict, seq, batch, amdahl, tmp, seed, bf16=False):
    cfg = v4torch.V4Config(cfg_dict)
    torch.manual_seed(seed)
    model = v4torch.V4Model(cfg, max_pos=seq)
    randomize(model, seed)
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    saved = v4torch.save_checkpoint(model, os.path.join(d, "model.safetensors"), bf16)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
    if bf16:  # compare against the weights as stored
        v4torch.load_official(model, {k: v.float() if v.is_floating_point() else v
                                      for k, v in saved.items()})
    model.eval()
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    with torch.no_grad():
        ref = model(ids)
    ok = True
    for mode in ("full", "incremental"):
        got = run_engine(amdahl, d, ids, mode, tmp)
        err = (got - ref).abs().max().item()
        tol = 1e-4 * ref.abs().max().item()
        status = "ok" if err <= tol else "FAIL"
        ok &= err <= tol
        print(f"{name:28s} engine {mode:11s} max|d| {err:.3e}  tol {tol:.3e}  {status}")
    # Causality: every prefix length t gives the same logits at positions < t.
    worst = 0.0
    with torch.no_grad():
        for t in range(1, seq + 1, 7):
            part = model(ids[:, :t])
            worst = max(worst, (part - ref[:, :t]).abs().max().item())
    tol = 1e-5 * ref.abs().max().item()
    ok &= worst <= tol
    print(f"{name:28s} prefix-vs-full       max|d| {worst:.3e}  tol {tol:.3e}  "
          f"{'ok' if worst <= tol else 'FAIL'}")
    # The indexer must actually prune (otherwise CSA equals HCA and selection is untested).
    n_vis = seq // cfg.csa_rate
    print(f"{name:28s} CSA visible entries at the end: {n_vis}, index_topk {cfg.index_topk}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amdahl", default="target/release/amdahl")
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="v4parity_")
    S, C, H = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
    cases = [
        ("mixed_w8_csa4_hca8_top3", tiny_config([S, C, H, C], ["hash_moe", "hash_moe", "moe", "moe"],
                                                8, 4, 8, 3), 80, 3, False),
        ("csa_first_w12_hca16_top5", tiny_config([C, H, S, C, H], ["hash_moe", "moe", "moe", "moe", "moe"],
                                                 12, 4, 16, 5, yarn=False), 96, 2, False),
        ("arith_shape_bf16", tiny_config([S, C, H, C, H, S], ["hash_moe"] * 2 + ["moe"] * 4,
                                         24, 4, 16, 8, vocab=18), 160, 2, True),
    ]
    # The shape models/arith is trained with, at its full context, stored as it ships (bf16).
    import train  # noqa: E402

    cases.append(("models_arith_config_bf16", train.model_config(256), 256, 1, True))
    ok = True
    for i, (name, cfg, seq, batch, bf16) in enumerate(cases):
        ok &= check(name, cfg, seq, batch, a.amdahl, tmp, 100 + i, bf16)
    print("PARITY", "PASSED" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
