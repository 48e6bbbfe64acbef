"""The container and cluster files of docker/, checked without a Docker engine, cluster or GPU.

docker/Dockerfile against setup.py and the build context (/.dockerignore); docker/compose.yaml and
docker/k8s/*.yaml: their TF_CONFIGs form one valid cluster whose addresses are the workers' own
DNS names; docker/slurm/train_cifar.sbatch: valid bash that runs the launcher under srun. Every
launcher flag these files pass must be one that launch/cifar.py defines (--helpfull). The YAML
checks need PyYAML (the `test` extra).

Least privilege: the image's default user is a fixed unprivileged UID/GID that owns what the job
writes; the compose workers sit on an internal network with no published port; the Kubernetes
pods run unprivileged on a read-only root file system behind a NetworkPolicy that admits the
gRPC port only from the job's own pods. tests/test_container.py builds the image and runs it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath

import launchers
import pytest
from launchers import REPO

DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"  # the build context is the repository root
COMPOSE = REPO / "docker" / "compose.yaml"
K8S = REPO / "docker" / "k8s"
SBATCH = REPO / "docker" / "slurm" / "train_cifar.sbatch"
# The image's user: the Dockerfile's USER, compose's user:, Kubernetes' runAsUser/runAsGroup.
IMAGE_UID, IMAGE_GID = 1000, 1000
# The one path of the image's root file system the job writes (TMPDIR and the caches): an emptyDir
# where the root file system is read-only.
SCRATCH = "/tmp"


# ---------------------------------------------------------------------------------------------
# Helpers


def setup_kwargs() -> dict:
    """The literal keyword arguments of setup() in setup.py."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    call = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setup"
    )
    out = {}
    for kw in call.keywords:
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            pass  # e.g. long_description=open(...).read()
    return out


