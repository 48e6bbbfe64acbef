"""A JAX job of several processes (``--strategy=multi_worker`` on KERAS_BACKEND=jax,
``backends.jax_job``) on CPU: 2 processes of 2 forced CPU devices each, started by
``launch/local_cluster.py`` as a TensorFlow job would be, or one by one with their own TF_CONFIG.

Every process runs with ``sys.modules["tensorflow"] = None``: nothing on the JAX path imports it.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("jax")
import launchers  # noqa: E402
from launchers import REPO  # noqa: E402
from test_distributed import final_lines  # noqa: E402
from test_tensorflow_free_backends import NO_TF, backend_env, final_json  # noqa: E402

from resnet_noBN.configs.errors import PEER_LOST_EXIT, PREEMPTED_EXIT  # noqa: E402

STEPS = 10
# one process's devices, forced on the CPU
DEVICES = "--xla_force_host_platform_device_count={}"


def env(devices: int) -> dict:
    return {**backend_env("jax"), "XLA_FLAGS": DEVICES.format(devices)}


def flags(data, model_dir, **more) -> list[str]:
    """A small run: 1 block per stage, batch 8 (2 images per device of 4), seed 4."""
    values = {
        "data_path": data,
        "model_dir": model_dir,
        "model": "small",
        "batch_size": 8,
        "eval_batch_size": 16,
        "seed": 4,
        "learning_rate": 0.005,
        "train_steps": STEPS,
        "log_every": 1,
        "eval_every": STEPS,
        "checkpoint_every": 5,
        **more,
    }
    return [f"--{name}={value}" for name, value in values.items()]


def job(args, workers=2, devices=2) -> subprocess.Popen:
    """``launch/local_cluster.py --workers=2`` of TensorFlow-free launch/cifar.py processes,
    warm where they can be (``launchers.start``: the launcher and, through it, its tasks)."""
    argv = [
        sys.executable,
        str(REPO / "launch" / "local_cluster.py"),
        f"--workers={workers}",
        "--kill_timeout=20",
        "--",
        sys.executable,
        "-c",
        NO_TF,
        "--strategy=multi_worker",
        *args,
    ]
    return launchers.start(argv, env(devices), subprocess.PIPE, subprocess.STDOUT, cwd=REPO)


def shown(out: str) -> str:
    """A failed job's output for the assertion: the report of a worker that crashed (Python's
    fatal-error stack, which the output's tail cuts off behind the other workers' lines), then
    the last 3,000 characters."""
    lines = out.splitlines()
    crash = next((i for i, line in enumerate(lines) if "Fatal Python error" in line), None)
    if crash is None:
        return out[-3000:]
    worker = lines[crash].split("]")[0] + "]"
    report = [line for line in lines[crash:] if line.startswith(worker)][:80]
    return "\n".join(report) + "\n...\n" + out[-3000:]


def one_process(args, devices) -> dict:
    run = launchers.run(
        "launch/cifar.py", *args, env=env(devices), cwd=REPO, unimportable=("tensorflow",)
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return final_json(run.stdout)


def weights(model_dir) -> dict:
    with np.load(model_dir / f"ckpt-{STEPS}.npz") as saved:
        return {name: saved[name] for name in saved.files}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from resnet_noBN.datasets.cifar_data import write_random

    root = tmp_path_factory.mktemp("jaxjob")
    write_random(root / "data" / "cifar-10-batches-bin", "cifar10", 8)
    return root


@pytest.fixture(scope="module")
def whole(data):
    """The uninterrupted 2 x 2 job: (its output, its folder)."""
    run = job(flags(data / "data", data / "whole"))
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, shown(out)
    return out, data / "whole"


def test_two_processes_train_as_one_and_only_process_0_writes(data, whole):
    """2 processes x 2 devices: one job of 4 devices, the same weights on both processes; only
    process 0 writes the folder. The weights are those of 4 processes x 1 device and of one
    process of 4 devices bit for bit (the gradients summed in device order, whatever the
    collective's topology; every process's XLA CPU pool sized by the run's 4 devices), and
    within the JAX equivalence tests' tolerance of one device."""
    out, folder = whole
    finals = final_lines(out)
    assert set(finals) == {"worker0", "worker1"}
    assert {final["final_step"] for final in finals.values()} == {STEPS}
    assert finals["worker0"]["weights_sha256"] == finals["worker1"]["weights_sha256"]
    assert "4 replica(s) x 2 input pipeline(s)" in out
    written = sorted(p.name for p in folder.iterdir())
    assert "ckpt-10.npz" in written and "train.jsonl" in written
    records = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))  # one writer, not two
    config = json.loads((folder / "config.json").read_text())
    assert config["runtime"]["strategy"] == "multi_worker" and config["runtime"]["replicas"] == 4

    run = job(flags(data / "data", data / "4x1"), workers=4, devices=1)
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, shown(out)
    digests = {final["weights_sha256"] for final in final_lines(out).values()}
    assert digests == {finals["worker0"]["weights_sha256"]}
    four = one_process(flags(data / "data", data / "four", strategy="mirrored"), devices=4)
    assert four["weights_sha256"] == finals["worker0"]["weights_sha256"]
    one = one_process(flags(data / "data", data / "one"), devices=1)
    job_weights = weights(folder)
    for name, value in weights(data / "one").items():
        np.testing.assert_allclose(job_weights[name], value, rtol=1e-4, atol=1e-6)
    assert one["final_step"] == STEPS


