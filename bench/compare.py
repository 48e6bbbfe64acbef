"""The benchmark against a peer timed in a subprocess on the same machine, in alternating rounds
(``compare``): the PyTorch twin of the paper's CIFAR network (arXiv:1611.04231, Table 1;
``torch_twin.py``), or this benchmark's training timing on the other Keras backend. Each peer
prints its report and ends with its result as JSON on the last stdout line.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from measure import say
from peaks import COMPUTE_PRECISIONS

BENCH = Path(__file__).resolve().parent


def peer_json(cmd: list[str], prefix: str = "", env: dict | None = None) -> dict:
    """``cmd`` in a subprocess: its report said line by line (after ``prefix``), its last line's
    JSON returned; RuntimeError with its stderr's tail where it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        say(prefix + line)
    return json.loads(lines[-1])


def run_torch_twin(args, threads: int, device: str = "cpu") -> dict:
    """bench/torch_twin.py in a subprocess (its own thread pools) on ``device`` ("cpu" or
    "gpu": CUDA) with the same model, batch, steps, seed and precision; its JSON result."""
    return peer_json(
        [
            sys.executable,
            str(BENCH / "torch_twin.py"),
            f"--device={'cuda' if device == 'gpu' else 'cpu'}",
            f"--model={args.model}",
            f"--batch_size={args.batch_size}",
            f"--steps={args.steps}",
            f"--warmup={max(args.warmup, 1)}",
            f"--threads={threads}",
            f"--seed={args.seed}",
            f"--autocast={COMPUTE_PRECISIONS[args.precision]}",
        ]
    )


def run_other_backend(args, other: str) -> dict:
    """This benchmark's training timing on the ``other`` Keras backend (a subprocess with the
    same model, batch, steps, precision and data; nothing else measured): its JSON result."""
    cmd = [
        sys.executable,
        str(BENCH / "throughput.py"),
        f"--model={args.model}",
        f"--batch_size={args.batch_size}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--precision={args.precision}",
        f"--data_format={args.data_format}",
        f"--seed={args.seed}",
        "--eval_batches=0",
        "--input_batches=0",
        "--no-measure_matmul",
        *([f"--data_path={args.data_path}"] if args.data_path else []),
    ]
    return peer_json(cmd, f"[{other}] ", dict(os.environ, KERAS_BACKEND=other))


def compare(args, label: str, peer: str, run_peer, times: list[float], time_window) -> dict:
    """Ours against ``peer`` over --compare_rounds rounds, each a window of ours (the first: the
    ``times`` already taken; then ``time_window()``) and a fresh ``run_peer()`` (a subprocess's
    JSON result): the medians of both, their ratio, the rounds and the peer's last result."""
    ours, rounds = list(times), []
    for r in range(args.compare_rounds):
        window = time_window() if r else times
        ours += window if r else []
        result = run_peer()
        rounds.append(
            {
                "ours_median_s": round(statistics.median(window), 5),
                "peer_median_s": result["train_s_per_step"]["median"],
            }
        )
        if args.compare_rounds > 1:
            say(
                f"round {r + 1}: {label} {rounds[-1]['ours_median_s']:.4f} s/step, {peer} "
                f"{rounds[-1]['peer_median_s']:.4f} s/step"
            )
    our_median = statistics.median(ours)
    peer_median = statistics.median(r["peer_median_s"] for r in rounds)
    say(
        f"{label} {our_median:.4f} s/step vs {peer} {peer_median:.4f} s/step: {label} / {peer} = "
        f"{our_median / peer_median:.3f}"
    )
    return {
        "rounds": rounds,
        "ours_s_per_step": round(our_median, 5),
        "peer_s_per_step": round(peer_median, 5),
        "ours_over_peer": round(our_median / peer_median, 4),
        "peer_result": result,
    }


def compare_with_torch(args, eng, threads: int, times, time_window, trainable_params) -> dict:
    """This backend against the PyTorch twin on the same device (``compare``)."""
    label = eng.version.split()[0]
    if eng.input == "pipeline":
        say("(ours with its input pipeline, torch on one batch: --synthetic for compute only)")
    result = compare(
        args,
        label,
        "torch",
        lambda: run_torch_twin(args, threads, eng.device),
        times,
        time_window,
    )
    twin = result.pop("peer_result")
    return {
        "torch": twin,
        "compare": {
            **result,
            "ours": eng.name,
            "ours_input": eng.input,
            "torch_input": "synthetic (one cached batch)",
            "torch_trainable_params": twin["trainable_params"],
            "same_param_count": twin["trainable_params"] == trainable_params,
        },
    }


def compare_with_other_backend(args, eng, times, time_window) -> dict:
    """This backend against the other one (TensorFlow against JAX), same machine, same run."""
    other = "jax" if eng.name == "tensorflow" else "tensorflow"
    label, peer = eng.version.split()[0], "JAX" if other == "jax" else "TF"
    result = compare(args, label, peer, lambda: run_other_backend(args, other), times, time_window)
    peer_result = result.pop("peer_result")
    return {
        "backend_compare": {
            **result,
            "ours": eng.name,
            "peer": other,
            "peer_version": peer_result["framework_version"],
            "jax_over_tensorflow": round(
                result["ours_over_peer"] if eng.name == "jax" else 1 / result["ours_over_peer"],
                4,
            ),
        }
    }
