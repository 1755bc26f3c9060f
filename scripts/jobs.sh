# Sourced by scripts/learn.sh and scripts/learn-grid.sh (after OUT is set and
# their output goes to their log): step prints a timed heading; beside and
# await run jobs beside the main line. The pure-Go backend leaves part of a
# 2-core machine idle, but only some pairs finish sooner side by side (two
# GRPO runs did; copy pretraining beside an eval did not: docs/learning.md).
#   beside NAME CMD...  runs CMD (a command or a function) with its output in OUT/NAME.log
#   await NAME          waits for it, prints its log's last lines, and stops the
#                       script (set -e) if it failed
# A script that stops, for any reason, stops its jobs first.
step() { echo; echo "== $(date +%T) $*"; }
declare -A pids
trap 'for p in "${pids[@]}"; do pkill -P "$p" 2>/dev/null; kill "$p" 2>/dev/null; done; true' EXIT
beside() {
	local name=$1
	shift
	step "$name: started beside the next steps (output in $OUT/$name.log)"
	"$@" > "$OUT/$name.log" 2>&1 &
	pids[$name]=$!
}
await() {
	local name=$1 status=0
	wait "${pids[$name]}" || status=$?
	unset "pids[$name]"
	step "$name: done (exit $status); the end of $OUT/$name.log:"
	tail -n 8 "$OUT/$name.log"
	if [ "$status" -ne 0 ]; then
		echo "$name failed; see $OUT/$name.log" >&2
		exit "$status"
	fi
}