def test_the_cpu_pool_is_sized_by_the_runs_devices_unless_the_user_sized_it(monkeypatch):
    """PJRT_NPROC = max(cores, the run's CPU devices); a PJRT_NPROC or NPROC of the user's is
    kept; the devices come from jax_num_cpu_devices, else XLA_FLAGS, else 1."""
    from resnet_noBN.backends.jax_backend import forced_cpu_devices, size_cpu_pool

    cores = len(os.sched_getaffinity(0))
    for name in ("PJRT_NPROC", "NPROC"):
        monkeypatch.delenv(name, raising=False)
    size_cpu_pool(cores + 3)
    assert os.environ["PJRT_NPROC"] == str(cores + 3)
    monkeypatch.delenv("PJRT_NPROC")
    size_cpu_pool(1)
    assert os.environ["PJRT_NPROC"] == str(cores)
    monkeypatch.setenv("PJRT_NPROC", "7")
    size_cpu_pool(64)
    assert os.environ["PJRT_NPROC"] == "7"
    monkeypatch.delenv("PJRT_NPROC")
    monkeypatch.setenv("NPROC", "5")
    size_cpu_pool(64)
    assert "PJRT_NPROC" not in os.environ
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false " + DEVICES.format(6))
    assert forced_cpu_devices() == 6
    monkeypatch.delenv("XLA_FLAGS")
    assert forced_cpu_devices() == 1


def test_sigterm_to_one_process_stops_every_process_at_one_step_and_resumes(data, whole):
    """SIGTERM to worker 1 alone: both processes save at the same call and exit 3, the launcher
    too; rerunning resumes there and ends with the uninterrupted job's weights."""
    args = flags(data / "data", data / "cut")
    run = job(args)
    lines, pids = [], {}
    for line in run.stdout:
        lines.append(line)
        if line.startswith("started worker"):
            name, pid = line.split()[1], int(line.split("pid=")[1])
            pids[name] = pid
        if line.startswith("[worker0] step       3"):
            os.kill(pids["worker1"], signal.SIGTERM)
            break
    rest, _ = run.communicate(timeout=300)
    out = "".join(lines) + rest
    assert run.returncode == PREEMPTED_EXIT, shown(out)
    assert "preempted: every trainer saved a checkpoint" in out
    stops = {
        line.split("]")[0][1:]: int(line.split("preempted at step ")[1].split(":")[0])
        for line in out.splitlines()
        if "preempted at step" in line
    }
    assert set(stops) == {"worker0", "worker1"} and len(set(stops.values())) == 1
    stopped = stops["worker0"]
    assert 3 <= stopped < STEPS
    index = json.loads((data / "cut" / "checkpoints.json").read_text())["checkpoints"]
    assert index[-1] == f"ckpt-{stopped}.npz"

    again = job(args)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, shown(out)
    assert f"resumed from {data / 'cut' / f'ckpt-{stopped}.npz'} at step {stopped}" in out
    finals = final_lines(out)
    expected = final_lines(whole[0])["worker0"]["weights_sha256"]
    assert {final["weights_sha256"] for final in finals.values()} == {expected}


