"""What a lease carries over, and the budget of each call: the exact data sets cut into parts
that each travel in a call of their own, their SHA-256, and the official files restored from
them on the GPU machine.

A call of the device tool carries at most :data:`CALL_LIMIT` (64 MiB): the tracked tree, the
untracked files git does not ignore, and the ignored paths the call names. So every call carries
the tree (:data:`TREE_ROOM` at most, checked by tests/test_gpu_lease.py), ``.carry/base``
(:data:`BASE_ROOM` at most: the keras, optree and namex wheels, the lossless packs' unpack tool,
``parts.json``) and at most one data part, of :data:`PART_BYTES` at most (52 MiB): the budget the
data parts get. Each data set's source (a lossless pack folder with its ``MANIFEST.json``, or a
tarball of the official binary files) is read as one byte stream, its files in order, and cut
into equal parts under that budget; ``parts.json`` holds each file's and each part's size and
SHA-256, and the SHA-256 of every official file the source restores.

On the GPU machine, the lease's first call keeps a copy of ``parts.json`` and the unpack tool
(:func:`keep`) where no call replaces it: every call replaces ``.carry/base`` while the lease's
supervisor works on, so the supervisor never reads it (CI's run of 2026-12-07 lost a restore to
that race). A part (:func:`receive`) arrives in ``.carry/parts/``, is checked against
its SHA-256 and moved into the lease's store (so that the next call's carried path does not
replace it); a damaged one is dropped and asked for again. When a data set's parts are all
there (:func:`restore`), its files are cut back out of the parts and checked, and the official
binary files restored (a pack by its carried unpack tool, a tarball by ``tarfile``) and checked,
before any run reads them.

Standard library only: this runs before anything is unpacked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

MiB = 1 << 20
CALL_LIMIT = 64 * MiB  # what one call of the device tool may carry, the tree included
TREE_ROOM = 8 * MiB  # the tree's share: the tracked files and the untracked ones git keeps
BASE_ROOM = 4 * MiB  # .carry/base: the wheels (2.8 MiB), the unpack tool, parts.json
PART_BYTES = CALL_LIMIT - TREE_ROOM - BASE_ROOM  # 52 MiB: the data parts' budget
CARRY = Path(".carry")  # under the tree's root; ignored by git
BASE = CARRY / "base"
PARTS = CARRY / "parts"
MANIFEST = "parts.json"
UNPACK_TOOL = "unpack_lossless.py"  # a pack's restorer: DATA_DIR/tools/, carried in base/tools
WHEELS = ("keras==3.15.1", "optree==0.20.0", "namex==0.1.0")  # Keras's needs the machine lacks

# What prepare takes from DATA_DIR for each data set, the first that exists: a lossless pack
# (a folder with MANIFEST.json, restored by its unpack tool) or a tarball of the official
# binary files (CIFAR's own, or an exact copy).
SOURCES = {
    "cifar10": ("cifar-10-lossless", "cifar-10-binary.tar.gz"),
    "cifar100": ("cifar-100-lossless", "cifar-100-binary.tar.xz", "cifar-100-binary.tar.gz"),
}
# The default lease's sources and their sizes in bytes (for the budget without the data at
# hand): CIFAR-10 as a WebP-lossless pack (59,904 of its 60,000 images byte-exact), CIFAR-100
# exact as a tar.xz of its official binary files.
DEFAULT_SOURCES = {
    "cifar10": ("cifar-10-lossless", 102_824_967),
    "cifar100": ("cifar-100-binary.tar.xz", 137_647_064),
}
CHUNK = 4 * MiB  # read and hashed in pieces of this size


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def split_sizes(total: int, part_bytes: int) -> list[int]:
    """``total`` bytes cut into the fewest equal parts (the first ones a byte longer where it
    does not divide) of at most ``part_bytes`` each."""
    count = max(1, -(-total // part_bytes))
    size, extra = divmod(total, count)
    return [size + (i < extra) for i in range(count)]


def tree_files(root: Path) -> list[str]:
    """What travels of the tree itself, relative to ``root``: the tracked files and the
    untracked ones git does not ignore (as the device tool takes them)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return [os.fsdecode(name) for name in listed if name]


def tree_bytes(root: Path) -> int:
    """The bytes of :func:`tree_files` (as the device tool counts them)."""
    paths = (root / name for name in tree_files(root))
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def path_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of the lease's carry: what it carries and its size."""

    part: str | None  # the data part it carries (None: the tree and base alone)
    tree: int
    base: int
    data: int

    @property
    def total(self) -> int:
        return self.tree + self.base + self.data

    def line(self) -> str:
        what = f"part {self.part} {self.data / MiB:.1f} MiB" if self.part else "no data part"
        return (
            f"tree {self.tree / MiB:.1f} + base {self.base / MiB:.1f} + {what} = "
            f"{self.total / MiB:.1f} MiB of {CALL_LIMIT // MiB}"
        )


def calls(tree: int, base: int, parts: list[tuple[str, int]]) -> list[Call]:
    """The carry calls of a lease: one per data part (name, bytes), each with the tree and the
    base; a lease without data parts still makes one call."""
    return [Call(name, tree, base, size) for name, size in parts] or [Call(None, tree, base, 0)]


