#!/usr/bin/python3
"""One GRPO update on the demo's recorded batch, in PyTorch float32, the way TRL's GRPOTrainer does it.

The Go side is grpo's BenchmarkUpdate (grpo/bench_test.go): the same batch
(grpo/testdata/demo_batch.json.gz: 56 guard calls of the demo's first step, their
trained positions, advantages and reference log-probs), the same model (configs/tiny.yaml:
Qwen3 with hidden 64, 2 layers, 4 query / 2 KV heads of 16, MLP 192, tied embeddings,
vocabulary 151,936; the weights of `mageguard model init --config configs/tiny.yaml`,
read from --ckpt), the same settings (micro-batches of 16 sequences of one phase, lr 1e-3,
β 0.04, ε 0.2, AdamW(0.9, 0.999, 1e-8), gradient-norm clip 1.0).

What TRL does, and this script does, per micro-batch: the rows right-padded to the longest,
one forward over prompt + completion; the LM head only at the completion positions (TRL's
logits_to_keep); log_softmax(logits / T) gathered at the sampled tokens; per token
ρ = exp(logp − logp.detach()) (μ = 1: π_old is the current policy), the clipped objective
min(ρA, clip(ρ, 1−ε, 1+ε)A) minus β times the k3 KL against the recorded reference log-probs;
the loss averaged per sequence, then over the step's sequences; backward; gradients
accumulated over the micro-batches; then clipping and AdamW. No shared-prefix or chunked-head
savings (TRL has neither).

  make build && bin/mageguard model init --config configs/tiny.yaml --out bin/bench-tiny
  /usr/bin/python3 scripts/bench_update_torch.py --ckpt bin/bench-tiny

It runs the update once per thread setting of --threads (default 1,2: torch's intra-op
threads and OpenBLAS's set to each, in a process of its own; scripts/benchload.py) and
compares against the fastest. With --go FILE (go test -bench output of ./grpo under
scripts/loadwatch.sh), prints both side by side with the ratio Go / PyTorch (wall and CPU
seconds), the load average around each side, and "too loaded, rerun" instead of the ratio
when either side's highest 1-minute load passed BENCH_MAX_LOAD (default 2.5) or the Go
side's was not recorded. make bench does this.
"""

import argparse
import gzip
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchload  # noqa: E402  (scripts/benchload.py)
from qwen3_ref import Qwen3  # noqa: E402  (scripts/qwen3_ref.py: the repository's PyTorch Qwen3)


def micro_batches(seqs, size):
    """Runs of consecutive sequences of one phase, at most size each (grpo's micro-batches)."""
    out = []
    for i, s in enumerate(seqs):
        if not out or len(out[-1]) == size or seqs[out[-1][0]]["phase"] != s["phase"]:
            out.append([])
        out[-1].append(i)
    return out


def update(model, opt, seqs, temperature, mbs, eps_clip=0.2, beta=0.04, max_norm=1.0):
    """One GRPO optimizer step over all micro-batches; returns (loss, grad norm)."""
    opt.zero_grad(set_to_none=True)
    n_seq = sum(1 for s in seqs if s["target_pos"])
    total = 0.0
    for rows in micro_batches(seqs, mbs):
        L = max(len(seqs[i]["tokens"]) for i in rows)
        ids = torch.zeros(len(rows), L, dtype=torch.long)
        attn = torch.zeros(len(rows), L, dtype=torch.long)
        for r, i in enumerate(rows):
            t = seqs[i]["tokens"]
            ids[r, :len(t)] = torch.tensor(t)
            attn[r, :len(t)] = 1
        h = model.hidden(ids, attn)
        loss = 0.0
        for r, i in enumerate(rows):
            s = seqs[i]
            if not s["target_pos"]:
                continue
            pos = torch.tensor(s["target_pos"])
            z = model.logits(h[r, pos - 1]) / temperature              # logits at the completion positions only
            logp = z.log_softmax(-1).gather(-1, ids[r, pos][:, None])[:, 0]
            ratio = torch.exp(logp - logp.detach())
            adv = s["advantage"]
            obj = torch.minimum(ratio * adv, ratio.clamp(1 - eps_clip, 1 + eps_clip) * adv)
            ref = torch.tensor(s["ref_logprobs"])
            kl = torch.exp(ref - logp) - (ref - logp) - 1
            loss = loss - (obj - beta * kl).mean() / n_seq          # seq-mean-token-mean
        loss.backward()
        total += float(loss)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return total, float(norm)


