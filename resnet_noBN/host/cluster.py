"""The cluster of a multi-process job, as the schedulers describe it, read without TensorFlow or
JAX: ``TF_CONFIG`` (Kubernetes, Docker compose and ``launch/local_cluster.py`` set it) checked
for what a strategy needs, and this task's port. Both backends read it: ``distribute`` for
``tf.distribute``'s resolvers, ``jax_job`` for ``jax.distributed``'s coordinator and process
ids. A bad cluster is one line (:class:`ClusterError`) before anything runs, not a hang.
"""

from __future__ import annotations

import json
import os
import socket


class ClusterError(ValueError):
    """A cluster that cannot work; the message is one line naming the fix."""


def parse_tf_config(strategy: str) -> dict:
    """``TF_CONFIG`` as a dict, checked for what ``strategy`` needs (ClusterError otherwise)."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise ClusterError(
            f"--strategy={strategy} needs TF_CONFIG (the cluster and this task); "
            "set it, use --cluster_resolver=slurm under SLURM, or start a local "
            "job with launch/local_cluster.py"
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ClusterError(f"TF_CONFIG is not valid JSON ({e.msg} at character {e.pos})") from None
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ClusterError(
            'TF_CONFIG has no "cluster" entry: add {"cluster": {"worker": ["host:port", ...]}}'
        )
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ClusterError(
            'TF_CONFIG has no "task" entry with "type" and "index": add '
            '{"task": {"type": "worker", "index": 0}}'
        )
    kind, index = task["type"], task["index"]
    if kind not in cluster:
        raise ClusterError(
            f'TF_CONFIG task type "{kind}" is not in its cluster '
            f"({', '.join(cluster)}): add it or fix the task type"
        )
    if not isinstance(index, int) or not 0 <= index < len(cluster[kind]):
        raise ClusterError(
            f"TF_CONFIG task index {index} is out of range: the cluster has "
            f'{len(cluster[kind])} "{kind}" task(s)'
        )
    if strategy == "parameter_server":
        missing = [k for k in ("chief", "worker", "ps") if not cluster.get(k)]
        if missing:
            raise ClusterError(
                f"--strategy=parameter_server needs chief, worker and ps tasks in "
                f"TF_CONFIG's cluster; it lacks {', '.join(missing)}"
            )
    elif not (cluster.get("worker") or cluster.get("chief")):
        raise ClusterError('TF_CONFIG\'s cluster has no "worker" task: list the workers')
    return config


def check_port_free(address: str, who: str) -> None:
    """ClusterError if this task's own ``host:port`` cannot be bound (another process has it)."""
    port = int(address.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET6 if address.startswith("[") else socket.AF_INET) as s:
        try:
            s.bind(("", port))
        except OSError:
            raise ClusterError(
                f"port {port} of {who} ({address}) is in use: stop what holds it "
                "or give this task another port in TF_CONFIG"
            ) from None


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago (a local job's)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
