#!/usr/bin/python3
"""An independent float32 PyTorch implementation of Qwen3 (transformers' Qwen3ForCausalLM),
written for mageguard to check its Go model against.

It reads a Hugging Face checkpoint directory — config.json and model.safetensors, or the
shards listed in model.safetensors.index.json — with float32, bfloat16 or float16 weights
(upcast exactly to float32), tied or untied embeddings, with or without attention biases,
and computes what `mageguard model score` computes, in the same JSON format:

  /usr/bin/python3 scripts/qwen3_ref.py score --ckpt DIR --inputs inputs.json --out out.json

inputs.json: {"sequences": [[ids…], …], "max_new_tokens": 8, "n_last_logits": 3,
"pad_token_id": 0} (absent keys take these defaults). The sequences run as one batch,
right-padded with pad_token_id, with an attention mask and positions 0..L-1. For each
sequence the output holds, at every position t: the argmax of the logits (first index on
ties), the top-1 minus top-2 logit (argmax_margin) and the log-sum-exp; the next-token
log-probs log_softmax(logits[t])[ids[t+1]] for t = 0..len-2; the full logits rows of the
last n_last_logits positions; and max_new_tokens greedy tokens decoded one sequence at a
time with a KV cache (no stop token), with each step's top-2 margin and log-prob. All
arithmetic is float32 (--float64 runs it in float64, to see the float32 rounding).

What it implements (Qwen3's decoder; the docstring of each method names its equation):
token embedding; per layer x = x + Attn(RMSNorm(x)), x = x + MLP(RMSNorm(x)), where Attn
projects to query / key / value heads, applies RMSNorm to each query and key head (q_norm,
k_norm), rotary position embeddings (rotate-half form, θ = rope_theta), grouped-query
attention with a causal mask and softmax(q·k / √head_dim), and the output projection;
MLP(x) = down(silu(gate(x)) · up(x)); a final RMSNorm and the LM head (the embedding when
tie_word_embeddings). It refuses what it does not implement: rope_scaling, sliding
windows, activations other than SiLU. It is a module too: `Qwen3.from_pretrained(dir)`
gives the model (its weights are torch Parameters, so it can be trained), `read_checkpoint`
the config and tensors.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

# transformers' Qwen3Config defaults for the keys a config.json may leave out.
CONFIG_DEFAULTS = {
    "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "attention_bias": False, "hidden_act": "silu", "rope_scaling": None, "use_sliding_window": False,
}
CONFIG_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                   "num_attention_heads", "num_key_value_heads")


def read_safetensors(path):
    """name -> float32 numpy array of every tensor of a .safetensors file (F32, BF16, F16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        raw = data[lo:hi]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "BF16":  # bfloat16 is the top half of a float32: exact
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {e['dtype']} is not F32, BF16 or F16")
        out[name] = a.reshape(e["shape"]).copy()
    return out


def read_checkpoint(ckpt):
    """(config with defaults filled in, name -> float32 numpy array) of a checkpoint directory."""
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    missing = [k for k in CONFIG_REQUIRED if k not in cfg]
    if missing:
        raise ValueError(f"{ckpt}/config.json lacks {', '.join(missing)}")
    cfg = {**CONFIG_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None or k == "rope_scaling"}}
    if cfg.get("head_dim") is None:
        cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    if cfg["rope_scaling"] is not None:
        raise ValueError(f"{ckpt}: rope_scaling {cfg['rope_scaling']} is not implemented")
    if cfg["use_sliding_window"]:
        raise ValueError(f"{ckpt}: sliding windows are not implemented")
    if cfg["hidden_act"] != "silu":
        raise ValueError(f"{ckpt}: hidden_act {cfg['hidden_act']} is not implemented (only silu)")
    index = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(ckpt, name)))
    return cfg, tensors