def default_parts(datasets, part_bytes: int = PART_BYTES) -> list[tuple[str, int]]:
    """The parts of the default sources (:data:`DEFAULT_SOURCES`) of ``datasets``, in order."""
    return [
        (f"{dataset}-{i}", size)
        for dataset in datasets
        for i, size in enumerate(split_sizes(DEFAULT_SOURCES[dataset][1], part_bytes), 1)
    ]


# ---- here, before the lease: prepare


def find_source(data_dir: Path, dataset: str) -> Path:
    """The first of the data set's :data:`SOURCES` in ``data_dir``; ValueError naming them."""
    for name in SOURCES[dataset]:
        if (data_dir / name).exists():
            return data_dir / name
    raise ValueError(
        f"{data_dir} holds none of {', '.join(SOURCES[dataset])} for {dataset}: give the folder "
        "that holds the exact data (a lossless pack or the official binary tarball)"
    )


def pack_label(pack: Path, dataset: str) -> str:
    """How figures name a pack's data: exact, or how many images are approximate (a pack lists
    them in APPROXIMATE.txt, one line each)."""
    name = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}[dataset]
    listed = pack / "APPROXIMATE.txt"
    if not listed.is_file():
        return f"{name} (exact)"
    approximate = sum(1 for line in listed.read_text().splitlines() if line.strip())
    return f"{name} (exact but {approximate} of 60,000 images approximate)"


def describe_source(source: Path, dataset: str) -> dict:
    """A data set's entry of parts.json before its parts: the kind, the files of its stream with
    their sizes and SHA-256, the official files it restores with theirs, and its label."""
    name = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}[dataset]
    if source.is_dir():
        manifest = json.loads((source / "MANIFEST.json").read_text())
        files = sorted(p.name for p in source.iterdir() if p.is_file())
        restored = {f: entry["sha256"] for f, entry in manifest["files"].items()}
        kind, label = "pack", pack_label(source, dataset)
    else:
        files, restored = [source.name], {}
        with tarfile.open(source) as tar:  # the official files inside, hashed as they stream
            for member in tar:
                if member.isfile():
                    digest = hashlib.sha256()
                    with tar.extractfile(member) as f:
                        while block := f.read(CHUNK):
                            digest.update(block)
                    restored[member.name] = digest.hexdigest()
        kind, label = "tarball", f"{name} (exact: the official binary files)"
    root = source if source.is_dir() else source.parent
    return {
        "source": source.name,
        "kind": kind,
        "label": label,
        "files": [
            {"name": f, "bytes": (root / f).stat().st_size, "sha256": sha256_file(root / f)}
            for f in files
        ],
        "restored": restored,
    }


def write_parts(source: Path, entry: dict, dataset: str, out: Path, part_bytes: int) -> dict:
    """The data set's stream (its files in order) cut into parts in ``out``; their entries of
    parts.json, by name."""
    root = source if source.is_dir() else source.parent
    total = sum(f["bytes"] for f in entry["files"])
    sizes = split_sizes(total, part_bytes)
    stream = (root / f["name"] for f in entry["files"])
    current, parts, offset = None, {}, 0
    for i, size in enumerate(sizes, 1):
        name = f"{dataset}-{i}"
        digest, left = hashlib.sha256(), size
        with open(out / name, "wb") as part:
            while left:
                if current is None:
                    current = open(next(stream), "rb")  # closed below
                block = current.read(min(left, CHUNK))
                if not block:
                    current.close()
                    current = None
                    continue
                part.write(block)
                digest.update(block)
                left -= len(block)
        parts[name] = {
            "dataset": dataset,
            "offset": offset,
            "bytes": size,
            "sha256": digest.hexdigest(),
        }
        offset += size
    if current is not None:
        current.close()
    return parts


