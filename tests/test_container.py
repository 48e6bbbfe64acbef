"""The image of docker/Dockerfile built by docker/build.sh and run for real, alone and as the
2-worker job of docker/compose.yaml.

Runs where a container engine can: a Docker daemon that answers, or root with podman (Debian's
podman, runc, mmdebstrap and podman-compose, installed now if missing: `build.sh setup-podman`);
skipped with the reason elsewhere. The image is built once per session with CPU-only TensorFlow
(`build.sh --cpu`); where python:3.11-slim-bookworm cannot be pulled, build.sh builds its Debian
stand-in. The host's CA bundle goes to pip in the build (a TLS-intercepting proxy). Every run is
the image's own user, UID 1000, on real CIFAR files mounted from the host (binary files written by
the test), with its --model_dir a host folder; nothing needs a GPU or a registry but PyPI and
Debian's mirror.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "docker" / "build.sh"
COMPOSE = REPO / "docker" / "compose.yaml"
TAG = "localhost/resnet-nobn:test"
IMAGE_UID = 1000
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
SMALL = [
    "--model=small",
    "--batch_size=16",
    "--eval_batch_size=32",
    "--seed=1",
]
# a run long enough to be stopped mid-way: a log line per step, no periodic checkpoint
STOPPABLE = [
    *SMALL,
    "--train_steps=150",
    "--log_every=1",
    "--checkpoint_every=1000",
    "--eval_every=1000",
]


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _engine() -> tuple[str | None, str]:
    """(docker or podman, None) or (None, why neither can run the image here)."""
    if _docker_answers():
        return "docker", ""
    if os.geteuid() != 0:
        return None, "no Docker daemon answers, and rootful podman needs root"
    if not shutil.which("podman") and not shutil.which("apt-get"):
        return None, "no Docker daemon answers, no podman, and no apt-get to install it"
    setup = subprocess.run(
        [str(BUILD), "setup-podman"], capture_output=True, text=True, timeout=900
    )
    if setup.returncode:
        return None, f"build.sh setup-podman failed: {setup.stderr.strip()[-200:]}"
    return "podman", ""


def _compose(engine: str) -> list[str] | None:
    if engine == "podman":
        return ["podman-compose"] if shutil.which("podman-compose") else None
    for cmd in (["docker", "compose"], ["docker-compose"]):
        try:
            if subprocess.run([*cmd, "version"], capture_output=True).returncode == 0:
                return cmd
        except OSError:
            pass
    return None


@pytest.fixture(scope="module")
def engine():
    name, why = _engine()
    if name is None:
        pytest.skip(why)
    return name


@pytest.fixture(scope="module")
def image(engine):
    """The CPU image built by build.sh (layers cached by the engine across sessions)."""
    args = [str(BUILD), "--engine", engine, "--cpu", "-t", TAG]
    if HOST_CA.is_file():
        args += ["--ca-bundle", str(HOST_CA)]
    build = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, (build.stdout[-3000:], build.stderr[-3000:])
    assert re.search(r"^build\.sh: built \S+ in \d+ s, \d+ MB$", build.stdout, re.M), build.stdout
    return TAG


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_cifar) -> Path:
    """A host folder holding cifar-10-batches-bin/ (16 records per file), readable by all."""
    root = tmp_path_factory.mktemp("data")
    write_cifar(root / "cifar-10-batches-bin", "cifar10", 16)
    for path in (root, *root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def runs_folder(path: Path) -> Path:
    """A host folder the image's user can write (the test runs as root: hand it over)."""
    path.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(path, IMAGE_UID, IMAGE_UID)
    else:
        path.chmod(0o777)
    return path


def run_args(engine, image, data, runs, *flags, name=None):
    return [
        engine,
        "run",
        "--rm",
        *(["--name", name] if name else []),
        "--network=none",
        "-v",
        f"{data}:/data:ro",
        "-v",
        f"{runs}:/runs",
        image,
        "--data_path=/data/cifar-10-batches-bin",
        *flags,
    ]


def run_image(engine, image, data, runs, *flags):
    """The finished `run_args` container."""
    return subprocess.run(
        run_args(engine, image, data, runs, *flags), capture_output=True, text=True, timeout=600
    )


