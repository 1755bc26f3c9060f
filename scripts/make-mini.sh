#!/usr/bin/env bash
# Rebuilds the bundled default data, data/agentdojo-mini/{train,eval}.jsonl,
# from the AgentDojo run logs (default: ../shared/data/agentdojo/runs).
# Deterministic: the same runs give byte-identical files. The Go test
# dataset/agentdojo TestSharedAgreement checks the committed files against
# these exact flags when ../shared is present.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-../shared/data/agentdojo/runs}
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
