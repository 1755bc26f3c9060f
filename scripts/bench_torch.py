#!/usr/bin/python3
"""The Go model benchmarks (model/bench_test.go) redone in PyTorch float32.

Same model (Qwen3: hidden 256, 4 layers, vocab 8192, 4 query / 2 kv heads of
64, MLP 768, tied embeddings) and the same work:

  forward     log-probs of every token of a 4 x 256 batch
  train_step  forward + backward + AdamW on the mean NLL of that batch
  decode1/8   greedy, KV cache, 64 new tokens after a 16-token prompt (prefill
              included), batch 1 and 8

Run with Debian's python3-torch (OpenBLAS): /usr/bin/python3 scripts/bench_torch.py
It runs PyTorch once per thread setting of --threads (default 1,2: torch's intra-op
threads and OpenBLAS's set to each, in a process of its own; scripts/benchload.py) and
compares against the fastest. With --go FILE (the output of `go test -bench . ./model`
run under scripts/loadwatch.sh, which appends the load around it), prints both side by
side with the ratios GoMLX time / PyTorch time, in wall-clock (the best run of each
side: PyTorch's best of --repeat in its fastest setting, Go's best-s/op metric, the
fastest of its -benchtime runs; Go's mean is printed too) and in CPU seconds (user +
system, all threads; PyTorch's least of its runs in that setting, Go's mean), with the
1-minute load average before and after each side and its highest while the side ran.
When that highest load passes BENCH_MAX_LOAD (default 2.5) on either side, or the Go
side's load was not recorded, it prints "too loaded, rerun" instead of the ratios.
`make bench` does this; scripts/bench-rounds.sh runs several interleaved rounds. The Go
benchmarks run with model's own matrix product and elementwise ops;
MODEL_BENCH_SIMPLEGO_OPS=1 makes them use simplego's (the figures before those), e.g.

  MODEL_BENCH_SIMPLEGO_OPS=1 scripts/loadwatch.sh go test ./model -run '^$' -bench . -benchtime 3x > bin/bench-simplego.txt
  /usr/bin/python3 scripts/bench_torch.py --go bin/bench-simplego.txt
"""

import argparse
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchload  # noqa: E402  (scripts/benchload.py)

V, H, I, LAYERS, NQ, NKV, D = 8192, 256, 768, 4, 4, 2, 64
EPS, THETA = 1e-6, 1e6
BATCH, SEQ, PROMPT, NEW = 4, 256, 16, 64


class Qwen3(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        def w(*shape):
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.02)
        self.embed = w(V, H)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            layer = torch.nn.Module()
            layer.q, layer.k, layer.v, layer.o = w(NQ * D, H), w(NKV * D, H), w(NKV * D, H), w(H, NQ * D)
            layer.gate, layer.up, layer.down = w(I, H), w(I, H), w(H, I)
            layer.ln1, layer.ln2 = torch.nn.Parameter(torch.ones(H)), torch.nn.Parameter(torch.ones(H))
            layer.qn, layer.kn = torch.nn.Parameter(torch.ones(D)), torch.nn.Parameter(torch.ones(D))
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(H))
        self.inv_freq = 1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D))

    @staticmethod
    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))

    def rope(self, x, pos):  # x [B, heads, T, D], pos [T]
        ang = pos[:, None].float() * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], -1)
        half = D // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * ang.cos() + rot * ang.sin()

    def forward(self, ids, cache=None):
        """ids [B, T]; cache: list of (k, v) per layer or None. Returns hidden [B, T, H]."""
        B, T = ids.shape
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[2]
        pos = torch.arange(past, past + T)
        x = self.embed[ids]
        mask = torch.ones(T, past + T, dtype=torch.bool).tril(past)
        for li, l in enumerate(self.layers):
            h = self.rms(x, l.ln1)
            q = self.rms((h @ l.q.t()).view(B, T, NQ, D), l.qn).transpose(1, 2)
            k = self.rms((h @ l.k.t()).view(B, T, NKV, D), l.kn).transpose(1, 2)
            v = (h @ l.v.t()).view(B, T, NKV, D).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if cache is not None:
                if cache[li] is not None:
                    k = torch.cat([cache[li][0], k], 2)
                    v = torch.cat([cache[li][1], v], 2)
                cache[li] = (k, v)
            k, v = k.repeat_interleave(NQ // NKV, 1), v.repeat_interleave(NQ // NKV, 1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            s = s.masked_fill(~mask, float("-inf"))
            a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, NQ * D)
            x = x + a @ l.o.t()
            h = self.rms(x, l.ln2)
            x = x + (F.silu(h @ l.gate.t()) * (h @ l.up.t())) @ l.down.t()
        return self.rms(x, self.norm)

    def token_logprobs(self, ids):
        h = self.forward(ids)[:, :-1]                      # positions p-1
        logp = (h @ self.embed.t()).log_softmax(-1)        # LM head at those positions
        return logp.gather(-1, ids[:, 1:, None])[..., 0]   # [B, L-1]