def pinned_tensorflow() -> str:
    pins = [
        r.split("==", 1)[1].split(";")[0].strip()
        for r in setup_kwargs()["install_requires"]
        if re.match(r"tensorflow\s*==", r)
    ]
    assert len(pins) == 1, "setup.py should pin tensorflow==X.Y.Z exactly once"
    return pins[0]


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each instruction; continuation lines joined, comments dropped
    (Docker drops comment lines also inside a continued instruction)."""
    out, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or (not current and not line.strip()):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        keyword, _, args = current.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        current = ""
    assert not current, "the Dockerfile ends inside a continued instruction"
    return out


def substitute(text: str, variables: dict[str, str]) -> str:
    """${VAR}, $VAR and ${VAR:-default} from `variables` (compose/Dockerfile interpolation)."""

    def repl(m):
        name, default = m.group(1) or m.group(3), m.group(2)
        return variables.get(name, default if default is not None else m.group(0))

    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", repl, text)


class Dockerfile:
    def __init__(self, path: Path):
        self.instructions = dockerfile_instructions(path.read_text(encoding="utf-8"))
        self.args: dict[str, str] = {}
        self.froms: list[str] = []
        self.copies: list[tuple[list[str], str]] = []  # (sources, absolute destination)
        self.volumes: list[str] = []
        self.exposed: list[str] = []
        self.runs: list[str] = []
        self.env: dict[str, str] = {}
        self.user: str | None = None
        self.entrypoint = self.cmd = None
        workdir = PurePosixPath("/")
        for keyword, args in self.instructions:
            if keyword == "ARG":
                name, _, default = args.partition("=")
                # an ARG's default may name an earlier ARG (BASE_IMAGE: ${PYTHON_VERSION})
                self.args[name.strip()] = substitute(default.strip().strip('"'), self.args)
            elif keyword == "FROM":
                self.froms.append(substitute(args.split()[0], self.args))
            elif keyword == "WORKDIR":
                workdir = workdir / substitute(args, self.args)
            elif keyword in ("COPY", "ADD"):
                words = json.loads(args) if args.startswith("[") else shlex.split(args)
                if any(w.startswith("--from") for w in words):
                    continue  # from another stage or image, not the build context
                words = [w for w in words if not w.startswith("--")]
                dest = PurePosixPath(words[-1])
                self.copies.append(
                    (words[:-1], str(workdir / dest) + ("/" if words[-1].endswith("/") else ""))
                )
            elif keyword == "VOLUME":
                self.volumes += json.loads(args) if args.startswith("[") else args.split()
            elif keyword == "EXPOSE":
                self.exposed += [p.split("/")[0] for p in args.split()]
            elif keyword == "RUN":
                self.runs.append(substitute(args, self.args))
            elif keyword == "ENV":
                for word in shlex.split(args):
                    name, _, value = word.partition("=")
                    self.env[name] = substitute(value, {**self.args, **self.env})
            elif keyword == "USER":
                self.user = substitute(args, self.args)
            elif keyword == "ENTRYPOINT":
                self.entrypoint = json.loads(args)
            elif keyword == "CMD":
                self.cmd = json.loads(args) if args.startswith("[") else args

    def index(self, keyword: str) -> int:
        """The position of the first `keyword` instruction."""
        return next(i for i, (k, _) in enumerate(self.instructions) if k == keyword)

    def owned_by(self, owner: str) -> set[str]:
        """The paths a RUN before VOLUME hands to `owner` ("UID:GID") with chown (Docker drops
        changes made to a volume's path after VOLUME)."""
        paths = set()
        for keyword, args in self.instructions[: self.index("VOLUME")]:
            if keyword != "RUN":
                continue
            commands, current = [], []
            for word in shlex.split(substitute(args, self.args)) + ["&&"]:
                if word in ("&&", ";", "||"):
                    commands, current = commands + [current], []
                else:
                    current.append(word)
            for words in commands:
                if words[:1] == ["chown"]:
                    words = [w for w in words[1:] if not w.startswith("-")]
                    if words and words[0] == owner:
                        paths.update(words[1:])
        return paths

    def repo_file_at(self, image_path: str) -> Path | None:
        """The repository file that ends up at `image_path` through a COPY, or None."""
        for sources, dest in self.copies:
            for src in sources:
                src_path = REPO / src
                if src_path.is_dir():
                    prefix = dest.rstrip("/") + "/"
                    if image_path.startswith(prefix):
                        return src_path / image_path[len(prefix) :]
                elif image_path == dest or (
                    dest.endswith("/") and image_path == dest + src_path.name
                ):
                    return src_path
        return None


def dockerignore_rules() -> list[tuple[bool, re.Pattern]]:
    """(is an exception '!', regex) per line of .dockerignore, in order."""
    rules = []
    for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        regex, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negate, re.compile(f"^{regex}$")))
    return rules


def dockerignored(relpath: str, rules) -> bool:
    """Whether Docker leaves `relpath` out of the context: the last rule that matches it or one
    of its parent folders decides."""
    parts = relpath.strip("/").split("/")
    candidates = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    excluded = False
    for negate, regex in rules:
        if any(regex.match(c) for c in candidates):
            excluded = not negate
    return excluded


@pytest.fixture(scope="module")
def yaml():
    return pytest.importorskip(
        "yaml", reason="PyYAML is in the `test` extra: pip install -e .[test]"
    )


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return Dockerfile(DOCKERFILE)


@pytest.fixture(scope="module")
def launcher_flags() -> dict[str, list[str] | None]:
    """Flags that launch/cifar.py defines (its --helpfull): name -> enum choices or None."""
    proc = launchers.run("launch/cifar.py", "--helpfull", cwd=REPO)
    flags = {}
    for m in re.finditer(r"^\s+--(?:\[no\])?(\w+):(?:\s+<([^>]*)>:)?", proc.stdout, re.M):
        flags[m.group(1)] = m.group(2).split("|") if m.group(2) else None
    assert {"strategy", "data_dir", "model_dir", "batch_size"} <= flags.keys(), proc.stdout[-2000:]
    return flags


