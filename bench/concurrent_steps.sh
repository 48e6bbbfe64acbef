#!/usr/bin/env bash
# Our training step alone and as K processes at once on the one GPU: do several runs side by side
# beat one run's images/s? (The GPU lease's question: two 60,000-step runs of arXiv:1611.04231's
# Table 1 network in one 15-minute lease.) Each process is bench/throughput.py on random records,
# mixed_bfloat16, one call of 1,500 steps; the sum of their images/s is the GPU's.
#
#   bash bench/concurrent_steps.sh OUT_DIR [K ...]     # K: processes at once (default: 1 2 3)
#
# On a lent GPU machine (no Keras there) it installs the lease's carried wheels
# (.carry/base/wheels, from `bash launch/gpu_lease.sh prepare`) into /tmp/site first; there:
#   run(command="bash bench/concurrent_steps.sh $OUT", carry=[".carry/base"], timeout_s=175)
# Writes OUT_DIR/k<K>-<i>.json (throughput.py's JSON; logs in $TMPDIR/concurrent_steps) and
# prints one line per K. BENCH_FLAGS: more throughput.py flags (a CPU's try: --model=small
# --chunk_steps=3); BENCH_TIMEOUT_S: each process's limit (80 s, a GPU's).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash bench/concurrent_steps.sh OUT_DIR [K ...]}; shift
counts=("$@"); [ ${#counts[@]} -eq 0 ] && counts=(1 2 3)
logs=${TMPDIR:-/tmp}/concurrent_steps  # beside, not in OUT_DIR: a lease brings back 8 files
mkdir -p "$out" "$logs"
PY=${PYTHON:-python3}
if ! "$PY" -c "import keras" 2>/dev/null && compgen -G ".carry/base/wheels/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .carry/base/wheels/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" KERAS_BACKEND=${KERAS_BACKEND:-jax}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false  # several processes share the GPU
one() {  # one process: $1 the name of its JSON
  timeout "${BENCH_TIMEOUT_S:-80}" "$PY" bench/throughput.py --precision=mixed_bfloat16 --input_batches=0 \
    --no-measure_matmul --steps=5 --warmup=3 --chunk_steps=1500 --eval_batches=1 \
    --output="$out/$1.json" ${BENCH_FLAGS:-} >"$logs/$1.log" 2>&1
}
for k in "${counts[@]}"; do
  for i in $(seq 1 "$k"); do one "k$k-$i" & done
  wait
  "$PY" - "$out" "$k" "$logs" <<'PY'
import json, sys
out, k, logs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rates = []
for i in range(1, k + 1):
    try:
        rates.append(json.load(open(f"{out}/k{k}-{i}.json"))["chunk_images_per_s"])
    except (OSError, KeyError, ValueError) as e:
        print(f"{k} at once: process {i} gave no figure ({e}); see {logs}/k{k}-{i}.log")
        raise SystemExit(1)
print(f"{k} at once: {' + '.join(f'{r:,.0f}' for r in rates)} = {sum(rates):,.0f} images/s")
PY
done
