"""docker/slurm/train_cifar.sbatch on a real one-node SLURM cluster (one_node_cluster.sh there).

Runs where the SLURM daemons can: as root, with Debian's slurm-wlm and munge installed (or
installable now); skipped with the reason elsewhere. The daemons listen on free ports and are
stopped at the end.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CLUSTER = REPO / "docker/slurm/one_node_cluster.sh"
SBATCH = REPO / "docker/slurm/train_cifar.sbatch"
# two workers on the one node, CPU-only: the overrides the sbatch script documents
CPU_NODE = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--gres=none"]
TRAIN = [
    "--model=small",
    "--batch_size=16",
    "--eval_batch_size=32",
    "--log_every=1",
    "--checkpoint_every=1000",
    "--eval_every=1000",
    "--train_steps=150",
    "--seed=1",
]


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the SLURM daemons need root"
    if shutil.which("slurmctld") and shutil.which("munged"):
        return None
    if not shutil.which("apt-get"):
        return "slurm-wlm and munge are not installed and there is no apt-get"
    install = subprocess.run([str(CLUSTER), "install"], capture_output=True, text=True, timeout=600)
    if install.returncode or not shutil.which("slurmctld"):
        return f"installing slurm-wlm and munge failed: {install.stderr.strip()[-200:]}"
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory, write_cifar):
    """(environment for sbatch/scontrol with the job's variables, the data folder)."""
    why = _why_not()
    if why:
        pytest.skip(why)
    state = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        [str(CLUSTER), "start", str(state)],
        capture_output=True,
        text=True,
        env=dict(os.environ, KILL_WAIT="20"),
        timeout=60,
    )
    if started.returncode:
        pytest.skip(f"the one-node SLURM cluster did not start: {started.stderr.strip()}")
    data = tmp_path_factory.mktemp("data") / "cifar-10-batches-bin"
    write_cifar(data, "cifar10", 16)
    runs = tmp_path_factory.mktemp("runs")
    (runs / "tmp").mkdir()
    env = dict(
        os.environ,
        SLURM_CONF=str(state / "slurm.conf"),
        REPO_DIR=str(REPO),
        RUNS_DIR=str(runs),
        PYTHON=sys.executable,
        TF_CPP_MIN_LOG_LEVEL="2",
        TMPDIR=str(runs / "tmp"),
    )
    try:
        yield env, data
    finally:
        subprocess.run([str(CLUSTER), "stop", str(state)], timeout=60)


def submit(env, run_name, data, *more) -> tuple[str, pathlib.Path]:
    """sbatch the script with the tests' flags (``more`` after them, winning)."""
    log = pathlib.Path(env["RUNS_DIR"]) / f"{run_name}.out"
    proc = subprocess.run(
        [
            "sbatch",
            "--parsable",
            *CPU_NODE,
            f"--output={log}",
            str(SBATCH),
            f"--data_path={data}",
            *TRAIN,
            *more,
        ],
        capture_output=True,
        text=True,
        env=dict(env, RUN_NAME=run_name),
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0], log


def job_state(env, job) -> str:
    text = subprocess.run(
        ["scontrol", "show", "job", job, "-o"], capture_output=True, text=True, env=env, timeout=30
    ).stdout
    return re.search(r"JobState=(\S+)", text).group(1)


def results(log: pathlib.Path) -> list[dict]:
    return [
        json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"dataset"')
    ]


@pytest.fixture(scope="module")
def uninterrupted(slurm, wait_for):
    """The log and state of the job run straight through."""
    env, data = slurm
    job, log = submit(env, "plain", data)
    wait_for(lambda: job_state(env, job) in ("COMPLETED", "FAILED", "CANCELLED"), "the job")
    return log, job_state(env, job)


def test_the_sbatch_script_trains_two_workers_to_the_same_weights(uninterrupted):
    log, state = uninterrupted
    assert state == "COMPLETED", log.read_text()[-3000:]
    finals = results(log)
    assert len(finals) == 2, log.read_text()[-3000:]
    assert finals[0]["final_step"] == finals[1]["final_step"] == 150
    assert finals[0]["weights_sha256"] == finals[1]["weights_sha256"]
    assert "2 replica(s) x 2 input pipeline(s)" in log.read_text()


