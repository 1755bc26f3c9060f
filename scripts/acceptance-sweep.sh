#!/bin/sh
# Acceptance run of `mageguard sweep` (make acceptance-sweep), from the
# repository root: the 2 × 2 grid of tiny runs of configs/sweep-tiny.yaml must
#   1. finish on a CPU,
#   2. resume after kill -9: the finished point is skipped, the killed one
#      runs again (training from step 0 when it was killed before its
#      checkpoint, its metrics lines not duplicated), and the summary holds
#      all four points;
#   3. give the same summary when its points run one by one from --plan's
#      plan.sh and --collect gathers them.
# Nothing here assumes how fast the machine is: the kill is triggered by an
# event on disk (point 1's first metrics.jsonl line), polled every 0.05 s,
# and what the kill interrupted is checked afterwards. Should point 1 have
# finished before the kill landed (a machine faster than the polling), the
# attempt is reported as a miss and repeated in a fresh folder, killing at
# the earliest event (point 1's folder) instead, up to TRIES attempts.
# Usage: scripts/acceptance-sweep.sh [OUT]   (default runs/acceptance-sweep)
set -eu
BIN=${BIN:-bin/mageguard}
CFG=${CFG:-configs/sweep-tiny.yaml}
OUT=${1:-runs/acceptance-sweep}
TRIES=${TRIES:-3}
P0='gamma=0,lambda=0' # point 0 of the grid (the first key varies slowest)
P1='gamma=0,lambda=1' # point 1, the one killed
rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)

# steps FILE: the step numbers of a metrics.jsonl, on one line.
steps() { sed -n 's/^{"step":\([0-9]*\),.*/\1/p' "$1" | paste -sd ' ' -; }

# arrived: whether this attempt's kill event has happened (metrics.jsonl is
# created empty when training starts, so wait until it holds a line).
arrived() {
	if [ "$attempt" -eq 1 ]; then [ -s "$OUT/run/$P1/metrics.jsonl" ]; else [ -d "$OUT/run/$P1" ]; fi
}

echo "== 1-2. sweep into $OUT/run, kill -9 during point 1, resume"
attempt=1
while :; do
	event="point 1's first metrics.jsonl line"
	if [ "$attempt" -gt 1 ]; then event="point 1's folder"; fi
	rm -rf "$OUT/run"
	"$BIN" sweep --config "$CFG" --out "$OUT/run" 2>"$OUT/run-1.log" &
	pid=$!
	while ! arrived; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "FAIL: the sweep ended before $event appeared"; tail -20 "$OUT/run-1.log"; exit 1
		fi
		sleep 0.05
	done
	kill -9 "$pid" 2>/dev/null || true # it may have exited since: the checks below tell
	wait "$pid" 2>/dev/null || true
	test -f "$OUT/run/$P0/DONE" || { echo "FAIL: point 1 had started but point 0 is not DONE"; exit 1; }
	if [ ! -f "$OUT/run/$P1/DONE" ]; then
		break
	fi
	echo "attempt $attempt: point 1 was already DONE when the kill after $event landed: the kill missed, nothing was checked"
	if [ "$attempt" -ge "$TRIES" ]; then
		echo "FAIL: point 1 finished before the kill in all $TRIES attempts"; exit 1
	fi
	attempt=$((attempt + 1))
done
m1="$OUT/run/$P1/metrics.jsonl"
lines=0
if [ -f "$m1" ]; then lines=$(wc -l <"$m1"); fi
ckpt=no
if [ -d "$OUT/run/$P1/checkpoint-2" ]; then ckpt=yes; fi
echo "attempt $attempt: killed after $(($(date +%s) - start))s on $event:" \
	"point 0 DONE; point 1 not DONE, $lines metrics line(s), checkpoint-2: $ckpt"

"$BIN" sweep --config "$CFG" --out "$OUT/run" 2>"$OUT/run-2.log"
grep -q "4 points over rewards.gamma × rewards.lambda, 1 already finished, 3 to run" "$OUT/run-2.log" ||
	{ echo "FAIL: the resumed sweep did not skip point 0"; head -3 "$OUT/run-2.log"; exit 1; }
if grep -q "$P0: running" "$OUT/run-2.log"; then echo "FAIL: point 0 ran again"; exit 1; fi
grep -q "$P1: running" "$OUT/run-2.log" || { echo "FAIL: the resumed sweep did not run point 1"; exit 1; }
if [ "$ckpt" = no ]; then
	# Killed before any checkpoint: training must restart from step 0.
	grep -qF "/$P1 yet, starting from step 0" "$OUT/run-2.log" ||
		{ echo "FAIL: point 1 did not restart from step 0"; grep "resume" "$OUT/run-2.log"; exit 1; }
fi
# The killed run's metrics lines are replaced, not duplicated.
got=$(steps "$m1")
test "$got" = "1 2" || { echo "FAIL: point 1's metrics.jsonl holds steps '$got', want '1 2'"; exit 1; }
test -f "$OUT/run/$P1/DONE" || { echo "FAIL: point 1 is not DONE after the resume"; exit 1; }
rows=$(tail -n +2 "$OUT/run/summary.csv" | wc -l)
test "$rows" -eq 4 || { echo "FAIL: summary.csv has $rows rows"; exit 1; }
echo "resumed and finished after $(($(date +%s) - start))s: point 0 skipped, point 1 rerun (steps $got), 4 rows"

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
