#!/bin/sh
# Acceptance run of `mageguard sweep` (make acceptance-sweep), from the
# repository root: the 2 × 2 grid of tiny runs of configs/sweep-tiny.yaml must
#   1. finish on a CPU,
#   2. resume after kill -9: the finished point is skipped, the killed one
#      runs again, and the summary holds all four points;
#   3. give the same summary when its points run one by one from --plan's
#      plan.sh and --collect gathers them.
# Usage: scripts/acceptance-sweep.sh [OUT]   (default runs/acceptance-sweep)
set -eu
BIN=${BIN:-bin/mageguard}
CFG=${CFG:-configs/sweep-tiny.yaml}
OUT=${1:-runs/acceptance-sweep}
rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)

echo "== 1-2. sweep into $OUT/run, kill -9 during point 1, resume"
"$BIN" sweep --config "$CFG" --out "$OUT/run" 2>"$OUT/run-1.log" &
pid=$!
while [ ! -f "$OUT/run/gamma=0,lambda=0/DONE" ]; do
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "FAIL: the sweep ended before point 0 finished"; tail -20 "$OUT/run-1.log"; exit 1
	fi
	sleep 2
done
sleep 10 # into point 1
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
test ! -f "$OUT/run/gamma=0,lambda=1/DONE" || { echo "FAIL: point 1 finished before the kill"; exit 1; }
echo "killed after $(($(date +%s) - start))s, point 0 done, point 1 not"
"$BIN" sweep --config "$CFG" --out "$OUT/run" 2>"$OUT/run-2.log"
grep -q "4 points over rewards.gamma × rewards.lambda, 1 already finished, 3 to run" "$OUT/run-2.log" ||
	{ echo "FAIL: the resumed sweep did not skip point 0"; head -3 "$OUT/run-2.log"; exit 1; }
if grep -q "gamma=0,lambda=0: running" "$OUT/run-2.log"; then echo "FAIL: point 0 ran again"; exit 1; fi
rows=$(tail -n +2 "$OUT/run/summary.csv" | wc -l)
test "$rows" -eq 4 || { echo "FAIL: summary.csv has $rows rows"; exit 1; }
echo "resumed and finished after $(($(date +%s) - start))s"

echo "== 3. the same points from plan.sh into $OUT/cluster, then --collect"
"$BIN" sweep --config "$CFG" --out "$OUT/cluster" --plan
for n in 0 1 2 3; do
	sh "$OUT/cluster/plan.sh" "$n" 2>>"$OUT/cluster.log"
done
"$BIN" sweep --config "$CFG" --out "$OUT/cluster" --collect
for f in summary.csv summary.md heatmap_asr.png heatmap_bu.png heatmap_token_cost_online.png; do
	cmp "$OUT/run/$f" "$OUT/cluster/$f" || { echo "FAIL: $f differs"; exit 1; }
done
echo "OK in $(($(date +%s) - start))s: $OUT/run/summary.md"
cat "$OUT/run/summary.csv"
