#!/usr/bin/env bash
# A lent GPU machine (JAX, no TensorFlow, no Keras, no network), held for LEASE_S seconds of GPU
# time (900 by default, its start included), in calls of at most 10 minutes that carry at most
# 64 MiB: the full-width runs of arXiv:1611.04231 on the exact data (ops/lease: the
# plan, the parts, the supervisor, what comes back).
#
#   bash launch/gpu_lease.sh prepare DATA_DIR   # here, with PyPI: .carry/base and .carry/parts
#   bash launch/gpu_lease.sh budget             # here: what each call of the default lease carries
#   bash launch/gpu_lease.sh                    # there, on every call, carrying what the last
#                                               # call's reply names (the first: .carry/base and
#                                               # the first part), within 30 s of its return
#   bash launch/gpu_lease.sh collect DIR...     # here, after the lease: each call's returned
#                                               # files joined and checked into runs/lease/back
#   bash launch/gpu_lease.sh check --data cifar10=DIR ...   # here: the weights on this CPU
#                                               # (PYTHON: the project's Python, with Keras)
#
# prepare: the keras, optree and namex wheels for the GPU machine's Python 3.12 (x86-64) into
# .carry/base/wheels, then the exact data of LEASE_RUNS' data sets from DATA_DIR cut into parts
# (.carry/parts, 52 MiB at most each) with their SHA-256 (.carry/base/parts.json); prints each
# call's size and refuses over 64 MiB. A call's exit: 0 done (give the machine back), 3 call
# again (the reply's last lines say with what), 1 the plan stopped, 2 bad input or no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

case "${1:-call}" in
  prepare)
    data=${2:?usage: [LEASE_RUNS=...] bash launch/gpu_lease.sh prepare DATA_DIR}
    [ -d "$data" ] || { echo "error: $data is not a folder: give the folder that holds the exact data" >&2; exit 2; }
    mkdir -p .carry/base
    rm -rf .carry/base/wheels
    wheels=$("$PY" -c 'from ops.lease.carry import WHEELS; print(" ".join(WHEELS))')
    # shellcheck disable=SC2086
    "${PIP_PYTHON:-$PY}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .carry/base/wheels $wheels
    exec "$PY" -m ops.lease prepare "$data" ;;
  call|budget|collect|check|supervise)
    what=${1:-call}; [ $# -gt 0 ] && shift
    exec "$PY" -m ops.lease "$what" "$@" ;;
  *)
    echo "usage: bash launch/gpu_lease.sh [prepare DATA_DIR | budget | collect DIR... | check --data DATASET=DIR]" >&2
    exit 2 ;;
esac
