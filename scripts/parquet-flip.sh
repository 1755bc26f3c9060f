#!/usr/bin/env bash
# parquet-flip.sh: change one byte of a valid Parquet file at a time and run
# `mageguard data validate` on each copy under `ulimit -v 6000000` (6 GB of
# address space) and `timeout 30`. Every run must end with exit status 0
# (read) or 1 (an error naming the file); anything else — a panic (2), a
# fatal error, a signal, a timeout (124) — is listed and fails the script.
#
#   scripts/parquet-flip.sh [STRIDE]      # every STRIDE-th byte of the data
#                                         # part (default 1) and every byte of
#                                         # the footer, magic bytes included
#   JOBS=2 VALUES="ff 00" scripts/parquet-flip.sh 4
#   FOOTER_STRIDE=100 scripts/parquet-flip.sh 5000   # a quick smoke run
#
# The file is `mageguard data subset
# data/agentdojo-mini/train.jsonl`. Each position is set to each value of
# VALUES (hex; default "ff"), and to its own value XOR 0x01 when VALUES is
# "xor" (a single bit flipped). Results: bin/parquet-flip/results.txt (one
# line per run: position, value, exit status, seconds), and a summary on
# stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

STRIDE=${1:-1}
JOBS=${JOBS:-2}
VALUES=${VALUES:-ff}
BIN=${BIN:-bin/mageguard}
WORK=bin/parquet-flip
mkdir -p "$WORK"
[ -x "$BIN" ] || make build >/dev/null

BASE=$WORK/base.parquet
"$BIN" data subset data/agentdojo-mini/train.jsonl --out "$BASE" 2>/dev/null
SIZE=$(stat -c %s "$BASE")
FOOTER_LEN=$(od -An -t u4 -j $((SIZE - 8)) -N 4 "$BASE" | tr -d ' ')
FOOTER_START=$((SIZE - 8 - FOOTER_LEN))
echo "parquet-flip: $BASE: $SIZE bytes, footer $FOOTER_START..$((SIZE - 1)) ($FOOTER_LEN bytes of metadata), data stride $STRIDE, values $VALUES, $JOBS jobs"

positions() {
	seq 0 3
	seq 4 "$STRIDE" $((FOOTER_START - 1))
	seq "$FOOTER_START" "${FOOTER_STRIDE:-1}" $((SIZE - 1))
}

# flip POS: one run on a copy with byte POS changed, for each value.
flip() {
	local pos=$1 copy="$WORK/flip-$1.parquet" v hex orig
	orig=$(od -An -t x1 -j "$pos" -N 1 "$BASE" | tr -d ' ')
	for v in $VALUES; do
		if [ "$v" = xor ]; then
			hex=$(printf '%02x' $((0x$orig ^ 0x01)))
		else
			hex=$v
		fi
		[ "$hex" = "$orig" ] && continue
		cp "$BASE" "$copy"
		printf "\\x$hex" | dd of="$copy" bs=1 seek="$pos" conv=notrunc status=none
		local start end rc
		start=$(date +%s.%N)
		rc=0
		(ulimit -v 6000000; timeout 30 "$BIN" data validate "$copy" >/dev/null 2>"$copy.err") || rc=$?
		end=$(date +%s.%N)
		if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
			echo "CRASH pos $pos value 0x$hex (was 0x$orig): exit $rc: $(head -c 300 "$copy.err" | tr '\n' ' ')" >>"$WORK/crashes.txt"
		fi
		echo "$pos $hex $rc $(echo "$end - $start" | bc)"
	done
	rm -f "$copy" "$copy.err"
}
export -f flip
export BASE BIN WORK VALUES

rm -f "$WORK/crashes.txt" "$WORK/results.txt"
positions | xargs -P "$JOBS" -n 1 bash -c 'flip "$0"' >"$WORK/results.txt"

runs=$(wc -l <"$WORK/results.txt")
read0=$(awk '$3 == 0' "$WORK/results.txt" | wc -l)
err1=$(awk '$3 == 1' "$WORK/results.txt" | wc -l)
slowest=$(sort -k4 -g "$WORK/results.txt" | tail -1)
echo "parquet-flip: $runs runs: $read0 read (exit 0), $err1 refused (exit 1), $((runs - read0 - err1)) crashed; slowest: $slowest (pos value exit seconds)"
if [ -s "$WORK/crashes.txt" ]; then
	cat "$WORK/crashes.txt"
	exit 1
fi
