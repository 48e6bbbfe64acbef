"""The JAX job's peer watch at the interpreter's exit (``backends.jax_job.PeerWatch``): two
processes join a JAX job on this CPU, start the watch beating every millisecond (its store
calls then nearly always in flight), run a few gradient-sum-like collectives and exit normally.
A store call in flight as Python finalizes aborts its process (SIGABRT: -6 in the record, 134
from a shell; "FATAL: exception not rethrown": CPython gh-87135), unless the watch stops first.

    .venv/bin/python ops/ci/peer_watch_at_exit.py [--rounds=20] [--tree=DIR] [--record=FILE]

``--tree``: the repository whose ``resnet_noBN`` runs (default this one; another commit's
checkout to compare). Appends one JSON line to ``--record``: date, machine, tree, commit, and
the exit codes of every round. Exit status 1 if a process of any round failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_under_load import machine  # noqa: E402

from resnet_noBN.host.cluster import free_ports  # noqa: E402

PROCESS = """
import os, sys
import jax, jax.numpy as jnp, numpy as np
from resnet_noBN.backends import jax_job
jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]), cluster_detection_method="deactivate")
watch = jax_job.PeerWatch(60.0)
watch.interval_s = 0.001
watch.start()
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
spread, whole = (jax.sharding.NamedSharding(mesh, spec) for spec in (jax.P("d"), jax.P()))
total = jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=whole)
mine = jax.device_put(np.ones((1, 64), np.float32), jax.local_devices()[0])
x = jax.make_array_from_single_device_arrays((2, 64), spread, [mine])
for _ in range(20):
    np.asarray(total(x).addressable_data(0))
"""


def one_round(tree: Path) -> list[int]:
    """The two processes' exit codes."""
    env = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu"}
    address = f"127.0.0.1:{free_ports(1)[0]}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, address, str(i)],
            env=env,
            cwd=tree,  # ``-c`` puts the working directory first on sys.path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    return [proc.wait(timeout=300) for proc in procs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tree", type=Path, default=REPO)
    parser.add_argument(
        "--record", type=Path, default=REPO / "ops" / "ci" / "peer_watch_at_exit.jsonl"
    )
    args = parser.parse_args()
    git = ["git", "-C", str(args.tree)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run([*git, "status", "--porcelain", "resnet_noBN"], capture_output=True)
    commit = head.stdout.strip() + (" with changes to resnet_noBN" if changed.stdout else "")
    codes = []
    for r in range(args.rounds):
        codes.append(one_round(args.tree))
        print(f"round {r + 1}/{args.rounds}: exit codes {codes[-1]}", flush=True)
    failed = sum(any(code) for code in codes)
    record = {
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "tree": str(args.tree),
        "commit": commit,
        "rounds": args.rounds,
        "rounds_failed": failed,
        "exit_codes": codes,
    }
    with open(args.record, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(f"{failed} of {args.rounds} rounds had a process that failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
