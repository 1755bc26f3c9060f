# Sourced by scripts/learn.sh and scripts/learn-grid.sh, from the
# repository's root, once they have set OUT: what both share.
#
# Settings (each from its environment variable, else its default):
BIN=bin/mageguard
CFG=configs/synth-learn.yaml
# Seeds of the generated files: none of them is 1 or 2 (data/synth/), 1000
# (the tokenizer's corpus), nor the fresh held-out seeds of docs/learning.md.
TRAIN_SEED=${LEARN_TRAIN_SEED:-11}
EVAL_SEED=${LEARN_EVAL_SEED:-12}
# Train trajectories: many more than a run sees (400 SFT steps of 1 a step
# see 400, plus the memory calls drawn from all), so the tiny model cannot
# memorise which names a trajectory holds; on 400 its memory manager did
# (docs/learning.md).
TRAIN_N=${LEARN_TRAIN_N:-4000}
EVAL_N=${LEARN_EVAL_N:-100}          # held-out trajectories (a smoke run may take a few)
COPY_STEPS=${LEARN_COPY_STEPS:-}    # "" = model pretrain's default (500: 200 fixed-length copies, then 2..20 tokens)
SFT_STEPS=${LEARN_SFT_STEPS:-}      # "" = the config's train.steps (synth-learn.yaml: 400, 3e-3 decaying to 0)
GRPO_TRAJ=${LEARN_GRPO_TRAJECTORIES:-8} # trajectories a GRPO step: an error in ~20 turns, so few groups differ with 2
GRPO_TEMP=${LEARN_GRPO_TEMPERATURE:-1.5} # rollouts hotter than 1: the warm start is so sure that at 1 its G samples agree
#
# Steps:
#   begin NAME VAR DIR  refuses an OUT holding an earlier run (OUT/results.md
#                       or OUT/DIR there; VAR is the variable that sets OUT),
#                       then sends all output to OUT/NAME.log as well
#   make_data           the synth train and held-out files in OUT/data/
#   copy_pretrain       copy pretraining into OUT/copy
#   evaluate NAME MODEL [flags]  the held-out eval of a checkpoint into OUT/eval-NAME
#   last DIR            the newest checkpoint-N in DIR
#   steps N             --set train.steps=N, or nothing when N is ""
#   finish NAME         the time taken, below OUT/results.md, then the table
#
# Jobs: step prints a timed heading; beside and await run jobs beside the
# main line. The pure-Go backend leaves part of a 2-core machine idle, but
# only some pairs finish sooner side by side (two GRPO runs did; copy
# pretraining beside an eval did not: docs/learning.md).
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

begin() {
	local name=$1 var=$2 dir=$3
	if [ -e "$OUT/results.md" ] || [ -e "$OUT/$dir" ]; then
		echo "$name: $OUT holds an earlier run; remove it or set $var" >&2
		exit 1
	fi
	mkdir -p "$OUT/data"
	exec > >(tee -a "$OUT/$name.log") 2>&1
	echo "$name: $(uptime)"
	start=$(date +%s)
}

make_data() {
	step "data: train --n $TRAIN_N --seed $TRAIN_SEED, held-out --seed $EVAL_SEED (data synth defaults otherwise)"
	$BIN data synth --out "$OUT/data/train.jsonl" --n "$TRAIN_N" --seed "$TRAIN_SEED"
	$BIN data synth --out "$OUT/data/eval.jsonl" --n "$EVAL_N" --seed "$EVAL_SEED"
}

copy_pretrain() {
	step "copy pretraining (the ability to copy a name it read, which a pretrained model brings)"
	# shellcheck disable=SC2046
	$BIN model pretrain --config "$CFG" $([ -n "$COPY_STEPS" ] && echo --steps "$COPY_STEPS") --out "$OUT/copy"
}

evaluate() {
	local name=$1 model=$2
	shift 2
	step "eval $name"
	$BIN eval --config "$CFG" --model "$model" --data "$OUT/data/eval.jsonl" --out "$OUT/eval-$name" "$@"
}

last() { ls -d "$1"/checkpoint-[0-9]* | sort -V | tail -1; }

steps() { [ -n "$1" ] && echo "--set train.steps=$1"; true; }

finish() {
	local end
	end=$(date +%s)
	{
		echo
		echo "make $1 took $((end - start)) s; $(uptime)"
	} >> "$OUT/results.md"
	cat "$OUT/results.md"
}
