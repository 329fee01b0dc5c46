"""Arithmetic problems, the character vocabulary, and the tokenizer files of models/arith.

A problem is `A op B=R\\n` with op in + - * (no spaces): A, B up to 3 digits for + and -
(R may be negative), up to 2 digits for *. A training sequence is problems back to back
(optionally after <bos>), cut at the sequence length, so later problems follow earlier worked
ones (this is what exercises the sliding window, the compressors and the indexer). Only the
answer tokens (R and its newline) carry loss.

The newline is the EOS token: generation stops right after the answer.

The Rust `amdahl eval-arith` draws its own problems from the same distribution with its own
generator (web/src/cli/eval_arith.rs); the two must agree on OPS, the digit-count weights and the
format, which they do by these constants.
"""

import json
import os

import torch

SPECIALS = ["<bos>", "<unk>"]
CHARS = ["\n"] + [str(d) for d in range(10)] + ["+", "-", "*", "="]
VOCAB = SPECIALS + CHARS
TOK = {c: i for i, c in enumerate(VOCAB)}
BOS, UNK, NL = TOK["<bos>"], TOK["<unk>"], TOK["\n"]
DIGIT0 = TOK["0"]
PLUS, MINUS, TIMES, EQ = TOK["+"], TOK["-"], TOK["*"], TOK["="]

# op id -> (symbol token, max digits per operand, weight in the mix)
OPS = [("+", 3, 0.3), ("-", 3, 0.3), ("*", 2, 0.4)]
OP_NAMES = ["add", "sub", "mul"]
# P(operand has d digits), d = 1..max
DIGIT_WEIGHTS = {3: [0.2, 0.3, 0.5], 2: [0.25, 0.75]}

FIELD = 14  # 3 + op + 3 + '=' + sign + 4 + '\n'


def encode(text):
    return [TOK.get(c, UNK) for c in text]


def decode(ids):
    return "".join(VOCAB[i] if i >= len(SPECIALS) else "" for i in ids)


