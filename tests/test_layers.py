"""The import graph of resnet_noBN/, launch/, bench/ and ops/: no circle, and no import that
climbs from a lower layer of the package to a higher one (``resnet_noBN.LAYERS``, lowest first;
``launch/``, ``bench/`` and ``ops/`` above them all); the lease of ops/ reads only the package's
lowest layer, ``configs``. Every import counts, at module level and inside functions, and
``from package import name`` counts as an import of the module ``package.name`` where that is one.
Read with ``ast``, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

import resnet_noBN

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("resnet_noBN", "launch", "bench", "ops")
TOP = len(resnet_noBN.LAYERS)  # the rank of launch/, bench/ and ops/


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every Python file of the three folders, by its module name."""
    return {
        module_name(path): path
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


def imports(path: Path, known, folder: str = "") -> list[tuple[str, int]]:
    """(module of ``known``, line) for every import in ``path`` that names one. A script of
    launch/, bench/ or ops/ imports its neighbours by their bare names (``folder``: its folder,
    as a module name, is on sys.path)."""
    found = []

    def resolve(name: str, line: int) -> None:
        for candidate in (name, f"{folder}.{name}" if folder else None):
            if candidate in known:
                found.append((candidate, line))
                return

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                resolve(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    found.append((f"{node.module}.{alias.name}", node.lineno))
                else:
                    resolve(node.module, node.lineno)
    return [(target, line) for target, line in found if target != "resnet_noBN"]


def rank(module: str) -> int:
    """The layer of a module: its subpackage's place in ``resnet_noBN.LAYERS`` (a module of the
    package's root, as ``plotting``, is its own layer); launch/, bench/, ops/ and the package's
    own face (its ``__init__``: ``resnet_noBN.load``) above them all."""
    parts = module.split(".")
    if parts[0] != "resnet_noBN" or len(parts) == 1:
        return TOP
    return resnet_noBN.LAYERS.index(parts[1])


def graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, int]]]]:
    known = modules()
    return known, {
        name: imports(
            path, known, name.rsplit(".", 1)[0] if name.split(".")[0] != "resnet_noBN" else ""
        )
        for name, path in known.items()
    }


def circles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or importing itself)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or any(w == v for w, _ in edges[v]):
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer():
    known, _ = graph()
    package = [m for m in known if m.startswith("resnet_noBN.")]
    assert len(package) > 40
    for name in package:
        assert name.split(".")[1] in resnet_noBN.LAYERS, f"{name}: in no layer of LAYERS"


def test_no_room_holds_more_than_a_fifth_of_the_package():
    """A room (a layer: a subpackage, or a module at the package's top) holds at most 20% of
    the package's lines, so that each stays one job a reader can hold (issue #94)."""
    lines = {}
    for path in (ROOT / "resnet_noBN").rglob("*.py"):
        parts = path.relative_to(ROOT / "resnet_noBN").with_suffix("").parts
        lines[parts[0]] = lines.get(parts[0], 0) + len(path.read_text().splitlines())
    whole = sum(lines.values())
    assert {room for room in lines if room != "__init__"} == set(resnet_noBN.LAYERS)
    crowded = {room: f"{n / whole:.0%}" for room, n in lines.items() if n > 0.2 * whole}
    assert not crowded, crowded


def test_no_import_circle():
    _, edges = graph()
    found = circles(edges)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_climbs_to_a_higher_layer():
    known, edges = graph()
    climbs = [
        f"{known[source].relative_to(ROOT)}:{line} imports {target} "
        f"({resnet_noBN.LAYERS[rank(source)]} below {resnet_noBN.LAYERS[rank(target)]})"
        for source, targets in edges.items()
        for target, line in targets
        if rank(target) > rank(source)
    ]
    assert not climbs, "imports that climb:\n" + "\n".join(climbs)


def test_the_lease_reads_only_the_packages_configs():
    """The lease starts on a GPU machine without TensorFlow or Keras, before anything is
    unpacked: of the package, ops/lease may import only ``resnet_noBN.configs`` and
    ``resnet_noBN.host.processes`` (the standard library's ``os`` alone)."""
    known, edges = graph()
    lease = [m for m in known if m.startswith("ops.lease.")]
    assert {"ops.lease.plan", "ops.lease.supervisor", "ops.ci.suite_under_load"} <= set(known)
    assert len(lease) == 6  # __main__, call, carry, collect, plan, supervisor
    reads = {
        f"{known[source].relative_to(ROOT)}:{line} imports {target}"
        for source, targets in edges.items()
        if source == "ops.lease" or source.startswith("ops.lease.")
        for target, line in targets
        if target.startswith("resnet_noBN.")
        and not target.startswith("resnet_noBN.configs")
        and target != "resnet_noBN.host.processes"
    }
    assert not reads, reads
    assert {t for t, _ in edges["resnet_noBN.host.processes"]} == set()  # imports none of ours
    assert ("ops.ci.suite_under_load", 26) in edges["ops.ci.peer_watch_at_exit"]


def test_the_walk_sees_imports_inside_functions_and_modules_named_in_from(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import os\nfrom resnet_noBN.runs import cli, FLAGS\n\n\ndef f():\n"
        "    from resnet_noBN.configs.errors import InputError\n    import engines\n"
    )
    known = {
        "resnet_noBN.runs",
        "resnet_noBN.runs.cli",
        "resnet_noBN.configs.errors",
        "bench.engines",
    }
    assert sorted(imports(script, known, "bench")) == [
        ("bench.engines", 7),
        ("resnet_noBN.configs.errors", 6),
        ("resnet_noBN.runs", 2),
        ("resnet_noBN.runs.cli", 2),
    ]
    assert circles({"a": [("b", 1)], "b": [("a", 2)], "c": [("a", 3)]}) == [["a", "b"]]
    assert rank("resnet_noBN.configs.errors") < rank("resnet_noBN.runs.cli") < rank("bench.engines")