def check_launcher_args(args: list[str], launcher_flags, where: str) -> None:
    """Assert every --flag in `args` is a launcher flag with a valid enum value."""
    for arg in args:
        if not arg.startswith("--"):
            continue
        name, has_value, value = arg[2:].partition("=")
        if name not in launcher_flags and name.startswith("no") and name[2:] in launcher_flags:
            name = name[2:]
        assert name in launcher_flags, f"{where}: launch/cifar.py defines no --{name}"
        choices = launcher_flags[name]
        if choices and has_value and "$" not in value:
            assert value in choices, f"{where}: --{name}={value} is not one of {choices}"


def check_cluster(tf_configs: dict[str, dict], own_hosts: dict[str, str], where: str) -> int:
    """TF_CONFIGs of all workers (keyed by worker name) form one cluster: the same cluster dict,
    each task exactly once, each worker's own address on its own host, one port (returned)."""
    clusters = [c["cluster"] for c in tf_configs.values()]
    assert all(c == clusters[0] for c in clusters), f"{where}: the workers' clusters differ"
    cluster = clusters[0]
    assert set(cluster) <= {"chief", "worker", "ps", "evaluator"}, cluster
    positions = {(t, i) for t, addrs in cluster.items() for i in range(len(addrs))}
    tasks = [(c["task"]["type"], c["task"]["index"]) for c in tf_configs.values()]
    assert len(set(tasks)) == len(tasks), f"{where}: two workers have the same task {tasks}"
    assert set(tasks) == positions, f"{where}: tasks {tasks} do not cover the cluster {cluster}"
    ports = set()
    for name, config in tf_configs.items():
        task_type, index = config["task"]["type"], config["task"]["index"]
        assert isinstance(index, int), f"{where}: task index {index!r} of {name} is not an int"
        host, _, port = cluster[task_type][index].rpartition(":")
        # The own name, or a fully qualified form of it (<name>.<namespace>.svc...).
        assert host == own_hosts[name] or host.startswith(own_hosts[name] + "."), (
            f"{where}: {name} is {task_type} {index}, whose address {host} is not its own "
            f"name {own_hosts[name]}"
        )
        ports.add(port)
    for addrs in cluster.values():
        ports.update(a.rpartition(":")[2] for a in addrs)
    assert len(ports) == 1 and next(iter(ports)).isdigit(), f"{where}: ports {ports}"
    return int(next(iter(ports)))


# ---------------------------------------------------------------------------------------------
# Dockerfile and build context


def test_dockerfile_tensorflow_is_the_one_setup_py_pins(dockerfile):
    pin = pinned_tensorflow()
    versions = []
    for image in dockerfile.froms:
        if image.startswith("tensorflow/tensorflow:"):
            versions.append(re.match(r"[\d.]+\d", image.split(":", 1)[1]).group(0))
    for run in dockerfile.runs:
        versions += re.findall(r"tensorflow(?:\[[\w,-]+\])?==([\w.]+)", run)
    assert versions, "the Dockerfile neither starts FROM tensorflow/tensorflow nor pip-installs it"
    assert set(versions) == {pin}, f"Dockerfile TensorFlow {versions}, setup.py pins {pin}"


def test_dockerfile_python_satisfies_python_requires(dockerfile):
    minimum = tuple(
        int(v)
        for v in re.match(r">=\s*([\d.]+)", setup_kwargs()["python_requires"]).group(1).split(".")
    )
    base = dockerfile.froms[-1]
    if not base.startswith("python:"):
        pytest.skip(f"the Python version of {base} is not in its tag")
    version = tuple(int(v) for v in re.match(r"python:(\d+\.\d+)", base).group(1).split("."))
    assert version >= minimum, f"{base}: Python {version} < python_requires {minimum}"