def _digits(x, width, g, device):
    """Left-aligned decimal digits of x >= 0 [N] -> tokens [N,width], valid [N,width]."""
    n = x.shape[0]
    length = torch.ones_like(x)
    for k in range(1, width):
        length += (x >= 10**k).long()
    j = torch.arange(width, device=device)[None, :]
    power = (length[:, None] - 1 - j).clamp_min(0)
    d = (x[:, None] // (10 ** power)) % 10
    valid = j < length[:, None]
    return (d + DIGIT0) * valid, valid


def _operand(ndig_max, n, g, device):
    w = torch.tensor(DIGIT_WEIGHTS[ndig_max], device=device)
    nd = torch.multinomial(w.expand(n, -1), 1, generator=g).squeeze(1) + 1
    lo = torch.where(nd == 1, torch.zeros_like(nd), 10 ** (nd - 1))
    hi = 10**nd  # exclusive
    u = torch.rand(n, generator=g, device=device)
    return lo + (u * (hi - lo)).long().clamp(max=hi - lo - 1), nd


def problems(n, g, device, op_weights=None):
    """n random problems -> dict of tokens [n,FIELD], valid, answer mask, op id, full width."""
    w = torch.tensor(op_weights or [o[2] for o in OPS], device=device)
    op = torch.multinomial(w.expand(n, -1), 1, generator=g).squeeze(1)
    a3, na3 = _operand(3, n, g, device)
    b3, nb3 = _operand(3, n, g, device)
    a2, na2 = _operand(2, n, g, device)
    b2, nb2 = _operand(2, n, g, device)
    mul = op == 2
    a = torch.where(mul, a2, a3)
    b = torch.where(mul, b2, b3)
    full = torch.where(mul, (na2 == 2) & (nb2 == 2), (na3 == 3) & (nb3 == 3))
    r = torch.where(op == 0, a + b, torch.where(op == 1, a - b, a * b))
    at, av = _digits(a, 3, g, device)
    bt, bv = _digits(b, 3, g, device)
    rt, rv = _digits(r.abs(), 4, g, device)
    opt = torch.tensor([PLUS, MINUS, TIMES], device=device)[op][:, None]
    one = torch.ones(n, 1, dtype=torch.bool, device=device)
    neg = (r < 0)[:, None]
    toks = torch.cat([at, opt, bt, torch.full_like(opt, EQ), torch.full_like(opt, MINUS) * neg,
                      rt, torch.full_like(opt, NL)], 1)
    valid = torch.cat([av, one, bv, one, neg, rv, one], 1)
    zero = torch.zeros_like(av)
    answer = torch.cat([zero, ~one, torch.zeros_like(bv), ~one, neg, rv, one], 1)
    return {"tokens": toks, "valid": valid, "answer": answer, "op": op, "full": full}


def batch(b, s, g, device, bos_prob=0.5, op_weights=None):
    """[b,s] ids, answer mask (positions holding answer tokens), problem index per position
    (-1 for <bos>), op id and full-width flag per problem ([b,K]), whether problem k is complete."""
    k = s // 6 + 1  # the shortest problem is 6 tokens, so k problems always fill s
    p = problems(b * k, g, device, op_weights)
    toks = p["tokens"].view(b, k * FIELD)
    valid = p["valid"].view(b, k * FIELD)
    answer = p["answer"].view(b, k * FIELD)
    pid = torch.arange(k, device=device).repeat_interleave(FIELD)[None].expand(b, -1)
    use_bos = torch.rand(b, 1, generator=g, device=device) < bos_prob
    toks = torch.cat([torch.full((b, 1), BOS, device=device), toks], 1)
    valid = torch.cat([use_bos, valid], 1)
    answer = torch.cat([torch.zeros_like(use_bos), answer], 1)
    pid = torch.cat([torch.full((b, 1), -1, device=device), pid], 1)
    pos = valid.long().cumsum(1) - 1
    keep = valid & (pos < s)
    rows = torch.arange(b, device=device)[:, None].expand_as(pos)
    ids = torch.zeros(b, s, dtype=torch.long, device=device)
    ans = torch.zeros(b, s, dtype=torch.bool, device=device)
    prob = torch.full((b, s), -1, dtype=torch.long, device=device)
    ids[rows[keep], pos[keep]] = toks[keep]
    ans[rows[keep], pos[keep]] = answer[keep]
    prob[rows[keep], pos[keep]] = pid[keep]
    # Problem j is complete iff its newline (last valid field) landed inside the sequence.
    last = (pos.view(b, -1)[:, 1:].view(b, k, FIELD)[..., -1])
    complete = last < s
    return {"ids": ids, "answer": ans, "prob": prob, "op": p["op"].view(b, k),
            "full": p["full"].view(b, k), "complete": complete}


@torch.no_grad()
def exact_match(logits, bt):
    """Greedy exact match under teacher forcing: a problem is right iff the argmax at every
    position before one of its answer tokens is that token (then greedy decoding reproduces
    the answer and the newline exactly). Returns counts per op and for subsets."""
    pred = logits[:, :-1].argmax(-1)
    tgt = bt["ids"][:, 1:]
    is_ans = bt["answer"][:, 1:]
    wrong = is_ans & (pred != tgt)
    b, k = bt["op"].shape
    prob = bt["prob"][:, 1:]
    bad = torch.zeros(b, k + 1, dtype=torch.long, device=logits.device)
    bad.scatter_add_(1, (prob + 1).clamp_min(0), wrong.long())
    ok = bad[:, 1:] == 0
    comp = bt["complete"]
    out = {}
    for o, name in enumerate(OP_NAMES):
        sel = comp & (bt["op"] == o)
        out[name] = (int((ok & sel).sum()), int(sel.sum()))
        self_full = sel & bt["full"]
        out[name + "_full"] = (int((ok & self_full).sum()), int(self_full.sum()))
    first = comp[:, 0]
    out["first_in_seq"] = (int((ok[:, 0] & first).sum()), int(first.sum()))
    return out


CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set text = message['content'] | replace(' ', '') | trim %}"
    "{% if message['role'] == 'user' %}"
    "{{ text }}{% if text[-1:] != '=' %}={% endif %}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ text }}{{ '\\n' }}"
    "{% endif %}"
    "{% endfor %}"
)


def write_tokenizer(out_dir, max_len):
    """tokenizer.json (character-level BPE without merges; loadable by the Rust `tokenizers`
    crate) and tokenizer_config.json (specials + chat template)."""
    from tokenizers import Tokenizer, decoders, processors
    from tokenizers.models import BPE

    vocab = {c: i for i, c in enumerate(VOCAB)}
    tok = Tokenizer(BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens(SPECIALS)
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS)]
    )
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "\n",
        "unk_token": "<unk>",
        "pad_token": "<unk>",
        "add_bos_token": True,
        "model_max_length": max_len,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # Self-check: the file encodes exactly as encode() does.
    t2 = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    text = "17*23=391\n5-9=-4\n"
    assert t2.encode(text, add_special_tokens=False).ids == encode(text), "tokenizer mismatch"
    assert t2.encode(text).ids == [BOS] + encode(text)
    assert t2.decode(encode(text)) == text