PEER_TIMEOUT_S = 6


def start_processes(data, model_dir, free_port, **more) -> list[subprocess.Popen]:
    """Two processes of one job, each with its TF_CONFIG, training long into ``model_dir``."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    values = {
        "train_steps": 100000,
        "log_every": 50,
        "eval_every": 100000,
        "checkpoint_every": 100000,
        "peer_timeout_s": PEER_TIMEOUT_S,
        **more,
    }
    args = flags(data / "data", model_dir, **values)
    return [
        launchers.start(
            [sys.executable, str(REPO / "launch" / "cifar.py"), "--strategy=multi_worker", *args],
            {
                **env(2),
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
            },
            subprocess.PIPE,
            subprocess.STDOUT,
            cwd=REPO,
            new_session=True,
            unimportable=("tensorflow",),
        )
        for i in range(2)
    ]


def wait_training(proc) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("step "):
            return lines
    raise AssertionError("".join(lines)[-3000:])


def ended(proc, within_s) -> tuple[int, str, float]:
    start = time.monotonic()
    out, _ = proc.communicate(timeout=within_s)
    return proc.returncode, out, time.monotonic() - start


@pytest.fixture
def free_port():
    from resnet_noBN.host.cluster import free_ports

    return lambda: free_ports(1)[0]


def test_a_killed_process_ends_the_other_at_once(data, free_port):
    """Worker 1 killed: worker 0 ends within the peer timeout's bound, having written nothing
    half (every line of its train.jsonl whole), in one of the three ways the README's fault
    matrix names; which one comes first is the machine's timing, and a loaded machine meets
    each:

    * waiting in a collective, it fails at once: one line "process 0 of the JAX job lost a
      peer (...); rerun the job ...", exit 5;
    * not then in a collective (its step's computation, its Python between calls), its
      heartbeat watch finds worker 1's counter still for --peer_timeout_s: one line "process 1
      of the JAX job has not answered for 6 s (...); rerun the job ...", exit 5;
    * JAX's coordination client learns of the loss first and aborts it (SIGABRT, its fatal log
      line, no line of ours). (The client's ``missed_heartbeat_callback`` cannot replace the
      abort on jaxlib 0.10.2: calling a Python callback with its absl::Status throws
      std::bad_cast, which terminates the process the same way.)"""
    procs = start_processes(data, data / "killed", free_port)
    try:
        wait_training(procs[0])
        procs[1].kill()
        code, out, seconds = ended(procs[0], 60)
    finally:
        for proc in procs:
            proc.kill()
    # the watch's worst case: the timeout after the last beat it saw, read up to a watch
    # interval (PEER_TIMEOUT_S / 4) before the kill and checked a watch interval after: 9 s;
    # the rest is a loaded machine's scheduling
    assert seconds < PEER_TIMEOUT_S + 10, (seconds, out[-3000:])
    log = data / "killed" / "train.jsonl"  # a line every 50 steps, from process 0
    logged = log.read_text().splitlines() if log.exists() else []
    assert [json.loads(line)["step"] for line in logged] == list(
        range(50, 50 * len(logged) + 1, 50)
    )
    if code == -signal.SIGABRT:
        assert "JAX distributed service detected fatal errors" in out, out[-3000:]
        assert "/job:jax_worker/replica:0/task:1" in out, out[-3000:]  # the lost one
        return
    assert code == PEER_LOST_EXIT, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out[-3000:]
    assert errors[0].startswith(
        (
            "error: process 0 of the JAX job lost a peer (",
            f"error: process 1 of the JAX job has not answered for {PEER_TIMEOUT_S} s (",
        )
    ), errors[0]
    assert errors[0].endswith("; rerun the job to resume from its latest checkpoint"), errors[0]


def test_a_stopped_coordinator_ends_the_other_within_the_peer_timeout(data, free_port):
    """Worker 0 (the JAX coordinator) stopped (SIGSTOP): worker 1 ends within
    --peer_timeout_s, one line, exit 5, though its collective would wait forever; worker 0,
    continued, finds its peer gone and ends the same way."""
    procs = start_processes(data, data / "stopped", free_port)
    try:
        wait_training(procs[1])
        os.kill(procs[0].pid, signal.SIGSTOP)
        code, out, seconds = ended(procs[1], 60)
        os.kill(procs[0].pid, signal.SIGCONT)
        first_code, first_out, _ = ended(procs[0], 30)
    finally:
        for proc in procs:
            proc.kill()
    assert code == PEER_LOST_EXIT, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "process 0 of the JAX job has not answered for 6 s" in errors[0]
    # the silence counts from the last beat seen, which may come up to a watch interval
    # (PEER_TIMEOUT_S / 4) before the stop, later under load
    assert PEER_TIMEOUT_S / 2 <= seconds < PEER_TIMEOUT_S + 10
    assert first_code == PEER_LOST_EXIT, first_out[-3000:]


def test_a_failed_write_on_process_0_alone_ends_the_job_at_once(data, free_port, tmp_path):
    """Process 0 alone writes: a full disk there (a 1 MiB tmpfs holds ckpt-5, not ckpt-10)
    ends it with its one line and exit 4, at once, not after JAX's shutdown barrier; process 1
    ends on one line and exit 5 within seconds, though --peer_timeout_s is 60. Which of its
    lines comes first is the machine's timing: its gradient sum fails ("lost a peer"), or its
    heartbeat's call to the coordination service, which process 0 held ("the JAX job's
    coordinator, is gone"; met beside two trainings). ckpt-5 stays the latest."""
    from test_faults import small_disk

    with small_disk(tmp_path / "disk", "1m") as disk:
        procs = start_processes(
            data, disk / "run", free_port, checkpoint_every=5, peer_timeout_s=60
        )
        try:
            first_code, first_out, first_s = ended(procs[0], 120)
            code, out, seconds = ended(procs[1], 60)
        finally:
            for proc in procs:
                proc.kill()
        index = json.loads((disk / "run" / "checkpoints.json").read_text())["checkpoints"]
    assert first_code == 4, first_out[-3000:]
    errors = [line for line in first_out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: cannot write the checkpoint of step 10 into {disk / 'run'} (No space left"
    ), first_out[-3000:]
    assert seconds < 15, seconds
    assert index == ["ckpt-5.npz"]
    if code == -signal.SIGABRT:  # the race of test_a_killed_process_ends_the_other_at_once
        return
    assert code == PEER_LOST_EXIT, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        (
            "error: process 1 of the JAX job lost a peer (",
            "error: process 0, the JAX job's coordinator, is gone (",
        )
    ), errors
    assert errors[0].endswith("; rerun the job to resume from its latest checkpoint"), errors


