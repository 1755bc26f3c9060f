#!/usr/bin/env bash
# Rebuilds the synthetic benchmark's bundled files (docs/synth.md):
#   assets/synth-tokenizer/{tokenizer.json,tokenizer_config.json}  the small tokenizer
#   data/synth/train.jsonl   400 trajectories, seed 1 (the defaults of data synth)
#   data/synth/eval.jsonl    100 trajectories, seed 2 (other tasks, other identifiers)
# Deterministic: rerunning gives byte-identical files (the Go tests
# TestCommittedTokenizerIsRebuilt and TestBundledDataIsRegenerated check it).
set -euo pipefail
cd "$(dirname "$0")/.."
make build
go run ./scripts/synth-tokenizer --out assets/synth-tokenizer --qwen assets/qwen3
mkdir -p data/synth
bin/mageguard data synth --out data/synth/train.jsonl --n 400 --seed 1
bin/mageguard data synth --out data/synth/eval.jsonl --n 100 --seed 2
bin/mageguard data validate data/synth/train.jsonl data/synth/eval.jsonl