def read_go(path):
    """BenchmarkUpdate* -> {"wall", "cpu", "heap"} from go test -bench output of ./grpo."""
    go = {}
    for line in open(path):
        m = re.match(r"Benchmark(Update\w*?)(-\d+)?\s+\d+\s+(\d+) ns/op(.*)", line)
        if m:
            metrics = {unit: float(val) for val, unit in re.findall(r"([\d.e+]+) (\S+)", m.group(4))}
            go[m.group(1)] = {"wall": int(m.group(3)) / 1e9, "cpu": metrics.get("cpu-s/op"), "heap": metrics.get("peak-heap-MB")}
    return go


def measure(a, threads):
    """{"wall", "cpu", "loss", "norm"}: the best of a.repeat updates after a warm-up, in this process."""
    torch.set_num_threads(threads)
    rec = json.load(gzip.open(a.batch))
    model = Qwen3.from_pretrained(a.ckpt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    loss, norm = update(model, opt, rec["sequences"], rec["temperature"], 16)  # warm-up
    walls, cpus = [], []
    for _ in range(a.repeat):
        w, c = time.perf_counter(), time.process_time()
        update(model, opt, rec["sequences"], rec["temperature"], 16)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {"wall": min(walls), "cpu": min(cpus), "loss": loss, "norm": norm, "sequences": len(rec["sequences"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="checkpoint of mageguard model init --config configs/tiny.yaml")
    ap.add_argument("--batch", default="grpo/testdata/demo_batch.json.gz")
    ap.add_argument("--threads", default="1,2", help="thread settings to try, e.g. 1,2 (torch intra-op and BLAS threads)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--go", help="go test -bench output of ./grpo under scripts/loadwatch.sh, printed side by side")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one setting, JSON out
    a = ap.parse_args()
    threads = benchload.parse_threads(a.threads)
    if a.repeat < 1:
        sys.exit(f"--repeat {a.repeat}: want at least 1")
    if a.child:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "results": measure(a, threads[0])}))
        return 0
    limit = benchload.max_load()
    settings = benchload.run_settings(os.path.abspath(__file__),
                                      ["--ckpt", a.ckpt, "--batch", a.batch, "--repeat", str(a.repeat)], threads)
    for n, res, rec in settings:
        r = res["results"]
        print(f"PyTorch {res['torch']} float32, {n} thread(s): one GRPO update on {a.batch} ({r['sequences']} sequences),"
              f" best of {a.repeat}: {r['wall']:.3f} s ({r['cpu']:.3f} s CPU); first step loss {r['loss']:.6f},"
              f" grad norm {r['norm']:.4f}; load {benchload.describe(rec)}")
    n, fastest, _ = min(((n, res["results"], rec) for n, res, rec in settings), key=lambda x: x[1]["wall"])
    wall, cpu = fastest["wall"], fastest["cpu"]
    if a.go:
        go = read_go(a.go)
        go_load = benchload.read_go_load(a.go)
        refuse = benchload.too_loaded([go_load] + [rec for _, _, rec in settings], limit)
        print(f"GoMLX ({a.go}): load {benchload.describe(go_load)}; ratios against PyTorch's fastest setting ({n} thread(s)),"
              f" each side's highest load <= {limit:g} (BENCH_MAX_LOAD)")
        print(f"{'Go benchmark':<22} {'s/op':>8} {'(cpu)':>8} {'heap MB':>8} | {'Go/PyTorch wall':>15} {'cpu':>6}")
        for name, g in sorted(go.items()):
            cpu_s = f"{g['cpu']:>8.3f}" if g["cpu"] is not None else f"{'-':>8}"
            ratio_cpu = f"{g['cpu'] / cpu:>5.2f}x" if g["cpu"] is not None else f"{'-':>6}"
            heap = f"{g['heap']:>8.0f}" if g["heap"] is not None else f"{'-':>8}"
            ratio = benchload.TOO_LOADED if refuse else f"{g['wall'] / wall:>14.2f}x {ratio_cpu}"
            print(f"{name:<22} {g['wall']:>8.3f} {cpu_s} {heap} | {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
