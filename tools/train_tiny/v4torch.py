"""DeepSeek-V4 forward pass in PyTorch, causal by construction, vectorized for training.

The math is amdahl's Rust CPU engine (engine/src/model/deepseek_v4, model-spec §3.3), written over
whole sequences with masks instead of caches. Every sequence starts at position 0. Position t sees:
  - raw kv rows of positions max(0, t-W+1)..=t (sliding window),
  - compressed entries w < (t+1) div m (a window is visible once its last token is <= t):
    all of them on HCA layers, the lightning indexer's top-k of them on CSA layers.
Nothing at a position > t enters position t, so a full-sequence forward equals a prefix forward
(`tests_parity.py` checks this and compares logits with `amdahl logits`).

Deliberately NOT built on transformers' deepseek_v4 module: its full-sequence forward leaks later
compress windows into earlier positions (model-spec §4.2b).

Parameter names are DeepSeek's official checkpoint names (the ones our loader asks for), except
that routed experts are stacked per layer (`ffn.experts.w1` [E, I, D] ...) for speed; `export()`
splits them into `ffn.experts.{e}.w{1,2,3}.weight`.
"""

import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------
# config


class V4Config:
    """The subset of a transformers-style DeepSeek-V4 config.json that the model uses (the same
    spelling engine/src/model/deepseek_v4/synthetic.rs writes)."""

    def __init__(self, d):
        self.raw = d
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.num_layers = d["num_hidden_layers"]
        self.num_heads = d["num_attention_heads"]
        self.head_dim = d["head_dim"]
        self.rope_dim = int(self.head_dim * d["partial_rotary_factor"])
        self.q_lora_rank = d["q_lora_rank"]
        self.o_groups = d["o_groups"]
        self.o_lora_rank = d["o_lora_rank"]
        self.n_routed_experts = d["n_routed_experts"]
        self.n_shared_experts = d.get("n_shared_experts", 1)
        self.top_k = d["num_experts_per_tok"]
        self.moe_inter = d["moe_intermediate_size"]
        assert d.get("scoring_func", "sqrtsoftplus") == "sqrtsoftplus"
        self.norm_topk_prob = d.get("norm_topk_prob", True)
        self.routed_scaling_factor = d.get("routed_scaling_factor", 1.5)
        self.swiglu_limit = d.get("swiglu_limit", 10.0)
        self.sliding_window = d["sliding_window"]
        rates = d.get("compress_rates", {})
        self.csa_rate = rates.get("compressed_sparse_attention", 4)
        self.hca_rate = rates.get("heavily_compressed_attention", 128)
        self.layer_types = d["layer_types"][: self.num_layers]
        self.mlp_types = d["mlp_layer_types"][: self.num_layers]
        self.hc_mult = d.get("hc_mult", 4)
        self.hc_iters = d.get("hc_sinkhorn_iters", 20)
        self.hc_eps = d.get("hc_eps", 1e-6)
        self.eps = d.get("rms_norm_eps", 1e-6)
        self.index_heads = d["index_n_heads"]
        self.index_dim = d["index_head_dim"]
        self.index_topk = d["index_topk"]
        rp = d["rope_parameters"]
        self.rope_main = rp["main"]
        self.rope_compress = rp["compress"]

    def ratio(self, l):
        t = self.layer_types[l]
        if t == "compressed_sparse_attention":
            return self.csa_rate
        if t == "heavily_compressed_attention":
            return self.hca_rate
        return 0


