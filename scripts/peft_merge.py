#!/usr/bin/python3
"""Merge a PEFT LoRA adapter into its base checkpoint, as PEFT's merge_and_unload does, written
independently of mageguard's Go code (numpy only; the safetensors files are parsed and written
here by hand):

    W <- W + s * B @ A      for every lora_A / lora_B pair of adapter_model.safetensors,
    s = lora_alpha / r      (use_rslora: lora_alpha / sqrt(r))

with A [r, in] and B [out, r] named base_model.model.<module>.lora_A.weight and
...lora_B.weight, and W the base's <module>.weight [out, in]. The product and the sum run in
float32 (PEFT computes the delta in the adapter's dtype and adds it to the weight); the merged
checkpoint is written as float32: config.json (torch_dtype float32), model.safetensors and the
tokenizer files of the adapter directory (else the base's).

  /usr/bin/python3 scripts/peft_merge.py --adapter runs/lora/checkpoint-8 --out runs/merged

The base is adapter_config.json's base_model_name_or_path (absolute, or relative to the adapter
directory) unless --base names it. `mageguard model merge` does the same in Go; scoring this
script's output with a PyTorch Qwen3 checks `mageguard model score --model ADAPTER_DIR`.
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja"]


def read_safetensors(path):
    """name -> float32 array of a .safetensors file (F32, BF16 or F16)."""
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
        elif e["dtype"] == "BF16":  # the top half of a float32: widening is exact
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']}")
        out[name] = a.reshape(e["shape"]).astype(np.float32)
    return out


def write_safetensors(path, tensors):
    """Write name -> float32 array as F32, in sorted name order."""
    header, offset = {}, 0
    names = sorted(tensors)
    for name in names:
        size = tensors[name].size * 4
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())


def read_base(base):
    """config.json and every weight of a checkpoint directory (one file or shards)."""
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(base, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(base, name)))
    return cfg, weights


def merge(adapter, base=None):
    """(config, merged weights, base dir, number of merged modules)."""
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        acfg = json.load(f)
    if acfg.get("peft_type") != "LORA":
        raise ValueError(f"{adapter}: peft_type {acfg.get('peft_type')!r}")
    r, alpha = acfg["r"], acfg["lora_alpha"]
    s = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
    if base is None:
        base = acfg["base_model_name_or_path"]
        if not os.path.isabs(base):
            base = os.path.join(adapter, base)
    cfg, weights = read_base(base)
    lora = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
    prefix, a_suffix = "base_model.model.", ".lora_A.weight"
    merged = 0
    for name in sorted(lora):
        if not name.endswith(a_suffix):
            continue
        module = name[len(prefix):-len(a_suffix)]
        a, b = lora[name], lora[prefix + module + ".lora_B.weight"]
        w = weights[module + ".weight"]
        if b.shape[1] != r or a.shape[0] != r or w.shape != (b.shape[0], a.shape[1]):
            raise ValueError(f"{module}: W {w.shape}, B {b.shape}, A {a.shape} with r {r}")
        weights[module + ".weight"] = w + (b @ a) * np.float32(s)
        merged += 1
    return cfg, weights, base, merged


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", required=True, help="PEFT adapter directory")
    ap.add_argument("--out", required=True, help="directory to write the merged float32 checkpoint into")
    ap.add_argument("--base", help="base checkpoint directory (default: adapter_config.json's)")
    a = ap.parse_args()
    cfg, weights, base, merged = merge(a.adapter, a.base)
    os.makedirs(a.out, exist_ok=True)
    cfg["torch_dtype"] = "float32"
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(a.out, "model.safetensors"), weights)
    for name in TOKENIZER_FILES:
        for src in (a.adapter, base):
            if os.path.exists(os.path.join(src, name)):
                shutil.copy(os.path.join(src, name), os.path.join(a.out, name))
                break
    print(f"peft_merge.py: merged {merged} modules of {a.adapter} into {base}: {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
