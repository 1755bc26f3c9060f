#!/usr/bin/env python3
"""Helpers of scripts/gpu-check.sh (Python 3; numpy, and torch + transformers for hf-score).

  plugin                      the CUDA PJRT plugin inside the jax-cuda*-pjrt wheel
  nvidia-libs                 the nvidia pip packages' lib folders, ':'-joined
  cuda-data-dir               a CUDA folder with nvvm/libdevice (for --xla_gpu_cuda_data_dir)
  pjrt-version PLUGIN         the PJRT C API version the plugin reports (GetPjrtApi)
  inputs --vocab V --out F    random token sequences in the reference cases' inputs.json format
  hf-score CKPT INPUTS OUT    transformers' Qwen3ForCausalLM (float32) on those sequences, in expected.json format
  compare REF GOT             max |Δ| of logits and next-token log-probs, argmax and greedy agreement
  peak FILE                   the largest number in a file (nvidia-smi's memory.used samples, MiB)
  bench FILE                  the figures of a `mageguard model bench --json` output
"""

import argparse
import ctypes
import glob
import importlib.util
import json
import os
import random
import sys


def nvidia_roots():
    """The folders of the `nvidia` namespace package (pip's CUDA libraries)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return list(spec.submodule_search_locations)


def walk(root, depth):
    """Folders under root, at most depth levels down."""
    out = [root]
    if depth == 0:
        return out
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return out
    for e in entries:
        p = os.path.join(root, e)
        if os.path.isdir(p) and not os.path.islink(p):
            out.extend(walk(p, depth - 1))
    return out


def cmd_plugin(_):
    for name in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                for f in sorted(glob.glob(os.path.join(d, "*.so"))):
                    if "plugin" in os.path.basename(f):
                        print(f)
                        return 0
    for d in sys.path:
        for f in glob.glob(os.path.join(d, "jax_plugins", "*", "xla_cuda_plugin.so")):
            print(f)
            return 0
    print("no CUDA PJRT plugin found (pip install jax-cuda13-pjrt)", file=sys.stderr)
    return 1


def cmd_nvidia_libs(_):
    dirs = []
    for root in nvidia_roots():
        for d in walk(root, 3):
            if os.path.basename(d) == "lib" and glob.glob(os.path.join(d, "*.so*")):
                dirs.append(d)
    print(":".join(dirs))
    return 0


def cmd_cuda_data_dir(_):
    cands = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    cands += sorted(glob.glob("/usr/local/cuda-*"))
    for root in nvidia_roots():
        cands += walk(root, 3)
    for c in cands:
        if c and glob.glob(os.path.join(c, "nvvm", "libdevice", "libdevice*.bc")):
            print(c)
            return 0
    print("no folder with nvvm/libdevice found", file=sys.stderr)
    return 1


def cmd_pjrt_version(a):
    lib = ctypes.CDLL(a.plugin)
    lib.GetPjrtApi.restype = ctypes.c_void_p
    api = lib.GetPjrtApi()
    # struct PJRT_Api { size_t struct_size; PJRT_Extension_Base* extension_start;
    #   PJRT_Api_Version { size_t struct_size; PJRT_Extension_Base* extension_start; int major; int minor; } ...
    size = ctypes.c_size_t.from_address(api).value
    major = ctypes.c_int.from_address(api + 32).value
    minor = ctypes.c_int.from_address(api + 36).value
    print(f"{major}.{minor} (PJRT_Api struct_size {size})")
    return 0


def cmd_inputs(a):
    rng = random.Random(a.seed)
    seqs = [[rng.randrange(a.vocab) for _ in range(n)] for n in (a.length, a.length // 2 + 3, 5)]
    with open(a.out, "w") as f:
        json.dump({"sequences": seqs, "max_new_tokens": a.new, "n_last_logits": 2, "pad_token_id": 0}, f)
    return 0


def expected_from_logits(seq, logits, greedy, greedy_rows):
    """One sequence's entry of the expected.json format from its [n, V] float logits."""
    import numpy as np
    lg = np.asarray(logits, dtype=np.float64)
    n = len(seq)
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    top2 = np.sort(lg, -1)[:, -2:]
    last = list(range(max(0, n - 2), n))
    steps = np.asarray(greedy_rows, dtype=np.float64) if greedy_rows else np.zeros((0, lg.shape[1]))
    slse = np.log(np.exp(steps - steps.max(-1, keepdims=True)).sum(-1)) + steps.max(-1) if len(steps) else []
    return {
        "input_ids": seq, "length": n,
        "argmax": [int(i) for i in lg.argmax(-1)],
        "argmax_margin": [float(x) for x in (top2[:, 1] - top2[:, 0])],
        "logsumexp": [float(x) for x in lse],
        "next_token_logprobs": [float(lg[t, seq[t + 1]] - lse[t]) for t in range(n - 1)],
        "last_logits_positions": last,
        "last_logits": [[float(x) for x in lg[t]] for t in last],
        "greedy_new_tokens": greedy,
        "greedy_margins": [float(np.sort(r)[-1] - np.sort(r)[-2]) for r in steps],
        "greedy_logprobs": [float(r[t] - l) for r, t, l in zip(steps, greedy, slse)],
    }


