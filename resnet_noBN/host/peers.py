"""A dead or hung peer of a multi-worker or parameter-server TensorFlow job ends every other task
within about ``--peer_timeout_s``, each in one line naming it and exit status ``PEER_LOST_EXIT``
(5), with nothing written damaged: rerunning the job resumes from its latest checkpoint.

What TensorFlow bounds, and what is added here:

* **A peer that died** (its process killed, its host lost): its sockets close, and the
  collective or remote call this task waits in fails at once (``UnavailableError``,
  ``CancelledError``, ...). The error reaches the launcher (``runs.cli.exit_codes``), which asks
  :func:`lost_peer` for the line: every peer is asked for its status (:func:`probe`, 5 s at
  most) to name the lost one.
* **A hung non-chief worker** (stopped, its host frozen): the coordination service, which the
  chief hosts, misses its heartbeats for ``--peer_timeout_s`` (``heartbeat_timeout_in_ms``, set
  by :func:`configure_coordination` before the strategy starts; TensorFlow's default is 10 s)
  and aborts the others' collectives; the error ends them as above.
* **A hung chief, a parameter server, a parameter-server job's chief lost**: TensorFlow bounds
  nothing. A collective would take a ``timeout_seconds`` (CommunicationOptions), but TensorFlow
  starts a thread per collective that sleeps for the whole timeout (its docs: for debugging
  only), and a parameter-server job's serving tasks wait for their chief forever. So
  :class:`PeerWatch`, a daemon thread, asks each peer for its status every
  ``--peer_timeout_s``/4 s (at most 10), the request TensorFlow's servers answer at once
  (``WorkerService/GetStatus``, over the job's own gRPC); a peer that has not answered for
  ``--peer_timeout_s`` ends this task, whatever it was doing. A parameter-server job's chief
  watches every other task; its workers and parameter servers the chief, from its first answer.

Either way the line is ``error: worker 0 (chief) stopped answering for 62 s (...); rerun the
job to resume from <checkpoint>`` and the process ends with ``os._exit`` (interpreter shutdown
would wait on the lost peer), its output flushed first. What the run wrote is whole:
checkpoints, logs and config.json are replaced atomically or appended whole
(``host.storage``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

import grpc
import tensorflow as tf
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
from tensorflow.python.distribute import multi_worker_util
from tensorflow.python.eager import context

from resnet_noBN.configs.errors import PEER_LOST_EXIT, first_line, say

# What a collective or a coordination-service call raises when a peer died or was declared dead
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
)

PROBE_TIMEOUT_S = 5.0  # one status request: a TF server answers in milliseconds, even when busy
_COORDINATED_JOBS = ("chief", "worker")


def configure_coordination(cluster_resolver, timeout_s: float) -> None:
    """The coordination service of a multi-worker job, as ``MultiWorkerMirroredStrategy`` would
    configure it, but declaring a task dead after ``timeout_s`` without heartbeat (TensorFlow's
    default: 10 s) and waiting at most ``timeout_s`` for the others at exit. Call it before the
    strategy is made."""
    spec = cluster_resolver.cluster_spec()
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in _COORDINATED_JOBS
            if job in spec.jobs
        ],
        heartbeat_timeout_in_ms=int(timeout_s * 1000),
        shutdown_barrier_timeout_in_ms=int(timeout_s * 1000),
    )


def task_label(kind: str, index: int, spec: dict) -> str:
    """How a task is named in the lines: ``worker 1``, ``worker 0 (chief)``, ``ps 0``."""
    chief = kind == "chief" or (kind == "worker" and index == 0 and "chief" not in spec)
    return f"{kind} {index}" + (" (chief)" if chief and kind != "chief" else "")


class PeerWatch:
    """Asks each of ``peers`` (``host:port`` -> its label) for its status every ``timeout_s / 4``
    seconds (at most 10); one that has not answered for ``timeout_s`` ends this task
    (:func:`end`). ``after_first_answer``: count a peer's silence only from its first answer
    (a serving task, started before its chief). :meth:`set_model_dir` names the folder whose
    latest checkpoint the line names."""

    def __init__(self, peers: dict[str, str], timeout_s: float, after_first_answer=False):
        self.peers, self.timeout_s = peers, timeout_s
        self.interval_s = min(10.0, timeout_s / 4)
        self.model_dir = None
        self._answered = {
            address: None if after_first_answer else time.monotonic() for address in peers
        }
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="peer-watch", daemon=True)

    def start(self) -> PeerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching: training is over, and the peers end in their own time. Waits for a
        status request in flight (at most :data:`PROBE_TIMEOUT_S`): a thread still in gRPC's
        C++ as Python finalizes is ended with ``pthread_exit``, which can abort the process
        (CPython gh-87135; the JAX job's watch did so, ``backends.jax_job.PeerWatch``)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(PROBE_TIMEOUT_S + 1)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def set_model_dir(self, model_dir: str) -> None:
        self.model_dir = model_dir

    def resume(self) -> str:
        """What the line tells to do: rerun the job, which resumes from the latest checkpoint."""
        latest = tf.train.latest_checkpoint(self.model_dir) if self.model_dir else None
        return f"rerun the job to resume from {latest}" if latest else "rerun the job"

    def _watch(self) -> None:
        while not self._stopped.wait(self.interval_s):
            for address, label in self.peers.items():
                if self.stopped:
                    return
                why = probe(address, min(PROBE_TIMEOUT_S, self.timeout_s))
                now, answered = time.monotonic(), self._answered[address]
                if why is None:
                    self._answered[address] = now
                elif answered is not None and now - answered >= self.timeout_s:
                    if not self.stopped:
                        end(
                            f"{label} stopped answering for {now - answered:.0f} s (hung, or "
                            f"its process or host lost: {why}); {self.resume()}"
                        )

    def lost_line(self, error: Exception) -> str:
        """The line for ``error``, one of :data:`PEER_ERRORS` raised in this task: the peers
        that do not answer now, with why (else "a peer", with the error's cause)."""
        gone = [(label, probe(address)) for address, label in self.peers.items()]
        gone = [f"{label} ended or stopped answering ({why})" for label, why in gone if why]
        if not gone:
            gone = [f"a peer ended or stopped answering ({type(error).__name__}: {cause(error)})"]
        return f"{'; '.join(gone)}; {self.resume()}"


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the TensorFlow server at ``address`` answers a status request (its worker
    service's GetStatus, which any task's server answers at once) within ``timeout_s``, else
    why not (a stopped process: the deadline; a dead one: the connection refused)."""
    with grpc.insecure_channel(address) as channel:
        try:
            channel.unary_unary("/tensorflow.WorkerService/GetStatus")(b"", timeout=timeout_s)
        except grpc.RpcError as e:
            return first_line(e.details() or e.code().name)
    return None


_watch: PeerWatch | None = None
_ending = threading.Lock()


def watch(cluster_resolver, timeout_s: float) -> PeerWatch:
    """Start watching every other task of ``cluster_resolver``'s job (after the strategy
    started: the cluster is up). A worker or parameter server of a parameter-server job, which
    only serves, watches the chief alone, from its first answer on."""
    global _watch
    spec = cluster_resolver.cluster_spec().as_dict()
    me = (cluster_resolver.task_type, cluster_resolver.task_id)
    serving = "ps" in spec and me[0] != "chief"
    peers = {
        spec[kind][index]: task_label(kind, index, spec)
        for kind in spec
        for index in range(len(spec[kind]))
        if (kind, index) != me and (kind == "chief" or not serving)
    }
    _watch = PeerWatch(peers, timeout_s, after_first_answer=serving).start()
    threading.excepthook = _lost_in_a_thread
    return _watch


def _lost_in_a_thread(args) -> None:
    """A thread of TensorFlow's (the preemption handler's watchers, the coordinator's workers)
    that fails on a lost peer ends the task in the one line, not a traceback; any other
    exception as before."""
    line = None if _watch.stopped else lost_peer(args.exc_value)  # stopped: the run is over
    if line is not None:
        end(line)
    threading.__excepthook__(args)


def watching() -> PeerWatch | None:
    """The watch of this process's job, None where it is not a task of one."""
    return _watch


def lost_peer(error: BaseException) -> str | None:
    """The one line for ``error`` where it is a lost peer of a watched job, else None."""
    if _watch is None or not isinstance(error, PEER_ERRORS):
        return None
    return _watch.lost_line(error)


def end(line: str) -> None:
    """Print ``error: <line>`` and end the process with PEER_LOST_EXIT, at once (its threads
    and TensorFlow's shutdown would wait on the lost peer); only the first caller prints."""
    _ending.acquire()  # a second caller (the watch, the main thread) waits here for the exit
    sys.stdout.flush()
    say(f"error: {line}")
    os._exit(PEER_LOST_EXIT)


def cause(error: Exception) -> str:
    """The line of a TensorFlow error that says what happened (its message starts with the
    graph's call stack): what aborted the collectives, else the first line."""
    text = str(getattr(error, "message", error))
    aborted = re.search(r"aborted by: (.*)", text)
    return first_line(aborted[1] if aborted else text)
