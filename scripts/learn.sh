#!/usr/bin/env bash
# make learn (docs/learning.md): proof that the pipeline learns the guard's
# job on the synthetic benchmark. Generates synth train and held-out files,
# evaluates a random model, teaches it to copy (model pretrain), warm-starts
# it with SFT (and, as the judge-only baseline, the same SFT of a judge that
# reads the raw trajectory), runs GRPO from the SFT checkpoint, evaluates
# each, and writes
#   OUT/guard/        the final guard (SFT + GRPO), a checkpoint directory
#   OUT/guard.yaml    the configuration to evaluate it with:
#                       mageguard eval --config OUT/guard.yaml --data FILE --out DIR
#   OUT/results.md    the held-out table (F1, ASR, BU, recall by gap)
# OUT is $1, else $LEARN_OUT, else runs/learn. Every step's own output stays
# in OUT (data/, random/, copy/, sft/, sft-own/, sft-judge-only/, grpo/, eval-*/, learn.log).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${LEARN_OUT:-runs/learn}}
BIN=bin/mageguard
CFG=configs/synth-learn.yaml
# Seeds of the generated files: none of them is 1 or 2 (data/synth/), 1000
# (the tokenizer's corpus), nor the fresh held-out seeds of docs/learning.md.
TRAIN_SEED=${LEARN_TRAIN_SEED:-11}
EVAL_SEED=${LEARN_EVAL_SEED:-12}
# Train trajectories: many more than a run sees (a 500-step SFT of 2 a step
# sees 1,000), so the tiny model cannot memorise which names a trajectory
# holds; on 400 its memory manager did (docs/learning.md).
TRAIN_N=${LEARN_TRAIN_N:-4000}
EVAL_N=${LEARN_EVAL_N:-100}          # held-out trajectories (a smoke run may take a few)
COPY_STEPS=${LEARN_COPY_STEPS:-300}  # steps of the copying task (model pretrain)
SFT_STEPS=${LEARN_SFT_STEPS:-}      # "" = configs/synth-learn.yaml's train.steps
OWN_STEPS=${LEARN_OWN_STEPS:-100}   # then SFT on the model's own memories (sft.own_memories); 0 = skip
GRPO_STEPS=${LEARN_GRPO_STEPS:-20}
GRPO_LR=${LEARN_GRPO_LR:-1e-4}      # GRPO's steps are smaller than the warm start's (3e-3)

if [ -e "$OUT/results.md" ] || [ -e "$OUT/sft" ]; then
	echo "learn: $OUT holds an earlier run; remove it or set LEARN_OUT" >&2
	exit 1
fi
mkdir -p "$OUT/data"
exec > >(tee -a "$OUT/learn.log") 2>&1
step() { echo; echo "== $(date +%T) $*"; }
steps() { [ -n "$1" ] && echo "--set train.steps=$1"; true; }
echo "learn: $(uptime)"
start=$(date +%s)

step "data: train --n $TRAIN_N --seed $TRAIN_SEED, held-out --seed $EVAL_SEED (data synth defaults otherwise)"
$BIN data synth --out "$OUT/data/train.jsonl" --n "$TRAIN_N" --seed "$TRAIN_SEED"
$BIN data synth --out "$OUT/data/eval.jsonl" --n "$EVAL_N" --seed "$EVAL_SEED"

evaluate() { # NAME MODEL [extra flags]: the held-out eval of a checkpoint into OUT/eval-NAME
	local name=$1 model=$2
	shift 2
	step "eval $name"
	$BIN eval --config "$CFG" --model "$model" --data "$OUT/data/eval.jsonl" --out "$OUT/eval-$name" "$@"
}

step "random init"
$BIN model init --config "$CFG" --out "$OUT/random"
evaluate random "$OUT/random"

step "copy pretraining (the ability to copy a name it read, which a pretrained model brings)"
$BIN model pretrain --config "$CFG" --steps "$COPY_STEPS" --out "$OUT/copy"

step "SFT (perfect synth teacher) from the copy-pretrained model"
# shellcheck disable=SC2046
$BIN sft --config "$CFG" --data "$OUT/data/train.jsonl" --model "$OUT/copy" --teacher synth $(steps "$SFT_STEPS") \
	--set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/sft"
sft_ckpt=$(ls -d "$OUT"/sft/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)
if [ "$OWN_STEPS" -gt 0 ]; then
	step "SFT on the model's own memories (sft.own_memories) from $sft_ckpt"
	$BIN sft --config "$CFG" --data "$OUT/data/train.jsonl" --model "$sft_ckpt" --teacher synth --set train.steps="$OWN_STEPS" \
		--set sft.own_memories=true --set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/sft-own"
	sft_ckpt=$(ls -d "$OUT"/sft-own/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)
fi
evaluate sft "$sft_ckpt"

step "GRPO from $sft_ckpt"
# shellcheck disable=SC2046
$BIN train --config "$CFG" --data "$OUT/data/train.jsonl" --model "$sft_ckpt" $(steps "$GRPO_STEPS") \
	--set grpo.learning_rate="$GRPO_LR" --set grpo.warmup_steps=0 \
	--set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/grpo"
grpo_ckpt=$(ls -d "$OUT"/grpo/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)
evaluate sft-grpo "$grpo_ckpt"

step "judge-only baseline: the same SFT, the judge reading the raw trajectory"
# shellcheck disable=SC2046
$BIN sft --config "$CFG" --data "$OUT/data/train.jsonl" --model "$OUT/copy" --teacher synth $(steps "$SFT_STEPS") \
	--set rollout.variant=judge-only --set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/sft-judge-only"
jo_ckpt=$(ls -d "$OUT"/sft-judge-only/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)
evaluate judge-only "$jo_ckpt" --variant judge-only

step "the guard: $grpo_ckpt"
rm -rf "$OUT/guard"
cp -r "$grpo_ckpt" "$OUT/guard"
$BIN config --config "$CFG" --set model.path="$OUT/guard" --set eval.data="$OUT/data/eval.jsonl" > "$OUT/guard.yaml"

go run ./scripts/learn-table --out "$OUT/results.md" \
	--title "Held-out ($OUT/data/eval.jsonl: data synth --n $EVAL_N --seed $EVAL_SEED), greedy decoding" \
	"random init=$OUT/eval-random" \
	"judge-only (SFT)=$OUT/eval-judge-only" \
	"SFT=$OUT/eval-sft" \
	"SFT + GRPO=$OUT/eval-sft-grpo"
end=$(date +%s)
{
	echo
	echo "make learn took $((end - start)) s; $(uptime)"
} >> "$OUT/results.md"
cat "$OUT/results.md"
echo "learn: the guard is $OUT/guard; evaluate it with: $BIN eval --config $OUT/guard.yaml --data FILE --out DIR"
