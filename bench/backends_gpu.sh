#!/usr/bin/env bash
# The user's launcher on a lent GPU, under each Keras backend named, one after the other: the
# paper's CIFAR-100 run (arXiv:1611.04231, Table 1's network, Section 4's recipe) for STEPS steps
# (300), mixed_bfloat16, seed 0, on the exact data a lease restored there. Each run's train.jsonl
# holds images/s every 100 steps; the record at the last step times the steps after the compile.
#
#   bash bench/backends_gpu.sh torch jax     # there, after a lease's call restored CIFAR-100
#
# Runs in a lease's tree: the carried wheels' site (runs/lease/site: Keras) and the restored data
# (runs/lease/data/cifar100). Writes $OUT/<backend>.log and $OUT/<backend>.jsonl (train.jsonl).
set -uo pipefail
cd "$(dirname "$0")/.."
site=runs/lease/site data=runs/lease/data/cifar100/cifar-100-binary
[ -d "$site" ] && [ -d "$data" ] || {
  echo "error: $site or $data is missing: run it on the machine a lease's call restored CIFAR-100 on" >&2
  exit 2
}
out=${OUT:-/tmp/backends_gpu}
mkdir -p "$out"
export PYTHONPATH="$site:." PYTHONUNBUFFERED=1
for backend in "$@"; do
  dir=/tmp/backends_gpu_run/$backend
  rm -rf "$dir"
  echo "== $backend: $(date -u +%T)"
  KERAS_BACKEND=$backend timeout "${RUN_S:-240}" python3 launch/cifar.py --experiment=cifar100_paper \
    --seed=0 --precision=mixed_bfloat16 --train_steps="${STEPS:-300}" --log_every=100 \
    --log_every_s=0 --data_path="$data" --model_dir="$dir" >"$out/$backend.log" 2>&1
  echo "rc $? at $(date -u +%T)"
  grep -v "^step " "$out/$backend.log" | tail -4
  cp "$dir/train.jsonl" "$out/$backend.jsonl" 2>/dev/null && tail -1 "$out/$backend.jsonl"
done