def test_the_dependencies_layer_copies_setup_py_alone_before_the_package(dockerfile):
    """setup.py's dependencies are installed where only setup.py has been copied, and the package
    after it without them: a change to the package or the README builds only the later layers."""
    steps = [(k, a) for k, a in dockerfile.instructions if k in ("COPY", "RUN")]
    first = next(i for i, (k, _) in enumerate(steps) if k == "COPY")
    assert steps[first] == ("COPY", "setup.py ./"), steps[first]
    assert steps[first + 1][0] == "RUN" and "pip install . &&" in steps[first + 1][1]
    package = next(i for i, (k, a) in enumerate(steps) if k == "COPY" and "resnet_noBN/" in a)
    assert package > first + 1
    assert "pip install --no-deps ." in steps[package + 1][1], steps[package + 1]


def test_dockerfile_copies_exist_in_the_build_context(dockerfile):
    rules = dockerignore_rules()
    assert dockerfile.copies, "the Dockerfile copies nothing from the repository"
    for sources, _dest in dockerfile.copies:
        for src in sources:
            path = REPO / src
            assert path.exists(), f"COPY {src}: no such path in the repository (build context)"
            files = [p for p in path.rglob("*.py")] if path.is_dir() else [path]
            assert files, f"COPY {src}: an empty folder"
            for f in files:
                if "__pycache__" in f.parts:
                    continue
                rel = f.relative_to(REPO).as_posix()
                assert not dockerignored(rel, rules), f"COPY {src}: .dockerignore excludes {rel}"


def test_dockerignore_keeps_bulky_paths_out_of_the_context():
    rules = dockerignore_rules()
    for rel in (
        ".venv/bin/python",
        "data/tensorflow_datasets/cifar10/3.0.2/x.tfrecord",
        "data/downloads/cifar-10-binary.tar.gz",
        "runs/cifar10/ckpt-1.index",
        ".git/HEAD",
        "resnet_noBN/__pycache__/model.cpython-311.pyc",
    ):
        assert dockerignored(rel, rules), f".dockerignore lets {rel} into the build context"


def test_dockerfile_runs_the_launcher_with_data_and_runs_volumes(dockerfile, launcher_flags):
    entry = dockerfile.entrypoint
    assert entry and entry[0].startswith("python"), "ENTRYPOINT must be exec form: python ..."
    script = dockerfile.repo_file_at(entry[1])
    assert script == REPO / "launch" / "cifar.py", (
        f"ENTRYPOINT runs {entry[1]}, not launch/cifar.py"
    )
    # User arguments are appended to the entrypoint: no default flags may hide in CMD.
    assert dockerfile.cmd in (None, []), "default flags belong to ENTRYPOINT (CMD is replaced)"
    check_launcher_args(entry[2:], launcher_flags, "Dockerfile ENTRYPOINT")
    assert {"/data", "/runs"} <= set(dockerfile.volumes)
    data_dir = next(a.split("=", 1)[1] for a in entry if a.startswith("--data_dir="))
    assert data_dir.startswith("/data/")


def test_dockerfile_runs_as_a_fixed_non_root_user(dockerfile):
    assert dockerfile.user, "no USER: the image would run as root"
    assert dockerfile.user == f"{IMAGE_UID}:{IMAGE_GID}", (
        f"USER {dockerfile.user}: a fixed numeric UID:GID (Kubernetes' runAsNonRoot can verify "
        "only a numeric user), the one the compose file and the manifests name"
    )
    assert IMAGE_UID != 0 and IMAGE_GID != 0
    last_user = max(i for i, (k, _) in enumerate(dockerfile.instructions) if k == "USER")
    assert last_user > max(i for i, (k, _) in enumerate(dockerfile.instructions) if k == "RUN"), (
        "USER comes after the build's RUN steps"
    )
    # the user exists in /etc/passwd (getpwuid works for it), with that group
    assert any(re.search(rf"\bgroupadd\b[^&]*--gid {IMAGE_GID}\b", r) for r in dockerfile.runs), (
        "no group with GID {IMAGE_GID}"
    )
    assert any(
        re.search(rf"\buseradd\b[^&]*--uid {IMAGE_UID}\b[^&]*--gid {IMAGE_GID}\b", r)
        for r in dockerfile.runs
    ), f"no user with UID {IMAGE_UID} in group {IMAGE_GID}"


