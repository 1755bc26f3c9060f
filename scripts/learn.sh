#!/usr/bin/env bash
# make learn (docs/learning.md): proof that the pipeline learns the guard's
# job on the synthetic benchmark. Generates synth train and held-out files,
# evaluates a random model, teaches it to copy (model pretrain), warm-starts
# it with SFT (the perfect teacher at a constant learning rate, then with the
# rate decaying, then on the model's own memories; make learn-quick: one
# shorter decaying stage), runs GRPO from the SFT checkpoint with two seeds,
# evaluates each, trains the judge-only baseline (SFT of a judge that reads
# the raw trajectory), and writes
#   OUT/guard/        the final guard (SFT + GRPO, the first seed), a checkpoint directory
#   OUT/guard.yaml    the configuration to evaluate it with:
#                       mageguard eval --config OUT/guard.yaml --data FILE --out DIR
#   OUT/results.md    the held-out table (F1, ASR, BU, recall by gap)
# OUT is $1, else $LEARN_OUT, else runs/learn. Every step's own output stays
# in OUT (data/, random/, copy/, sft/, sft-decay/, sft-own/, sft-judge-only/,
# grpo-s<seed>/, eval-*/, learn.log).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${LEARN_OUT:-runs/learn}}
BIN=bin/mageguard
CFG=${LEARN_CONFIG:-configs/synth-learn.yaml} # make learn-quick: configs/synth-learn-quick.yaml
# Seeds of the generated files: none of them is 1 or 2 (data/synth/), 1000
# (the tokenizer's corpus), nor the fresh held-out seeds of docs/learning.md.
TRAIN_SEED=${LEARN_TRAIN_SEED:-11}
EVAL_SEED=${LEARN_EVAL_SEED:-12}
# Train trajectories: many more than a run sees (a 500-step SFT of 2 a step
# sees 1,000), so the tiny model cannot memorise which names a trajectory
# holds; on 400 its memory manager did (docs/learning.md).
TRAIN_N=${LEARN_TRAIN_N:-4000}
EVAL_N=${LEARN_EVAL_N:-100}          # held-out trajectories (a smoke run may take a few)
COPY_STEPS=${LEARN_COPY_STEPS:-}    # "" = model pretrain's default (500: 200 fixed-length copies, then 2..20 tokens)
SFT_STEPS=${LEARN_SFT_STEPS:-}      # "" = the config's train.steps (synth-learn.yaml: 400 at a constant 3e-3)
DECAY_STEPS=${LEARN_DECAY_STEPS:-300} # then SFT with the rate decaying from 3e-3 to 0 (cosine); 0 = skip
OWN_STEPS=${LEARN_OWN_STEPS:-100}   # then SFT on the model's own memories (sft.own_memories), 1e-3 decaying; 0 = skip
JO_STEPS=${LEARN_JO_STEPS:-100}     # the judge-only baseline's SFT steps, 5 warm-up (~10 s a step: its prompts hold the trajectory;
JO_DECAY_STEPS=${LEARN_JO_DECAY_STEPS:-50} # fewer than the guard's, for time), then decaying; 0 = skip
GRPO_STEPS=${LEARN_GRPO_STEPS:-10}
GRPO_TRAJ=${LEARN_GRPO_TRAJECTORIES:-8} # trajectories a GRPO step: an error in ~20 turns, so few groups differ with 2
GRPO_TEMP=${LEARN_GRPO_TEMPERATURE:-1.5} # rollouts hotter than 1: the warm start is so sure that at 1 its G samples agree
GRPO_SEEDS=${LEARN_GRPO_SEEDS:-1 2} # one GRPO run per seed; the guard is the first seed's
GRPO_LR=${LEARN_GRPO_LR:-1e-4}      # at a constant rate; 3e-4 for 5 steps cost recall (docs/learning.md)

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
# shellcheck disable=SC2046
$BIN model pretrain --config "$CFG" $([ -n "$COPY_STEPS" ] && echo --steps "$COPY_STEPS") --out "$OUT/copy"