def test_the_peer_watch_stops_before_the_interpreter_exits(monkeypatch):
    """The watch's beats go to the store (this process's counter, 0, 1, 2, ...; the peer's read),
    and ``stop``, registered with atexit when the watch starts, ends both threads and every call
    into the store: a call in flight as Python finalizes aborts the process (gh-87135)."""
    from jax._src.distributed import global_state

    from resnet_noBN.backends import jax_job

    calls = []

    class Store:  # the coordination client's two calls; the peer's counter moves at each read
        def key_value_set(self, key, value, allow_overwrite):
            calls.append(("set", key, value))

        def key_value_try_get(self, key):
            calls.append(("get", key))
            return str(len(calls))

    monkeypatch.setattr(global_state, "client", Store())
    monkeypatch.setattr(global_state, "process_id", 1)
    monkeypatch.setattr(global_state, "num_processes", 2)
    registered = []
    monkeypatch.setattr(jax_job.atexit, "register", registered.append)
    watch = jax_job.PeerWatch(timeout_s=2.0)  # a beat every 0.5 s
    watch.start()
    assert registered == [watch.stop]
    deadline = time.monotonic() + 60
    while len(calls) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.stop()
    assert not any(thread.is_alive() for thread in watch.threads)
    made = list(calls)
    assert made[:4] == [
        ("set", "resnet_noBN/alive/1", "0"),
        ("get", "resnet_noBN/alive/0"),
        ("set", "resnet_noBN/alive/1", "1"),
        ("get", "resnet_noBN/alive/0"),
    ]
    time.sleep(2 * watch.interval_s)
    assert calls == made  # none after stop


