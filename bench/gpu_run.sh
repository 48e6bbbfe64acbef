#!/usr/bin/env bash
# The paper's CIFAR-10 run (arXiv:1611.04231, Table 1 network: 60,000 steps of batch 128,
# whole-test evaluation every 2,000 steps) on a GPU machine with JAX and no TensorFlow, from this
# source tree, in commands of at most --budget seconds each (default 570: under a 10-minute limit).
#
#   bench/gpu_run.sh            # from the repository root; rerun it until it exits 0
#
# Each call:
#   1. Keras: where `import keras` fails, the wheels in $CARRY/wheels (keras, optree, namex:
#      about 3 MB) are unpacked into $CARRY/site and put on PYTHONPATH (nothing is installed).
#   2. The data: $CARRY/cifar-10-jpeg.tar.gz (the JPEG copy of CIFAR-10, 19 MB: train/ and
#      test/, a folder per class) unpacked once into $WORK.
#   3. Once per machine (while $WORK/bench.json is absent): bench/throughput.py, the JAX step in
#      mixed_bfloat16 on the paper model against the PyTorch twin on the same GPU, same run.
#   4. launch/cifar.py on the JAX backend with --time_budget_s set to what is left of the call's
#      budget (less a margin for the last evaluation and the copy): at the budget it writes a
#      checkpoint and exits 3, and the next call resumes from $WORK/model (while the machine keeps
#      $WORK, an ignored folder of the checkout); at 60,000 steps it exits 0.
# After every call $OUT holds the benchmark's JSON and log, the run's config.json, metrics.jsonl,
# train.jsonl, test_error.png and the logs of both steps.
#
# Environment: CARRY (default .carry), WORK (default runs/gpu_run), OUT (default: $OUT, else
# $WORK/out), BUDGET_S (570), PRECISION (the training's: float32, the paper's, run as TF32 by
# XLA's default on Ampere and newer GPUs; or mixed_bfloat16), TRAIN_FLAGS (more launch/cifar.py
# flags, e.g. "--train_steps=2000" for a short run), BENCH_FLAGS (more bench/throughput.py flags).
#
# Getting the wheels, on a machine with pip and internet (for the GPU machine's Python 3.12):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 -d .carry/wheels keras==3.15.1 optree==0.20.0 namex==0.1.0
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
CARRY=${CARRY:-.carry}
WORK=${WORK:-runs/gpu_run}
OUT=${OUT:-$WORK/out}
BUDGET_S=${BUDGET_S:-570}
PRECISION=${PRECISION:-float32}
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
mkdir -p "$WORK" "$OUT"
python=${PYTHON:-python3}

if ! "$python" -c "import keras" 2>/dev/null; then
  wheels=("$CARRY"/wheels/*.whl)
  if [ ! -e "${wheels[0]}" ]; then
    echo "error: keras is not importable and $CARRY/wheels has no wheels; download keras, optree and namex there (see the top of $0)" >&2
    exit 2
  fi
  "$python" -m pip install --quiet --no-index --no-deps --target "$CARRY/site" "${wheels[@]}"
  export PYTHONPATH="$PWD/$CARRY/site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$python" -c "import jax, keras; print(f'JAX {jax.__version__} on {jax.devices()}, Keras {keras.__version__}')"

data=$WORK/cifar-10-jpeg
if [ ! -d "$data/test" ]; then
  if [ ! -f "$CARRY/cifar-10-jpeg.tar.gz" ]; then
    echo "error: no $CARRY/cifar-10-jpeg.tar.gz (the JPEG copy of CIFAR-10: train/ and test/, a folder per class); put it there" >&2
    exit 2
  fi
  tar xzf "$CARRY/cifar-10-jpeg.tar.gz" -C "$WORK"
fi

if [ ! -f "$WORK/bench.json" ]; then
  compare=()
  if "$python" -c "import torch" 2>/dev/null; then compare=(--compare_torch --compare_rounds=2); fi
  # shellcheck disable=SC2086  # BENCH_FLAGS: more flags, split on spaces
  "$python" bench/throughput.py --precision=mixed_bfloat16 --steps=50 --warmup=5 \
    --chunk_steps=200 --eval_batches=10 --input_batches=200 --data_path="$data" \
    "${compare[@]}" ${BENCH_FLAGS:-} --output="$WORK/bench.json.tmp" 2>&1 | tee "$OUT/bench.log"
  mv "$WORK/bench.json.tmp" "$WORK/bench.json"
fi
cp "$WORK/bench.json" "$OUT/"

left=$((BUDGET_S - ($(date +%s) - start) - 60))
if [ "$left" -lt 60 ]; then
  echo "the benchmark used this call's budget; rerun to start the training"
  exit 3
fi
status=0
# shellcheck disable=SC2086  # TRAIN_FLAGS: more flags, split on spaces
"$python" launch/cifar.py --dataset=cifar10 --data_path="$data" --precision="$PRECISION" \
  --model_dir="$WORK/model" --time_budget_s="$left" ${TRAIN_FLAGS:-} 2>&1 |
  tee -a "$OUT/train.log" || status=${PIPESTATUS[0]}
for f in config.json metrics.jsonl train.jsonl test_error.png; do
  if [ -f "$WORK/model/$f" ]; then cp "$WORK/model/$f" "$OUT/"; fi
done
if [ "$status" = 3 ]; then echo "stopped at the time budget with a checkpoint; rerun $0 to resume"; fi
exit "$status"
