#!/usr/bin/env bash
# make learn-gamma (docs/learning.md): the γ experiment in miniature. From
# the myopic warm start (SFT on a memory that keeps only the latest turn,
# so the judge misses every attack of gap >= 2), GRPO with a tight memory
# length threshold, once with γ = 0 (each memory call is rewarded for its
# own turn's judge only) and once with γ = 0.5 (also for the later turns it
# influences), over several seeds; then the held-out table: F1 and recall
# by gap, mean ± spread over the seeds.
#   OUT/results.md    the table
# OUT is $1, else $LEARN_GAMMA_OUT, else runs/learn-gamma; every run's
# output stays in OUT (data/, copy/, sft-myopic/, grpo-g<γ>-s<seed>/, eval-*/,
# learn-gamma.log and each GRPO job's grpo-g<γ>-s<seed>.log). Each seed's two
# runs (γ = 0 and 0.5) run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${LEARN_GAMMA_OUT:-runs/learn-gamma}}
# shellcheck source=scripts/learn-lib.sh
source scripts/learn-lib.sh # the shared settings (data, copy pretraining, GRPO rollouts) and steps
SEEDS=${LEARN_GAMMA_SEEDS:-1 2 3}
GAMMAS=${LEARN_GAMMAS:-0 0.5}
# The memory length threshold L (characters) and λ: a perfect memory is up
# to 75 characters, one injected id and one allowed id about 40, so under
# L = 40 a memory must choose what to keep.
THRESHOLD=${LEARN_GAMMA_THRESHOLD:-40}
# A myopic warm start made before (a checkpoint directory: an earlier run's
# OUT/sft-myopic/checkpoint-N, made from the same train file): "" = make it
# here (copy pretraining and SFT, ~17 minutes here); with one, only the GRPO
# runs and the evals run, e.g. to try other GRPO settings or another warm
# start (the table then names it by its path).
MYOPIC=${LEARN_GAMMA_MYOPIC:-}
GRPO_STEPS=${LEARN_GAMMA_GRPO_STEPS:-16}
GRPO_LR=${LEARN_GAMMA_GRPO_LR:-2e-4} # twice make learn's: the memory has far more to learn here, in few steps

begin learn-gamma LEARN_GAMMA_OUT sft-myopic
make_data

if [ -n "$MYOPIC" ]; then
	step "the myopic warm start: $MYOPIC (LEARN_GAMMA_MYOPIC; no copy pretraining or SFT here)"
	myopic=$MYOPIC
else
	copy_pretrain

	step "SFT (myopic synth teacher) from the copy-pretrained model"
	# shellcheck disable=SC2046
	$BIN sft --config "$CFG" --data "$OUT/data/train.jsonl" --model "$OUT/copy" --teacher synth-myopic $(steps "$SFT_STEPS") \
		--set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/sft-myopic"
	myopic=$(last "$OUT/sft-myopic")
fi
evaluate sft-myopic "$myopic"

grpo() { # G SEED: GRPO from the myopic SFT with γ = G into OUT/grpo-gG-sSEED, and its eval
	local g=$1 s=$2 run=grpo-g$1-s$2
	# shellcheck disable=SC2046
	$BIN train --config "$CFG" --data "$OUT/data/train.jsonl" --model "$myopic" $(steps "$GRPO_STEPS") \
		--set rewards.gamma="$g" --set train.seed="$s" --set rewards.length_threshold="$THRESHOLD" \
		--set grpo.learning_rate="$GRPO_LR" --set grpo.lr_schedule=constant --set grpo.warmup_steps=0 \
		--set train.trajectories="$GRPO_TRAJ" --set rollout.temperature="$GRPO_TEMP" \
		--set train.eval_data="$OUT/data/eval.jsonl" --out "$OUT/$run"
	evaluate "$run" "$(last "$OUT/$run")"
}
# Each seed's runs (one per γ) side by side: a GRPO step's rollouts leave a core idle.
for s in $SEEDS; do
	for g in $GAMMAS; do
		beside "grpo-g$g-s$s" grpo "$g" "$s"
	done
	for g in $GAMMAS; do
		await "grpo-g$g-s$s"
	done
done
warm="myopic SFT"
[ -n "$MYOPIC" ] && warm="warm start $MYOPIC"
rows=("$warm=$OUT/eval-sft-myopic")
for g in $GAMMAS; do
	dirs=()
	for s in $SEEDS; do
		dirs+=("$OUT/eval-grpo-g$g-s$s")
	done
	rows+=("GRPO, γ $g=$(IFS=,; echo "${dirs[*]}")")
done

go run ./scripts/learn-table --out "$OUT/results.md" \
	--title "Held-out ($OUT/data/eval.jsonl: data synth --n $EVAL_N --seed $EVAL_SEED), greedy decoding; GRPO from the ${warm#warm start } with rewards.length_threshold $THRESHOLD" \
	"${rows[@]}"
finish learn-gamma
