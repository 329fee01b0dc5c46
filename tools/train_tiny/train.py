"""Trains the tiny arithmetic DeepSeek-V4 (models/arith) with v4torch.py on generated problems.

    python train.py --out OUT_DIR [--minutes 4.5] [--device cuda]

Deterministic given --seed and the number of steps: the step count is fixed after a short timing
probe (printed as `plan: N steps`); pass --steps N to replay a run exactly. The held-out set is
drawn from a different seed. Writes OUT_DIR/config.json, OUT_DIR/model.safetensors (matrices
bf16, small vectors f32) and OUT_DIR/train_log.txt; the printed held-out accuracy is measured on
the saved (bf16-rounded) weights in f32, as the Rust engine runs them.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arith  # noqa: E402
import v4torch  # noqa: E402

TRAIN_SEED = 20240917
HELDOUT_SEED = 777001


def model_config(seq):
    S, C, H = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
    head_dim, rope_dim = 64, 16
    partial = rope_dim / head_dim
    return {
        "model_type": "deepseek_v4",
        "architectures": ["DeepseekV4ForCausalLM"],
        "vocab_size": len(arith.VOCAB),
        "hidden_size": 256,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": head_dim,
        "partial_rotary_factor": partial,
        "q_lora_rank": 128,
        "o_groups": 2,
        "o_lora_rank": 64,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 96,
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "sliding_window": 24,
        "layer_types": [S, C, H, C, H, S],
        "mlp_layer_types": ["hash_moe", "hash_moe", "moe", "moe", "moe", "moe"],
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial},
            "compress": {"rope_type": "default", "rope_theta": 160000.0,
                         "partial_rotary_factor": partial},
        },
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "rms_norm_eps": 1e-6,
        "index_n_heads": 4,
        "index_head_dim": 32,
        "index_topk": 8,
        "max_position_embeddings": seq,
        "bos_token_id": arith.BOS,
        "eos_token_id": arith.NL,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        leaf = name.split(".")[-1]
        if p.dim() >= 2 and leaf not in ("ape", "fn") and "hc_head_fn" not in name:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def evaluate(model, sets, device, autocast):
    model.eval()
    tot = {}
    with torch.no_grad():
        for bt in sets:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(bt["ids"])
            for k, (c, n) in arith.exact_match(logits.float(), bt).items():
                a, b = tot.get(k, (0, 0))
                tot[k] = (a + c, b + n)
    model.train()
    return tot


def fmt(acc):
    parts = []
    for k, (c, n) in acc.items():
        parts.append(f"{k} {100.0 * c / max(n, 1):.2f}% ({c}/{n})")
    return ", ".join(parts)


def score(acc, how="mean"):
    per = [acc[k][0] / max(acc[k][1], 1) for k in arith.OP_NAMES]
    return min(per) if how == "min" else sum(per) / len(per)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--minutes", type=float, default=4.5, help="wall-clock budget for training")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: from the budget)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--aux", type=float, default=0.05, help="indexer distillation loss weight")
    ap.add_argument("--seed", type=int, default=TRAIN_SEED)
    ap.add_argument("--tiny", action="store_true", help="a miniature model (script smoke test)")
    ap.add_argument("--init", default=None, help="continue from this model folder's weights")
    ap.add_argument("--op-weights", default=None,
                    help="training mix of add,sub,mul (held-out keeps arith.OPS), e.g. 0.2,0.55,0.25")
    ap.add_argument("--select", choices=["mean", "min"], default="mean",
                    help="keep the checkpoint with the best mean / worst-op held-out accuracy")
    a = ap.parse_args()

    t_start = time.time()
    device = torch.device(a.device)
    use_amp = device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    log_f = open(os.path.join(a.out, "train_log.txt"), "w")

    def log(msg):
        line = f"[{time.time() - t_start:7.1f}s] {msg}"
        print(line, flush=True)
        log_f.write(line + "\n")
        log_f.flush()

    cfg_dict = model_config(a.seq)
    if a.tiny:
        cfg_dict.update(hidden_size=64, num_attention_heads=2, head_dim=32, q_lora_rank=32,
                        o_lora_rank=16, moe_intermediate_size=32, index_head_dim=16)
        cfg_dict["partial_rotary_factor"] = 0.25
        for t in cfg_dict["rope_parameters"].values():
            t["partial_rotary_factor"] = 0.25
    cfg = v4torch.V4Config(cfg_dict)
    torch.manual_seed(a.seed)
    model = v4torch.V4Model(cfg, max_pos=a.seq).to(device)
    if a.init:
        from safetensors.torch import load_file

        with open(os.path.join(a.init, "config.json")) as f:
            assert json.load(f) == json.loads(json.dumps(cfg_dict)), "--init config differs"
        t = load_file(os.path.join(a.init, "model.safetensors"))
        v4torch.load_official(model, {k: (v.float() if v.is_floating_point() else v).to(device)
                                      for k, v in t.items()})
    op_weights = [float(x) for x in a.op_weights.split(",")] if a.op_weights else None
    n_params = sum(p.numel() for p in model.parameters())
    log(f"device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), "
        f"torch {torch.__version__}, params {n_params / 1e6:.2f}M, config {json.dumps(cfg_dict)}")

    g_train = torch.Generator(device=device).manual_seed(a.seed)
    g_eval = torch.Generator(device=device).manual_seed(HELDOUT_SEED)
    held = [arith.batch(a.batch, a.seq, g_eval, device) for _ in range(a.eval_batches)]

    opt = torch.optim.AdamW(param_groups(model, a.wd), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.type == "cuda")
    budget = a.minutes * 60.0
    total = a.steps if a.steps > 0 else 10**9
    best = (-1.0, None, 0)
    if a.init:
        acc = evaluate(model, held, device, use_amp)
        best = (score(acc, a.select), {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, 0)
        log(f"eval step 0 (from {a.init}): {fmt(acc)}")
    step = 0
    t_train = time.time()
    probe_t0 = None
    topk_layers = [l.ffn for l in model.layers if not l.ffn.hash]
    while step < total:
        if a.steps == 0 and step in (10, 30) and device.type == "cuda":
            torch.cuda.synchronize()
        if a.steps == 0 and step == 10:
            probe_t0 = time.time()
        if a.steps == 0 and step == 30:
            per = (time.time() - probe_t0) / 20
            spent = time.time() - t_train
            evals = 1.0 + 0.05  # headroom for periodic evaluation
            total = max(step + 1, int((budget - spent) / (per * evals)) + step)
            log(f"plan: {total} steps ({per * 1000:.0f} ms/step, {a.batch}x{a.seq} tokens/step)")
        lr_scale = min(1.0, (step + 1) / a.warmup)
        if total < 10**9:
            prog = min(1.0, step / max(total, 1))
            lr_scale *= 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * prog))
        for gr in opt.param_groups:
            gr["lr"] = a.lr * lr_scale
        bt = arith.batch(a.batch, a.seq, g_train, device, op_weights=op_weights)
        aux = []
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            logits = model(bt["ids"], aux=aux)
        tgt = bt["ids"][:, 1:]
        w = bt["answer"][:, 1:].float()
        ce = F.cross_entropy(logits[:, :-1].float().reshape(-1, cfg.vocab_size), tgt.reshape(-1),
                             reduction="none")
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        aux_loss = torch.stack(aux).mean() if aux else torch.zeros((), device=device)
        opt.zero_grad(set_to_none=True)
        (loss + a.aux * aux_loss).backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free balancing of the top-k routers
            for ffn in topk_layers:
                load = ffn.last_load.float()
                ffn.bias += 1e-3 * torch.sign(load.mean() - load)
        step += 1
        if step % 25 == 0 or step == 1:
            log(f"step {step} loss {loss.item():.4f} aux {aux_loss.item():.4f} "
                f"gnorm {gn.item():.2f} lr {a.lr * lr_scale:.2e}")
        if step % a.eval_every == 0 or step == total:
            acc = evaluate(model, held, device, use_amp)
            sc = score(acc, a.select)
            log(f"eval step {step}: {a.select} {100 * sc:.2f}% | {fmt(acc)}")
            if sc >= best[0]:
                state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                best = (sc, state, step)
                # Kept on disk as well, so a failure later in the run loses nothing.
                v4torch.save_checkpoint(model, os.path.join(a.out, "model.safetensors"), True, state)
                v4torch.write_config(cfg_dict, os.path.join(a.out, "config.json"))
        if a.steps == 0 and time.time() - t_train > budget + 30:
            log(f"time budget exhausted at step {step}")
            break

    if best[1] is None or (step % a.eval_every != 0 and step != total):
        acc = evaluate(model, held, device, use_amp)
        sc = score(acc, a.select)
        log(f"eval step {step}: {a.select} {100 * sc:.2f}% | {fmt(acc)}")
        if sc >= best[0]:
            best = (sc, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, step)
    log(f"training done: {step} steps in {time.time() - t_train:.1f}s; best eval at step {best[2]}")
    model.load_state_dict(best[1])
    # Save, then reload the saved (bf16-rounded) tensors and measure in f32 as the engine runs.
    path = os.path.join(a.out, "model.safetensors")
    saved = v4torch.save_checkpoint(model.cpu(), path, matrices_bf16=True)
    v4torch.write_config(cfg_dict, os.path.join(a.out, "config.json"))
    model = model.to(device)
    v4torch.load_official(model, {k: (v.float() if v.is_floating_point() else v).to(device)
                                  for k, v in saved.items()})
    acc = evaluate(model, held, device, autocast=False)
    log(f"HELD-OUT (seed {HELDOUT_SEED}, saved bf16 weights, f32 forward, greedy exact match, "
        f"every problem of {a.eval_batches}x{a.batch} sequences of {a.seq}): {fmt(acc)}")
    log(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB); total wall {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
