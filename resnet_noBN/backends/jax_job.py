"""A JAX job over several processes (``--strategy=multi_worker`` on ``KERAS_BACKEND=jax``): its
forming, and the end of a process whose peer is lost.

* **Forming** (:func:`form`): ``jax.distributed.initialize`` (what
  ``keras.distribution.initialize`` wraps; called directly for the timeouts below, which Keras's
  wrapper does not pass on), the coordinator being the first task of ``TF_CONFIG``'s cluster
  (its chief, else worker 0: the process that writes the run's files, as on TensorFlow), the
  process id the task's place in that list; or, with ``--cluster_resolver=slurm``, the first node
  of the SLURM step, ``SLURM_NTASKS`` and ``SLURM_PROCID``, every task driving all the devices
  of its node. Every process then sees every process's devices (``jax.devices()``), and the
  trainer splits each batch over all of them.
* **Agreed decisions** (``trainers.jax_agreed``): a process waits for the others in every
  step's gradient sum, so anything one process decides from its own clock or its own signals
  must be decided once for all: the seed, the steps of the next call and the time budget are
  process 0's, the stop after SIGTERM is any process's.
* **A lost peer** (:class:`PeerWatch`, :func:`end_if_peer_lost`): a killed process closes its
  sockets, and the collective the others wait in fails at once (``JaxRuntimeError``: "Gloo ...
  Connection closed by peer"): the launcher ends on one line and :data:`PEER_LOST_EXIT`. A
  stopped process (SIGSTOP, a frozen host) closes nothing: the others would wait in the
  collective forever, deaf to SIGTERM (a Python handler runs only between bytecodes). JAX's own
  bound, the coordination service's heartbeat timeout, ends them with an abort (rc 134, a page
  of C++ log) and cannot be caught (the client's ``missed_heartbeat_callback``, which
  ``jax.distributed.initialize`` does not pass on, would replace the abort, but jaxlib 0.10.2
  cannot call a Python one: converting its absl::Status throws std::bad_cast, which terminates
  the process the same way); so each process also writes a counter into the
  coordination service's key-value store every few seconds, and a peer whose counter has not
  moved for ``--peer_timeout_s`` (or a coordinator that stopped answering) ends this process
  first, on one line and exit 5. The service's heartbeat timeout is set to twice that, its
  shutdown barrier to it, so that nothing waits unbounded.
* **A failure one process meets alone** (a full disk: only process 0 writes; input only it
  reads; an error of its own): it ends at once (:func:`exit_now`, through
  ``JaxBackend.end_now_in_job``), not through JAX's exit handler, whose shutdown barrier would
  wait for peers that wait for it in the next gradient sum and then abort it; its peers'
  collective fails at once and they end as on a lost peer.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time

import jax

from resnet_noBN.configs.errors import PEER_LOST_EXIT, first_line, say
from resnet_noBN.host.cluster import ClusterError, check_port_free, parse_tf_config

ALIVE_KEY = "resnet_noBN/alive/"  # + process id: the counter a process advances while it lives
# The words of a collective or coordination call that failed because a peer is gone (Gloo on
# CPUs, NCCL on GPUs, the coordination service's gRPC)
PEER_ERROR_WORDS = ("closed by peer", "Connection reset", "Gloo", "NCCL", "UNAVAILABLE", "DEADLINE")


def coordinates(resolver: str) -> tuple[str, int, int]:
    """(coordinator ``host:port``, processes, this process's id) of the job, from ``TF_CONFIG``
    or (``resolver`` "slurm") the SLURM step's variables; ClusterError (one line) for a cluster
    a JAX job cannot form."""
    if resolver == "slurm":
        missing = [
            name
            for name in ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID")
            if name not in os.environ
        ]
        if missing:
            raise ClusterError(
                f"--cluster_resolver=slurm outside a SLURM step (no {', '.join(missing)}): "
                "launch with srun, or use TF_CONFIG"
            )
        from jax._src.clusters import SlurmCluster  # the first node's name, JAX's own parse

        return (
            SlurmCluster.get_coordinator_address(None, None),
            int(os.environ["SLURM_NTASKS"]),
            int(os.environ["SLURM_PROCID"]),
        )
    config = parse_tf_config("multi_worker")
    cluster, task = config["cluster"], config["task"]
    if set(cluster) - {"chief", "worker"}:
        extra = ", ".join(sorted(set(cluster) - {"chief", "worker"}))
        raise ClusterError(
            f"TF_CONFIG's cluster has {extra} tasks, which a JAX job has no use for "
            "(--strategy=multi_worker: a chief and workers, all training); list workers only"
        )
    tasks = [("chief", i) for i in range(len(cluster.get("chief", [])))]
    tasks += [("worker", i) for i in range(len(cluster.get("worker", [])))]
    process = tasks.index((task["type"], task["index"]))
    coordinator = cluster[tasks[0][0]][0]
    if process == 0:
        check_port_free(coordinator, f"{tasks[0][0]} 0, the JAX coordinator")
    return coordinator, len(tasks), process


def form(resolver: str, peer_timeout_s: float) -> int:
    """Join this process to the job (:func:`coordinates`) and start its :class:`PeerWatch`;
    the job's number of processes. Call it before anything else of JAX runs. A peer that never
    comes ends the wait after ``max(300, peer_timeout_s)`` seconds (``JaxRuntimeError``, a lost
    peer)."""
    coordinator, processes, process = coordinates(resolver)
    jax.distributed.initialize(
        coordinator,
        processes,
        process,
        cluster_detection_method="deactivate",  # all the node's devices, not one per task
        initialization_timeout=max(300, math.ceil(peer_timeout_s)),
        heartbeat_timeout_seconds=math.ceil(2 * peer_timeout_s),
        shutdown_timeout_seconds=math.ceil(peer_timeout_s),
    )
    PeerWatch(peer_timeout_s).start()
    return processes


def end(line: str) -> None:
    """Print ``error: <line>`` and end the process with PEER_LOST_EXIT at once
    (:func:`exit_now`)."""
    say(f"error: {line}; rerun the job to resume from its latest checkpoint")
    exit_now(PEER_LOST_EXIT)


def exit_now(status: int) -> None:
    """Flush and end the process with ``status`` at once (``os._exit``). JAX's exit handler
    would first wait for every peer at its shutdown barrier: one that is lost, or that waits
    for this process in the next step's gradient sum, never comes, and after
    ``--peer_timeout_s`` the handler aborts the process (SIGABRT), losing ``status``. Ended
    at once, this process closes its connections and a peer waiting in a collective fails
    at once too (:func:`end_if_peer_lost`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def end_if_peer_lost(error: BaseException) -> None:
    """In a job, where ``error`` is a collective or coordination call that failed because a
    peer is gone: :func:`end` (never returns). Else nothing."""
    if not (jax.distributed.is_initialized() and isinstance(error, jax.errors.JaxRuntimeError)):
        return
    if any(word in str(error) for word in PEER_ERROR_WORDS):
        end(f"process {jax.process_index()} of the JAX job lost a peer ({first_line(error)})")


class PeerWatch:
    """Two daemon threads: one advances this process's counter in the coordination service's
    key-value store and reads the peers' every ``timeout_s / 4`` seconds (at most 5); the
    other, which never waits on the network, ends the process (:func:`end`) when a peer's
    counter has not moved for ``timeout_s`` or the store has not answered for that long.

    Both stop, and are waited for, when the interpreter exits (:meth:`stop`, an ``atexit``
    handler): Python 3.11 ends a daemon thread that comes back from C++ after finalization has
    begun with ``pthread_exit``, whose unwinding through the client's C++ frames aborts the
    process ("FATAL: exception not rethrown", rc 134; CPython issue gh-87135). A store call in
    flight as a finished process exits did that to 1 of 30 four-process jobs on a loaded CPU."""

    def __init__(self, timeout_s: float):
        from jax._src.distributed import global_state  # the job's coordination client

        self.client, self.timeout_s = global_state.client, timeout_s
        self.interval_s = min(5.0, timeout_s / 4)
        # the job's, not jax.process_index(): that would make the CPU client before
        # jax_backend.size_cpu_pool has sized it
        self.me, self.count = global_state.process_id, global_state.num_processes
        now = time.monotonic()
        self.seen = {p: (None, now) for p in range(self.count) if p != self.me}
        self.answered = now  # the last time the store answered this process
        self.stopped = threading.Event()
        self.threads = [
            threading.Thread(target=target, daemon=True, name=f"peer-watch{target.__name__}")
            for target in (self._beat, self._check)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """End both threads and wait for them (a store call in flight answers at once while
        the job lives; at most ``timeout_s`` where it does not)."""
        self.stopped.set()
        for thread in self.threads:
            thread.join(self.timeout_s)

    def _beat(self) -> None:
        beat = 0
        while not self.stopped.is_set():
            try:
                self.client.key_value_set(f"{ALIVE_KEY}{self.me}", str(beat), allow_overwrite=True)
                for peer, (value, _) in self.seen.items():
                    now_value = self._read(peer)
                    if now_value != value:
                        self.seen[peer] = (now_value, time.monotonic())
            except jax.errors.JaxRuntimeError as e:  # the coordinator (process 0) is gone
                if self.me and not self.stopped.is_set():
                    end(f"process 0, the JAX job's coordinator, is gone ({first_line(e)})")
            else:
                self.answered = time.monotonic()
            beat += 1
            self.stopped.wait(self.interval_s)

    def _read(self, peer: int) -> str | None:
        """``peer``'s counter, None before it wrote one."""
        try:
            return self.client.key_value_try_get(f"{ALIVE_KEY}{peer}")
        except jax.errors.JaxRuntimeError as e:
            if "NOT_FOUND" in str(e):
                return None
            raise

    def _check(self) -> None:
        while not self.stopped.wait(self.interval_s):
            now = time.monotonic()
            silent = [p for p, (_, at) in self.seen.items() if now - at >= self.timeout_s]
            if now - self.answered >= self.timeout_s:
                silent = [0] if self.me else silent
            if silent:
                end(
                    f"process {silent[0]} of the JAX job has not answered for "
                    f"{self.timeout_s:g} s (killed, stopped or its host lost)"
                )