def inv_freq(table, rope_dim):
    """Inverse frequencies and cos/sin scale of one rope table (engine/src/config/rope.rs)."""
    theta = float(table.get("rope_theta", 10000.0))
    half = rope_dim // 2
    dim = float(rope_dim)
    base = [1.0 / theta ** ((2 * i) / dim) for i in range(half)]
    kind = table.get("rope_type", table.get("type", "default"))
    if kind == "default":
        return base, 1.0
    assert kind == "yarn", kind
    orig = float(table["original_max_position_embeddings"])
    factor = float(table["factor"])
    beta_fast = float(table.get("beta_fast") or 32.0)
    beta_slow = float(table.get("beta_slow") or 1.0)

    def corr(rot):
        return dim * math.log(orig / (rot * 2.0 * math.pi)) / (2.0 * math.log(theta))

    low = max(math.floor(corr(beta_fast)), 0.0)
    high = min(math.ceil(corr(beta_slow)), dim - 1.0)
    if low == high:
        high += 0.001
    out = []
    for i, f in enumerate(base):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        out.append(f / factor * ramp + f * (1.0 - ramp))
    scale = table.get("attention_factor")
    if scale is None:
        def ms(s, m):
            return 1.0 if s <= 1.0 else 0.1 * m * math.log(s) + 1.0
        m, a = table.get("mscale"), table.get("mscale_all_dim")
        scale = ms(factor, m) / ms(factor, a) if m and a else ms(factor, 1.0)
    return out, float(scale)


def rope_tables(table, rope_dim, n_pos):
    """cos, sin [n_pos, rope_dim/2]: angle = f32(inv_freq) * f32(pos) in f32, as the engine."""
    freqs, scale = inv_freq(table, rope_dim)
    f = torch.tensor(freqs, dtype=torch.float64).float()
    pos = torch.arange(n_pos, dtype=torch.float32)
    ang = (pos[:, None] * f[None, :]).double()
    return (ang.cos() * scale).float(), (ang.sin() * scale).float()


# ----------------------------------------------------------------------------------------------
# small ops