def test_dockerfile_volumes_home_and_caches_are_writable_by_its_user(dockerfile):
    owned = dockerfile.owned_by(f"{IMAGE_UID}:{IMAGE_GID}")
    assert {"/data", "/runs"} <= owned, f"the volumes' mount points must be the user's: {owned}"
    env = dockerfile.env
    assert env["HOME"] in owned, f"HOME={env.get('HOME')} is not the user's"
    for name in ("KERAS_HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME"):
        assert env[name].startswith(SCRATCH + "/"), f"{name}={env.get(name)} is not under {SCRATCH}"
    assert "TMPDIR" not in env or env["TMPDIR"].startswith(SCRATCH)
    data_dir = next(
        a.split("=", 1)[1] for a in dockerfile.entrypoint if a.startswith("--data_dir=")
    )
    assert env["TFDS_DATA_DIR"] == data_dir


# ---------------------------------------------------------------------------------------------
# docker compose


def compose_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_tf_configs_form_one_cluster(yaml, dockerfile):
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    assert len(services) >= 2
    configs = {name: json.loads(compose_env(s)["TF_CONFIG"]) for name, s in services.items()}
    own = {name: s.get("hostname", name) for name, s in services.items()}
    port = check_cluster(configs, own, "compose.yaml")
    assert str(port) in dockerfile.exposed
    for name, s in services.items():
        assert str(port) in [str(p) for p in s.get("expose", [str(port)])], name


def test_compose_workers_run_the_same_job(yaml, launcher_flags):
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    first = next(iter(services.values()))
    for name, s in services.items():
        assert s["build"] == first["build"] and s.get("image") == first.get("image"), name
        build = s["build"]
        assert (COMPOSE.parent / build["context"]).resolve() == REPO
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        assert s["command"] == first["command"], "every worker runs the same program"
        check_launcher_args(s["command"], launcher_flags, f"compose.yaml {name}")
        assert "--strategy=multi_worker" in s["command"]
        targets = {v.split(":")[1] for v in s["volumes"]}
        assert {"/data", "/runs"} <= targets, f"{name}: volumes {s['volumes']}"
        assert s["volumes"] == first["volumes"], "the workers share the data and runs volumes"
        model_dir = [a for a in s["command"] if a.startswith("--model_dir=")]
        assert all(a.split("=", 1)[1].startswith("/runs/") for a in model_dir)


def test_compose_workers_are_unprivileged_on_an_internal_network(yaml):
    """No published port, an internal network, the image's user, no capabilities."""
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    networks = compose.get("networks") or {}
    for name, s in compose["services"].items():
        assert "ports" not in s, f"{name} publishes {s['ports']} on the host"
        assert s.get("network_mode") is None, f"{name}: network_mode {s['network_mode']}"
        assert s["networks"], f"{name} is on compose's default network, which is not internal"
        for net in s["networks"]:
            assert networks[net]["internal"] is True, f"{name}: network {net} is not internal"
        assert s["user"] == f"{IMAGE_UID}:{IMAGE_GID}", name
        assert s["cap_drop"] == ["ALL"] and "cap_add" not in s, name
        assert "no-new-privileges:true" in s["security_opt"], name
        assert not s.get("privileged"), name


def compose_cli() -> bool:
    try:
        return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.skipif(not compose_cli(), reason="no `docker compose` here")
