"""What comes back from a lease, and what stays small: each call's ``$OUT`` (at most 8 files of
at most 16 MiB, 64 MiB together), the final weights of each run in parts, the logs trimmed to
what their tables and curves read, and, here after the lease, the parts joined and checked.

Every call brings back ``status.json``, ``plan.log`` and ``results.tar.gz`` (everything small of
every run so far: ``config.json``, ``metrics.jsonl``, ``answers.jsonl`` (which test images each
evaluation got right, the final predicted classes), ``train.jsonl`` thinned to a record per
:data:`TRAIN_RECORDS` records, ``launch.log`` without the progress lines that ``train.jsonl`` holds,
``test_error.png``, and where a run diverged its replay's ``divergence/`` whole (a record per
step before the NaN, and its plot); the speed tries' and the probe's JSON and logs, the kernel
summary, the lease's curves), then the weights' parts not yet acknowledged (``plan.Back``), as
many as fit.

A finished run's weights (:func:`cut_weights`): the model's variables of its last checkpoint
(no optimizer state), byte for byte as the checkpoint holds them, and its step, in
``weights-<step>.npz`` (about 54 MB for Table 1's network), cut into parts of
:data:`WEIGHT_PART` bytes; the file's and each part's SHA-256 in ``status.json``. Weights never
enter the tracked tree: every tracked byte travels with every call.

Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

OUT_FILES = 8  # what one call brings back from $OUT
OUT_FILE_BYTES = 16 * (1 << 20)
OUT_BYTES = 64 * (1 << 20)
WEIGHT_PART = 16_000_000  # a part of a run's weights, under the 16 MiB a returned file may have
TRAIN_RECORDS = 200  # train.jsonl: at most about this many records come back (and the last)
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # a weights file's members: the same bytes for the same weights
RUN_FILES = (
    "config.json",
    "metrics.jsonl",
    "answers.jsonl",
    "train.jsonl",
    "launch.log",
    "test_error.png",
    # a divergence replayed (--replay_divergence: the CIFAR-100 experiments), whole: every step
    "divergence/train.jsonl",
    "divergence/health.png",
)
PROGRESS = re.compile(r"^\s*(\[[^\]]*\] )?step\s+\d+\s+loss ")  # a launcher's progress line


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- what stays small


def thin_train_log(text: str, records: int = TRAIN_RECORDS) -> str:
    """``train.jsonl`` with every k-th record and the last, k the least that leaves at most
    ``records`` (a training curve reads no more: 60,000 steps logged every 100 keep one per
    300); a shorter log unchanged."""
    lines = [line for line in text.splitlines() if line.strip()]
    every = -(-len(lines) // records)
    kept = [line for i, line in enumerate(lines) if i % every == every - 1 or i == len(lines) - 1]
    return "".join(line + "\n" for line in kept)


def trim_launch_log(text: str) -> str:
    """A launcher's output without its progress lines (``step N loss ...``: ``train.jsonl`` holds
    them) and with a line repeated back to back (a warning a library prints at every step)
    kept once, with its count."""
    out, last, repeats = [], None, 0
    for line in text.splitlines():
        if PROGRESS.match(line):
            continue
        key = re.sub(r"^[A-Z]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ", "", line)  # absl's prefix
        if key == last:
            repeats += 1
            continue
        if repeats:
            out.append(f"(the line above {repeats} more times)")
        out.append(line)
        last, repeats = key, 0
    if repeats:
        out.append(f"(the line above {repeats} more times)")
    return "".join(line + "\n" for line in out)


def small_copy(path: Path) -> bytes:
    """The bytes of ``path`` as they come back: a train log thinned, a launch log trimmed."""
    if path.name == "train.jsonl" and path.parent.name != "divergence":
        return thin_train_log(path.read_text()).encode()
    if path.name == "launch.log":
        return trim_launch_log(path.read_text(errors="replace")).encode()
    return path.read_bytes()


# ---- the weights


def cut_weights(folder: Path, final: dict | None) -> dict:
    """A finished run's final weights: ``weights-<step>.npz`` (the ``model/`` arrays of its last
    checkpoint, unchanged, and ``step``), its SHA-256, and its parts ``weights/w1``, ... of at
    most :data:`WEIGHT_PART` bytes each, with theirs."""
    index = json.loads((folder / "checkpoints.json").read_text())["checkpoints"]
    checkpoint = folder / index[-1]
    step = int(re.fullmatch(r"ckpt-(\d+)\.npz", index[-1])[1])
    name = f"weights-{step}.npz"
    with zipfile.ZipFile(checkpoint) as source, zipfile.ZipFile(folder / name, "w") as out:
        members = [m for m in source.namelist() if m.startswith("model/")]
        iteration = [m for m in source.namelist() if re.fullmatch(r"optimizer/.*iteration\.npy", m)]
        if not members or len(iteration) != 1:
            raise ValueError(f"{checkpoint.name} holds no model variables or no one iteration")
        for member, arcname in [*((m, m) for m in sorted(members)), (iteration[0], "step.npy")]:
            out.writestr(zipfile.ZipInfo(arcname, FIXED_TIME), source.read(member))
    data = (folder / name).read_bytes()
    parts_dir = folder / "weights"
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts_dir.mkdir()
    parts = []
    for i, start in enumerate(range(0, len(data), WEIGHT_PART), 1):
        chunk = data[start : start + WEIGHT_PART]
        (parts_dir / f"w{i}").write_bytes(chunk)
        parts.append({"name": f"w{i}", "bytes": len(chunk), "sha256": sha256_bytes(chunk)})
    return {
        "file": name,
        "step": step,
        "arrays": len(members),
        "bytes": len(data),
        "sha256": sha256_bytes(data),
        "parts": parts,
        "run_weights_sha256": (final or {}).get("weights_sha256"),
    }


# ---- there: a call's $OUT


def results_tarball(work: Path, runs, target: Path) -> None:
    """``results.tar.gz``: everything small of the lease so far (module docstring)."""
    small = [work / "plan.log", work / "supervisor.log", work / "lease_curves.png"]
    for name in runs:
        small += [work / name / f for f in RUN_FILES]
    for sub in ("speed", "probe"):
        if (work / sub).is_dir():
            small += sorted(
                p
                for p in (work / sub).iterdir()
                if p.is_file() and p.suffix in (".json", ".log", ".txt")
            )
    with tarfile.open(target, "w:gz") as tar:
        for path in small:
            if path.is_file():
                data = small_copy(path)
                info = tarfile.TarInfo(str(path.relative_to(work)))
                info.size, info.mtime = len(data), int(path.stat().st_mtime)
                tar.addfile(info, io.BytesIO(data))


def fill_out(work: Path, out: Path, status: dict, acked) -> tuple[list[str], list[str]]:
    """This call's ``$OUT``: status.json, plan.log, results.tar.gz, then the weights' parts not
    in ``acked`` while files and bytes allow. Returns (the items this reply brings: the runs
    ended and the weight parts, the weight parts left for a later call)."""
    out.mkdir(parents=True, exist_ok=True)
    results_tarball(work, list(status["runs"]), work / "results.tar.gz")
    files = [(n, work / n) for n in ("status.json", "plan.log", "results.tar.gz")]
    files = [(n, p) for n, p in files if p.is_file()]
    used = sum(p.stat().st_size for _, p in files)
    items, left = [], []
    ended = [n for n, r in status["runs"].items() if r["state"] in ENDED]
    items += ended
    for name in ended:
        weights = status["runs"][name].get("weights") or {}
        for part in weights.get("parts", []):
            item = f"{name}.{part['name']}"
            path = work / name / "weights" / part["name"]
            if item in acked or not path.is_file():
                continue
            if len(files) < OUT_FILES and used + part["bytes"] <= OUT_BYTES:
                files.append((item, path))
                used += part["bytes"]
                items.append(item)
            else:
                left.append(item)
    for rel, path in files:
        shutil.copyfile(path, out / rel)
    return items, left


ENDED = ("done", "stopped at its time budget", "failed")


# ---- here, after the lease: join and check


def join(back_dirs: list[Path], into: Path) -> list[str]:
    """Each call's returned files (``back_dirs``, in the order of the calls) gathered in
    ``into``: the results (a later call's files replace an earlier's), the status (the latest),
    each run's weights joined from its parts and checked against their SHA-256 into
    ``into/<run>/weights-<step>.npz``. Returns one line per run."""
    into.mkdir(parents=True, exist_ok=True)
    weights, states, merged = {}, {}, None
    for back in back_dirs:
        tarball = back / "results.tar.gz"
        if tarball.is_file():
            with tarfile.open(tarball) as tar:
                tar.extractall(into, filter="data")
        status = (
            json.loads((back / "status.json").read_text())
            if (back / "status.json").is_file()
            else None
        )
        if status:
            for name, run in status["runs"].items():
                if run["state"] != "done earlier" or name not in states:
                    states[name] = run  # a machine's own record of the run, the latest
                if (run.get("weights") or {}).get("parts"):
                    weights[name] = run["weights"]
            merged = {**status, "runs": states}
        for part in back.iterdir():
            match = re.fullmatch(r"(.+)\.(w\d+)", part.name)
            if match and match[1] in weights:
                (into / match[1] / "weights").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(part, into / match[1] / "weights" / match[2])
    if merged:  # the latest status, each run as the machine that ran it last had it
        (into / "status.json").write_text(json.dumps(merged, indent=1))
    lines = []
    for name, run in states.items():
        lines.append(
            f"{name}: {run['state']}, step {run.get('step', 0):,}; "
            + check_weights(into / name, weights.get(name))
        )
    return lines


def check_weights(folder: Path, weights: dict | None) -> str:
    """Join a run's weight parts in ``folder/weights`` and check them; one phrase."""
    if not weights:
        return "no weights"
    missing = [
        p["name"] for p in weights["parts"] if not (folder / "weights" / p["name"]).is_file()
    ]
    if missing:
        return f"weights incomplete: parts {missing} did not come back"
    data = b""
    for part in weights["parts"]:
        chunk = (folder / "weights" / part["name"]).read_bytes()
        if sha256_bytes(chunk) != part["sha256"]:
            return f"weights part {part['name']} damaged (SHA-256 differs): bring it back again"
        data += chunk
    if sha256_bytes(data) != weights["sha256"]:
        return "weights joined with a wrong SHA-256"
    (folder / weights["file"]).write_bytes(data)
    shutil.rmtree(folder / "weights")
    return f"{weights['file']}, {len(data):,} bytes, SHA-256 {weights['sha256'][:16]}... ok"
