#!/usr/bin/env bash
# Rebuilds the bundled default data, data/agentdojo-mini/{train,eval}.jsonl,
# from the complete AgentDojo run logs:
#
#   scripts/make-mini.sh RUNS_DIR     (or AGENTDOJO_RUNS=RUNS_DIR scripts/make-mini.sh)
#
# RUNS_DIR holds <model>/<suite>/<user_task>/<attack>/<injection_task>.json
# and has the logs' LICENSE beside it (RUNS_DIR/../LICENSE). Deterministic:
# the same runs give byte-identical files. scripts/agentdojo-check
# (go run ./scripts/agentdojo-check RUNS_DIR/..) checks the committed files
# against these exact flags.
set -euo pipefail
RUNS=${1:-${AGENTDOJO_RUNS:-}}
if [ -z "$RUNS" ]; then
  echo "usage: scripts/make-mini.sh RUNS_DIR (the AgentDojo run logs; or set AGENTDOJO_RUNS)" >&2
  exit 2
fi
RUNS=$(cd "$RUNS" && pwd)
cd "$(dirname "$0")/.."
OUT=data/agentdojo-mini
make build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin/mageguard data import agentdojo --runs "$RUNS" --out "$tmp/all.parquet"
bin/mageguard data subset "$tmp/all.parquet" --out "$tmp/mini.jsonl" \
  --max-turns 12 --max-observation-chars 2000 \
  --attack-per-suite 60 --benign-per-suite 15 --positive-frac 0.5 --seed 1
mkdir -p "$OUT"
bin/mageguard data split "$tmp/mini.jsonl" --eval-frac 0.25 --seed 1 \
  --train-out "$OUT/train.jsonl" --eval-out "$OUT/eval.jsonl"
install -m 644 "$(dirname "$RUNS")/LICENSE" "$OUT/LICENSE"
bin/mageguard data validate "$OUT/train.jsonl" "$OUT/eval.jsonl"