class Qwen3(torch.nn.Module):
    """Qwen3ForCausalLM's forward pass from a config dict and its tensors (Hugging Face names)."""

    def __init__(self, cfg, tensors, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.nq, self.nkv, self.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.eps = cfg["rms_norm_eps"]
        used = set()

        def param(name, required=True):
            if name not in tensors:
                if required:
                    raise KeyError(f"checkpoint lacks tensor {name}")
                return None
            used.add(name)
            return torch.nn.Parameter(torch.from_numpy(tensors[name]).to(dtype))

        self.embed = param("model.embed_tokens.weight")
        self.norm = param("model.norm.weight")
        tied = cfg["tie_word_embeddings"]
        self.lm_head = None if tied else param("lm_head.weight")
        self.layers = torch.nn.ModuleList()
        bias = cfg["attention_bias"]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            layer = torch.nn.Module()
            for short in ("q", "k", "v", "o"):
                setattr(layer, short, param(f"{p}self_attn.{short}_proj.weight"))
                setattr(layer, short + "_bias", param(f"{p}self_attn.{short}_proj.bias") if bias else None)
            layer.gate, layer.up = param(p + "mlp.gate_proj.weight"), param(p + "mlp.up_proj.weight")
            layer.down = param(p + "mlp.down_proj.weight")
            layer.ln1, layer.ln2 = param(p + "input_layernorm.weight"), param(p + "post_attention_layernorm.weight")
            layer.qn, layer.kn = param(p + "self_attn.q_norm.weight"), param(p + "self_attn.k_norm.weight")
            self.layers.append(layer)
        unused = set(tensors) - used - ({"lm_head.weight"} if tied else set())
        if unused:
            raise ValueError(f"checkpoint holds tensors this model does not use: {sorted(unused)[:5]}")
        D = self.D
        self.register_buffer("inv_freq", 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D)).to(dtype),
                             persistent=False)

    @classmethod
    def from_pretrained(cls, ckpt, dtype=torch.float32):
        cfg, tensors = read_checkpoint(ckpt)
        return cls(cfg, tensors, dtype)

    def rms(self, x, w):
        """RMSNorm: w · x / √(mean(x²) + ε) over the last axis."""
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, x, pos):
        """Rotary embedding of x [B, heads, T, D] at positions pos [T]: x·cos + rotate_half(x)·sin."""
        ang = pos[:, None].to(self.inv_freq.dtype) * self.inv_freq[None, :]  # [T, D/2]
        ang = torch.cat([ang, ang], -1)                                       # [T, D]
        half = self.D // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * ang.cos() + rot * ang.sin()

    @staticmethod
    def linear(x, w, b):
        return x @ w.t() if b is None else x @ w.t() + b

    def hidden(self, ids, attn=None, cache=None):
        """Final-normed hidden states [B, T, H] of ids [B, T] (attn [B, T]: 1 = token, 0 = padding).

        cache, when given, is a list with an entry per layer (None at first): the keys and
        values of the tokens before ids, extended in place; positions continue after them.
        """
        B, T = ids.shape
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[2]
        pos = torch.arange(past, past + T)
        mask = torch.ones(T, past + T, dtype=torch.bool).tril(past)[None, None]  # [1, 1, T, S] causal
        if attn is not None:
            mask = mask & attn.bool()[:, None, None, :]                          # [B, 1, T, S]
        nq, nkv, D = self.nq, self.nkv, self.D
        x = self.embed[ids]                                                      # [B, T, H]
        for li, l in enumerate(self.layers):
            h = self.rms(x, l.ln1)
            q = self.rms(self.linear(h, l.q, l.q_bias).view(B, T, nq, D), l.qn).transpose(1, 2)   # [B, nq, T, D]
            k = self.rms(self.linear(h, l.k, l.k_bias).view(B, T, nkv, D), l.kn).transpose(1, 2)  # [B, nkv, T, D]
            v = self.linear(h, l.v, l.v_bias).view(B, T, nkv, D).transpose(1, 2)                  # [B, nkv, T, D]
            q, k = self.rope(q, pos), self.rope(k, pos)
            if cache is not None:
                if cache[li] is not None:
                    k = torch.cat([cache[li][0], k], 2)
                    v = torch.cat([cache[li][1], v], 2)
                cache[li] = (k, v)
            k, v = k.repeat_interleave(nq // nkv, 1), v.repeat_interleave(nq // nkv, 1)        # [B, nq, S, D]
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D)                                         # [B, nq, T, S]
            s = s.masked_fill(~mask, float("-inf"))
            a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, nq * D)                       # [B, T, nq·D]
            x = x + self.linear(a, l.o, l.o_bias)
            h = self.rms(x, l.ln2)
            x = x + (F.silu(h @ l.gate.t()) * (h @ l.up.t())) @ l.down.t()
        return self.rms(x, self.norm)

    def logits(self, h):
        """The LM head: h [..., H] → logits [..., V]."""
        return h @ (self.embed if self.lm_head is None else self.lm_head).t()


