#!/usr/bin/env bash
# The paper's CIFAR-10 and CIFAR-100 runs (arXiv:1611.04231, Table 1 network, 60,000 steps of
# batch 128), or the other runs of bench/lease_plan.py's RUNS that LEASE_RUNS names (the leaky
# ReLU, the 2016 reader with its leak probe, the claims), on a lent GPU machine with JAX and
# neither TensorFlow nor Keras, held for at most 30 minutes of GPU time (its start included), in
# calls of at most 10 minutes.
#
#   bash bench/gpu_lease.sh prepare DATA_DIR   # here, where PyPI is reachable: fills .carry/
#   bash bench/gpu_lease.sh                    # on the GPU machine, every call, carrying .carry
#
# prepare: downloads the keras, optree and namex wheels for the GPU machine's Python 3.12
# (x86-64) into .carry/wheels, copies the data of the runs of LEASE_RUNS (by default both
# tarballs: cifar-10-jpeg.tar.gz, JPEG q75, 19.4 MB; cifar-100-jpeg.tar.gz, JPEG q90, 41.3 MB) from
# DATA_DIR into .carry/, forgets the last lease's status, and checks that what travels stays
# under 64 MiB. Both leave the tree under 1 MiB of room; a lease of one run
# (LEASE_RUNS=cifar100 on every call, prepare included) carries its tarball alone, and the
# probe then times random records.
#
# A call: bench/lease_plan.py (its docstring has the plan and its knobs). The first call on a
# bare machine unpacks the wheels into a scratch site (runs/lease/site, never carried) and the
# data, starts the plan in a session of its own and returns; every later call waits until the
# plan is done or about 9 minutes have passed, copies status.json, plan.log, each run's
# metrics.jsonl and test_error.png and lease.tar.gz (configs, train logs, the probe's JSON) into
# $OUT and prints a table last. Exit 0: done; 3: still running, call again within 30 s (the
# machine goes back 30 s after a call returns); 1: a run failed or the plan stopped; 2: a carried
# file is missing.
#
# After each call, copy the returned status.json to .carry/status.json: a call that then finds a
# bare machine knows the machine was lost (not a first call), says so, and starts over.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(keras==3.15.1 optree==0.20.0 namex==0.1.0)  # keras's other needs are on the GPU machine

if [ "${1:-}" = prepare ]; then
  data=${2:?usage: [LEASE_RUNS=...] bash bench/gpu_lease.sh prepare DATA_DIR (the folder holding the JPEG tarballs of the runs)}
  list=$("${PYTHON:-python3}" bench/lease_plan.py tarballs) || exit 2  # LEASE_RUNS' data
  mapfile -t tarballs <<< "$list"
  for f in "${tarballs[@]}"; do
    [ -f "$data/$f" ] || { echo "error: no $data/$f: give the folder that holds the runs' JPEG tarballs" >&2; exit 2; }
  done
  mkdir -p .carry
  rm -rf .carry/wheels .carry/status.json .carry/cifar-10-jpeg.tar.gz .carry/cifar-100-jpeg.tar.gz
  "${PIP_PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .carry/wheels "${WHEELS[@]}"
  for f in "${tarballs[@]}"; do cp "$data/$f" .carry/; done
  tree=$(git ls-files -co --exclude-standard -z | xargs -0 -r du -cb | tail -1 | cut -f1)
  carry=$(du -sb .carry | cut -f1)
  echo "travels: tree $((tree / 1024)) KiB + .carry $((carry / 1024)) KiB (limit 65,536 KiB)"
  ls -l .carry .carry/wheels
  if [ $((tree + carry)) -gt $((64 * 1024 * 1024)) ]; then
    echo "error: over 64 MiB: what travels must shrink (never carry an unpacked site)" >&2; exit 2
  fi
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: bash bench/gpu_lease.sh [prepare DATA_DIR]" >&2; exit 2; }
exec "${PYTHON:-python3}" bench/lease_plan.py call