def test_scontrol_requeue_checkpoints_requeues_and_resumes_with_no_step_lost(
    slurm, uninterrupted, wait_for
):
    """Both tasks get SIGTERM, agree on a step and save it; the requeued job resumes there and
    ends with the weights of the job that ran straight through, to the bit."""
    env, data = slurm
    job, log = submit(env, "requeued", data)
    wait_for(lambda: log.exists() and "step      30 " in log.read_text(), "step 30")
    subprocess.run(["scontrol", "requeue", job], check=True, env=env, timeout=30)
    wait_for(lambda: log.read_text().count("preempted at step ") == 2, "both workers to save")
    saved = set(re.findall(r"preempted at step (\d+):", log.read_text()))
    assert len(saved) == 1, log.read_text()[-3000:]  # both workers: the same step
    saved = int(saved.pop())
    assert 30 < saved < 150
    model_dir = pathlib.Path(env["RUNS_DIR"]) / "requeued"
    assert (model_dir / f"ckpt-{saved}.index").exists()

    # a requeued job waits ~2 minutes before it is eligible again: release it now
    wait_for(lambda: job_state(env, job) == "PENDING", "the requeued job to be pending")
    subprocess.run(
        ["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True, env=env, timeout=30
    )
    wait_for(lambda: job_state(env, job) in ("COMPLETED", "FAILED", "CANCELLED"), "the job")
    text = log.read_text()
    assert job_state(env, job) == "COMPLETED", text[-3000:]
    # the log holds both runs (--open-mode=append), and the second resumed at the saved step
    assert f"run 0 of job {job}" in text and f"run 1 of job {job}" in text
    assert text.count(f"resumed from {model_dir}/ckpt-{saved} at step {saved}") == 2
    finals = results(log)
    assert [r["final_step"] for r in finals] == [150, 150]
    assert (
        finals[0]["weights_sha256"]
        == finals[1]["weights_sha256"]
        == results(uninterrupted[0])[0]["weights_sha256"]
    )
    assert "Traceback" not in text


def test_the_sbatch_script_runs_a_jax_job_equal_to_one_process(slurm, tmp_path, wait_for):
    """KERAS_BACKEND=jax: the same script forms a JAX job from the step's variables (2 tasks of
    2 forced CPU devices); both tasks end with the weights of one process of 4 devices, to the
    bit, and only task 0 writes the folder."""
    env, data = slurm
    # PJRT_NPROC: the same XLA CPU pool in the tasks and in the one process, whatever cores
    # SLURM binds each task to (jax_backend.size_cpu_pool would size each by its own cores)
    jax_env = dict(
        env,
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        PJRT_NPROC="4",
    )
    steps = ("--train_steps=20", "--log_every=10")
    job, log = submit(jax_env, "jax", data, *steps)
    wait_for(lambda: job_state(env, job) in ("COMPLETED", "FAILED", "CANCELLED"), "the job")
    text = log.read_text()
    assert job_state(env, job) == "COMPLETED", text[-3000:]
    finals = results(log)
    assert [r["final_step"] for r in finals] == [20, 20], text[-3000:]
    assert "4 replica(s) x 2 input pipeline(s)" in text
    records = (pathlib.Path(env["RUNS_DIR"]) / "jax" / "train.jsonl").read_text().splitlines()
    assert len(records) == 2  # steps 10 and 20, written once

    one = subprocess.run(
        [
            sys.executable,
            "launch/cifar.py",
            "--strategy=mirrored",
            f"--data_path={data}",
            f"--model_dir={tmp_path / 'one'}",
            *TRAIN,
            *steps,
        ],
        cwd=REPO,
        env=dict(jax_env, XLA_FLAGS="--xla_force_host_platform_device_count=4"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    digest = json.loads(one.stdout.strip().splitlines()[-1])["weights_sha256"]
    assert finals[0]["weights_sha256"] == finals[1]["weights_sha256"] == digest
