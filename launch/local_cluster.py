"""Run a real multi-process TensorFlow cluster on this machine (127.0.0.1, free ports).

    python launch/local_cluster.py --workers=2 -- launch/cifar.py --strategy=multi_worker ...
    python launch/local_cluster.py --workers=2 --ps=1 -- \
        launch/cifar.py --strategy=parameter_server ...

Starts one process per task with its own ``TF_CONFIG``: N workers (worker 0 is the chief) for
multi-worker training; with ``--ps=M``, a chief (the coordinator), N workers and M parameter
servers. Streams every task's output prefixed with its name. The job succeeds when its trainers
(every worker; with parameter servers, the chief) exit 0; then the serving tasks are stopped.
When one task fails, every other is sent SIGTERM and, after ``--kill_timeout`` seconds, SIGKILL
(a worker waiting for a peer that never comes blocks in a collective and may not stop on
SIGTERM). The exit status is the failed task's (128 + signal for a killed one).

Preemption: interrupted itself (Ctrl-C, SIGTERM, SIGHUP), it sends SIGTERM to the trainers,
which agree on a step, save a checkpoint there and exit with status 3; then it stops the
serving tasks and exits with 3 too (rerun the same command to resume), or 130 if a trainer did
not save. A trainer that exits 3 on its own (it was sent SIGTERM) is followed by the others.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("workers", 2, "Worker processes.")
flags.DEFINE_integer("ps", 0, "Parameter servers (0: a multi-worker job without a chief task).")
flags.DEFINE_float(
    "kill_timeout",
    30.0,
    "Seconds between SIGTERM and SIGKILL when stopping "
    "(the trainers save a checkpoint in that time; SLURM's and Kubernetes' "
    "default is 30 s too).",
)
# resnet_noBN.errors.PREEMPTED_EXIT, written again: importing the package would set
# TF_ENABLE_ONEDNN_OPTS here, which every task would then inherit as if the user had set it.
PREEMPTED_EXIT = 3


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cluster_spec(workers: int, ps: int) -> dict[str, list[str]]:
    """The cluster of a local job: workers (and a chief and parameter servers when ps > 0)."""
    ports = iter(free_ports(workers + (ps + 1 if ps else 0)))
    spec = {"worker": [f"127.0.0.1:{next(ports)}" for _ in range(workers)]}
    if ps:
        spec["chief"] = [f"127.0.0.1:{next(ports)}"]
        spec["ps"] = [f"127.0.0.1:{next(ports)}" for _ in range(ps)]
    return spec


def tasks(spec: dict[str, list[str]]) -> list[tuple[str, int]]:
    """(type, index) of every task, the chief first and the parameter servers last."""
    order = ("chief", "worker", "ps")
    return [(kind, i) for kind in order for i in range(len(spec.get(kind, [])))]


def _stream(name: str, pipe) -> None:
    for line in iter(pipe.readline, ""):
        print(f"[{name}] {line}", end="", flush=True)


class Job:
    """The processes of one local cluster job."""

    def __init__(self, command: list[str], spec: dict[str, list[str]]):
        if command[0].endswith(".py"):
            command = [sys.executable] + command
        self.spec, self.procs, self.threads = spec, {}, []
        for kind, index in tasks(spec):
            name = f"{kind}{index}"
            env = dict(
                os.environ,
                PYTHONUNBUFFERED="1",
                TF_CONFIG=json.dumps({"cluster": spec, "task": {"type": kind, "index": index}}),
            )
            proc = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            print(f"started {name} pid={proc.pid}", flush=True)
            thread = threading.Thread(target=_stream, args=(name, proc.stdout), daemon=True)
            thread.start()
            self.procs[name], self.threads = proc, self.threads + [thread]

    def trainers(self) -> list[str]:
        """The tasks whose success is the job's: the chief with parameter servers, else workers."""
        return (
            ["chief0"] if "ps" in self.spec else [n for n in self.procs if n.startswith("worker")]
        )

    def wait(self) -> int:
        """0 once every trainer exited 0; 3 once every trainer saved on a preemption (or
        ``--kill_timeout`` after the first did); the status of the first task to fail otherwise."""
        preempted_at = None
        while True:
            codes = {name: proc.poll() for name, proc in self.procs.items()}
            for name, code in codes.items():
                if code not in (None, 0, PREEMPTED_EXIT):
                    status = 128 - code if code < 0 else code
                    print(f"{name} exited with status {status}; stopping the job", flush=True)
                    self.stop()
                    return status
            trainers = [codes[n] for n in self.trainers()]
            if all(code == 0 for code in trainers):
                self.stop()
                return 0
            if preempted_at is None and PREEMPTED_EXIT in trainers:
                preempted_at = time.monotonic()
            if preempted_at is not None and (
                None not in trainers or time.monotonic() > preempted_at + FLAGS.kill_timeout
            ):
                self.stop()
                return self.status_after_stop()
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM the trainers, then the serving tasks (which hold a parameter-server job's
        variables until the chief has saved them); SIGKILL what is left after the timeout."""
        for group in (self.trainers(), [n for n in self.procs if n not in self.trainers()]):
            running = [self.procs[n] for n in group if self.procs[n].poll() is None]
            for proc in running:
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + FLAGS.kill_timeout
            for proc in running:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        for thread in self.threads:
            thread.join(timeout=5)

    def status_after_stop(self) -> int:
        """3 when every trainer saved a checkpoint and exited 3, else 130."""
        if all(self.procs[n].returncode == PREEMPTED_EXIT for n in self.trainers()):
            print(
                "preempted: every trainer saved a checkpoint; rerun the same command to resume",
                flush=True,
            )
            return PREEMPTED_EXIT
        return 130


def main(argv):
    command = argv[1:]
    if not command:
        print(
            "error: no command: write it after --, e.g. `python launch/local_cluster.py "
            "--workers=2 -- launch/cifar.py --strategy=multi_worker`",
            file=sys.stderr,
        )
        sys.exit(2)
    if FLAGS.workers < 1 or FLAGS.ps < 0:
        print(
            f"error: --workers must be >= 1 and --ps >= 0, got {FLAGS.workers} and {FLAGS.ps}",
            file=sys.stderr,
        )
        sys.exit(2)
    # stopped itself (Ctrl-C, SIGTERM, a closed terminal): stop every task first, since each
    # runs in a session of its own and would outlive this process
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    job = Job(command, cluster_spec(FLAGS.workers, FLAGS.ps))
    try:
        status = job.wait()
    except KeyboardInterrupt:
        print("interrupted; stopping the job", flush=True)
        job.stop()
        status = job.status_after_stop()
    sys.exit(status)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    app.run(main)
