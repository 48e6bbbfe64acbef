"""Scale-out on localhost: multi-worker, parameter servers, kill-and-resume, cluster errors,
and the local job's network: its unauthenticated gRPC ports unreachable from other hosts."""

import contextlib
import functools
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import launchers
import pytest
import tensorflow as tf
from launchers import REPO

from resnet_noBN.backends import distribute
from resnet_noBN.configs.errors import PEER_LOST_EXIT, say
from resnet_noBN.host import cluster
from resnet_noBN.trainers.tensorflow_training import scratch_dir_name

CIFAR_RECORDS = 32  # a file, in the cifar_bin fixture (conftest.py)
SMALL = [
    "--model=small",
    "--batch_size=16",
    "--eval_batch_size=20",
    "--log_every=5",
    "--seed=1",
]


def job_env(tmp_path):
    """The job's TMPDIR is the test's: non-chief workers' temporary checkpoints land there."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(tmp_path / "tmp"), TF_CPP_MIN_LOG_LEVEL="2")


def cluster_command(cluster_args, launcher_args) -> list[str]:
    return [
        sys.executable,
        str(REPO / "launch/local_cluster.py"),
        *cluster_args,
        "--",
        str(REPO / "launch/cifar.py"),
        *launcher_args,
    ]


def local_cluster(tmp_path, cluster_args, launcher_args):
    """The finished job (started warm where it can be: launchers.start)."""
    return launchers.finished(cluster_command(cluster_args, launcher_args), job_env(tmp_path))


def start_local_cluster(tmp_path, cluster_args, launcher_args):
    """The running job, its output (stderr included) to read line by line."""
    command = cluster_command(cluster_args, launcher_args)
    return launchers.start(command, job_env(tmp_path), subprocess.PIPE, subprocess.STDOUT)


def final_lines(stdout: str) -> dict[str, dict]:
    """task name -> the JSON line it ended with."""
    lines = {}
    for line in stdout.splitlines():
        if line.startswith("[") and '] {"dataset"' in line:
            name, text = line[1:].split("] ", 1)
            lines[name] = json.loads(text)
    return lines


def fault_at_step(job, watcher: str, step: int, victim: str, sig) -> dict:
    """Read the running ``job``'s output; when task ``watcher`` reports a step >= ``step``,
    send ``sig`` to task ``victim``; wait for the job (every task killed after). Returns the
    job's ``status``, its ``output``, the ``step`` of the signal, the tasks' ``errors`` (their
    ``error:`` lines) and the seconds from the signal to the first (``ended_in``)."""
    pids, result, output = {}, {"step": None, "ended_in": None}, []
    try:
        for line in job.stdout:
            output.append(line)
            if line.startswith("started "):
                pids[line.split()[1]] = int(line.split("pid=")[1])
            if line.startswith(f"[{watcher}] step ") and "loss" in line and not result["step"]:
                if int(line.split()[2]) >= step:
                    result.update(step=int(line.split()[2]), at=time.monotonic())
                    os.kill(pids[victim], sig)
            if "] error: " in line and result["ended_in"] is None and result["step"]:
                result["ended_in"] = time.monotonic() - result["at"]
        result["status"] = job.wait(timeout=60)
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    result["output"] = "".join(output)
    result["errors"] = [line for line in output if line.startswith("[") and "] error: " in line]
    return result


def test_two_workers_train_in_lockstep_and_only_the_chief_writes(tmp_path, cifar_bin):
    model_dir = tmp_path / "run"
    proc = local_cluster(
        tmp_path,
        ["--workers=2"],
        [
            "--strategy=multi_worker",
            f"--data_path={cifar_bin}",
            f"--model_dir={model_dir}",
            "--train_steps=10",
            "--checkpoint_every=5",
            "--eval_every=10",
            *SMALL,
        ],
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    results = final_lines(proc.stdout)
    assert set(results) == {"worker0", "worker1"}
    assert results["worker0"]["final_step"] == results["worker1"]["final_step"] == 10
    assert results["worker0"]["weights_sha256"] == results["worker1"]["weights_sha256"]
    assert results["worker0"]["test_examples"] == 32  # the whole test split, sharded over 2
    assert "2 replica(s) x 2 input pipeline(s)" in proc.stdout
    # the chief's files only: one checkpoint series, one metrics file; no leftover temp dirs,
    # and no run.lock: the chief's lock stands for the job and goes with it
    assert sorted(p.name for p in model_dir.iterdir()) == [
        "answers.jsonl",  # the last evaluation's answer per test image
        "checkpoint",
        "ckpt-10.data-00000-of-00001",
        "ckpt-10.index",
        "ckpt-5.data-00000-of-00001",
        "ckpt-5.index",
        "config.json",
        "eval",
        "metrics.jsonl",
        "test_error.png",
        "train",
        "train.jsonl",
    ]
    assert len((model_dir / "metrics.jsonl").read_text().splitlines()) == 1
    assert list((tmp_path / "tmp").iterdir()) == []


def test_parameter_servers_advance_the_step_by_the_steps_scheduled(tmp_path, cifar_bin):
    model_dir = tmp_path / "ps_run"
    proc = local_cluster(
        tmp_path,
        ["--workers=2", "--ps=1"],
        [
            "--strategy=parameter_server",
            f"--data_path={cifar_bin}",
            f"--model_dir={model_dir}",
            "--train_steps=15",
            "--checkpoint_every=15",
            "--eval_every=15",
            *SMALL,
        ],
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    results = final_lines(proc.stdout)
    assert list(results) == ["chief0"]  # workers and the ps only serve
    assert results["chief0"]["final_step"] == 15
    assert "1 replica(s) x 2 input pipeline(s)" in proc.stdout
    assert "worker 1: serving the chief" in proc.stdout and "ps 0: serving the chief" in proc.stdout
    # the job done, the launcher's SIGTERM ends each serving task at once, in its line (a wait
    # in server.join() handled no signal: the launcher waited 30 s for its SIGKILL)
    for task in ("worker0", "worker1", "ps0"):
        line = f"[{task}] stopped by SIGTERM while serving the chief; the chief saves the job's "
        assert line + "checkpoints\n" in proc.stdout, proc.stdout[-3000:]
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-15")
    reader = tf.train.load_checkpoint(str(model_dir))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 15


def long_job_args(strategy: str, cifar_bin, model_dir) -> list[str]:
    """The launcher's flags of a job that a fault interrupts: checkpoints every 10 steps, no
    evaluation before the end (add --train_steps)."""
    return [
        f"--strategy={strategy}",
        f"--data_path={cifar_bin}",
        f"--model_dir={model_dir}",
        "--checkpoint_every=10",
        "--eval_every=100000",
        *SMALL,
    ]


def test_killed_worker_job_resumes_from_the_last_checkpoint(tmp_path, cifar_bin):
    """SIGKILL worker 1 mid-run; the job stops; rerun: it resumes at the last checkpoint."""
    model_dir = tmp_path / "run"
    args = long_job_args("multi_worker", cifar_bin, model_dir)
    job = start_local_cluster(
        tmp_path, ["--workers=2", "--kill_timeout=5"], ["--train_steps=100000", *args]
    )
    fault = fault_at_step(job, "worker0", 30, "worker1", signal.SIGKILL)
    # the chief sees worker 1 gone, says so in one line and exits 5, and so does the job
    assert fault["status"] == PEER_LOST_EXIT, fault["output"][-3000:]
    assert "Traceback" not in fault["output"], fault["output"][-3000:]
    saved = int(tf.train.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
    (line,) = fault["errors"]
    assert line.startswith("[worker0] error: worker 1 ended or stopped answering ("), line
    assert line.endswith(f"; rerun the job to resume from {model_dir}/ckpt-{saved}\n")
    assert fault["ended_in"] < 5
    assert saved % 10 == 0 and fault["step"] - 10 <= saved  # no step lost beyond the interval

    # the killed worker's scratch checkpoints are left behind, in a folder named for its task
    # and model_dir, which its next run empties, uses and removes: nothing accumulates
    assert scratch_folders(tmp_path) == [scratch_dir_name(str(model_dir), "worker1")]

    proc = local_cluster(tmp_path, ["--workers=2"], [f"--train_steps={saved + 10}", *args])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert scratch_folders(tmp_path) == []
    assert f"resumed from {model_dir}/ckpt-{saved} at step {saved}" in proc.stdout
    results = final_lines(proc.stdout)
    assert set(results) == {"worker0", "worker1"}, proc.stdout[-3000:]
    assert results["worker0"]["final_step"] == saved + 10
    assert results["worker0"]["weights_sha256"] == results["worker1"]["weights_sha256"]


@pytest.mark.parametrize("fault, victim", [("kill", 0), ("stop", 0), ("stop", 1)])
def test_a_dead_or_hung_peer_ends_the_job_in_one_line_and_status_5_and_it_resumes(
    tmp_path, cifar_bin, fault, victim
):
    """kill -9 of the chief, SIGSTOP of the chief and of worker 1 (kill -9 of worker 1:
    test_killed_worker_job_resumes_from_the_last_checkpoint): the other worker ends within
    --peer_timeout_s and a few seconds, in one line naming the lost task and the checkpoint a
    rerun resumes from, status 5, no traceback; the job exits 5; the rerun after a lost chief
    resumes there."""
    model_dir, timeout_s = tmp_path / "run", 10
    args = long_job_args("multi_worker", cifar_bin, model_dir)
    job = start_local_cluster(
        tmp_path,
        ["--workers=2", "--kill_timeout=2"],
        ["--train_steps=100000", f"--peer_timeout_s={timeout_s}", *args],
    )
    survivor = f"worker{1 - victim}"
    sig = signal.SIGKILL if fault == "kill" else signal.SIGSTOP
    result = fault_at_step(job, survivor, 20, f"worker{victim}", sig)
    assert result["status"] == PEER_LOST_EXIT, result["output"][-3000:]
    assert "Traceback" not in result["output"], result["output"][-3000:]
    lost = "worker 0 (chief)" if victim == 0 else "worker 1"
    saved = int(tf.train.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
    (line,) = result["errors"]  # the survivor's, one line
    assert line.startswith(f"[{survivor}] error: {lost} "), line
    assert line.endswith(f"; rerun the job to resume from {model_dir}/ckpt-{saved}\n")
    assert result["ended_in"] < (5 if fault == "kill" else timeout_s + 10), result["ended_in"]
    assert f"{survivor} exited with status 5" in result["output"] or fault == "kill"
    if victim == 1:
        return  # the rerun after a lost worker 1: test_killed_worker_job_resumes_...

    proc = local_cluster(tmp_path, ["--workers=2"], [f"--train_steps={saved + 5}", *args])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"resumed from {model_dir}/ckpt-{saved} at step {saved}" in proc.stdout
    assert final_lines(proc.stdout)["worker0"]["final_step"] == saved + 5


def test_a_lost_parameter_server_ends_the_chief_in_one_line_and_status_5(tmp_path, cifar_bin):
    """kill -9 of the parameter server: the chief's next step fails, it names the lost task in
    one line and exits 5 at once, no traceback; the job exits 5."""
    model_dir = tmp_path / "ps_run"
    job = start_local_cluster(
        tmp_path,
        ["--workers=1", "--ps=1", "--kill_timeout=2"],
        ["--train_steps=100000", *long_job_args("parameter_server", cifar_bin, model_dir)],
    )
    result = fault_at_step(job, "chief0", 15, "ps0", signal.SIGKILL)  # ckpt-10 written by then
    assert result["status"] == PEER_LOST_EXIT, result["output"][-3000:]
    assert "Traceback" not in result["output"], result["output"][-3000:]
    latest = tf.train.latest_checkpoint(str(model_dir))
    (line,) = result["errors"]
    assert line.startswith("[chief0] error: ps 0 ended or stopped answering ("), line
    assert latest and line.endswith(f"; rerun the job to resume from {latest}\n")
    assert result["ended_in"] < 5


def test_an_error_line_is_one_write(monkeypatch):
    """The one line is written with its newline in one write: ``print`` wrote the newline
    apart, and under load gRPC's own "failed to connect ... Connection refused", logged to the
    same stream by a thread of the surviving task as the chief died, landed between the two
    (the survivor's line then ended with gRPC's text: ``[kill-0]`` above, beside two
    trainings on 2026-11-26, in 1 of 2 whole repeats of its family)."""
    writes = []

    class Stream:
        def write(self, text):
            writes.append(text)

        def flush(self):
            writes.append("<flush>")

    monkeypatch.setattr(sys, "stderr", Stream())
    say("error: worker 0 (chief) ended or stopped answering (...); rerun the job")
    assert writes == [
        "error: worker 0 (chief) ended or stopped answering (...); rerun the job\n",
        "<flush>",
    ]


def test_stopping_the_peer_watch_waits_for_its_request_in_flight(monkeypatch):
    """``PeerWatch.stop`` (training over) returns once the status request in flight has
    answered, and no request follows: a thread still in gRPC's C++ as Python finalizes can
    abort the process (CPython gh-87135)."""
    from resnet_noBN.host import peers

    asked, answer = [], threading.Event()

    def probe(address, timeout_s=peers.PROBE_TIMEOUT_S):
        asked.append(address)
        answer.wait(30)  # a request in flight until the test lets it answer
        return None

    monkeypatch.setattr(peers, "probe", probe)
    watch = peers.PeerWatch({"10.0.0.1:2222": "worker 0 (chief)"}, timeout_s=0.4).start()
    deadline = time.monotonic() + 60
    while not asked and time.monotonic() < deadline:
        time.sleep(0.01)
    assert asked == ["10.0.0.1:2222"]
    threading.Timer(0.2, answer.set).start()
    watch.stop()
    assert answer.is_set() and not watch._thread.is_alive()
    time.sleep(3 * watch.interval_s)
    assert asked == ["10.0.0.1:2222"]


def scratch_folders(tmp_path):
    """The non-chief scratch checkpoint folders in the job's TMPDIR (a killed process also
    leaves TensorFlow's autograph files there)."""
    return [p.name for p in (tmp_path / "tmp").glob("resnet_noBN-*")]


