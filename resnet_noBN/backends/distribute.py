"""The ``tf.distribute`` strategy the training loop runs under, and the cluster it spans.

=================  ==============================================================================
``default``        one device (TF's default strategy).
``mirrored``       all local GPUs of one machine, synchronous (``MirroredStrategy``).
``multi_worker``   synchronous data parallelism over machines (``MultiWorkerMirroredStrategy``):
                   the stand-in for the paper's 6 machines x 8 GPUs. ``--batch_size`` is the
                   GLOBAL batch, split over all replicas of all workers.
``parameter_server``  asynchronous: each worker applies its own updates to variables held by
                   parameter servers (``ParameterServerStrategy`` + ``ClusterCoordinator``), as
                   the paper's 6 machines did. The chief coordinates; ``--batch_size`` is each
                   update's batch, one worker's. Workers and parameter servers only serve.
=================  ==============================================================================

The cluster comes from ``TF_CONFIG`` (``--cluster_resolver=tf_config``, as Kubernetes, Docker
compose and ``launch/local_cluster.py`` set it) or from SLURM's variables
(``--cluster_resolver=slurm``). It is validated (``host.cluster``) before any TensorFlow op
runs: collective ops must be configured first, and a bad cluster gets a one-line error, not a
hang.
``tensorflow_backend.TensorFlowBackend.start`` does all that a launcher needs before it builds
anything: threads, the strategy, the seed.
"""

from __future__ import annotations

import os
import signal

import tensorflow as tf

from resnet_noBN.configs.choices import RESOLVERS, STRATEGIES
from resnet_noBN.host import peers, stops
from resnet_noBN.host.cluster import ClusterError, check_port_free, parse_tf_config


class _CpuSlurmClusterResolver(tf.distribute.cluster_resolver.SlurmClusterResolver):
    """SLURM on nodes without GPUs (tensorflow/tensorflow#56894).

    TF's resolver calls nvidia-smi when it is not told the GPUs, and divides by zero in
    ``cluster_spec`` when told there are none. Telling it one pseudo-GPU per task, without
    setting CUDA_VISIBLE_DEVICES, and reporting no accelerators gives the right CPU cluster.
    """

    def __init__(self, tasks_per_node: int):
        super().__init__(gpus_per_node=tasks_per_node, gpus_per_task=1, auto_set_gpu=False)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}


def slurm_resolver() -> tf.distribute.cluster_resolver.SlurmClusterResolver:
    """The cluster of this SLURM step, one worker per task."""
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        expand_tasks_per_node,
    )

    if "SLURM_PROCID" not in os.environ:
        raise ClusterError(
            "--cluster_resolver=slurm outside a SLURM step (no SLURM_PROCID): "
            "launch with srun, or use TF_CONFIG"
        )
    if os.environ.get("CUDA_VISIBLE_DEVICES", "") == "" and not _has_nvidia_smi():
        tasks = expand_tasks_per_node(os.environ.get("SLURM_STEP_TASKS_PER_NODE", "1"))
        return _CpuSlurmClusterResolver(max(tasks))
    return tf.distribute.cluster_resolver.SlurmClusterResolver()


def _has_nvidia_smi() -> bool:
    import shutil

    return shutil.which("nvidia-smi") is not None


def make_strategy(name: str, resolver: str = "tf_config", peer_timeout_s: float = 60.0):
    """(the strategy called ``name``, its cluster resolver or None); call it before any other
    TensorFlow op. A task of a multi-worker or parameter-server job ends within about
    ``peer_timeout_s`` of another task dying or hanging (``host.peers``).

    Under ``parameter_server`` a worker or ps task never returns from here: it serves the
    chief until the job is stopped.
    """
    if name not in STRATEGIES:
        raise ClusterError(f"--strategy={name} is unknown; choose one of {', '.join(STRATEGIES)}")
    if resolver not in RESOLVERS:
        raise ClusterError(
            f"--cluster_resolver={resolver} is unknown; choose one of {', '.join(RESOLVERS)}"
        )
    if name == "default":
        return tf.distribute.get_strategy(), None
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(), None
    if resolver == "slurm":
        cluster_resolver = slurm_resolver()
    else:
        config = parse_tf_config(name)
        task = config["task"]
        check_port_free(
            config["cluster"][task["type"]][task["index"]], f"{task['type']} {task['index']}"
        )
        cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if name == "multi_worker":
        peers.configure_coordination(cluster_resolver, peer_timeout_s)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=cluster_resolver)
        peers.watch(cluster_resolver, peer_timeout_s)
        return strategy, cluster_resolver
    if cluster_resolver.task_type in ("worker", "ps"):
        _serve(cluster_resolver, peer_timeout_s)
    strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
    peers.watch(cluster_resolver, peer_timeout_s)
    return strategy, cluster_resolver


def _serve(cluster_resolver, peer_timeout_s: float) -> None:
    """Run this worker's or parameter server's TF server until the job is stopped, or until
    the chief, once it answered, has not answered for ``peer_timeout_s`` (``host.peers``:
    one line, exit 5). A stop (SIGTERM, SIGINT) ends the task at once in one line, exit 3
    (``host.stops``): it waits in Python, not in ``server.join()``, a wait in C++ that no
    signal handler interrupts (there a finished job's launcher waited its whole
    ``--kill_timeout`` for the SIGKILL)."""
    print(f"{cluster_resolver.task_type} {cluster_resolver.task_id}: serving the chief", flush=True)
    server = tf.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=cluster_resolver.task_type,
        task_index=cluster_resolver.task_id,
        protocol=cluster_resolver.rpc_layer or "grpc",
        start=False,
    )
    server.start()
    stops.doing("while serving the chief", "the chief saves the job's checkpoints")
    peers.watch(cluster_resolver, peer_timeout_s)
    while True:  # the server runs in its own threads; this frame keeps it referenced
        signal.pause()


def is_chief(cluster_resolver) -> bool:
    """Whether this process writes the run's files: the chief, or worker 0 when there is none."""
    if cluster_resolver is None or not cluster_resolver.task_type:
        return True
    if cluster_resolver.task_type == "chief":
        return True
    return (
        cluster_resolver.task_type == "worker"
        and cluster_resolver.task_id == 0
        and "chief" not in cluster_resolver.cluster_spec().as_dict()
    )


def input_pipelines(strategy: tf.distribute.Strategy, cluster_resolver) -> int:
    """How many input pipelines ``distribute_datasets_from_function`` builds: one per worker
    (the chief of a multi-worker job is a worker; the parameter-server chief only coordinates)."""
    if cluster_resolver is None or not cluster_resolver.task_type:
        return 1
    spec = cluster_resolver.cluster_spec().as_dict()
    if is_parameter_server(strategy):
        return len(spec["worker"])
    return len(spec.get("worker", [])) + len(spec.get("chief", []))


def is_parameter_server(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def chief_seed(strategy: tf.distribute.Strategy, seed: int, chief: bool) -> int:
    """The chief's ``seed`` on every worker of a multi-worker job (each may have drawn its own:
    the data order of a resumed run must not depend on which worker drew what); ``seed``
    elsewhere. One all-reduce: the chief's replicas contribute the seed, the others 0."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return seed
    workers = max(
        1, sum(len(tasks) for tasks in strategy.cluster_resolver.cluster_spec().as_dict().values())
    )
    total = tf.function(
        lambda v: strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(v,)), axis=None
        )
    )(tf.constant(seed if chief else 0, tf.int64))
    return int(total) // (strategy.num_replicas_in_sync // workers)