def final(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# One container


def test_image_runs_as_its_user_and_has_the_pinned_tensorflow(engine, image):
    """As its user (UID 1000), with the pinned TensorFlow; /tmp empty as the image starts (the
    build leaves no cache there that the user could not write), so matplotlib keeps its cache in
    the image's MPLCONFIGDIR and warns of nothing."""
    proc = subprocess.run(
        [
            engine,
            "run",
            "--rm",
            "--network=none",
            "--entrypoint",
            "python",
            image,
            "-c",
            "import json, os; left = os.listdir('/tmp'); import matplotlib, tensorflow as tf; "
            "print(json.dumps([os.getuid(), os.getgid(), tf.__version__, left, "
            "matplotlib.get_configdir()]))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [1000, 1000, "2.21.0", [], "/tmp/matplotlib"]
    assert "matplotlib" not in proc.stderr.lower(), proc.stderr[-2000:]


@pytest.fixture(scope="module")
def pod_run(engine, image, data):
    """The stoppable run, straight through, in what docker/k8s/ gives the pods: a read-only
    root with a tmpfs on /tmp, no capabilities, no privilege escalation, no network; /runs a
    fresh named volume (owned by the image's user through its mount point). The finished
    process."""
    volume = f"resnet-nobn-test-runs-{os.getpid()}"
    try:
        return subprocess.run(
            [
                engine,
                "run",
                "--rm",
                "--read-only",
                "--tmpfs",
                "/tmp",
                "--cap-drop",
                "ALL",
                "--security-opt",
                "no-new-privileges",
                "--network=none",
                "-v",
                f"{data}:/data:ro",
                "-v",
                f"{volume}:/runs",
                image,
                "--data_path=/data/cifar-10-batches-bin",
                "--model_dir=/runs/t",
                *STOPPABLE,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        subprocess.run([engine, "volume", "rm", "-f", volume], capture_output=True)


def test_image_trains_like_a_kubernetes_pod_read_only_root_no_capabilities_fresh_volume(pod_run):
    assert pod_run.returncode == 0, pod_run.stdout[-2000:] + pod_run.stderr[-2000:]
    assert final(pod_run.stdout)["final_step"] == 150


@pytest.fixture(scope="module")
def uninterrupted_digest(pod_run):
    """weights_sha256 of the stoppable run, run straight through in one container (a pod's)."""
    assert pod_run.returncode == 0, pod_run.stderr[-3000:]
    return final(pod_run.stdout)["weights_sha256"]


def test_stop_saves_the_step_reached_exits_3_and_the_rerun_resumes_bit_identically(
    engine, image, data, tmp_path, uninterrupted_digest
):
    """On CIFAR files mounted from the host, --model_dir a host folder: `docker stop` (SIGTERM
    to the entrypoint, PID 1) mid-run writes a checkpoint of the step reached there, as the
    image's user, and exits 3; the same command resumes from it and ends with the weights of
    the run that was never stopped (a pod's), its evaluation of the 16 test images written."""
    runs = runs_folder(tmp_path / "runs")
    name = f"resnet-nobn-test-stop-{os.getpid()}"
    args = run_args(engine, image, data, runs, "--model_dir=/runs/t", *STOPPABLE, name=name)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step      20 "):
                subprocess.run(
                    [engine, "stop", "-t", "120", name], capture_output=True, timeout=180
                )
                break
        lines += proc.stdout.readlines()
        status = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run([engine, "rm", "-f", name], capture_output=True)
    output = "".join(lines)
    assert status == 3, output[-3000:]
    assert "SIGTERM received: saving a checkpoint" in output
    saved = int(re.search(r"^preempted at step (\d+): ", output, re.M).group(1))
    assert 20 <= saved < 150 and f"step {saved:>7d}  loss" in output
    for file in ("config.json", "checkpoint", f"ckpt-{saved}.index"):
        assert (runs / "t" / file).is_file(), file
    assert (runs / "t" / f"ckpt-{saved}.index").stat().st_uid == IMAGE_UID

    resumed = run_image(engine, image, data, runs, "--model_dir=/runs/t", *STOPPABLE)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from /runs/t/ckpt-{saved} at step {saved}" in resumed.stdout.splitlines()
    assert final(resumed.stdout)["final_step"] == 150
    assert final(resumed.stdout)["test_examples"] == 16
    assert final(resumed.stdout)["weights_sha256"] == uninterrupted_digest
    for file in ("metrics.jsonl", "ckpt-150.index"):
        assert (runs / "t" / file).is_file(), file
    assert (runs / "t" / "ckpt-150.index").stat().st_uid == IMAGE_UID


# ---------------------------------------------------------------------------------------------
# The 2-worker job of docker/compose.yaml


class Job:
    """docker/compose.yaml as it is, but for what this machine lacks: no GPU (its `deploy:`
    blocks dropped, as the file's comment says), the built image (no `build:`), the test's
    folders for ../data and ../runs, and small-run flags appended to the workers' command."""

    def __init__(self, engine, compose, image, data, runs, project, flags):
        import yaml

        config = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
        config["name"] = project
        config = {k: v for k, v in config.items() if not k.startswith("x-")}
        self.containers = {}
        for name, service in config["services"].items():
            del service["deploy"], service["build"]
            service["image"] = image
            service["container_name"] = self.containers[name] = f"{project}-{name}"
            service["volumes"] = [
                v.replace("../data:/data", f"{data}:/data").replace(
                    "../runs:/runs", f"{runs}:/runs"
                )
                for v in service["volumes"]
            ]
            service["command"] = [*service["command"], "--data_path=/data/cifar-10-batches-bin"]
            service["command"] += flags
        self.file = runs.parent / "compose.yaml"
        self.file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.engine, self.base = engine, [*compose, "-p", project, "-f", str(self.file)]
        self.networks = [f"{project}_{n}" for n in config.get("networks", {})]

    def __call__(self, *args, timeout=600):
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)

    def logs(self, service) -> str:
        proc = subprocess.run(
            [self.engine, "logs", self.containers[service]], capture_output=True, text=True
        )
        return proc.stdout + proc.stderr

    def exit_code(self, service) -> int:
        proc = subprocess.run(
            [self.engine, "inspect", "--format", "{{.State.ExitCode}}", self.containers[service]],
            capture_output=True,
            text=True,
        )
        return int(proc.stdout.strip())

    def results(self, service) -> list[dict]:
        return [json.loads(x) for x in re.findall(r'^\{"dataset".*$', self.logs(service), re.M)]

    def down(self):
        self("down", timeout=300)
        for network in self.networks:  # podman-compose 1.0.3's `down` leaves them
            subprocess.run([self.engine, "network", "rm", network], capture_output=True)


@pytest.fixture(scope="module")
def job(engine, image, data, tmp_path_factory):
    """Job(name, flags): the compose job named `name`, removed at the end of the module."""
    compose = _compose(engine)
    if compose is None:
        pytest.skip(f"no compose tool for {engine} (podman-compose, docker compose)")
    pytest.importorskip("yaml", reason="PyYAML is in the `test` extra: pip install -e .[test]")
    jobs = []

    def make(name, flags):
        runs = runs_folder(tmp_path_factory.mktemp(name) / "runs")
        jobs.append(Job(engine, compose, image, data, runs, f"rnt{os.getpid()}{name}", flags))
        return jobs[-1], runs

    yield make
    for j in jobs:
        j.down()


@pytest.fixture(scope="module")
def compose_straight(job):
    """The 2-worker job run straight through: (job, its runs folder)."""
    straight, runs = job("straight", STOPPABLE)
    up = straight("up")
    assert up.returncode == 0, (up.stdout[-3000:], up.stderr[-3000:])
    return straight, runs


def test_compose_job_trains_both_workers_to_the_same_weights(compose_straight):
    straight, runs = compose_straight
    assert [straight.exit_code(w) for w in ("worker0", "worker1")] == [0, 0]
    finals = [straight.results(w)[-1] for w in ("worker0", "worker1")]
    assert [f["final_step"] for f in finals] == [150, 150]
    assert finals[0]["weights_sha256"] == finals[1]["weights_sha256"]
    assert "2 replica(s) x 2 input pipeline(s)" in straight.logs("worker0")
    # only the chief writes the model dir
    assert (runs / "cifar10-2workers" / "ckpt-150.index").is_file()


def test_compose_stop_saves_on_both_workers_and_up_resumes(job, compose_straight, wait_for):
    """`compose stop` mid-run: both workers save the same step and exit 3; `compose up` again
    resumes both there and ends with the weights of the job that ran straight through."""
    stopped, runs = job("stopped", STOPPABLE)
    started = stopped("up", "-d")
    assert started.returncode == 0, started.stderr[-3000:]
    wait_for(lambda: "step      20 " in stopped.logs("worker0"), "step 20")
    # compose.yaml's stop_grace_period, given outright: podman-compose 1.0.3 ignores it and
    # stops with -t 10, too short beside two trainings (worker 1 killed: 137, 2026-12-06)
    stop = stopped("stop", "-t", "120")
    assert stop.returncode == 0, stop.stderr[-3000:]
    assert [stopped.exit_code(w) for w in ("worker0", "worker1")] == [3, 3]
    saved = {
        w: re.findall(r"^preempted at step (\d+): ", stopped.logs(w), re.M)
        for w in ("worker0", "worker1")
    }
    assert saved["worker0"] == saved["worker1"] and len(saved["worker0"]) == 1, saved
    step = int(saved["worker0"][0])
    assert 20 <= step < 150
    assert (runs / "cifar10-2workers" / f"ckpt-{step}.index").is_file()

    rerun = stopped("up")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    expected = compose_straight[0].results("worker0")[-1]["weights_sha256"]
    for w in ("worker0", "worker1"):
        logs = stopped.logs(w)
        assert stopped.exit_code(w) == 0, logs[-3000:]
        assert f"resumed from /runs/cifar10-2workers/ckpt-{step} at step {step}" in logs
        assert stopped.results(w)[-1]["final_step"] == 150
        assert stopped.results(w)[-1]["weights_sha256"] == expected
