"""Run a real multi-process TensorFlow cluster, or JAX job, on this machine (127.0.0.1, free
ports).

    python launch/local_cluster.py --workers=2 -- launch/cifar.py --strategy=multi_worker ...
    python launch/local_cluster.py --workers=2 --ps=1 -- \
        launch/cifar.py --strategy=parameter_server ...
    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python launch/local_cluster.py --workers=2 -- launch/cifar.py --strategy=multi_worker \
        --data_path=...     # JAX: 2 processes x 2 CPU devices, worker 0 the coordinator

Starts one process per task with its own ``TF_CONFIG``: N workers (worker 0 is the chief) for
multi-worker training; with ``--ps=M``, a chief (the coordinator), N workers and M parameter
servers. Streams every task's output prefixed with its name. The job succeeds when its trainers
(every worker; with parameter servers, the chief) exit 0; then the serving tasks are stopped.
When one task fails, every other is sent SIGTERM and, after ``--kill_timeout`` seconds, SIGKILL
(a stopped task does not act on SIGTERM); a task killed by a signal first leaves the others 3 s
to see it gone and end on their own. A lost peer: every task of a multi-worker or
parameter-server job ends within about its ``--peer_timeout_s`` of another dying or hanging, in
one line naming it, with status 5 (``PEER_LOST_EXIT``); the job then exits 5 too (the job lost
a task: rerunning the same command resumes from the latest checkpoint), and the hung task is
stopped with the rest. Any other failure: the job's status is the failed task's (128 + signal
for a killed one).

Preemption: interrupted itself (Ctrl-C, SIGTERM, SIGHUP), it sends SIGTERM to the trainers,
which agree on a step, save a checkpoint there and exit with status 3; then it stops the
serving tasks and exits with 3 too (rerun the same command to resume), or 130 if a trainer did
not save. A trainer that exits 3 on its own (it was sent SIGTERM) is followed by the others.

Network (``--network=loopback``, the default): TensorFlow's distributed runtime has no
authentication (TensorFlow's SECURITY.md: run it on trusted networks only), and its gRPC server
listens on every interface, ``[::]:<port>``, whatever host ``TF_CONFIG`` names; no option of
TensorFlow 2.21 gives it an address (JAX's coordination service, on worker 0, binds
``[::]:<port>`` too, and its Gloo collectives open ports of their own, all without
authentication). So the job runs in a network namespace of its own whose
only interface is loopback, shared by all its tasks: they reach each other on 127.0.0.1, and
no other host, nor a process of this machine outside the namespace (root aside), can reach
their ports. Root gets the namespace directly; another user through a user namespace of
its own that maps only its own user and group IDs. The tasks then have no network beyond
127.0.0.1: prepare data first. Where the kernel forbids namespaces (e.g. a container under
Docker's default seccomp profile), one line says so and the job runs on this host's network, as
with ``--network=host``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from absl import app, flags

from resnet_noBN.configs.errors import PEER_LOST_EXIT, PREEMPTED_EXIT
from resnet_noBN.host.cluster import free_ports

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
flags.DEFINE_enum(
    "network",
    "loopback",
    ["loopback", "host"],
    "loopback: the tasks share a network namespace of their own with only the loopback "
    "interface, so no other host can reach their (unauthenticated) gRPC ports; they have no "
    "network beyond 127.0.0.1. host: this host's network; the ports listen on all its interfaces.",
)


# <sched.h>, <linux/sockios.h>, <net/if.h>
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def isolate_network() -> str | None:
    """Move this process, and so every task it starts from now on, into a new network namespace
    whose only interface, loopback, is up. None when done; else the one-line reason why not
    (this process is then unchanged). OSError if the namespace was made but cannot be set up.

    Root unshares the network namespace; any other user first a user namespace, which gives it
    the capabilities to own one (user_namespaces(7)), mapping only its own user and group IDs:
    files it writes are still its own, and it gains no rights outside.
    """
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux-only"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        why = os.strerror(ctypes.get_errno())
        uid, gid = os.geteuid(), os.getegid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            if ctypes.get_errno() != errno.EPERM:  # EPERM says no more than the first error
                why += f"; with a user namespace: {os.strerror(ctypes.get_errno())}"
            return f"unshare: {why}"
        for name, text in (
            ("setgroups", "deny"),  # required before an unprivileged gid_map
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh22x", b"lo", 0)  # struct ifreq: name, flags
        lo_flags = struct.unpack("16sh22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", lo_flags | IFF_UP))
    return None


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
    """Print each of a task's lines under its name, its newline in the same write (``print``
    writes its ``end`` apart, where another task's thread may write between the two); a line
    a killed task left unfinished is ended here, so the next task's line starts a line of its
    own."""
    for line in iter(pipe.readline, ""):
        text = line.removesuffix("\n")
        print(f"[{name}] {text}\n", end="", flush=True)


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
                    if code >= 0:  # its own status (a full disk, bad input): the job's
                        self.stop()
                        return status
                    self.wait_for_others(LOST_GRACE_S)  # the others see it gone, and say so
                    self.stop()
                    return self.status_after_kill(status)
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

    def wait_for_others(self, seconds: float) -> None:
        """Up to ``seconds`` for every task to end on its own."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.1)

    def status_after_kill(self, status: int) -> int:
        """After a task was killed (``status`` 128 + the signal): 5 (PEER_LOST_EXIT) where
        another task ended on the lost peer before it was stopped (the job lost a task, and
        rerunning it resumes from its latest checkpoint); else ``status``."""
        if any(p.returncode == PEER_LOST_EXIT for p in self.procs.values()):
            print(
                "a task of the job was lost; rerun the same command to resume from the latest "
                "checkpoint",
                flush=True,
            )
            return PEER_LOST_EXIT
        return status

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
    if FLAGS.network == "loopback":
        try:
            why_not = isolate_network()
        except OSError as e:
            print(f"error: setting up the job's network namespace failed: {e}", file=sys.stderr)
            sys.exit(2)
        if why_not:
            print(
                f"network: no namespace of its own ({why_not}): the tasks use this host's "
                "network and their gRPC ports, which take no authentication, listen on all its "
                "interfaces; run on a trusted network only",
                flush=True,
            )
        else:
            print(
                "network: the tasks share a namespace with loopback only; no other host can "
                "reach their ports (--network=host to use this host's network)",
                flush=True,
            )
    else:
        print(HOST_NETWORK_LINE, flush=True)
    job = Job(command, cluster_spec(FLAGS.workers, FLAGS.ps))
    try:
        status = job.wait()
    except KeyboardInterrupt:
        print("interrupted; stopping the job", flush=True)
        job.stop()
        status = job.status_after_stop()
    sys.exit(status)


# After a task is killed, what the others get to see it gone and end on their own (a dead peer's
# sockets close: they end within a second, in one line, with PEER_LOST_EXIT)
LOST_GRACE_S = 3.0

HOST_NETWORK_LINE = (
    "network: this host's (--network=host): the job's gRPC ports, which take no authentication, "
    "listen on every interface of this host; run on a trusted network only"
)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    app.run(main)
