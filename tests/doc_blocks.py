"""The commands and quoted figures of the repository's Markdown files, as tests/test_docs.py checks
them (the markers are described in docs/testing.md, "The documentation's commands").

A shell block (a fence of ``sh``, ``bash``, ``shell`` or ``console``) carries a marker on the
line before it: ``<!-- run -->`` (the test runs it as written), ``<!-- run, exit N -->`` (and
expects status N), ``<!-- run, adding: FLAGS -->`` (the test runs its launcher commands with
FLAGS after their own: absl keeps the last value of a flag; ``{cifar10}`` is a folder of
generated CIFAR-10 binary files, ``{tmp}`` a fresh folder), or ``<!-- not run: REASON -->``,
REASON starting with one of ``NOT_RUN_REASONS``. A ``text`` block marked ``<!-- output -->``
right after a run block holds lines its output must contain. A figure quoted from a committed
result carries ``<!-- from PATH: QUERY -->`` right after it (``figure_value``)."""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SHELL_LANGUAGES = ("sh", "bash", "shell", "console")
# Why a command is not run by the tests; a marker's reason starts with one of these.
NOT_RUN_REASONS = (
    "needs a GPU",
    "needs a cluster",
    "needs a container engine",
    "needs the network",
    "needs root",
    "needs the real data",
    "takes minutes",
    "takes hours",
    "takes days",
)
# Folders whose Markdown is not the project's documentation.
SKIPPED_DIRS = {".venv", "runs", "build", "node_modules", ".carry", "tensorflow_datasets"}

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")
MARKER = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")
RUN_MARKER = re.compile(r"^run(?:, exit (?P<exit>\d+))?(?:, adding: (?P<adding>.+))?$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}
SHELL_KEYWORDS = {"do", "then", "else", "!"}


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository but those under SKIPPED_DIRS or a hidden folder."""
    found = []
    for path in sorted(REPO.rglob("*.md")):
        parts = path.relative_to(REPO).parts[:-1]
        if any(p in SKIPPED_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in parts):
            continue
        found.append(path)
    return found


@dataclass
class Block:
    """A fenced code block: its file, first line (1-based), info string, text and the marker of
    the line before it (None: no marker)."""

    path: Path
    line: int
    language: str
    text: str
    marker: str | None
    output: str | None = None  # the text of the `<!-- output -->` block after it, if any

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES

    def run_marker(self) -> re.Match | None:
        return RUN_MARKER.match(self.marker or "")

    def not_run_reason(self) -> str | None:
        if self.marker and self.marker.startswith("not run: "):
            return self.marker[len("not run: ") :]
        return None


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of one Markdown file, an output block attached to the block it
    follows."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, language = m.group(1), m.group(2), m.group(3)
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(before)
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        block = Block(path, i + 1, language, "\n".join(body), marker.group(1) if marker else None)
        if block.marker == "output" and found:
            found[-1].output = block.text
        found.append(block)
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in markdown_files() for b in blocks(path)]


# --------------------------------------------------------------------------- shell commands
@dataclass
class Command:
    """One simple command of a shell block: its environment assignments and its words."""

    env: dict[str, str]
    argv: list[str]


def commands(text: str) -> list[Command]:
    """The simple commands of a shell block (continuation lines joined, comments dropped, split
    at ``&&``, ``||``, ``;``, ``|``; ``for``/``done`` lines and ``do``/``then`` dropped). A line
    of assignments alone sets variables that later words' ``$NAME`` expand (a word that is only
    ``$NAME`` splits into the value's words)."""
    found = []
    variables: dict[str, str] = {}
    for line in text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token not in SEPARATORS:
                words += expand(token, variables)
                continue
            while words and words[0] in SHELL_KEYWORDS:
                words.pop(0)
            if words and words[0] not in ("for", "done", "fi", "if", "while"):
                env = {}
                while words and ASSIGNMENT.match(words[0]):
                    name, value = words.pop(0).split("=", 1)
                    env[name] = value
                if words:
                    found.append(Command(env, words))
                else:
                    variables.update(env)
            words = []
    return found


def expand(word: str, variables: dict[str, str]) -> list[str]:
    """``word`` with the block's variables expanded (others left as written)."""
    m = re.fullmatch(r"\$\{?(\w+)\}?", word)
    if m and m.group(1) in variables:
        return shlex.split(variables[m.group(1)])
    return [
        re.sub(
            r"\$\{?(\w+)\}?",
            lambda v: variables.get(v.group(1), v.group(0)),
            word,
        )
    ]


def is_python(word: str) -> bool:
    return re.fullmatch(r"(\S*/)?python3?(\.\d+)?", word) is not None


def is_setup(cmd: Command) -> bool:
    """A set-up step (a virtual environment, a pip install) rather than the project's own."""
    argv = cmd.argv
    if is_python(argv[0]) and argv[1:3] in (["-m", "venv"], ["-m", "pip"]):
        return True
    return re.fullmatch(r"(\S*/)?pip3?", argv[0]) is not None


@dataclass
class Invocation:
    """A repository script called by a command: its path and arguments."""

    script: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


CONTAINER_IMAGE = re.compile(r"^(\S+/)?resnet-nobn(:[\w.-]+)?$")


def invocations(cmd: Command) -> list[Invocation]:
    """The repository scripts a command runs with their arguments: ``python SCRIPT ...``;
    ``launch/local_cluster.py ... -- SCRIPT ...`` (both); ``sbatch ... train_cifar.sbatch ARGS``
    and ``docker run ... resnet-nobn ARGS`` (ARGS are launch/cifar.py's); a shell script
    (``bash X.sh``, ``dir/X.sh``)."""
    argv = cmd.argv
    found = []
    if is_python(argv[0]) and len(argv) > 1 and argv[1].endswith(".py"):
        script, args = argv[1], argv[2:]
        if "--" in args:
            k = args.index("--")
            inner = args[k + 1 :]
            args = args[:k]
            if inner and inner[0].endswith(".py"):
                found.append(Invocation(inner[0], inner[1:], cmd.env))
        found.insert(0, Invocation(script, args, cmd.env))
    elif argv[0] == "sbatch":
        k = next((i for i, w in enumerate(argv) if w.endswith("train_cifar.sbatch")), None)
        if k is not None:
            found.append(Invocation("launch/cifar.py", argv[k + 1 :], cmd.env))
    elif argv[:2] == ["docker", "run"] and "--entrypoint" not in argv:
        k = next((i for i, w in enumerate(argv) if i > 1 and CONTAINER_IMAGE.match(w)), None)
        if k is not None:
            found.append(Invocation("launch/cifar.py", argv[k + 1 :], cmd.env))
    elif argv[0] == "bash" and len(argv) > 1 and argv[1].endswith(".sh"):
        found.append(Invocation(argv[1], argv[2:], cmd.env))
    elif argv[0].endswith(".sh") and not argv[0].startswith("/"):
        found.append(Invocation(argv[0], argv[1:], cmd.env))
    return found


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a Markdown file outside its fenced blocks, fence lines excluded."""
    in_fence = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m:
            in_fence = None if in_fence and line.strip().startswith(in_fence) else m.group(2)
        elif not in_fence:
            yield n, line


# Inline code that calls a repository script, e.g. `python launch/evaluate.py --model_dir=RUN`.
INLINE_COMMAND = re.compile(
    r"`((?:[A-Za-z_][A-Za-z0-9_]*=\S+ )*(?:\S*/)?python3? (?:launch|bench|data)/[^`]+)`"
)


def inline_commands(path: Path) -> list[tuple[int, str]]:
    """(line, command) of the inline code spans of a Markdown file that call a repository
    script (outside fenced blocks)."""
    found = []
    for n, line in prose_lines(path):
        found += [(n, c) for c in INLINE_COMMAND.findall(line)]
    return found


# A flag's value that stands for what the reader fills in: the test checks the flag's name only.
PLACEHOLDER = re.compile(r"\$|\.\.\.|…|<|\b[A-Z][A-Z0-9_]{2,}\b")


PLACEHOLDER_VALUE = "\0"  # what split_placeholders puts in a placeholder's place


def split_placeholders(args: list[str]) -> tuple[list[str], list[str]]:
    """(args with each placeholder value replaced by PLACEHOLDER_VALUE, the names of those
    flags); a bare ``...`` is dropped."""
    parse, names = [], []
    for arg in args:
        if arg in ("...", "…"):
            continue
        if arg.startswith("--") and "=" in arg and PLACEHOLDER.search(arg.split("=", 1)[1]):
            name = arg[2:].split("=", 1)[0]
            names.append(name)
            parse.append(f"--{name}={PLACEHOLDER_VALUE}")
        else:
            parse.append(arg)
    return parse, names


def argparse_options(script: Path) -> set[str]:
    """The option strings an argparse script declares (``add_argument("--x", ...)``; with
    ``BooleanOptionalAction`` also ``--no-x``; ``flag_config.add_argument(parser, Config,
    "x")``: ``--x``, a config field's option), read from its source without importing it."""
    options = set()
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        if getattr(node.func, "id", "") == "add_argument" and isinstance(
            node.args[-1], ast.Constant
        ):
            options.add(f"--{node.args[-1].value}")  # a config field's option (flag_config)
            continue
        if getattr(node.func, "attr", "") != "add_argument":
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        boolean = any(
            k.arg == "action" and "BooleanOptionalAction" in ast.unparse(k.value)
            for k in node.keywords
        )
        for name in names:
            if isinstance(name, str) and name.startswith("--"):
                options.add(name)
                if boolean:
                    options.add("--no-" + name[2:])
    return options


def uses_absl(script: Path) -> bool:
    text = script.read_text(encoding="utf-8")
    return "cli.run(main)" in text or "app.run(main)" in text


# --------------------------------------------------------------------------- quoted figures
FIGURE = re.compile(
    r"(?P<number>[-−+]?\d[\d,]*(?:\.\d+)?)(?P<tail>[\s%*]*)<!--\s*from\s+(?P<path>\S+?):\s*"
    r"(?P<query>.*?)\s*-->"
)
FIGURE_MARKER = re.compile(r"<!--\s*from\s")


@dataclass
class Figure:
    path: Path
    line: int
    number: str
    source: str
    query: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def figures(path: Path) -> tuple[list[Figure], list[int]]:
    """The figures of a Markdown file marked ``<!-- from PATH: QUERY -->``, and the lines of a
    ``from`` marker with no number right before it."""
    found, orphans = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        matched = list(FIGURE.finditer(line))
        found += [
            Figure(path, n, m.group("number"), m.group("path"), m.group("query")) for m in matched
        ]
        if len(FIGURE_MARKER.findall(line)) != len(matched):
            orphans.append(n)
    return found, orphans


def figure_value(source: Path, query: str) -> float:
    """The value QUERY picks from a committed result file.

    ``.jsonl``: ``last FIELD``, ``min FIELD``, ``max FIELD`` over the lines, or
    ``where KEY=VALUE[,KEY=VALUE] FIELD`` (the first line that matches); ``.json``: a dotted
    path (``arms.hardt_ma.mean``; a key with dots or spaces in brackets: ``runs[lr 0.02].x``);
    any text file: ``/REGEX/`` (its first group, as a number). A FIELD written ``1-FIELD`` takes
    one minus the value (an error from a precision); then a `` %`` multiplies by 100, and a
    last `` - X`` or `` + X`` subtracts or adds X (a gap to the paper's figure).
    """
    offset = 0.0
    m = re.fullmatch(r"(.*?)\s+([-+])\s*(\d+(?:\.\d+)?)", query)
    if m:
        query, offset = m.group(1), float(m.group(3)) * (1 if m.group(2) == "+" else -1)
    scale = 1.0
    if query.endswith(" %"):
        query, scale = query[:-2].strip(), 100.0
    return pick(source, query) * scale + offset


def pick(source: Path, query: str) -> float:
    """``figure_value``'s QUERY without its scale and offset."""
    text = source.read_text(encoding="utf-8")
    if query.startswith("/") and query.endswith("/"):
        m = re.search(query[1:-1], text)
        if not m:
            raise ValueError(f"{query} matches nothing in {source}")
        return float(m.group(1).replace(",", ""))
    if source.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        how, *rest = query.split()
        name = rest[-1]
        complement = name.startswith("1-")
        name = name.removeprefix("1-")
        if how == "where":
            conditions = dict(c.split("=", 1) for c in rest[0].split(","))
            rows = [r for r in rows if all(str(r.get(k)) == v for k, v in conditions.items())]
            if not rows:
                raise ValueError(f"no line of {source} has {rest[0]}")
            value = rows[0][name]
        else:
            values = [r[name] for r in rows if name in r]
            value = {"last": lambda v: v[-1], "min": min, "max": max}[how](values)
        return 1 - float(value) if complement else float(value)
    value = json.loads(text)
    for key in re.findall(r"\[([^\]]+)\]|([^.\[\]]+)", query):
        name = key[0] or key[1]
        value = value[int(name)] if isinstance(value, list) else value[name]
    return float(value)


def as_number(text: str) -> tuple[float, int]:
    """A figure as written (commas, a Unicode minus) -> (value, decimals)."""
    text = text.replace(",", "").replace("−", "-").lstrip("+")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text), decimals


def matches(number: str, value: float) -> bool:
    """Whether a figure as written is ``value`` rounded to the decimals written (either way at
    an exact half: 1,059 for 1058.5)."""
    written, decimals = as_number(number)
    return abs(value - written) <= 0.5 * 10**-decimals + 1e-9


# --------------------------------------------------------------------------- links
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores
    dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found = set()
    for _, line in prose_lines(path):
        if line.startswith("#"):
            found.add(heading_anchor(line))
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of the relative links of a Markdown file (outside fenced blocks)."""
    found = []
    for n, line in prose_lines(path):
        for target in LINK.findall(line):
            if not re.match(r"[a-z]+:", target):
                found.append((n, target))
    return found


# --------------------------------------------------------------------------- named files
CODE_SPAN = re.compile(r"`([^`\s]+)`")
FILE_PATH = re.compile(r"[\w.-]+(/[\w.-]+)+\.(py|sh|md|yaml|sbatch|json|jsonl|png|toml|txt)")
# folders whose files are made by runs, not committed
MADE_BY_RUNS = ("runs/", ".carry/", "data/tensorflow_datasets/", "/", "--")


def named_files(path: Path) -> list[tuple[int, str]]:
    """(line, path) of the repository files a Markdown file names in inline code outside fenced
    blocks (``launch/cifar.py``, ``docker/slurm/train_cifar.sbatch``), but those runs make."""
    found = []
    for n, line in prose_lines(path):
        for span in CODE_SPAN.findall(line):
            if FILE_PATH.fullmatch(span) and not span.startswith(MADE_BY_RUNS):
                found.append((n, span))
    return found