last() { ls -d "$1"/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1; }
sft() { # DIR MODEL STEPS [--set ...]: SFT with the perfect synth teacher into OUT/DIR; prints nothing
	local dir=$1 model=$2 n=$3
	shift 3
	# shellcheck disable=SC2046
	$BIN sft --config "$CFG" --data "$OUT/data/train.jsonl" --model "$model" --teacher synth $(steps "$n") \
		--set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/$dir" "$@"
}
decay=(--set grpo.lr_schedule=cosine --set grpo.warmup_steps=0) # a fresh optimizer, the rate from its value to 0

step "SFT (perfect synth teacher) from the copy-pretrained model"
sft sft "$OUT/copy" "$SFT_STEPS"
sft_ckpt=$(last "$OUT/sft")
if [ "$DECAY_STEPS" -gt 0 ]; then
	step "SFT from $sft_ckpt, the learning rate decaying to 0"
	sft sft-decay "$sft_ckpt" "$DECAY_STEPS" "${decay[@]}"
	sft_ckpt=$(last "$OUT/sft-decay")
fi
if [ "$OWN_STEPS" -gt 0 ]; then
	step "SFT on the model's own memories (sft.own_memories) from $sft_ckpt"
	sft sft-own "$sft_ckpt" "$OWN_STEPS" --set sft.own_memories=true --set grpo.learning_rate=1e-3 \
		--set grpo.lr_schedule=cosine --set grpo.warmup_steps=10
	sft_ckpt=$(last "$OUT/sft-own")
fi
evaluate sft "$sft_ckpt"

grpo_rows=()
grpo_ckpt=
for s in $GRPO_SEEDS; do
	step "GRPO from $sft_ckpt, seed $s"
	# shellcheck disable=SC2046
	$BIN train --config "$CFG" --data "$OUT/data/train.jsonl" --model "$sft_ckpt" $(steps "$GRPO_STEPS") \
		--set grpo.learning_rate="$GRPO_LR" --set grpo.lr_schedule=constant --set grpo.warmup_steps=0 --set train.seed="$s" \
		--set train.trajectories="$GRPO_TRAJ" --set rollout.temperature="$GRPO_TEMP" \
		--set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/grpo-s$s"
	ckpt=$(last "$OUT/grpo-s$s")
	grpo_ckpt=${grpo_ckpt:-$ckpt}
	evaluate "sft-grpo-s$s" "$ckpt"
	grpo_rows+=("$OUT/eval-sft-grpo-s$s")
done

step "the guard: $grpo_ckpt (written before the judge-only baseline runs)"
rm -rf "$OUT/guard"
cp -r "$grpo_ckpt" "$OUT/guard"
$BIN config --config "$CFG" --set model.path="$OUT/guard" --set eval.data="$OUT/data/eval.jsonl" > "$OUT/guard.yaml"

step "judge-only baseline: the same SFT, the judge reading the raw trajectory"
sft sft-judge-only "$OUT/copy" "$JO_STEPS" --set rollout.variant=judge-only --set grpo.warmup_steps=5
jo_ckpt=$(last "$OUT/sft-judge-only")
if [ "$JO_DECAY_STEPS" -gt 0 ]; then
	sft sft-judge-only-decay "$jo_ckpt" "$JO_DECAY_STEPS" --set rollout.variant=judge-only "${decay[@]}"
	jo_ckpt=$(last "$OUT/sft-judge-only-decay")
fi
evaluate judge-only "$jo_ckpt" --variant judge-only

go run ./scripts/learn-table --out "$OUT/results.md" \
	--title "Held-out ($OUT/data/eval.jsonl: data synth --n $EVAL_N --seed $EVAL_SEED), greedy decoding" \
	"random init=$OUT/eval-random" \
	"judge-only (SFT, $JO_STEPS$([ "$JO_DECAY_STEPS" -gt 0 ] && echo " + $JO_DECAY_STEPS") steps)=$OUT/eval-judge-only" \
	"SFT=$OUT/eval-sft" \
	"SFT + GRPO=$(IFS=,; echo "${grpo_rows[*]}")"
end=$(date +%s)
{
	echo
	echo "make learn took $((end - start)) s; $(uptime)"
} >> "$OUT/results.md"
cat "$OUT/results.md"
echo "learn: the guard is $OUT/guard; evaluate it with: $BIN eval --config $OUT/guard.yaml --data FILE --out DIR"
