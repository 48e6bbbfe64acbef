"""The lease's command line (``launch/gpu_lease.sh`` runs it; module docstrings say more):

    python3 -m ops.lease call                  # there: one call of the lease
    python3 -m ops.lease supervise             # there: the detached supervisor
    python3 -m ops.lease prepare DATA_DIR      # here: the data parts into .carry/
    python3 -m ops.lease budget                # here: what each call of the default carries
    python3 -m ops.lease collect DIR... [--into runs/lease/back]   # here: what came back
    python3 -m ops.lease check --data cifar10=DIR [--into ...]     # here: weights on CPU

The lease's settings come from the environment (``LEASE_*``, ``ops.lease.plan.Knobs``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from ops.lease import call, carry, collect, plan, supervisor

ROOT = Path.cwd()  # the tree's root: launch/gpu_lease.sh and the device run from it


def print_calls(calls: list[carry.Call]) -> bool:
    """One line per call; whether all are within the limit."""
    for i, c in enumerate(calls, 1):
        over = "  OVER THE LIMIT" if c.total > carry.CALL_LIMIT else ""
        print(f"call {i}: {c.line()}{over}")
    return all(c.total <= carry.CALL_LIMIT for c in calls)


def prepare(knobs: plan.Knobs, data_dir: str, part_bytes: int) -> int:
    if not Path(data_dir).is_dir():
        return call.error(f"{data_dir} is not a folder: give the folder that holds the exact data")
    try:
        manifest = carry.prepare(ROOT, Path(data_dir), knobs.datasets(), part_bytes)
    except ValueError as e:
        return call.error(str(e))
    for dataset, entry in manifest["datasets"].items():
        print(
            f"{dataset}: {entry['source']} ({entry['kind']}), {entry['label']}: "
            f"parts {entry['parts']}"
        )
    print(f"data parts of at most {part_bytes / carry.MiB:.1f} MiB each; the calls:")
    if not print_calls(carry.prepared_calls(ROOT, manifest)):
        return call.error("a call would carry over 64 MiB: the tree or .carry/base grew")
    return 0


CHECK_FILE = "cpu_check.json"  # beside a run's results: its weights evaluated here


def check(into: Path, data: dict[str, str]) -> int:
    """Each run with joined weights evaluated on this CPU (launch/evaluate.py --weights, by this
    Python: the project's, with Keras), its predictions compared with the GPU's final ones; the
    evaluation's JSON and the comparison written to the run's ``cpu_check.json``."""
    status = json.loads((into / "status.json").read_text())
    failed = 0
    for name, run in status["runs"].items():
        weights = run.get("weights") or {}
        path = into / name / weights.get("file", "-")
        if not path.is_file():
            continue
        if run["dataset"] not in data:
            print(f"{name}: no --data {run['dataset']}=DIR given: not checked")
            continue
        cmd = [
            sys.executable,
            "launch/evaluate.py",
            f"--model_dir={into / name}",
            f"--weights={path}",
            f"--data_path={data[run['dataset']]}",
            f"--compare_answers={into / name / 'answers.jsonl'}",
        ]
        # This tree's package first (an editable install may point at another checkout)
        path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": os.pathsep.join(path)}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        result = supervisor.last_json_line(done.stdout)
        if done.returncode or not result:
            print(
                f"{name}: evaluation failed: {supervisor.failure_line(done.stdout + done.stderr)}"
            )
            failed += 1
            continue
        digest = result.get("weights_sha256")
        check = {
            "command": " ".join(cmd),
            "gpu_test_error": run.get("test_error"),
            "gpu_weights_sha256": weights.get("run_weights_sha256"),
            "weights_file_sha256": weights.get("sha256"),
            "digest_equal": digest == weights.get("run_weights_sha256"),
            "cpu": result,
        }
        (into / name / CHECK_FILE).write_text(json.dumps(check, indent=1) + "\n")
        print(
            f"{name}: on this CPU test error {result['test_error']:.4f} (the GPU's "
            f"{run.get('test_error')}); {result['predictions_differ']:,} of "
            f"{result['test_examples']:,} predictions differ from the GPU's; weights digest "
            f"{digest} {'=' if digest == weights.get('run_weights_sha256') else '!='} the run's "
            f"{weights.get('run_weights_sha256')}"
        )
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m ops.lease", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("call")
    sub.add_parser("supervise")
    p = sub.add_parser("prepare")
    p.add_argument("data_dir")
    sub.add_parser("budget")
    p = sub.add_parser("collect")
    p.add_argument("dirs", nargs="+", type=Path, help="each call's returned files, in order")
    p.add_argument("--into", type=Path, default=Path("runs/lease/back"))
    p = sub.add_parser("check")
    p.add_argument("--into", type=Path, default=Path("runs/lease/back"))
    p.add_argument("--data", action="append", default=[], help="DATASET=DIR of the exact data")
    args = parser.parse_args(argv)
    knobs = plan.Knobs.from_env()
    part_bytes = int(os.environ.get("LEASE_PART_BYTES", carry.PART_BYTES))
    if args.what == "call":
        return call.call(knobs, ROOT)
    if args.what == "supervise":
        supervisor.Supervisor(knobs, ROOT).run()
        return 0
    if args.what == "prepare":
        return prepare(knobs, args.data_dir, part_bytes)
    if args.what == "budget":
        print(
            f"the default lease ({', '.join(knobs.datasets())}), data parts of at most "
            f"{part_bytes / carry.MiB:.0f} MiB"
            + (f"; finished earlier, left out: {list(knobs.finished)}" if knobs.finished else "")
            + ":"
        )
        return 0 if print_calls(carry.default_calls(ROOT, knobs.datasets(), part_bytes)) else 1
    if args.what == "collect":
        missing = [str(d) for d in args.dirs if not d.is_dir()]
        if missing:
            return call.error(f"not folders: {missing}")
        for line in collect.join(args.dirs, args.into):
            print(line)
        return 0
    data = dict(d.split("=", 1) for d in args.data if "=" in d)
    if not (args.into / "status.json").is_file():
        return call.error(f"{args.into} has no status.json: collect the lease's files first")
    return check(args.into, data)


if __name__ == "__main__":
    sys.exit(main())