def test_preempting_the_job_saves_one_step_on_every_worker_and_resumes(tmp_path, cifar_bin):
    """SIGTERM to the launcher (as a scheduler would): both workers agree on a step, save it
    and exit 3, and so does the launcher; the rerun resumes there: 0 steps lost."""
    model_dir = tmp_path / "run"
    args = [
        "--strategy=multi_worker",
        f"--data_path={cifar_bin}",
        f"--model_dir={model_dir}",
        "--checkpoint_every=1000",
        "--eval_every=1000",
        *SMALL,
    ]
    job = start_local_cluster(tmp_path, ["--workers=2"], ["--train_steps=100000", *args])
    pids, output = [], []
    for line in job.stdout:
        output.append(line)
        if line.startswith("started "):
            pids.append(int(line.split("pid=")[1]))
        if line.startswith("[worker0] step      10 "):  # training is under way
            job.send_signal(signal.SIGTERM)
            break
    output = "".join(output) + job.communicate(timeout=120)[0]
    assert job.returncode == 3, output[-3000:]
    assert "preempted: every trainer saved a checkpoint" in output
    steps = {
        name: int(output.split(f"[{name}] preempted at step ")[1].split(":")[0])
        for name in ("worker0", "worker1")
    }
    saved = steps["worker0"]
    assert steps["worker1"] == saved > 10
    assert tf.train.latest_checkpoint(str(model_dir)) == f"{model_dir}/ckpt-{saved}"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert scratch_folders(tmp_path) == []

    proc = local_cluster(tmp_path, ["--workers=2"], [f"--train_steps={saved + 5}", *args])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"resumed from {model_dir}/ckpt-{saved} at step {saved}" in proc.stdout
    results = final_lines(proc.stdout)
    assert results["worker0"]["final_step"] == saved + 5
    assert results["worker0"]["weights_sha256"] == results["worker1"]["weights_sha256"]


