#!/bin/sh
# Interleaved rounds of the model benchmarks against PyTorch: each round
# runs, for each Go test binary given, the Go benchmarks (Forward,
# TrainStep, Decode1, Decode8) under scripts/loadwatch.sh and then
# scripts/bench_torch.py on the same work with 1 and 2 PyTorch threads,
# printing both side by side with the ratios against PyTorch's fastest
# setting and the load average before, after and at its highest during each
# side; a round where either side ran above BENCH_MAX_LOAD (default 2.5)
# prints "too loaded, rerun" instead of its ratios. Extra arguments for
# bench_torch.py go in BENCH_TORCH_ARGS (e.g. --threads 1,2,4). With
# BENCH_OPS_SEQUENTIAL=both each binary runs twice a round, as built and
# with MODEL_BENCH_OPS_SEQUENTIAL=1 (model.ops_sequential: ops one at a
# time in program order), the two side by side.
#
#   scripts/bench-rounds.sh [ROUNDS [GO_TEST_BINARY...]]
#
# ROUNDS defaults to 3; the binaries (`go test -c ./model` builds, e.g. of
# two commits to compare) default to one built from this checkout into
# bin/model.test. Outputs in bin/rounds/.
set -eu
case ${BENCH_OPS_SEQUENTIAL:-} in
"") variants=0 ;;
both) variants="0 1" ;;
*) echo "bench-rounds: BENCH_OPS_SEQUENTIAL is '$BENCH_OPS_SEQUENTIAL'; it takes 'both' or nothing" >&2; exit 2 ;;
esac
rounds=${1:-3}
[ $# -gt 0 ] && shift
mkdir -p bin/rounds
if [ $# -eq 0 ]; then
	go test -c -o bin/model.test ./model
	set -- bin/model.test
fi
i=1
while [ "$i" -le "$rounds" ]; do
	for bin in "$@"; do
		for seq in $variants; do
			name=$(basename "$bin")
			[ "$seq" = 1 ] && name=$name-ops-sequential
			out=bin/rounds/round-$i-$name.txt
			echo "== round $i, $bin$([ "$seq" = 1 ] && echo ' with MODEL_BENCH_OPS_SEQUENTIAL=1'), load $(cut -d' ' -f1-3 /proc/loadavg)"
			{
				echo "pkg: github.com/mageguard/mageguard/model"
				MODEL_BENCH_OPS_SEQUENTIAL=$seq scripts/loadwatch.sh "$bin" -test.run '^$' -test.bench 'Forward$|TrainStep$|Decode1$|Decode8$' -test.benchtime 3x 2>/dev/null
			} >"$out"
			grep -h 'peak-heap-MB' "$out" | sed 's/^/   /' || true
			# shellcheck disable=SC2086 # BENCH_TORCH_ARGS is split on purpose
			/usr/bin/python3 scripts/bench_torch.py --go "$out" ${BENCH_TORCH_ARGS:-}
		done
	done
	i=$((i + 1))
done
echo "== done, load $(cut -d' ' -f1-3 /proc/loadavg)"
