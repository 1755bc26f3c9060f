#!/bin/sh
# Interleaved rounds of the model benchmarks against PyTorch, for a machine
# shared with other work: each round runs, for each Go test binary given,
# the Go benchmarks (Forward, TrainStep, Decode1, Decode8) and then
# scripts/bench_torch.py on the same work, printing both side by side with
# the load average, so that the two sides of each ratio share the machine's
# load.
#
#   scripts/bench-rounds.sh [ROUNDS [GO_TEST_BINARY...]]
#
# ROUNDS defaults to 3; the binaries (`go test -c ./model` builds, e.g. of
# two commits to compare) default to one built from this checkout into
# bin/model.test. Outputs in bin/rounds/.
set -eu
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
		out=bin/rounds/round-$i-$(basename "$bin").txt
		echo "== round $i, $bin, load $(cut -d' ' -f1-3 /proc/loadavg)"
		{
			echo "pkg: github.com/mageguard/mageguard/model"
			"$bin" -test.run '^$' -test.bench 'Forward$|TrainStep$|Decode1$|Decode8$' -test.benchtime 3x 2>/dev/null
		} >"$out"
		grep -h 'peak-heap-MB' "$out" | sed 's/^/   /' || true
		/usr/bin/python3 scripts/bench_torch.py --go "$out"
	done
	i=$((i + 1))
done
echo "== done, load $(cut -d' ' -f1-3 /proc/loadavg)"
