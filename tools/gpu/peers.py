#!/usr/bin/env python3
"""The peers at the shapes of `amdahl profile --dummy v4-flash`, run on the GPU machine in the
same call as amdahl (tools/gpu/run.sh peers), so that ratios compare like with like:

  copy      device-to-device copy bandwidth (2 GiB, the roofline every ratio uses)
  moe       the routed + shared experts of one MoE layer in bf16 through torch grouped_mm
            (256 experts, top-6, hidden 4096, intermediate 2048; uniform random routing),
            captured in a CUDA graph; bandwidth on the bf16 bytes of the experts it touches
  sglang    SGLang's sm_120 Triton sparse decode kernel (flash_mla_sm120_triton.py), brought
            for the run only (never committed) as .gpu/peers/flash_mla_sm120_triton.py: its
            DSv4 paged FP8 cache, 64 heads, window 128 + top-512 compressed rows, merged and
            sink-scaled by the file's own helpers; also one 640-row call
  hf        transformers 5.17 eager DeepseekV4ForCausalLM at V4-Flash widths, 4 layers
            (sliding, sliding, CSA 4, HCA 128; hash MoE x3, MoE), bf16 weights filled on the GPU
            (matrices N(0, 1/fan_in), vectors 1), hash routes spread over the experts: an
            8192-token prefill, then
            decode steps at context 8192 (batch 1) and 1024 (batch 16: eager attention
            materialises [batch, heads, rows, cols] scores and batch 16 x 8192 prefill does not fit)

    python3 tools/gpu/peers.py [--out DIR] [--only copy,moe,sglang,hf]

Prints one JSON object per measurement (also written to DIR/peers.jsonl) and a summary last.
A section that fails prints its error and the others still run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HIDDEN, INTER, EXPERTS, TOP_K = 4096, 2048, 256, 6
HEADS, HEAD_DIM, WINDOW, INDEX_TOPK, CTX = 64, 512, 128, 512, 8192
RESULTS: list[dict] = []


def emit(**row):
    RESULTS.append(row)
    print(json.dumps(row), flush=True)


def time_ms(fn, iters=20, warm=3):
    """Mean milliseconds per call over `iters` calls after `warm`, by CUDA events."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def graphed(fn):
    """`fn` captured in a CUDA graph (after a warm-up on a side stream), or None if capture fails."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay
    except Exception as e:  # noqa: BLE001 - report and fall back to eager launches
        print(f"graph capture failed ({type(e).__name__}: {e}); timing eager launches", flush=True)
        return None


def copy_bw():
    n = 1 << 30  # 2 GiB of bf16
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), iters=10)
    gbs = 2 * src.numel() * 2 / (ms * 1e-3) / 1e9
    emit(section="copy", bytes=2 * n * 2, ms=round(ms, 4), gb_s=round(gbs, 1))
    del src, dst
    return gbs


def grouped_mm_fn():
    f = getattr(torch.nn.functional, "grouped_mm", None)
    return f if f is not None else torch._grouped_mm


def moe(batches, copy):
    gmm = grouped_mm_fn()
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(7)
    # nn.Linear layout [out, in]; grouped_mm takes the transposed (column-major) view.
    w13 = torch.randn(EXPERTS, 2 * INTER, HIDDEN, dtype=torch.bfloat16, device=dev, generator=g) * 0.02
    w2 = torch.randn(EXPERTS, HIDDEN, INTER, dtype=torch.bfloat16, device=dev, generator=g) * 0.02
    s13 = torch.randn(2 * INTER, HIDDEN, dtype=torch.bfloat16, device=dev, generator=g) * 0.02
    s2 = torch.randn(HIDDEN, INTER, dtype=torch.bfloat16, device=dev, generator=g) * 0.02
    for b in batches:
        x = torch.randn(b, HIDDEN, dtype=torch.bfloat16, device=dev, generator=g)
        ids = torch.stack([torch.randperm(EXPERTS, device=dev, generator=g)[:TOP_K] for _ in range(b)])
        wts = torch.rand(b, TOP_K, device=dev, generator=g).to(torch.bfloat16)
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=EXPERTS)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        token = (order // TOP_K).contiguous()
        rw = wts.reshape(-1)[order].unsqueeze(1)
        out = torch.zeros(b, HIDDEN, dtype=torch.bfloat16, device=dev)

        def step():
            xs = x.index_select(0, token)
            h = gmm(xs, w13.transpose(-2, -1), offs=offs)
            a = torch.nn.functional.silu(h[:, :INTER]) * h[:, INTER:]
            y = gmm(a, w2.transpose(-2, -1), offs=offs) * rw
            hs = x @ s13.t()
            out.copy_((torch.nn.functional.silu(hs[:, :INTER]) * hs[:, INTER:]) @ s2.t())
            out.index_add_(0, token, y)

        replay = graphed(step)
        ms = time_ms(replay or step)
        touched = int((counts > 0).sum())
        nbytes = (touched + 1) * 3 * HIDDEN * INTER * 2
        gbs = nbytes / (ms * 1e-3) / 1e9
        emit(section="moe", peer="torch grouped_mm bf16", batch=b, graph=replay is not None,
             experts_touched=touched, weight_bytes=nbytes, ms=round(ms, 4), gb_s=round(gbs, 1),
             of_copy=round(gbs / copy, 3))
    del w13, w2, s13, s2
    torch.cuda.empty_cache()


def load_sglang():
    path = os.path.join(ROOT, ".gpu", "peers", "flash_mla_sm120_triton.py")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not brought for this run")
    spec = importlib.util.spec_from_file_location("sglang_sm120_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sglang(batches):
    mod = load_sglang()
    page, bpt = 64, 576 + 8  # DSv4 page: 576 data bytes per token, then 8 scale bytes per token
    scale = HEAD_DIM ** -0.5
    g = torch.Generator(device="cuda").manual_seed(11)

    def cache(rows_per_seq, b):
        per = math.ceil(rows_per_seq / page)
        # Bytes below 0x70 are finite e4m3 values, modest UE8M0 scales and finite bf16 halves.
        st = torch.randint(0, 0x70, (b * per, page * bpt), dtype=torch.uint8, device="cuda", generator=g)
        view = st.as_strided((b * per, page, 1, bpt), (page * bpt, bpt, bpt, 1))
        return view, per * page

    for b in batches:
        swa, swa_stride = cache(CTX, b)
        comp, comp_stride = cache(CTX // 4, b)
        base = torch.arange(b, device="cuda", dtype=torch.int32).unsqueeze(1)
        swa_idx = (base * swa_stride + torch.arange(CTX - WINDOW, CTX, device="cuda", dtype=torch.int32)).view(b, 1, WINDOW)
        pick = torch.stack([torch.randperm(CTX // 4, device="cuda", generator=g)[:INDEX_TOPK] for _ in range(b)])
        comp_idx = (base * comp_stride + pick.to(torch.int32)).view(b, 1, INDEX_TOPK)
        both = torch.stack([torch.randperm(CTX // 4, device="cuda", generator=g)[: WINDOW + INDEX_TOPK] for _ in range(b)])
        idx640 = (base * comp_stride + both.to(torch.int32)).view(b, 1, WINDOW + INDEX_TOPK)
        q = torch.randn(b, 1, HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda", generator=g)
        sinks = torch.randn(HEADS, device="cuda", generator=g)

        def flow():
            o1, l1 = mod._run_triton_sparse_decode_legacy(q, swa, swa_idx, None, scale)
            o2, l2 = mod._run_triton_sparse_decode_legacy(q, comp, comp_idx, None, scale)
            o, lse = mod._merge_partial_attn(o1, l1, o2, l2)
            return mod._apply_attn_sink(o, lse, sinks)

        def one():
            return mod._run_triton_sparse_decode_legacy(q, comp, idx640, None, scale)

        for name, fn in (("window 128 + top-512, merged, sink", flow), ("one call, 640 rows", one)):
            fn()  # autotune outside the capture
            torch.cuda.synchronize()
            replay = graphed(fn)
            ms = time_ms(replay or fn)
            emit(section="sglang", peer="SGLang sm_120 Triton sparse decode", variant=name, batch=b,
                 heads=HEADS, rows=WINDOW + INDEX_TOPK, graph=replay is not None, us=round(ms * 1e3, 2))
        del swa, comp
        torch.cuda.empty_cache()


def hf(prefill_len, decode_steps):
    sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
    import v4tiny as V  # noqa: E402
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    from transformers.cache_utils import DynamicCache

    kw = V.base_config(
        vocab_size=129_280, hidden_size=HIDDEN, num_hidden_layers=4, num_attention_heads=HEADS,
        head_dim=HEAD_DIM, partial_rotary_factor=64 / HEAD_DIM, q_lora_rank=1024, o_groups=8,
        o_lora_rank=1024, n_routed_experts=EXPERTS, num_experts_per_tok=TOP_K,
        moe_intermediate_size=INTER, sliding_window=WINDOW,
        compress_rates={V.CSA: 4, V.HCA: 128}, index_n_heads=64, index_head_dim=128,
        index_topk=INDEX_TOPK, layer_types=[V.SWA, V.SWA, V.CSA, V.HCA],
        mlp_layer_types=["hash_moe"] * 3 + ["moe"], rope_parameters=V.yarn(16, 65_536),
        max_position_embeddings=1_048_576,
    )
    cfg = DeepseekV4Config(**kw)
    cfg._attn_implementation = "eager"
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.time()
    with torch.device("cuda"):
        model = DeepseekV4ForCausalLM(cfg).eval()
    with torch.no_grad():
        # Building under torch.device("cuda") leaves the parameters as allocated (an earlier run
        # timed whatever memory held): matrices ~ N(0, 1/fan_in), vectors 1, so routing and
        # activations are those of a real-valued model.
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, p.shape[-1] ** -0.5)
            else:
                p.fill_(1.0)
        for name, buf in model.named_buffers():
            if name.endswith("tid2eid"):  # spread hash routes like real ones (init leaves zeros)
                r = torch.rand(buf.shape[0], EXPERTS, device="cuda").argsort(1)[:, : buf.shape[1]]
                buf.copy_(r.to(buf.dtype))
    torch.cuda.synchronize()
    print(f"hf: model built in {time.time() - t0:.1f} s", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(3)
    head_ms = time_ms(lambda: model.lm_head(torch.randn(1, 1, HIDDEN, device="cuda")), iters=10)

    @torch.no_grad()
    def run(batch, ctx, chunk):
        ids = torch.randint(0, cfg.vocab_size, (batch, ctx + decode_steps + 1), device="cuda", generator=gen)
        cache = DynamicCache(config=cfg)
        torch.cuda.synchronize()
        t = time.time()
        for s in range(0, ctx, chunk):
            model(ids[:, s : s + chunk], past_key_values=cache, use_cache=True)
        torch.cuda.synchronize()
        pre = time.time() - t
        model(ids[:, ctx : ctx + 1], past_key_values=cache, use_cache=True)  # warm decode
        torch.cuda.synchronize()
        t = time.time()
        for i in range(decode_steps):
            model(ids[:, ctx + 1 + i : ctx + 2 + i], past_key_values=cache, use_cache=True)
        torch.cuda.synchronize()
        step_ms = (time.time() - t) * 1e3 / decode_steps
        emit(section="hf", peer="transformers 5.17 eager", batch=batch, ctx=ctx, prefill_chunk=chunk,
             prefill_s=round(pre, 3), prefill_tok_s_per_layer=round(batch * ctx * 4 / pre, 1),
             decode_step_ms=round(step_ms, 3), head_ms=round(head_ms, 3),
             decode_ms_per_layer=round((step_ms - head_ms) / 4, 3))
        return pre

    pre = run(1, prefill_len, prefill_len)
    if pre < 60:
        run(16, 1024, 1024)
    del model
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--only", default="copy,moe,sglang,hf")
    ap.add_argument("--batch", default="1,16,64")
    ap.add_argument("--prefill", type=int, default=CTX)
    ap.add_argument("--decode-steps", type=int, default=5)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("peers.py: no CUDA device")
    batches = [int(x) for x in a.batch.split(",")]
    want = a.only.split(",")
    print(f"peers on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    copy = copy_bw()
    failed = []
    for name, fn in (("moe", lambda: moe(batches, copy)), ("sglang", lambda: sglang(batches)),
                     ("hf", lambda: hf(a.prefill, a.decode_steps))):
        if name not in want:
            continue
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - one peer failing must not hide the others
            failed.append(name)
            traceback.print_exc()
            emit(section=name, error=f"{type(e).__name__}: {e}")
            torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "peers.jsonl"), "w") as f:
        for r in RESULTS:
            f.write(json.dumps(r) + "\n")
    print(f"peers: {len(RESULTS)} measurements, failed sections: {failed or 'none'}")


if __name__ == "__main__":
    main()
