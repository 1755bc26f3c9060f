#!/usr/bin/env bash
# scripts/gpu-check.sh — mageguard's GPU check, for a one-GPU machine with no network and no Go
# toolchain: only this repository, Python 3 with torch, transformers and the jax-cuda13-pjrt wheel,
# and a mageguard binary built beforehand (MAGEGUARD=path, default bin/mageguard; build it with
# `make build`, cgo and the xla backend included). At most 5 minutes; each part runs under its own
# timeout, so a part that hangs or fails does not stop the next.
#
#   scripts/gpu-check.sh [--out DIR]    on the GPU (output in DIR, default runs/gpu-check)
#   scripts/gpu-check.sh --dry-run      the same steps here, on the go backend with a tiny model,
#                                       scripts/qwen3_ref.py (this repository's PyTorch Qwen3, run
#                                       by /usr/bin/python3) standing in for transformers
#
# Setup: finds the CUDA PJRT plugin inside the wheel (python3), puts the nvidia pip packages' lib
# folders on LD_LIBRARY_PATH, points --xla_gpu_cuda_data_dir at a folder with nvvm/libdevice, and
# prints the plugin's PJRT C API version (go-xla v0.1.4's headers are 0.83).
# (a) the reference Qwen3 cases of model/testdata on the GPU against their expected outputs
#     (tolerance 1e-4), with TF32 as XLA defaults it and with NVIDIA_TF32_OVERRIDE=0;
# (b) a Qwen3-4B-shaped random checkpoint with 2 layers (mageguard model init on
#     configs/default.yaml), scored by mageguard and by transformers' Qwen3ForCausalLM on the same
#     GPU, both in float32 with TF32 off: their logits compared;
# (c) on that model, `mageguard model bench`: a GRPO training step (tokens/s, model FLOP
#     utilisation against 790 TFLOP/s bf16) and decoding at batch 64 (tokens/s), with the peak GPU
#     memory (nvidia-smi, polled every 100 ms) beside mageguard plan's figures for the same shapes.
set -uo pipefail

DRY=0
OUT=runs/gpu-check
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "$0")/.." || exit 2
export MAGEGUARD="${MAGEGUARD:-bin/mageguard}"
if [ ! -x "$MAGEGUARD" ]; then
  echo "gpu-check: no mageguard binary at $MAGEGUARD (build it with make build, or set MAGEGUARD)" >&2
  exit 2
fi
rm -rf "$OUT"
mkdir -p "$OUT"
export OUT DRY
exec > >(tee "$OUT/gpu-check.log") 2>&1
T0=$(date +%s)
echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $( [ $DRY = 1 ] && echo 'DRY RUN (go backend, tiny model)' || echo GPU); mageguard $MAGEGUARD, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# ---------------------------------------------------------------- setup
if [ $DRY = 1 ]; then
  export PY=/usr/bin/python3
  # ops in program order: the order mageguard plan counts in (docs/real-use.md)
  export BACKEND="--set model.backend=go --set model.plugin= --set model.dtype=float32 --set model.ops_sequential=true"
  export TF32_MODES="default"
  export CKPT="$OUT/qwen3-tiny-2l"
  export INIT_SETS="--set model.hidden_size=64 --set model.intermediate_size=192 --set model.num_attention_heads=4 --set model.num_key_value_heads=2 --set model.head_dim=16"
  export BENCH_SETS="--heap --train-rows 4 --train-prefix-tokens 64 --train-row-tokens 128 --train-target-tokens 32 --steps 1 --decode-rows 64 --decode-prefix-tokens 48 --decode-prompt-tokens 64 --decode-new-tokens 8"
  echo "setup: dry run — no plugin, no GPU; python $PY"
else
  export PY="${PYTHON:-python3}"
  export GOMLX_NO_AUTO_INSTALL=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "setup: nvidia-smi failed"
  PLUGIN=$(timeout 30 "$PY" scripts/gpu_check.py plugin) || { echo "setup: FAIL: no CUDA PJRT plugin"; exit 1; }
  NVLIBS=$(timeout 30 "$PY" scripts/gpu_check.py nvidia-libs)
  export LD_LIBRARY_PATH="${NVLIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if CUDA_DIR=$(timeout 30 "$PY" scripts/gpu_check.py cuda-data-dir); then
    export XLA_FLAGS="--xla_gpu_cuda_data_dir=$CUDA_DIR${XLA_FLAGS:+ $XLA_FLAGS}"
  else
    echo "setup: no nvvm/libdevice found: XLA may fail to compile kernels"
  fi
  echo "setup: plugin $PLUGIN"
  echo "setup: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "setup: XLA_FLAGS=${XLA_FLAGS:-}"
  echo "setup: the plugin's PJRT C API version: $(timeout 30 "$PY" scripts/gpu_check.py pjrt-version "$PLUGIN" 2>&1) (go-xla v0.1.4's headers: 0.83)"
  "$PY" -c 'import torch, transformers; print("setup: torch", torch.__version__, "CUDA", torch.version.cuda, "| transformers", transformers.__version__)' || true
  export BACKEND="--set model.backend=xla --set model.plugin=$PLUGIN --set model.xla_preallocate=false"
  export TF32_MODES="default off"
  export CKPT="$OUT/qwen3-4b-2l"
  export INIT_SETS=""
  export BENCH_SETS="--train-rows 8 --train-prefix-tokens 512 --train-row-tokens 1024 --train-target-tokens 256 --steps 3 --decode-rows 64 --decode-prefix-tokens 448 --decode-prompt-tokens 512 --decode-new-tokens 64"
fi

# ---------------------------------------------------------------- the parts
# Each part is a function run in its own bash under timeout; it exits 0 when it passed.