def best(fn, repeat):
    """(min wall seconds, min CPU seconds) of repeat runs after a warm-up."""
    fn()
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def read_go(path):
    """Benchmark name -> {"mean": s/op, "best": s/op, "cpu": s/op} from `go test -bench` output
    (package model only); "best" is the best-s/op metric, or the mean where there is none."""
    go, in_model = {}, False
    for line in open(path):
        if line.startswith("pkg: "):
            in_model = line.strip().endswith("/model")
        m = re.match(r"Benchmark(\w+?)(-\d+)?\s+\d+\s+(\d+) ns/op(.*)", line)
        if in_model and m:
            metrics = {unit: float(val) for val, unit in re.findall(r"([\d.e+]+) (\S+)", m.group(4))}
            mean = int(m.group(3)) / 1e9
            go[m.group(1)] = {"mean": mean, "best": metrics.get("best-s/op", mean), "cpu": metrics.get("cpu-s/op")}
    return go


def measure(threads, repeat):
    """{benchmark: {"wall": best s, "cpu": least CPU s}} of every benchmark, in this process."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Qwen3()
    ids = torch.randint(0, V, (BATCH, SEQ))

    def fwd():
        with torch.no_grad():
            model.token_logprobs(ids)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def train():
        loss = -model.token_logprobs(ids).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def decode(batch):
        prompt = torch.randint(0, V, (batch, PROMPT))
        def run():
            with torch.no_grad():
                cache = [None] * LAYERS
                h = model.forward(prompt, cache)[:, -1]
                for _ in range(NEW - 1):
                    nxt = (h @ model.embed.t()).log_softmax(-1).argmax(-1)
                    h = model.forward(nxt[:, None], cache)[:, -1]
                (h @ model.embed.t()).log_softmax(-1).argmax(-1)
        return run

    out = {}
    for name, fn in {"Forward": fwd, "TrainStep": train, "Decode1": decode(1), "Decode8": decode(8)}.items():
        wall, cpu = best(fn, repeat)
        out[name] = {"wall": wall, "cpu": cpu}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="thread settings to try, e.g. 1,2 (torch intra-op and BLAS threads)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--go", help="output of go test -bench for ./model under scripts/loadwatch.sh, to print side by side")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one setting, JSON out
    a = ap.parse_args()
    threads = benchload.parse_threads(a.threads)
    if a.repeat < 1:
        sys.exit(f"--repeat {a.repeat}: want at least 1")
    if a.child:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "results": measure(threads[0], a.repeat)}))
        return 0
    limit = benchload.max_load()
    settings = benchload.run_settings(os.path.abspath(__file__), ["--repeat", str(a.repeat)], threads)
    go = read_go(a.go) if a.go else {}
    go_load = benchload.read_go_load(a.go) if a.go else None
    # name -> tokens per op
    work = {"Forward": BATCH * SEQ, "TrainStep": BATCH * SEQ, "Decode1": NEW, "Decode8": 8 * NEW}

    print(f"PyTorch {settings[0][1]['torch']} float32, best of {a.repeat} in each thread setting; GoMLX: best and mean"
          f" of the go test -bench runs, mean CPU. Load (1-minute average; a ratio needs each side's highest <= {limit:g},"
          f" BENCH_MAX_LOAD):")
    if a.go:
        print(f"  GoMLX ({a.go}): {benchload.describe(go_load)}")
    for n, res, rec in settings:
        print(f"  PyTorch, {n} thread(s) (torch reports {res['threads']}): {benchload.describe(rec)}")
    cols = " ".join(f"{f'{n} thr s/op':>11} {'(cpu)':>7}" for n, _, _ in settings)
    print(f"{'benchmark':<10} {cols} {'fastest':>7} | {'GoMLX best':>10} {'mean':>7} {'(cpu)':>7} | {'Go/PyTorch wall':>15} {'cpu':>6}")
    for name, tokens in work.items():
        per = [(n, res["results"][name], rec) for n, res, rec in settings]
        fastest = min(per, key=lambda x: x[1]["wall"])
        line = f"{name:<10} " + " ".join(f"{r['wall']:>11.3f} {r['cpu']:>7.3f}" for _, r, _ in per) + f" {fastest[0]:>5} t"
        g = go.get(name)
        if g:
            gcpu = f"{g['cpu']:>7.3f}" if g["cpu"] is not None else f"{'-':>7}"
            line += f" | {g['best']:>10.3f} {g['mean']:>7.3f} {gcpu} | "
            if benchload.too_loaded([go_load] + [rec for _, _, rec in settings], limit):
                line += benchload.TOO_LOADED
            else:
                rcpu = f"{g['cpu'] / fastest[1]['cpu']:>5.2f}x" if g["cpu"] is not None else f"{'-':>6}"
                line += f"{g['best'] / fastest[1]['wall']:>14.2f}x {rcpu}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
