"""Scale-out on localhost: multi-worker, parameter servers, kill-and-resume, cluster errors."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from resnet_noBN import distribute
from resnet_noBN.training import scratch_dir_name

REPO = pathlib.Path(__file__).resolve().parents[1]

SMALL = [
    "--num_residual_units=1",
    "--stage_widths=16,32,64",
    "--batch_size=16",
    "--eval_batch_size=20",
    "--log_every=5",
    "--seed=1",
]


@pytest.fixture(scope="module")
def cifar_bin(tmp_path_factory, write_cifar):
    folder = tmp_path_factory.mktemp("cifar-10-batches-bin")
    write_cifar(folder, "cifar10", 32)
    return folder


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


def local_cluster(tmp_path, cluster_args, launcher_args, **kwargs):
    """The finished job."""
    return subprocess.run(
        cluster_command(cluster_args, launcher_args),
        capture_output=True,
        text=True,
        env=job_env(tmp_path),
        timeout=300,
        **kwargs,
    )


def start_local_cluster(tmp_path, cluster_args, launcher_args):
    """The running job, its output (stderr included) to read line by line."""
    return subprocess.Popen(
        cluster_command(cluster_args, launcher_args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=job_env(tmp_path),
    )


def final_lines(stdout: str) -> dict[str, dict]:
    """task name -> the JSON line it ended with."""
    lines = {}
    for line in stdout.splitlines():
        if line.startswith("[") and '] {"dataset"' in line:
            name, text = line[1:].split("] ", 1)
            lines[name] = json.loads(text)
    return lines


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
    # the chief's files only: one checkpoint series, one metrics file; no leftover temp dirs
    assert sorted(p.name for p in model_dir.iterdir()) == [
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
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-15")
    reader = tf.train.load_checkpoint(str(model_dir))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 15


def test_killed_worker_job_resumes_from_the_last_checkpoint(tmp_path, cifar_bin):
    """SIGKILL worker 1 mid-run; the job stops; rerun: it resumes at the last checkpoint."""
    model_dir = tmp_path / "run"
    args = [
        "--strategy=multi_worker",
        f"--data_path={cifar_bin}",
        f"--model_dir={model_dir}",
        "--checkpoint_every=10",
        "--eval_every=100000",
        *SMALL,
    ]
    job = start_local_cluster(
        tmp_path, ["--workers=2", "--kill_timeout=5"], ["--train_steps=100000", *args]
    )
    pids, killed_at, output = {}, None, []
    deadline = time.monotonic() + 240
    for line in job.stdout:
        output.append(line)
        if line.startswith("started "):
            name, pid = line.split()[1], int(line.split("pid=")[1])
            pids[name] = pid
        if line.startswith("[worker0] step ") and "loss" in line:
            step = int(line.split()[2])
            if step >= 30 and killed_at is None:
                killed_at = step
                os.kill(pids["worker1"], signal.SIGKILL)
        assert time.monotonic() < deadline, "".join(output[-50:])
    assert job.wait(timeout=60) == 128 + signal.SIGKILL, "".join(output[-30:])
    assert "worker1 exited with status 137; stopping the job" in "".join(output)
    saved = int(tf.train.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
    assert saved % 10 == 0 and killed_at - 10 <= saved  # no step lost beyond the interval

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


def run_cifar(tmp_path, args, tf_config=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config if isinstance(tf_config, str) else json.dumps(tf_config)
    return subprocess.run(
        [sys.executable, str(REPO / "launch/cifar.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "tf_config, message",
    [
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
    ],
)
def test_bad_tf_config_is_one_line_and_status_2(tmp_path, cifar_bin, tf_config, message):
    model_dir = tmp_path / "run"
    proc = run_cifar(
        tmp_path,
        ["--strategy=multi_worker", f"--data_path={cifar_bin}", f"--model_dir={model_dir}", *SMALL],
        tf_config,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not model_dir.exists()


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
        with pytest.raises(distribute.ClusterError, match="it lacks ps"):
            distribute.parse_tf_config("parameter_server")
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