def test_compose_file_is_valid_for_docker_compose():
    """`docker compose config` checks the file against the compose specification (no engine)."""
    proc = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_compose_reserves_one_distinct_gpu_per_worker(yaml):
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    gpus = []
    for name, s in services.items():
        devices = s["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and "gpu" in devices[0]["capabilities"], name
        ids = [substitute(str(i), {}) for i in devices[0]["device_ids"]]
        gpus += ids
    assert len(set(gpus)) == len(gpus), f"two workers default to the same GPU: {gpus}"


# ---------------------------------------------------------------------------------------------
# Kubernetes


def k8s_objects(yaml) -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return docs


def test_k8s_indexed_job_tf_configs_name_the_pods_dns_names(yaml, dockerfile):
    objects = k8s_objects(yaml)
    jobs = [
        o for o in objects if o["kind"] == "Job" and o["spec"].get("completionMode") == "Indexed"
    ]
    assert len(jobs) == 1, "one Indexed Job: the training workers"
    job = jobs[0]
    job_name, spec = job["metadata"]["name"], job["spec"]
    n = spec["completions"]
    assert spec["parallelism"] == n >= 2, "all workers must run at once"
    pod = spec["template"]["spec"]
    service = next(
        o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == pod["subdomain"]
    )
    assert service["spec"]["clusterIP"] == "None", "the subdomain Service must be headless"
    labels = {**spec["template"].get("metadata", {}).get("labels", {}), "job-name": job_name}
    assert service["spec"]["selector"].items() <= labels.items(), "the Service selects the pods"

    (container,) = pod["containers"]
    env = container["env"]
    names = [e["name"] for e in env]
    tf_config = next(e["value"] for e in env if e["name"] == "TF_CONFIG")
    refs = set(re.findall(r"\$\((\w+)\)", tf_config))
    for ref in refs:  # Kubernetes expands $(VAR) only for variables defined before
        assert names.index(ref) < names.index("TF_CONFIG"), f"$({ref}) is defined after TF_CONFIG"
        source = next(e for e in env if e["name"] == ref)["valueFrom"]["fieldRef"]["fieldPath"]
        assert source == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    configs = {
        f"{job_name}-{i}": json.loads(re.sub(r"\$\(\w+\)", str(i), tf_config)) for i in range(n)
    }
    for i, config in enumerate(configs.values()):
        assert config["task"] == {"type": "worker", "index": i}
    # The pod hostname is <job>-<index>; <hostname>.<subdomain> resolves in the namespace.
    own = {name: f"{name}.{pod['subdomain']}" for name in configs}
    port = check_cluster(configs, own, "k8s Job")
    assert len(configs[f"{job_name}-0"]["cluster"]["worker"]) == n
    assert port in [p["port"] for p in service["spec"]["ports"]]
    assert port in [p.get("targetPort", p["port"]) for p in service["spec"]["ports"]]
    assert port in [p["containerPort"] for p in container["ports"]]
    assert str(port) in dockerfile.exposed


def test_k8s_containers_use_the_image_launcher_and_claims(yaml, dockerfile, launcher_flags):
    objects = k8s_objects(yaml)
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert jobs
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        scratch = set()
        for volume in pod.get("volumes", []):
            if "emptyDir" in volume:
                scratch.add(volume["name"])
            else:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, volume
        for container in pod["containers"]:
            if "command" in container:  # replaces the entrypoint: must run a file of the image
                assert container["command"][0] == "python"
                script = dockerfile.repo_file_at(container["command"][1])
                assert script is not None and script.is_file(), container["command"]
            else:  # appended to the entrypoint: launcher flags
                check_launcher_args(container["args"], launcher_flags, job["metadata"]["name"])
                assert "--strategy=multi_worker" in container["args"]
            for mount in container.get("volumeMounts", []):
                if mount["name"] in scratch:
                    assert mount["mountPath"] == SCRATCH, mount
                else:
                    assert mount["mountPath"] in dockerfile.volumes, mount


def test_k8s_pods_run_unprivileged_on_a_read_only_root(yaml, dockerfile):
    """Every pod: the image's user, never root, no privilege escalation, no capabilities, the
    runtime's seccomp profile, a read-only root file system with an emptyDir on the one path
    the job writes besides its volumes, and no Kubernetes API token."""
    jobs = [o for o in k8s_objects(yaml) if o["kind"] == "Job"]
    assert jobs
    for job in jobs:
        name, pod = job["metadata"]["name"], job["spec"]["template"]["spec"]
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True, name
        assert (security["runAsUser"], security["runAsGroup"]) == (IMAGE_UID, IMAGE_GID), name
        assert dockerfile.user == f"{security['runAsUser']}:{security['runAsGroup']}"
        assert security["fsGroup"] == IMAGE_GID, name
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            c = container["securityContext"]
            assert c["allowPrivilegeEscalation"] is False, name
            assert c["capabilities"] == {"drop": ["ALL"]}, name
            assert c["readOnlyRootFilesystem"] is True, name
            assert not c.get("privileged") and c.get("runAsUser", IMAGE_UID) != 0, name
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            assert "emptyDir" in mounts[SCRATCH], f"{name}: {SCRATCH} must be an emptyDir"
            for var in ("KERAS_HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME"):  # written at run time
                assert dockerfile.env[var].startswith(SCRATCH + "/"), var


def test_k8s_network_policy_admits_tcp_only_from_the_jobs_pods(yaml):
    """Every TCP port, from the job's pods only: the gRPC port of TF_CONFIG and the ports NCCL
    and Gloo choose when they connect."""
    objects = k8s_objects(yaml)
    job = next(o for o in objects if o["kind"] == "Job" and o["spec"].get("completionMode"))
    job_name = job["metadata"]["name"]
    pod_labels = {**job["spec"]["template"]["metadata"]["labels"], "job-name": job_name}

    def selects(selector: dict) -> bool:
        assert set(selector) == {"matchLabels"}, selector  # no matchExpressions to reason about
        return selector["matchLabels"].items() <= pod_labels.items()

    policies = [
        o for o in objects if o["kind"] == "NetworkPolicy" and selects(o["spec"]["podSelector"])
    ]
    assert len(policies) == 1, "one NetworkPolicy selects the training pods"
    (policy,) = policies
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert "Ingress" in policy["spec"]["policyTypes"]
    rules = policy["spec"]["ingress"]
    assert rules, "no ingress rule: nothing, not even the other workers, could connect"
    for rule in rules:
        # a rule without `from` admits every source; namespaceSelector or ipBlock other sources
        assert rule["from"], rule
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, f"a source beyond the job's pods: {peer}"
            assert "job-name" in peer["podSelector"]["matchLabels"], peer
            assert selects(peer["podSelector"]), f"{peer} does not select the job's pods"
            # ... and only them: the Job controller's job-name label is the job's own
            assert peer["podSelector"]["matchLabels"]["job-name"] == job_name
        assert rule["ports"] == [{"protocol": "TCP"}], rule["ports"]  # no port: every one


# ---------------------------------------------------------------------------------------------
# SLURM


def test_sbatch_script_is_valid_bash():
    proc = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_sbatch_script_runs_one_worker_per_node():
    text = SBATCH.read_text(encoding="utf-8")
    directives = re.findall(r"^#SBATCH\s+(\S+)", text, re.M)
    assert "--ntasks-per-node=1" in directives
    assert re.search(r"^srun\b", text, re.M), "the workers are started with srun"


def test_sbatch_script_flags_are_launcher_flags(launcher_flags):
    block = re.search(r"^TRAIN_FLAGS=\((.*?)^\)", SBATCH.read_text(encoding="utf-8"), re.M | re.S)
    assert block, "the launcher flags are listed in TRAIN_FLAGS=( ... )"
    args = [w for w in shlex.split(block.group(1), comments=True)]
    assert "--strategy=multi_worker" in args and "--cluster_resolver=slurm" in args
    check_launcher_args(args, launcher_flags, "train_cifar.sbatch")


@pytest.mark.parametrize("container", [False, True])
def test_sbatch_script_srun_command_line(tmp_path, container):
    """Run the script with a fake srun (and apptainer) that records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "srun_args"
    (bin_dir / "srun").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {record}\n')
    (bin_dir / "srun").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "SLURM_SUBMIT_DIR": str(REPO),
        "RUNS_DIR": str(tmp_path / "runs"),
        "RUN_NAME": "r1",
    }
    if container:
        env["SIF"] = str(tmp_path / "resnet-nobn.sif")
    proc = subprocess.run(
        ["bash", str(SBATCH), "--train_steps=5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    args = record.read_text().splitlines()
    assert args[0] == "--kill-on-bad-exit=1"
    flags = ["--strategy=multi_worker", "--cluster_resolver=slurm"]
    if container:
        assert args[1:3] == ["apptainer", "exec"] and "--nv" in args
        assert args[args.index(env["SIF"]) + 1 : args.index(env["SIF"]) + 3] == [
            "python",
            "/opt/resnet_noBN/launch/cifar.py",
        ]
        bind = args[args.index("--bind") + 1]
        assert bind == (
            f"{REPO}/data/tensorflow_datasets:/data/tensorflow_datasets,{tmp_path}/runs:/runs"
        )
        flags += ["--data_dir=/data/tensorflow_datasets", "--model_dir=/runs/r1"]
    else:
        assert args[1:3] == [f"{REPO}/.venv/bin/python", f"{REPO}/launch/cifar.py"]
        flags += [f"--data_dir={REPO}/data/tensorflow_datasets", f"--model_dir={tmp_path}/runs/r1"]
    assert args[-len(flags) - 1 :] == flags + ["--train_steps=5"]
    assert (tmp_path / "runs").is_dir()


def test_sbatch_script_needs_no_root():
    """Nothing in the script asks for privileges: it runs as the submitting user."""
    code = [line.split("#", 1)[0] for line in SBATCH.read_text(encoding="utf-8").splitlines()]
    for word in ("sudo", "su", "chown", "setcap", "mount", "unshare", "nsenter", "--userns"):
        hits = [line for line in code if re.search(rf"(^|[\s;(&|]){word}\b", line)]
        assert not hits, f"train_cifar.sbatch uses {word}: {hits}"
    assert "--fakeroot" not in " ".join(code)


def test_sbatch_container_paths_are_in_the_image(dockerfile):
    paths = re.findall(r"(/opt/\S+?\.py)\b", SBATCH.read_text(encoding="utf-8"))
    assert paths
    for path in paths:
        script = dockerfile.repo_file_at(path)
        assert script is not None and script.is_file(), f"{path} is no file of the image"


# Preemption: the recipes give the launcher time to save (it acts within ~2 calls of ~5 s plus
# the save; tests/test_launch_cifar.py, test_distributed.py and test_slurm.py run it).
SAVE_SECONDS = 60


def test_sbatch_script_requeues_on_preemption_and_ahead_of_the_time_limit():
    text = SBATCH.read_text(encoding="utf-8")
    directives = re.findall(r"^#SBATCH\s+(\S+)", text, re.M)
    assert "--requeue" in directives and "--open-mode=append" in directives
    signal_at = [d for d in directives if d.startswith("--signal=")]
    assert signal_at == ["--signal=B:USR1@300"]
    assert re.search(r"^trap .*scontrol requeue \"\$SLURM_JOB_ID\".* USR1$", text, re.M)
    assert re.search(r"^srun .*&$", text, re.M), "srun in the background, so the trap can run"


def test_k8s_job_gives_time_to_save_and_does_not_count_preemptions_nor_lost_peers(yaml):
    job = next(
        d
        for d in k8s_objects(yaml)
        if d["kind"] == "Job" and d["metadata"]["name"] == "resnet-nobn-cifar"
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= SAVE_SECONDS
    assert pod["restartPolicy"] == "Never"  # what podFailurePolicy requires
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {
        "action": "Ignore",
        "onExitCodes": {"containerName": "worker", "operator": "In", "values": [3, 5]},
    } in rules
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules


def test_compose_workers_have_a_grace_period_to_save(yaml):
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    for service in services.values():
        assert service["stop_grace_period"] == "2m"