def prepare(root: Path, data_dir: Path, datasets, part_bytes: int = PART_BYTES) -> dict:
    """Fill ``.carry/parts`` with the parts of ``datasets`` (in that order) from ``data_dir``,
    ``.carry/base/parts.json`` with their manifest and ``.carry/base/tools`` with the unpack tool
    where a pack needs it; returns the manifest. Old parts are removed first."""
    parts_dir, base = root / PARTS, root / BASE
    shutil.rmtree(parts_dir, ignore_errors=True)
    shutil.rmtree(base / "tools", ignore_errors=True)
    parts_dir.mkdir(parents=True)
    base.mkdir(parents=True, exist_ok=True)
    manifest = {"part_bytes": part_bytes, "datasets": {}, "parts": {}}
    for dataset in datasets:
        source = find_source(data_dir, dataset)
        entry = describe_source(source, dataset)
        if entry["kind"] == "pack":
            tool = data_dir / "tools" / UNPACK_TOOL
            if not tool.is_file():
                raise ValueError(f"{source.name} is a lossless pack and {tool} is missing")
            (base / "tools").mkdir(exist_ok=True)
            shutil.copy(tool, base / "tools" / UNPACK_TOOL)
        parts = write_parts(source, entry, dataset, parts_dir, part_bytes)
        entry["parts"] = list(parts)
        manifest["datasets"][dataset] = entry
        manifest["parts"].update(parts)
    manifest["tree_bytes"] = tree_bytes(root)
    for _ in range(2):  # the base's size counts the manifest that records it
        manifest["base_bytes"] = path_bytes(base)
        (base / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def prepared_calls(root: Path, manifest: dict) -> list[Call]:
    """The carry calls of the prepared lease, with the tree and base as they are now."""
    parts = [(name, p["bytes"]) for name, p in manifest["parts"].items()]
    return calls(tree_bytes(root), path_bytes(root / BASE), parts)


# ---- there, on the GPU machine: receive and restore


def load_manifest(base: Path) -> dict | None:
    """``parts.json`` from ``base`` (the carried ``.carry/base``, or the machine's own copy)."""
    try:
        return json.loads((base / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def keep(base: Path, own: Path) -> None:
    """``parts.json`` and the unpack tool of ``base`` copied into ``own``, the machine's own
    folder, which no call replaces."""
    shutil.rmtree(own, ignore_errors=True)
    own.mkdir(parents=True)
    shutil.copy(base / MANIFEST, own / MANIFEST)
    if (base / "tools").is_dir():
        shutil.copytree(base / "tools", own / "tools")


def receive(root: Path, store: Path, manifest: dict) -> list[str]:
    """Every part carried in ``.carry/parts`` checked and moved into ``store``; one line each
    (arrived, or dropped: unknown or damaged)."""
    store.mkdir(parents=True, exist_ok=True)
    lines = []
    carried = root / PARTS
    for path in sorted(carried.iterdir()) if carried.is_dir() else []:
        expected = manifest["parts"].get(path.name)
        if expected is None:
            path.unlink()
            lines.append(f"part {path.name}: not in parts.json (another prepare's?): dropped")
            continue
        got = sha256_file(path)
        if got != expected["sha256"]:
            path.unlink()
            lines.append(
                f"part {path.name}: SHA-256 {got[:16]}, expected {expected['sha256'][:16]}: "
                "damaged on the way, dropped: carry it again"
            )
            continue
        os.replace(path, store / path.name)
        lines.append(
            f"part {path.name}: arrived, {path_bytes(store / path.name):,} bytes, SHA-256 ok"
        )
    return lines


def present(store: Path, manifest: dict) -> list[str]:
    """The parts on this machine, in the manifest's order."""
    return [name for name in manifest["parts"] if (store / name).is_file()]


def complete(store: Path, manifest: dict, dataset: str) -> bool:
    return all((store / name).is_file() for name in manifest["datasets"][dataset]["parts"])


def restore(own: Path, store: Path, manifest: dict, dataset: str, data: Path, python: str) -> Path:
    """The data set's files cut back out of its parts in ``store`` and checked, the official
    binary files restored into ``data/<dataset>`` (a pack by the unpack tool kept in ``own``)
    and checked; returns the folder a run's --data_path names. The parts are removed once
    restored. ValueError (one line) where a SHA-256 differs."""
    entry = manifest["datasets"][dataset]
    source = data / f"{dataset}.source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    parts = iter(entry["parts"])
    part, left = None, 0
    for f in entry["files"]:
        digest, need = hashlib.sha256(), f["bytes"]
        with open(source / f["name"], "wb") as out:
            while need:
                if not left:
                    name = next(parts)
                    if part:
                        part.close()
                    part = open(store / name, "rb")  # closed below
                    left = manifest["parts"][name]["bytes"]
                block = part.read(min(need, left, CHUNK))
                out.write(block)
                digest.update(block)
                need -= len(block)
                left -= len(block)
        if digest.hexdigest() != f["sha256"]:
            raise ValueError(f"{dataset}: {f['name']} reassembled with a wrong SHA-256")
    if part:
        part.close()
    out_dir = data / dataset
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    if entry["kind"] == "pack":
        tool = own / "tools" / UNPACK_TOOL
        done = subprocess.run(
            [python, str(tool), str(source), str(out_dir)], capture_output=True, text=True
        )
        if done.returncode:
            raise ValueError(f"{dataset}: {UNPACK_TOOL} failed: {done.stderr.strip()[-300:]}")
    else:
        with tarfile.open(source / entry["files"][0]["name"]) as tar:
            tar.extractall(out_dir, filter="data")
    for name, expected in entry["restored"].items():
        got = sha256_file(out_dir / name)
        if got != expected:
            raise ValueError(
                f"{dataset}: {name} restored with SHA-256 {got[:16]}, expected {expected[:16]}"
            )
    shutil.rmtree(source)
    for name in entry["parts"]:
        (store / name).unlink()
    return out_dir


def default_calls(root: Path, datasets, part_bytes: int = PART_BYTES) -> list[Call]:
    """The carry calls of the default sources of ``datasets`` (:data:`DEFAULT_SOURCES`) with
    this tree, and ``.carry/base`` as prepared (else its room, :data:`BASE_ROOM`)."""
    base = path_bytes(root / BASE) if (root / BASE).is_dir() else BASE_ROOM
    return calls(tree_bytes(root), base, default_parts(datasets, part_bytes))