def test_the_job_is_read_from_tf_config_or_slurm(monkeypatch, free_port):
    """The coordinator is the chief (else worker 0), the process id the task's place after it;
    parameter servers are refused in one line; SLURM: the step's first node, tasks and rank."""
    from resnet_noBN.backends import jax_job
    from resnet_noBN.host.cluster import ClusterError

    chief, worker = f"127.0.0.1:{free_port()}", "10.0.0.2:2222"
    config = {"cluster": {"chief": [chief], "worker": ["10.0.0.1:2222", worker]}}
    monkeypatch.setenv("TF_CONFIG", json.dumps({**config, "task": {"type": "worker", "index": 1}}))
    assert jax_job.coordinates("tf_config") == (chief, 3, 2)
    monkeypatch.setenv("TF_CONFIG", json.dumps({**config, "task": {"type": "chief", "index": 0}}))
    assert jax_job.coordinates("tf_config") == (chief, 3, 0)
    config["cluster"]["ps"] = ["10.0.0.3:2222"]
    monkeypatch.setenv("TF_CONFIG", json.dumps({**config, "task": {"type": "chief", "index": 0}}))
    with pytest.raises(ClusterError, match="has ps tasks, which a JAX job has no use for"):
        jax_job.coordinates("tf_config")
    with pytest.raises(ClusterError, match="outside a SLURM step"):
        jax_job.coordinates("slurm")
    for name, value in {
        "SLURM_JOB_ID": "4097",
        "SLURM_STEP_NODELIST": "node[07-08]",
        "SLURM_NTASKS": "2",
        "SLURM_PROCID": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert jax_job.coordinates("slurm") == ("node07:61441", 2, 1)


def test_the_time_budget_stops_every_process_at_the_same_step(data):
    """--time_budget_s on a JAX job: process 0's clock decides, both processes save the same
    step and exit 3."""
    run = job(
        flags(
            data / "data",
            data / "budget",
            train_steps=100000,
            log_every=100000,
            eval_every=100000,
            checkpoint_every=100000,
            time_budget_s=2,
        )
    )
    out, _ = run.communicate(timeout=300)
    assert run.returncode == PREEMPTED_EXIT, shown(out)
    stops = {
        line.split("]")[0][1:]: line.split("reached at step ")[1].split(":")[0]
        for line in out.splitlines()
        if "time budget of 2 s reached at step" in line
    }
    assert set(stops) == {"worker0", "worker1"} and len(set(stops.values())) == 1, shown(out)
    index = json.loads((data / "budget" / "checkpoints.json").read_text())["checkpoints"]
    assert index == [f"ckpt-{stops['worker0']}.npz"]