def rms(x, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x, cos, sin, inverse=False):
    """Interleaved rotary on the trailing 2*cos.shape[-1] channels; cos/sin broadcast to
    x[..., :rd/2]."""
    rd = cos.shape[-1] * 2
    nope, r = x[..., :-rd], x[..., -rd:]
    r = r.unflatten(-1, (rd // 2, 2))
    x0, x1 = r[..., 0], r[..., 1]
    if inverse:
        sin = -sin
    y = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2)
    return torch.cat([nope, y.to(nope.dtype)], -1)


def mm32(a, b):
    """a @ b in f32 even under autocast (mHC mixing must not round to bf16)."""
    with torch.autocast(a.device.type, enabled=False):
        return a.float() @ b.float()


def swiglu(g, u, limit):
    return F.silu(g.clamp(max=limit)) * u.clamp(-limit, limit)


# ----------------------------------------------------------------------------------------------
# modules


class HyperConnection(nn.Module):
    """mHC site: pre (stream weights), post (output weights), comb (Sinkhorn-normalized mixer)."""

    def __init__(self, cfg):
        super().__init__()
        hc, d = cfg.hc_mult, cfg.hidden_size
        self.hc, self.iters, self.hc_eps, self.eps = hc, cfg.hc_iters, cfg.hc_eps, cfg.eps
        mix = (2 + hc) * hc
        self.fn = nn.Parameter(torch.randn(mix, hc * d) * 0.02 / math.sqrt(hc))
        base = torch.zeros(mix)
        base[2 * hc:] = (torch.eye(hc) * 4.0).flatten()  # start near identity stream mixing
        self.base = nn.Parameter(base)
        self.scale = nn.Parameter(torch.ones(3))

    def pre(self, x):
        """x [B,S,hc,D] f32 -> (post [B,S,hc], comb [B,S,hc,hc], u [B,S,D])."""
        hc = self.hc
        flat = rms(x.flatten(-2), self.eps)
        mix = mm32(flat, self.fn.t())
        sc, base = self.scale.float(), self.base.float()
        pre = torch.sigmoid(mix[..., :hc] * sc[0] + base[:hc]) + self.hc_eps
        post = 2.0 * torch.sigmoid(mix[..., hc:2 * hc] * sc[1] + base[hc:2 * hc])
        logits = (mix[..., 2 * hc:] * sc[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
        c = torch.softmax(logits, -1) + self.hc_eps
        c = c / (c.sum(-2, keepdim=True) + self.hc_eps)
        for _ in range(1, self.iters):
            c = c / (c.sum(-1, keepdim=True) + self.hc_eps)
            c = c / (c.sum(-2, keepdim=True) + self.hc_eps)
        u = (pre.unsqueeze(-1) * x).sum(-2)
        return post, c, u

    @staticmethod
    def post(x, post, comb, y):
        """X'_k = post_k * y + sum_j comb[j][k] X_j."""
        with torch.autocast(x.device.type, enabled=False):
            mixed = torch.einsum("bsjk,bsjd->bskd", comb.float(), x.float())
        return post.unsqueeze(-1) * y.float().unsqueeze(-2) + mixed


class Compressor(nn.Module):
    def __init__(self, cfg, ratio, dim, overlap):
        super().__init__()
        d = cfg.hidden_size
        self.ratio, self.dim, self.overlap, self.eps = ratio, dim, overlap, cfg.eps
        w = 2 * dim if overlap else dim
        self.wkv = nn.Linear(d, w, bias=False)
        self.wgate = nn.Linear(d, w, bias=False)
        self.ape = nn.Parameter(torch.zeros(ratio, w))
        self.norm = nn.Parameter(torch.ones(dim))

    def forward(self, u, cos, sin):
        """u [B,S,D] -> entries [B, S div m, dim]; entry w pools positions of window w (and the
        first halves of window w-1 when overlapping), roped at position w*m."""
        b, s, _ = u.shape
        m, d = self.ratio, self.dim
        n = s // m
        if n == 0:
            return u.new_zeros(b, 0, d, dtype=torch.float32)
        uu = u[:, : n * m]
        kv = self.wkv(uu).float().unflatten(1, (n, m))
        g = self.wgate(uu).float().unflatten(1, (n, m)) + self.ape.float()
        if self.overlap:
            ka, kb = kv[..., :d], kv[..., d:]
            ga, gb = g[..., :d], g[..., d:]
            ka = F.pad(ka, (0, 0, 0, 0, 1, 0))[:, :n]
            ga = F.pad(ga, (0, 0, 0, 0, 1, 0), value=NEG_INF)[:, :n]
            kv = torch.cat([ka, kb], 2)
            g = torch.cat([ga, gb], 2)
        e = (torch.softmax(g, 2) * kv).sum(2)
        e = rms(e, self.eps) * self.norm.float()
        first = torch.arange(n, device=u.device) * m
        return rope(e, cos[first], sin[first])


class Indexer(nn.Module):
    def __init__(self, cfg, ratio):
        super().__init__()
        self.heads, self.dim, self.topk = cfg.index_heads, cfg.index_dim, cfg.index_topk
        self.compressor = Compressor(cfg, ratio, self.dim, True)
        self.wq_b = nn.Linear(cfg.q_lora_rank, self.heads * self.dim, bias=False)
        self.weights_proj = nn.Linear(cfg.hidden_size, self.heads, bias=False)

    def forward(self, u, qr, cos, sin, visible):
        """Scores [B,S,n] (invisible = -inf) and the selection mask [B,S,n] (top-k of visible,
        ties to the lower index; -0.0 sorts below +0.0 as Rust's total_cmp does)."""
        b, s, _ = u.shape
        keys = self.compressor(u, cos, sin)  # [B,n,dim]
        q = self.wq_b(qr).float().unflatten(-1, (self.heads, self.dim))
        q = rope(q, cos[:s, None], sin[:s, None])
        w = self.weights_proj(u).float() * self.heads**-0.5  # [B,S,H]
        dots = torch.einsum("bthd,bnd->bthn", q, keys).relu() * self.dim**-0.5
        score = (dots * w.unsqueeze(-1)).sum(2)  # [B,S,n]
        score = score.masked_fill(~visible, NEG_INF)
        n = score.shape[-1]
        with torch.no_grad():
            # A zero score has the sign of its terms, which all share the query's weight signs:
            # negative zero only when every head weight is negative (Rust sums from -0.0).
            sc = score.detach()
            neg_zero = (sc == 0) & (w < 0).all(-1, keepdim=True)
            order0 = torch.sort(neg_zero.to(torch.int8), dim=-1, stable=True).indices
            sc0 = sc.gather(-1, order0)
            order1 = torch.sort(sc0, dim=-1, descending=True, stable=True).indices
            order = order0.gather(-1, order1)
            k = min(self.topk, n)
            sel = torch.zeros(visible.shape, dtype=torch.bool, device=visible.device)
            sel.scatter_(-1, order[..., :k], True)
            sel &= visible
        return score, sel


class Attention(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        self.cfg = cfg
        d, h, hd = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        self.kind = cfg.layer_types[l]
        self.ratio = cfg.ratio(l)
        self.wq_a = nn.Linear(d, cfg.q_lora_rank, bias=False)
        self.q_norm = nn.Parameter(torch.ones(cfg.q_lora_rank))
        self.wq_b = nn.Linear(cfg.q_lora_rank, h * hd, bias=False)
        self.wkv = nn.Linear(d, hd, bias=False)
        self.norm = nn.Parameter(torch.ones(hd))
        gi = h * hd // cfg.o_groups
        self.wo_a = nn.Linear(gi, cfg.o_groups * cfg.o_lora_rank, bias=False)
        self.wo_b = nn.Linear(cfg.o_groups * cfg.o_lora_rank, d, bias=False)
        self.attn_sink = nn.Parameter(torch.zeros(h))
        self.compressor = None
        self.indexer = None
        if self.kind == "compressed_sparse_attention":
            self.compressor = Compressor(cfg, self.ratio, hd, True)
            self.indexer = Indexer(cfg, self.ratio)
        elif self.kind == "heavily_compressed_attention":
            self.compressor = Compressor(cfg, self.ratio, hd, False)

    def forward(self, u, cos, sin, win_mask, aux):
        """u [B,S,D] (normed) -> [B,S,D]. `aux` collects the indexer's distillation loss."""
        cfg = self.cfg
        b, s, _ = u.shape
        h, hd = cfg.num_heads, cfg.head_dim
        c, sn = cos[:s], sin[:s]
        qr = rms(self.wq_a(u), cfg.eps) * self.q_norm.float()
        q = self.wq_b(qr).float().unflatten(-1, (h, hd))
        q = rope(rms(q, cfg.eps), c[:, None], sn[:, None])
        kv = rope(rms(self.wkv(u), cfg.eps) * self.norm.float(), c, sn)  # [B,S,hd]
        keys, mask = kv, win_mask[None].expand(b, s, s)
        sel = score = None
        if self.compressor is not None:
            ent = self.compressor(u, cos, sin)  # [B,n,hd]
            n = ent.shape[1]
            t = torch.arange(s, device=u.device)
            visible = (torch.arange(n, device=u.device)[None, :] < ((t + 1) // self.ratio)[:, None])
            visible = visible[None].expand(b, s, n)
            if self.indexer is not None:
                # The indexer learns only from its distillation loss: its inputs are detached.
                score, sel = self.indexer(u.detach(), qr.detach(), cos, sin, visible)
                cmask = sel
            else:
                cmask = visible
            keys = torch.cat([kv, ent], 1)
            mask = torch.cat([mask, cmask], 2)
        scale = hd**-0.5
        logits = torch.einsum("bthd,bsd->bhts", q, keys) * scale
        logits = logits.float().masked_fill(~mask[:, None], NEG_INF)
        sink = self.attn_sink.float()[None, :, None, None].expand(b, h, s, 1)
        p = torch.softmax(torch.cat([logits, sink], -1), -1)[..., :-1]
        out = torch.einsum("bhts,bsd->bthd", p.to(keys.dtype), keys)
        out = rope(out.float(), c[:, None], sn[:, None], inverse=True)
        if sel is not None and aux is not None and self.training:
            # Indexer distillation (DeepSeek-V3.2 style, restricted to the selected entries):
            # the indexer learns the heads' attention mass over the entries it selected.
            with torch.no_grad():
                tgt = p[..., s:].float().sum(1) * sel  # [B,S,n]
                tot = tgt.sum(-1, keepdim=True)
                has = (tot > 0).squeeze(-1)
                tgt = tgt / tot.clamp_min(1e-20)
            # A finite fill keeps rows without any selected entry NaN-free in backward.
            logq = torch.log_softmax(score.masked_fill(~sel, -1e30), -1)
            kl = (tgt * (tgt.clamp_min(1e-20).log() - logq.masked_fill(~sel, 0.0))).sum(-1)
            aux.append((kl * has).sum() / has.sum().clamp_min(1))
        g = cfg.o_groups
        z = out.flatten(-2).unflatten(-1, (g, -1))  # [B,S,G,gi]
        wa = self.wo_a.weight.unflatten(0, (g, cfg.o_lora_rank))  # [G,ol,gi]
        z = torch.einsum("bsgi,goi->bsgo", z, wa).flatten(-2)
        return self.wo_b(z)


class MoE(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        self.cfg = cfg
        d, e, i = cfg.hidden_size, cfg.n_routed_experts, cfg.moe_inter
        self.hash = cfg.mlp_types[l] == "hash_moe"
        self.gate = nn.Linear(d, e, bias=False)
        if self.hash:
            g = torch.Generator().manual_seed(1000 + l)
            ids = torch.stack([torch.randperm(e, generator=g)[: cfg.top_k] for _ in range(cfg.vocab_size)])
            self.register_buffer("tid2eid", ids.long())
        else:
            self.register_buffer("bias", torch.zeros(e))
        std = 0.02
        self.w1 = nn.Parameter(torch.randn(e, i, d) * std)
        self.w3 = nn.Parameter(torch.randn(e, i, d) * std)
        self.w2 = nn.Parameter(torch.randn(e, d, i) * std)
        si = cfg.n_shared_experts * i
        self.shared = nn.ModuleDict(
            {
                "w1": nn.Linear(d, si, bias=False),
                "w3": nn.Linear(d, si, bias=False),
                "w2": nn.Linear(si, d, bias=False),
            }
        )
        self.last_load = None

    def forward(self, v, ids):
        cfg = self.cfg
        lim = cfg.swiglu_limit
        with torch.autocast(v.device.type, enabled=False):
            logits = F.linear(v.float(), self.gate.weight.float())
        s = F.softplus(logits).sqrt()
        if self.hash:
            idx = self.tid2eid[ids]
        else:
            idx = torch.topk(s.detach() + self.bias, cfg.top_k, -1).indices
            self.last_load = torch.bincount(idx.flatten(), minlength=cfg.n_routed_experts)
        w = s.gather(-1, idx)
        if cfg.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * cfg.routed_scaling_factor
        dense = torch.zeros_like(s).scatter_add(-1, idx, w)  # [B,S,E]
        h1 = torch.einsum("bsd,eid->bsei", v, self.w1)
        h3 = torch.einsum("bsd,eid->bsei", v, self.w3)
        hh = swiglu(h1.float(), h3.float(), lim) * dense.unsqueeze(-1)
        y = torch.einsum("bsei,edi->bsd", hh, self.w2).float()
        sh = self.shared
        y = y + sh["w2"](swiglu(sh["w1"](v).float(), sh["w3"](v).float(), lim)).float()
        return y


class Block(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        self.attn_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.ffn_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.hc_attn = HyperConnection(cfg)
        self.hc_ffn = HyperConnection(cfg)
        self.attn = Attention(cfg, l)
        self.ffn = MoE(cfg, l)
        self.eps = cfg.eps
        self.compress_rope = cfg.layer_types[l] != "sliding_attention"

    def forward(self, x, ids, ropes, win_mask, aux):
        cos, sin = ropes[1] if self.compress_rope else ropes[0]
        post, comb, u = self.hc_attn.pre(x)
        u = rms(u, self.eps) * self.attn_norm.float()
        a = self.attn(u, cos, sin, win_mask, aux)
        x = HyperConnection.post(x, post, comb, a)
        post, comb, v = self.hc_ffn.pre(x)
        v = rms(v, self.eps) * self.ffn_norm.float()
        m = self.ffn(v, ids)
        return HyperConnection.post(x, post, comb, m)


class V4Model(nn.Module):
    def __init__(self, cfg, max_pos):
        super().__init__()
        self.cfg = cfg
        d, hc, v = cfg.hidden_size, cfg.hc_mult, cfg.vocab_size
        self.embed = nn.Embedding(v, d)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.layers = nn.ModuleList([Block(cfg, l) for l in range(cfg.num_layers)])
        self.norm = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, v, bias=False)
        self.hc_head_fn = nn.Parameter(torch.randn(hc, hc * d) * 0.02 / math.sqrt(hc))
        self.hc_head_base = nn.Parameter(torch.zeros(hc))
        self.hc_head_scale = nn.Parameter(torch.ones(1))
        cm = rope_tables(cfg.rope_main, cfg.rope_dim, max_pos)
        cc = rope_tables(cfg.rope_compress, cfg.rope_dim, max_pos)
        self.register_buffer("cos_m", cm[0], persistent=False)
        self.register_buffer("sin_m", cm[1], persistent=False)
        self.register_buffer("cos_c", cc[0], persistent=False)
        self.register_buffer("sin_c", cc[1], persistent=False)
        self.max_pos = max_pos
        for name, p in self.named_parameters():
            if p.dim() == 2 and name.endswith(".weight") and "embed" not in name:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, aux=None):
        """ids [B,S] (positions 0..S-1) -> logits [B,S,V] f32."""
        cfg = self.cfg
        b, s = ids.shape
        assert s <= self.max_pos
        x = self.embed(ids).float().unsqueeze(2).expand(b, s, cfg.hc_mult, cfg.hidden_size)
        x = x.contiguous()
        t = torch.arange(s, device=ids.device)
        win = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - cfg.sliding_window)
        ropes = ((self.cos_m, self.sin_m), (self.cos_c, self.sin_c))
        for layer in self.layers:
            x = layer(x, ids, ropes, win, aux)
        flat = rms(x.flatten(-2), cfg.eps)
        pre = torch.sigmoid(mm32(flat, self.hc_head_fn.t()) * self.hc_head_scale.float()
                            + self.hc_head_base.float()) + cfg.hc_eps
        y = (pre.unsqueeze(-1) * x).sum(-2)
        y = rms(y, cfg.eps) * self.norm.float()
        with torch.autocast(ids.device.type, enabled=False):
            return F.linear(y, self.head.weight.float())


# ----------------------------------------------------------------------------------------------
# official names <-> module


def _site_names(l):
    out = {}
    for site in ("hc_attn", "hc_ffn"):
        for leaf in ("fn", "base", "scale"):
            out[f"layers.{l}.{site}.{leaf}"] = f"layers.{l}.{site}_{leaf}"
    return out


def export(model):
    """module -> {official name: f32 tensor} (routed experts split, buffers included)."""
    return export_state(model.state_dict(), model.cfg)


def export_state(state, cfg):
    """state dict -> {official name: f32 tensor} (routed experts split, buffers included)."""
    sd = {k: v.detach().float().cpu() for k, v in state.items()}
    out = {}
    rename = {}
    for l in range(cfg.num_layers):
        rename.update(_site_names(l))
    for k, v in sd.items():
        if k.startswith("cos_") or k.startswith("sin_"):
            continue
        parts = k.split(".")
        if len(parts) == 4 and parts[2] == "ffn" and parts[3] in ("w1", "w2", "w3"):
            for e in range(v.shape[0]):
                out[f"layers.{parts[1]}.ffn.experts.{e}.{parts[3]}.weight"] = v[e].clone()
            continue
        if ".ffn.shared." in k:
            k = k.replace(".ffn.shared.", ".ffn.shared_experts.")
        if k.endswith(".ffn.bias"):
            k = k.replace(".ffn.bias", ".ffn.gate.bias")
        if k.endswith(".ffn.tid2eid"):
            out[k.replace(".ffn.tid2eid", ".ffn.gate.tid2eid")] = sd[k].long()
            continue
        k2 = rename.get(k, k)
        # Norm weights are module parameters without a `.weight` leaf here.
        for suffix in (".attn_norm", ".ffn_norm", ".q_norm", ".attn.norm", ".compressor.norm"):
            if k2.endswith(suffix):
                k2 = k2 + ".weight"
        if k2 == "norm":
            k2 = "norm.weight"
        out[k2] = v
    out = {k: (v.long() if k.endswith("tid2eid") else v) for k, v in out.items()}
    return out


def load_official(model, tensors):
    """Inverse of export: fills the module from official-name tensors."""
    cfg = model.cfg
    exp = export(model)
    missing = set(exp) - set(tensors)
    assert not missing, f"missing tensors: {sorted(missing)[:8]}"
    sd = model.state_dict()
    inv = {}
    for k in sd:
        if k.startswith("cos_") or k.startswith("sin_"):
            continue
        inv[k] = None
    new = {}
    for k in inv:
        parts = k.split(".")
        if len(parts) == 4 and parts[2] == "ffn" and parts[3] in ("w1", "w2", "w3"):
            new[k] = torch.stack(
                [tensors[f"layers.{parts[1]}.ffn.experts.{e}.{parts[3]}.weight"]
                 for e in range(cfg.n_routed_experts)]
            )
            continue
        name = _official_name(k, cfg)
        new[k] = tensors[name].to(sd[k].dtype).reshape(sd[k].shape)
    model.load_state_dict(new, strict=False)


def _official_name(k, cfg):
    for l in range(cfg.num_layers):
        r = _site_names(l)
        if k in r:
            return r[k]
    k2 = k.replace(".ffn.shared.", ".ffn.shared_experts.")
    if k2.endswith(".ffn.bias"):
        return k2.replace(".ffn.bias", ".ffn.gate.bias")
    if k2.endswith(".ffn.tid2eid"):
        return k2.replace(".ffn.tid2eid", ".ffn.gate.tid2eid")
    for suffix in (".attn_norm", ".ffn_norm", ".q_norm", ".attn.norm", ".compressor.norm"):
        if k2.endswith(suffix):
            return k2 + ".weight"
    if k2 == "norm":
        return "norm.weight"
    return k2


def save_checkpoint(model, path, matrices_bf16, state=None):
    """Writes model.safetensors (from `state` if given, else the module): linear/embedding
    matrices in bf16 when asked, every other float tensor (norms, mHC, sinks, compressor
    position biases, router bias) in f32."""
    from safetensors.torch import save_file

    t = export_state(state, model.cfg) if state is not None else export(model)
    out = {}
    for k, v in t.items():
        if v.dtype == torch.long:
            out[k] = v.contiguous()
        elif matrices_bf16 and k.endswith(".weight") and v.dim() == 2:
            out[k] = v.to(torch.bfloat16).contiguous()
        else:
            out[k] = v.float().contiguous()
    save_file(out, path, metadata={"format": "pt"})
    return out


def write_config(cfg_dict, path):
    with open(path, "w") as f:
        json.dump(cfg_dict, f, indent=2)