part_a() { # the reference cases against their expected outputs
  local rc=0
  for c in p1_tied_f32 p2_untied_bf16_sharded; do
    for mode in $TF32_MODES; do
      local env=()
      [ "$mode" = off ] && env=(env NVIDIA_TF32_OVERRIDE=0)
      local out="$OUT/a-$c-tf32-$mode.json" t0=$SECONDS
      if ! "${env[@]}" "$MAGEGUARD" model score --config configs/default.yaml $BACKEND --set model.dtype=float32 \
          --model "model/testdata/$c/ckpt" --input "model/testdata/$c/inputs.json" --out "$out" 2> "$out.log"; then
        echo "(a) $c, TF32 $mode: mageguard model score failed:"; tail -5 "$out.log"; rc=1; continue
      fi
      local res st
      res=$("$PY" scripts/gpu_check.py compare "model/testdata/$c/expected.json" "$out"); st=$?
      echo "(a) $c, TF32 $mode ($((SECONDS - t0)) s): $res"
      [ $st = 0 ] || rc=1
    done
  done
  return $rc
}

part_b() { # a Qwen3-4B-shaped checkpoint scored by mageguard and an independent loader
  "$MAGEGUARD" model init --config configs/default.yaml --set model.num_hidden_layers=2 $INIT_SETS --out "$CKPT" --force || return 1
  "$PY" scripts/gpu_check.py inputs --vocab 151936 --out "$OUT/b-inputs.json" || return 1
  env NVIDIA_TF32_OVERRIDE=0 "$MAGEGUARD" model score --config configs/default.yaml $BACKEND --set model.dtype=float32 \
    --model "$CKPT" --input "$OUT/b-inputs.json" --out "$OUT/b-mageguard.json" 2> "$OUT/b-mageguard.log" \
    || { echo "(b) mageguard model score failed:"; tail -5 "$OUT/b-mageguard.log"; return 1; }
  if [ $DRY = 1 ]; then
    /usr/bin/python3 scripts/qwen3_ref.py score --ckpt "$CKPT" --inputs "$OUT/b-inputs.json" --out "$OUT/b-reference.json" > "$OUT/b-reference.log" 2>&1 \
      || { echo "(b) qwen3_ref.py failed:"; tail -5 "$OUT/b-reference.log"; return 1; }
    echo "(b) reference: scripts/qwen3_ref.py (float32, CPU) in place of transformers"
  else
    "$PY" scripts/gpu_check.py hf-score "$CKPT" "$OUT/b-inputs.json" "$OUT/b-reference.json" --device cuda > "$OUT/b-reference.log" 2>&1 \
      || { echo "(b) transformers failed:"; tail -5 "$OUT/b-reference.log"; return 1; }
    echo "(b) reference: transformers Qwen3ForCausalLM (float32, TF32 off, CUDA)"
  fi
  local res st
  res=$("$PY" scripts/gpu_check.py compare "$OUT/b-reference.json" "$OUT/b-mageguard.json" --atol-logits 1e-3 --atol-logprob 1e-3); st=$?
  echo "(b) $(basename "$CKPT") ($(sed -n 's/.*"hidden_size": \([0-9]*\).*/hidden \1/p' "$CKPT/config.json"), 2 layers), mageguard vs the reference: $res"
  return $st
}

part_c() { # a training step and decoding at batch 64, timed, with the peak memory beside the plan's
  [ -f "$CKPT/config.json" ] || { echo "(c) no checkpoint from (b)"; return 1; }
  local poller=""
  if [ $DRY = 0 ]; then
    echo "(c) GPU memory used before: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits --id=0) MiB"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits --id=0 -lms 100 > "$OUT/c-memory.txt" 2>/dev/null &
    poller=$!
  fi
  "$MAGEGUARD" model bench --config configs/default.yaml $BACKEND --model "$CKPT" $BENCH_SETS --json > "$OUT/c-bench.json" 2> "$OUT/c-bench.log"
  local rc=$?
  [ -n "$poller" ] && kill "$poller" 2>/dev/null
  if [ $rc != 0 ]; then echo "(c) mageguard model bench failed:"; tail -8 "$OUT/c-bench.log"; return 1; fi
  echo "(c) mageguard model bench $BENCH_SETS:"
  "$PY" scripts/gpu_check.py bench "$OUT/c-bench.json"
  if [ $DRY = 0 ]; then
    echo "(c) peak GPU memory used (nvidia-smi, whole process: decoding, then the training step): $("$PY" scripts/gpu_check.py peak "$OUT/c-memory.txt") MiB"
  else
    echo "(c) dry run: the Go heap stands in for GPU memory"
  fi
}
export -f part_a part_b part_c

declare -A STATUS
run() { # name, seconds, function
  local t0=$(date +%s)
  echo
  echo "== part $1 (timeout $2 s)"
  timeout -k 5 "$2" bash -c "$3"
  local rc=$?
  case $rc in
    0) STATUS[$1]="PASS" ;;
    124|137) STATUS[$1]="TIMEOUT after $2 s" ;;
    *) STATUS[$1]="FAIL (exit $rc)" ;;
  esac
  echo "== part $1: ${STATUS[$1]} ($(( $(date +%s) - t0 )) s)"
}

if [ $DRY = 1 ]; then
  run a 120 part_a; run b 240 part_b; run c 180 part_c
else
  run a 75 part_a; run b 110 part_b; run c 100 part_c
fi

echo
echo "== summary ($(( $(date +%s) - T0 )) s; outputs in $OUT)"
rc=0
for p in a b c; do
  echo "  ($p) ${STATUS[$p]}"
  [ "${STATUS[$p]}" = PASS ] || rc=1
done
exit $rc