def top2_margin(row):
    """Top-1 minus top-2 of a 1-D numpy array."""
    top = np.partition(row, -2)[-2:]
    return float(top[1] - top[0])


def score(model, inputs):
    """The expected.json-format result of inputs (a dict as read from inputs.json)."""
    seqs = inputs["sequences"]
    n_new = int(inputs.get("max_new_tokens", 8))
    n_last = int(inputs.get("n_last_logits", 3))
    pad = int(inputs.get("pad_token_id", 0))
    V = model.cfg["vocab_size"]
    for i, s in enumerate(seqs):
        if not s:
            raise ValueError(f"sequence {i} is empty")
        if min(s) < 0 or max(s) >= V:
            raise ValueError(f"sequence {i} holds an id outside [0, {V})")
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    attn = torch.zeros(len(seqs), L, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        attn[b, :len(s)] = 1
    out = []
    with torch.no_grad():
        logits = model.logits(model.hidden(ids, attn))            # [B, L, V]
        lse = torch.logsumexp(logits, -1)                          # [B, L]
        for b, s in enumerate(seqs):
            n = len(s)
            lg = logits[b, :n].numpy()
            last = list(range(max(0, n - n_last), n))
            seq = {
                "input_ids": list(s), "length": n,
                "argmax": [int(np.argmax(r)) for r in lg],
                "argmax_margin": [top2_margin(r) for r in lg],
                "logsumexp": [float(x) for x in lse[b, :n]],
                "next_token_logprobs": [float(lg[t, s[t + 1]] - lse[b, t]) for t in range(n - 1)],
                "last_logits_positions": last,
                "last_logits": [[float(x) for x in lg[t]] for t in last],
                "greedy_new_tokens": [], "greedy_margins": [], "greedy_logprobs": [],
            }
            cache = [None] * len(model.layers)
            row = model.logits(model.hidden(torch.tensor([s]), cache=cache)[0, -1])
            for _ in range(n_new):
                r = row.numpy()
                tok = int(np.argmax(r))
                seq["greedy_new_tokens"].append(tok)
                seq["greedy_margins"].append(top2_margin(r))
                seq["greedy_logprobs"].append(float(row[tok] - torch.logsumexp(row, -1)))
                row = model.logits(model.hidden(torch.tensor([[tok]]), cache=cache)[0, -1])
            out.append(seq)
    return out


def cmd_score(a):
    dtype = torch.float64 if a.float64 else torch.float32
    model = Qwen3.from_pretrained(a.ckpt, dtype).eval()
    with open(a.inputs) as f:
        inputs = json.load(f)
    result = {
        "format": "qwen3-ref-expected-v1",
        "generator": f"mageguard scripts/qwen3_ref.py (PyTorch {torch.__version__}, {str(dtype).replace('torch.', '')})",
        "config": {k: model.cfg.get(k) for k in CONFIG_REQUIRED + ("head_dim", "rms_norm_eps", "rope_theta",
                                                                     "tie_word_embeddings", "attention_bias")},
        "sequences": score(model, inputs),
    }
    with open(a.out, "w") as f:
        json.dump(result, f)
    print(f"qwen3_ref.py: scored {len(result['sequences'])} sequences of {a.ckpt} into {a.out}", file=sys.stderr)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="logits, next-token log-probs and greedy tokens of a checkpoint")
    s.add_argument("--ckpt", required=True, help="Hugging Face checkpoint directory")
    s.add_argument("--inputs", required=True, help="inputs.json")
    s.add_argument("--out", required=True, help="output JSON (expected.json format)")
    s.add_argument("--float64", action="store_true", help="compute in float64 instead of float32")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0 = PyTorch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    return {"score": cmd_score}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