# ---------------------------------------------------------------------------------------------
# The local job's network: TensorFlow's gRPC server listens on every interface (no address can be
# given), and takes no authentication; launch/local_cluster.py runs the job in a network
# namespace of its own with only loopback (--network=loopback, the default).


def listening_sockets(pid: int) -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(address, port) of every listening TCP socket that process `pid` holds (its open file
    descriptors matched by inode against its network namespace's /proc/<pid>/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    out = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A: TCP_LISTEN
                    continue
                hex_address, hex_port = local.split(":")
                raw = bytes.fromhex(hex_address)  # 32-bit words in host (little-endian) order
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                out.append((ipaddress.ip_address(raw), int(hex_port, 16)))
    return out


def is_loopback(address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def interfaces(pid: int) -> set[str]:
    """The network interfaces of process `pid`'s network namespace."""
    with open(f"/proc/{pid}/net/dev") as f:
        return {line.split(":")[0].strip() for line in f.readlines()[2:]}


def reachable_from_other_hosts(pid: int) -> list[str]:
    """The listening sockets of `pid` that another host could reach: bound to an address other
    than loopback (the wildcard included) in a namespace that has an interface besides lo."""
    if interfaces(pid) <= {"lo"}:
        return []
    return [f"{a}:{p}" for a, p in listening_sockets(pid) if not is_loopback(a)]


def test_listening_sockets_are_read_with_their_addresses():
    """The check itself, on sockets of this process: loopback, IPv4 and dual-stack wildcards.
    An IPv4 and an IPv6 socket may hold the same port (the kernel drew one for both in a run
    of 2026-12-07), so ``::1`` takes the IPv4 wildcard's port here, and each socket is known
    by its address and port."""
    with (
        socket.socket() as lo,
        socket.socket() as any4,
        socket.socket(socket.AF_INET6) as any6,
        socket.socket(socket.AF_INET6) as lo6,
        socket.socket() as unbound,
    ):
        for s, address in ((lo, "127.0.0.1"), (any4, "0.0.0.0"), (any6, "::")):
            s.bind((address, 0))
        lo6.bind(("::1", any4.getsockname()[1]))
        for s in (lo, any4, any6, lo6):
            s.listen()
        unbound.bind(("127.0.0.1", 0))  # bound, not listening
        found = listening_sockets(os.getpid())
        assert sorted(found, key=str) == sorted(
            [
                (ipaddress.ip_address(s.getsockname()[0]), s.getsockname()[1])
                for s in (lo, any4, any6, lo6)
            ],
            key=str,
        )
        assert {str(a): is_loopback(a) for a, _ in found} == {
            "127.0.0.1": True,
            "0.0.0.0": False,
            "::": False,
            "::1": True,
        }
    assert is_loopback(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert "lo" in interfaces(os.getpid())


def test_local_job_ports_are_unreachable_from_other_hosts(tmp_path, cifar_bin):
    """During a 2-worker job no listening socket of the job can be reached from another host:
    the workers share a network namespace with only loopback, their gRPC ports listen there."""
    job = start_local_cluster(
        tmp_path,
        ["--workers=2"],
        [
            "--strategy=multi_worker",
            f"--data_path={cifar_bin}",
            f"--model_dir={tmp_path / 'run'}",
            "--train_steps=100000",
            "--checkpoint_every=1000",
            "--eval_every=1000",
            *SMALL,
        ],
    )
    pids, output = {}, []
    for line in job.stdout:
        output.append(line)
        if line.startswith("network: no namespace of its own"):
            job.send_signal(signal.SIGTERM)
            job.communicate(timeout=120)
            pytest.skip(line.strip())
        if line.startswith("started "):
            pids[line.split()[1]] = int(line.split("pid=")[1])
        if line.startswith("[worker0] step ") and "loss" in line:  # both servers are up
            break
    try:
        assert set(pids) == {"worker0", "worker1"}, "".join(output[-30:])
        namespaces = {os.readlink(f"/proc/{pid}/ns/net") for pid in pids.values()}
        assert len(namespaces) == 1, "the tasks must share one namespace (they talk on 127.0.0.1)"
        assert namespaces != {os.readlink("/proc/self/ns/net")}
        for name, pid in pids.items():
            assert interfaces(pid) == {"lo"}, name
            assert listening_sockets(pid), f"{name} holds no listening socket: its gRPC server?"
            assert reachable_from_other_hosts(pid) == [], name
    finally:
        job.send_signal(signal.SIGTERM)
        output.append(job.communicate(timeout=120)[0])
    assert job.returncode == 3, "".join(output)[-3000:]


PROBE = """
import json, os, time
devices = open('/proc/self/net/dev').readlines()[2:]
print(json.dumps({'uid': os.getuid(), 'netns': os.readlink('/proc/self/ns/net'),
    'interfaces': sorted(line.split(':')[0].strip() for line in devices)}), flush=True)
# a barrier: the job stops the other tasks once its trainers exit, so none exits before all reported
config = json.loads(os.environ['TF_CONFIG'])
here = os.path.join(os.environ['TMPDIR'], 'reported')
os.makedirs(here, exist_ok=True)
open(os.path.join(here, config['task']['type'] + str(config['task']['index'])), 'w').close()
tasks = sum(len(addresses) for addresses in config['cluster'].values())
deadline = time.monotonic() + 60
while len(os.listdir(here)) < tasks and time.monotonic() < deadline:
    time.sleep(0.05)
"""  # a task that reports its user and network, then waits for the others to have reported


def probe_job(tmp_path, cluster_args, prefix=()):
    """local_cluster.py with the PROBE as each task (under `prefix`, e.g. unshare): the finished
    process and the tasks' reports by name."""
    proc = subprocess.run(
        [
            *prefix,
            sys.executable,
            str(REPO / "launch/local_cluster.py"),
            *cluster_args,
            "--",
            sys.executable,
            "-c",
            PROBE,
        ],
        capture_output=True,
        text=True,
        env=job_env(tmp_path),
        timeout=120,
    )
    reports = {}
    for line in proc.stdout.splitlines():
        if line.startswith("[") and "] {" in line:
            name, text = line[1:].split("] ", 1)
            reports[name] = json.loads(text)
    return proc, reports


def task_job(tmp_path, task: str) -> subprocess.CompletedProcess:
    """``launch/local_cluster.py --workers=2`` of ``python -c task``, finished."""
    return subprocess.run(
        [sys.executable, str(REPO / "launch/local_cluster.py"), "--workers=2", "--"]
        + [sys.executable, "-c", task],
        capture_output=True,
        text=True,
        env=job_env(tmp_path),
        timeout=60,
    )


def test_the_job_exits_with_the_status_of_the_task_that_failed_first(tmp_path):
    """Worker 0 exits 4 (a full disk on the chief); worker 1, stopped, says it lost its peer
    and exits 5, as a real one would: the job's status is 4, the cause, not 5."""
    task = (
        "import json, os, signal, sys, time\n"
        "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 0:\n"
        "    sys.exit(4)\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))\n"
        "time.sleep(60)\n"
    )
    proc = task_job(tmp_path, task)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "worker0 exited with status 4; stopping the job" in proc.stdout
    assert "a task of the job was lost" not in proc.stdout


def test_a_line_a_task_left_unfinished_is_ended_before_the_next_tasks_line(tmp_path):
    """Worker 0 writes a step line without its newline and dies, as a chief killed between
    ``print``'s two writes does; worker 1's line then starts a line of its own (``[kill-0]``
    above, in CI on 2026-12-04: the survivor's error line was glued to the chief's last step)."""
    task = (
        "import json, os, sys, time\n"
        "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 0:\n"
        "    sys.stdout.write('step 20'); sys.stdout.flush(); os._exit(0)\n"
        "time.sleep(0.5); print('error: worker 0 (chief) ended')\n"
    )
    proc = task_job(tmp_path, task)
    lines = proc.stdout.splitlines()
    assert "[worker0] step 20" in lines and "[worker1] error: worker 0 (chief) ended" in lines, (
        proc.stdout
    )


def test_two_tasks_writing_at_once_keep_their_lines_whole(tmp_path):
    """Both workers write 2,000 lines as fast as they can: each line of the job's output is one
    task's line whole (a newline written apart from its line let the other task's line in
    between: ``[worker1] preempted at step 5: ...[worker0] preempted at step 5: ...`` under
    pytest-xdist, 2026-12-04)."""
    task = (
        "import json, os\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "for i in range(2000): print(f'line {i} of task {index}', flush=True)\n"
    )
    proc = task_job(tmp_path, task)
    lines = [line for line in proc.stdout.splitlines() if "line " in line]
    assert len(lines) == 4000, proc.stdout[-2000:]
    for line in lines:
        name, text = line.split("] ", 1)
        assert text.endswith(f"of task {name[-1]}") and text.count("line ") == 1, line


def test_local_cluster_tasks_share_a_loopback_only_namespace(tmp_path):
    proc, reports = probe_job(tmp_path, ["--workers=2", "--ps=1"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if "network: no namespace of its own" in proc.stdout:
        pytest.skip(proc.stdout.splitlines()[0])
    assert proc.stdout.splitlines()[0] == (
        "network: the tasks share a namespace with loopback only; no other host can reach "
        "their ports (--network=host to use this host's network)"
    )
    assert set(reports) == {"chief0", "worker0", "worker1", "ps0"}
    assert len({r["netns"] for r in reports.values()}) == 1
    for report in reports.values():
        assert report["netns"] != os.readlink("/proc/self/ns/net")
        assert report["interfaces"] == ["lo"]
        assert report["uid"] == os.getuid()


def test_local_cluster_network_host_keeps_this_hosts_network(tmp_path):
    proc, reports = probe_job(tmp_path, ["--workers=1", "--network=host"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "network: this host's (--network=host): the job's gRPC ports, which take no "
        "authentication, listen on every interface of this host; run on a trusted network only"
    )
    assert reports["worker0"]["netns"] == os.readlink("/proc/self/ns/net")


def unshare_user_works() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not unshare_user_works(), reason="no user namespaces here (unshare --user)")
def test_local_cluster_needs_no_root(tmp_path):
    """Run by a user who is not root (uid 1000 in a user namespace of the test's): the job
    still gets its loopback-only namespace, through a user namespace that maps only that user."""
    proc, reports = probe_job(
        tmp_path, ["--workers=2"], ["unshare", "--map-user=1000", "--map-group=1000"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("network: the tasks share a namespace with loopback only")
    assert [r["uid"] for r in reports.values()] == [1000, 1000]
    assert [r["interfaces"] for r in reports.values()] == [["lo"], ["lo"]]


@pytest.mark.skipif(not unshare_user_works(), reason="no user namespaces here (unshare --user)")
def test_local_cluster_without_namespaces_says_so_and_runs(tmp_path):
    """Where no network namespace can be made (here: the limit of a user namespace set to 0),
    one line says so and the job runs on this host's network, with the usual exit status."""
    limit = 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"'
    proc, reports = probe_job(
        tmp_path, ["--workers=1"], ["unshare", "--map-root-user", "sh", "-c", limit, "sh"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "network: no namespace of its own (unshare: No space left on device; with a user "
        "namespace: No space left on device): the tasks use this host's network and their gRPC "
        "ports, which take no authentication, listen on all its interfaces; run on a trusted "
        "network only"
    )
    assert reports["worker0"]["netns"] == os.readlink("/proc/self/ns/net")


def run_cifar(tmp_path, args, tf_config=None, env=None):
    if tf_config is not None and not isinstance(tf_config, str):
        tf_config = json.dumps(tf_config)
    env = {"TF_CONFIG": tf_config, **(env or {})}
    return launchers.run("launch/cifar.py", *args, env=env, timeout=120)


BAD_TF_CONFIG = [  # TF_CONFIG (None: unset), the start of the launch's last line
    (None, "error: --strategy=multi_worker needs TF_CONFIG"),
    (
        {"cluster": {"worker": ["127.0.0.1:1"]}},
        'error: TF_CONFIG has no "task" entry with "type" and "index"',
    ),
    (
        {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}},
        'error: TF_CONFIG task index 3 is out of range: the cluster has 1 "worker" task(s)',
    ),
    ("{not json", "error: TF_CONFIG is not valid JSON"),
]


@pytest.fixture(scope="module")
def bad_tf_config_runs(tmp_path_factory, cifar_bin):
    """Each BAD_TF_CONFIG case launched (two at a time): its --model_dir and its process."""
    root = tmp_path_factory.mktemp("tf_config")
    dirs = [root / f"run{i}" for i in range(len(BAD_TF_CONFIG))]
    args = ["--strategy=multi_worker", f"--data_path={cifar_bin}", *SMALL]
    launches = [
        functools.partial(
            run_cifar, root, [*args, f"--model_dir={d}"], tf_config, launchers.IMPORT_TIMES
        )
        for d, (tf_config, _) in zip(dirs, BAD_TF_CONFIG)
    ]
    return list(zip(dirs, launchers.run_many(launches)))


@pytest.mark.parametrize("case", range(len(BAD_TF_CONFIG)))
def test_bad_tf_config_is_one_line_and_status_2(bad_tf_config_runs, case):
    model_dir, proc = bad_tf_config_runs[case]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(BAD_TF_CONFIG[case][1])
    assert not model_dir.exists()
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES  # runs.preflight's


def test_port_in_use_is_one_line_and_status_2(tmp_path, cifar_bin):
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = run_cifar(
            tmp_path,
            [
                "--strategy=multi_worker",
                f"--data_path={cifar_bin}",
                f"--model_dir={tmp_path / 'run'}",
                *SMALL,
            ],
            {
                "cluster": {"worker": [f"127.0.0.1:{port}", "127.0.0.1:1"]},
                "task": {"type": "worker", "index": 0},
            },
        )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: port {port} of worker 0 (127.0.0.1:{port}) is in use: stop what holds it or "
        "give this task another port in TF_CONFIG"
    )


def test_batch_not_divisible_by_the_workers_stops_the_job(tmp_path, cifar_bin):
    proc = local_cluster(
        tmp_path,
        ["--workers=2"],
        [
            "--strategy=multi_worker",
            f"--data_path={cifar_bin}",
            f"--model_dir={tmp_path / 'run'}",
            *SMALL,
            "--batch_size=15",
        ],
    )
    assert proc.returncode == 2
    assert (
        "error: --batch_size=15 is not divisible by the 2 replicas; use a multiple of 2"
        in proc.stdout
    )
    assert not (tmp_path / "run").exists()


def test_parameter_server_needs_ps_tasks():
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": ["a:1"], "chief": ["b:1"]}, "task": {"type": "chief", "index": 0}}
    )
    try:
        with pytest.raises(cluster.ClusterError, match="it lacks ps"):
            cluster.parse_tf_config("parameter_server")
    finally:
        del os.environ["TF_CONFIG"]


def test_slurm_cluster_on_cpu_nodes(monkeypatch):
    """tensorflow/tensorflow#56894: no nvidia-smi, no GPUs: the CPU resolver still works."""
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    monkeypatch.setenv("SLURM_STEP_NODELIST", "node[07-08]")
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(distribute, "_has_nvidia_smi", lambda: False)
    resolver = distribute.slurm_resolver()
    assert resolver.cluster_spec().as_dict() == {"worker": ["node07:8888", "node08:8888"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.num_accelerators() == {}
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert not distribute.is_chief(resolver)


def test_slurm_outside_a_step(monkeypatch):
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    with pytest.raises(distribute.ClusterError, match="outside a SLURM step"):
        distribute.slurm_resolver()