def cmd_hf_score(a):
    import torch
    from transformers import Qwen3ForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = a.device
    model = Qwen3ForCausalLM.from_pretrained(a.ckpt, torch_dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    inputs = json.load(open(a.inputs))
    out = []
    with torch.no_grad():
        for seq in inputs["sequences"]:
            ids = torch.tensor([seq], device=dev)
            logits = model(ids).logits[0].float().cpu().numpy()
            toks, rows = [], []
            cur = list(seq)
            for _ in range(int(inputs.get("max_new_tokens", 0))):
                r = model(torch.tensor([cur], device=dev)).logits[0, -1].float().cpu().numpy()
                t = int(r.argmax())
                toks.append(t)
                rows.append(r)
                cur.append(t)
            out.append(expected_from_logits(seq, logits, toks, rows))
    import transformers
    json.dump({"format": "qwen3-ref-expected-v1",
               "generator": f"transformers {transformers.__version__} Qwen3ForCausalLM, float32, eager attention, TF32 off, {dev}",
               "sequences": out}, open(a.out, "w"))
    return 0


def cmd_compare(a):
    import numpy as np
    ref, got = json.load(open(a.ref)), json.load(open(a.got))
    dl = dp = 0.0
    argmax_bad = greedy_bad = 0
    for r, g in zip(ref["sequences"], got["sequences"]):
        if r["input_ids"] != g["input_ids"]:
            print("input_ids differ")
            return 1
        dl = max(dl, float(np.abs(np.array(r["last_logits"]) - np.array(g["last_logits"])).max()))
        dl = max(dl, float(np.abs(np.array(r["logsumexp"]) - np.array(g["logsumexp"])).max()))
        if r["next_token_logprobs"]:
            dp = max(dp, float(np.abs(np.array(r["next_token_logprobs"]) - np.array(g["next_token_logprobs"])).max()))
        for t, (x, y) in enumerate(zip(r["argmax"], g["argmax"])):
            if x != y and r["argmax_margin"][t] > 2 * a.atol_logits:
                argmax_bad += 1
        if r.get("greedy_new_tokens") and g.get("greedy_new_tokens") and r["greedy_new_tokens"] != g["greedy_new_tokens"]:
            greedy_bad += 1
    ok = dl <= a.atol_logits and dp <= a.atol_logprob and argmax_bad == 0 and greedy_bad == 0
    print(f"max |d logits| {dl:.3g} (atol {a.atol_logits:g}), max |d next-token log-prob| {dp:.3g} (atol {a.atol_logprob:g}), "
          f"argmax disagreements {argmax_bad}, greedy sequences differing {greedy_bad}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def cmd_peak(a):
    vals = []
    for line in open(a.file):
        for tok in line.replace(",", " ").split():
            try:
                vals.append(float(tok))
            except ValueError:
                pass
    print(int(max(vals)) if vals else "none")
    return 0 if vals else 1


def cmd_bench(a):
    b = json.load(open(a.file))
    print(f"  backend {b['backend']}, {b['dtype']}: {b['model']}, {b['parameters']:,} parameters")
    if b.get("lora"):
        print(f"  trained: {b['lora']}, {b['trained_parameters']:,} parameters (the base frozen)")
    d = b.get("decode")
    if d:
        s = d["shape"]
        print(f"  decode: {s['rows']} rows × {s['prompt_tokens']}-token prompts: prefill {d['prefill_seconds']:.3f} s, "
              f"{1e3 * d['step_seconds']:.2f} ms a step, {d['tokens_per_second']:.0f} tokens/s; plan {b.get('plan_decode_bytes', 0) / 1e9:.2f} GB"
              + (f"; Go heap peak {d['heap_peak_bytes'] / 1e9:.3f} GB" if d.get("heap_peak_bytes") else ""))
    t = b.get("train")
    if t:
        s = t["shape"]
        print(f"  train step: {s['rows']} rows × ({s['prefix_tokens']} shared + {s['row_tokens']}) tokens, {s['target_tokens']} targets: "
              f"{t['seconds']:.3f} s, {t['tokens_per_second']:.0f} tokens/s, {t['flops_per_second'] / 1e12:.3f} TFLOP/s, "
              f"MFU {100 * b.get('mfu', 0):.3f}% of {b.get('peak_flops', 0) / 1e12:.0f} TFLOP/s; "
              f"plan {b.get('plan_train_bytes', 0) / 1e9:.2f} GB ({b.get('plan_train_peak')})"
              + (f"; Go heap peak {t['heap_peak_bytes'] / 1e9:.3f} GB (live {t.get('heap_live_peak_bytes', 0) / 1e9:.3f} GB)"
                 if t.get("heap_peak_bytes") else ""))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("plugin")
    sub.add_parser("nvidia-libs")
    sub.add_parser("cuda-data-dir")
    s = sub.add_parser("pjrt-version")
    s.add_argument("plugin")
    s = sub.add_parser("inputs")
    s.add_argument("--vocab", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--length", type=int, default=24)
    s.add_argument("--new", type=int, default=4)
    s.add_argument("--seed", type=int, default=7)
    s = sub.add_parser("hf-score")
    s.add_argument("ckpt")
    s.add_argument("inputs")
    s.add_argument("out")
    s.add_argument("--device", default="cuda")
    s = sub.add_parser("compare")
    s.add_argument("ref")
    s.add_argument("got")
    s.add_argument("--atol-logits", type=float, default=1e-4)
    s.add_argument("--atol-logprob", type=float, default=1e-4)
    s = sub.add_parser("peak")
    s.add_argument("file")
    s = sub.add_parser("bench")
    s.add_argument("file")
    a = p.parse_args()
    fn = {"plugin": cmd_plugin, "nvidia-libs": cmd_nvidia_libs, "cuda-data-dir": cmd_cuda_data_dir,
          "pjrt-version": cmd_pjrt_version, "inputs": cmd_inputs, "hf-score": cmd_hf_score, "compare": cmd_compare,
          "peak": cmd_peak, "bench": cmd_bench}[a.cmd]
    return fn(a)


if __name__ == "__main__":
    sys.exit(main())
