"""What the PyTorch comparisons (bench_torch.py, bench_update_torch.py) share: the
machine's load around each side, PyTorch's thread settings, and the refusal to
print a ratio measured under load.

Load: the 1-minute load average (/proc/loadavg), before and after a side runs
and its highest value while it runs (sampled every second). A benchmark's own
threads count in it: on the 2-core machine a quiet round runs at 1.2-1.9. When
the highest load of either side passes BENCH_MAX_LOAD (default 2.5; a number
> 0), the ratio is not printed: "too loaded, rerun". The Go side's load comes
from the lines scripts/loadwatch.sh appends to the go test output:

    # load before 1.20 1.05 0.90 after 1.85 1.30 1.00 max 1.92

PyTorch's fastest setting: each thread count of --threads (default 1,2) runs
in its own process with torch's intra-op threads and OpenBLAS's, OpenMP's
and MKL's set to it (the BLAS pools are sized when the library loads, so the
environment is set before the child starts); the fastest setting's wall
time is the one compared.
"""

import json
import math
import os
import re
import subprocess
import sys
import threading

TOO_LOADED = "too loaded, rerun"
DEFAULT_MAX_LOAD = 2.5


def max_load():
    """BENCH_MAX_LOAD as a float > 0 (default 2.5); exits with a message naming it when it is not one."""
    raw = os.environ.get("BENCH_MAX_LOAD", "")
    if raw == "":
        return DEFAULT_MAX_LOAD
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        sys.exit(f"BENCH_MAX_LOAD={raw!r}: want a finite number > 0 (the highest 1-minute load average a side may run at)")
    return v


def loadavg():
    """The 1-, 5- and 15-minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class LoadWatch:
    """A context that records the load averages before and after it and the highest
    1-minute load average sampled every second while it runs."""

    def __init__(self, period=1.0):
        self.period = period
        self.before = self.after = None
        self.max = 0.0
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.wait(self.period):
            self.max = max(self.max, loadavg()[0])

    def __enter__(self):
        self.before = loadavg()
        self.max = self.before[0]
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.after = loadavg()
        self.max = max(self.max, self.after[0])
        return False

    def record(self):
        return {"before": self.before, "after": self.after, "max": self.max}


GO_LOAD = re.compile(r"^# load before ([\d.]+) ([\d.]+) ([\d.]+) after ([\d.]+) ([\d.]+) ([\d.]+) max ([\d.]+)")


def read_go_load(path):
    """The load record scripts/loadwatch.sh appended to a go test output (the last one), or None."""
    rec = None
    for line in open(path):
        m = GO_LOAD.match(line)
        if m:
            v = [float(x) for x in m.groups()]
            rec = {"before": v[0:3], "after": v[3:6], "max": v[6]}
    return rec


def describe(rec):
    """'before 1.20 after 1.85 max 1.92', or 'not recorded'."""
    if rec is None:
        return "not recorded (run go test under scripts/loadwatch.sh)"
    return f"before {rec['before'][0]:.2f} after {rec['after'][0]:.2f} max {rec['max']:.2f}"


def too_loaded(records, limit):
    """Whether any side's load record is missing or passed the limit."""
    return any(r is None or r["max"] > limit for r in records)


def parse_threads(s):
    """'1,2' -> [1, 2]; each a whole number >= 1."""
    out = []
    for part in s.split(","):
        try:
            n = int(part)
        except ValueError:
            n = 0
        if n < 1:
            sys.exit(f"--threads {s!r}: want thread counts >= 1 separated by commas, e.g. 1,2")
        out.append(n)
    return out


def run_settings(script, args, threads):
    """Runs `script args --child --threads N` once per N in threads, each in its own
    process with torch's and the BLAS libraries' threads set to N, and returns
    [(N, results, load record)], results being the JSON object the child printed
    on its last line of output."""
    out = []
    for n in threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n))
        with LoadWatch() as w:
            p = subprocess.run([sys.executable, script, *args, "--child", "--threads", str(n)],
                               env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{script} with {n} thread(s) failed:\n{p.stderr}")
        out.append((n, json.loads(p.stdout.strip().splitlines()[-1]), w.record()))
    return out
