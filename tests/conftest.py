"""Test-session set-up shared by every test module."""

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import jax_cache
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# One JAX compilation cache for the session, in every launch this process starts, and in its own
# JAX: TensorFlow, which imports JAX, is imported after this (pytest_configure), and xdist's workers
# take these settings from the controller. For the in-process JAX tests alone the cache gains
# nothing (4 files, 2 pairs, wall ratio 0.995). A JAX launch of a network and devices compiled
# before loads the executables XLA made then (a 10-step launch of the small network, 2 devices: 27 s
# cold, 6 s warm on a 2-core Zen 3), the same code bit for bit. An entry half written (a launch
# killed as it wrote it, or two writing it at once) is read as a miss and compiled again; JAX's
# warning of that is silenced, so it cannot add a line to an output a test reads.
# ``JAX_COMPILATION_CACHE_DIR=`` turns it off.
_JAX_CACHE_ENV = {
    jax_cache.FOLDER: tempfile.mkdtemp(prefix="resnet_noBN-jax-cache-"),
    **jax_cache.SETTINGS,
}
for _name, _value in _JAX_CACHE_ENV.items():
    os.environ.setdefault(_name, _value)
_CACHE_MISS_WARNING = "Error reading persistent compilation cache entry"
os.environ["PYTHONWARNINGS"] = ",".join(
    filter(None, [os.environ.get("PYTHONWARNINGS"), f"ignore:{_CACHE_MISS_WARNING}"])
)
warnings.filterwarnings("ignore", message=_CACHE_MISS_WARNING)
atexit.register(shutil.rmtree, _JAX_CACHE_ENV[jax_cache.FOLDER], ignore_errors=True)

CIFAR_SLICES_ENV = "RESNET_NOBN_CIFAR_SLICES"


def pytest_addoption(parser):
    parser.addoption(
        "--cifar_slices",
        metavar="PATH",
        default=os.environ.get(CIFAR_SLICES_ENV),
        help="A folder holding real CIFAR data in the official binary layout "
        "(cifar-10-batches-bin/, cifar-100-binary/), read by the tests on real images; "
        f"default ${CIFAR_SLICES_ENV}. Those tests are skipped without it.",
    )


@pytest.fixture(scope="session", autouse=True)
def session_temporary_folder(tmp_path_factory) -> Iterator[Path]:
    """The temporary folder of every test and every process it starts: a folder in the
    session's own (pytest keeps the last three). Not the machine's. There, each process a test
    kills leaves a file of TensorFlow's autograph, and each tfds builder made before its data is
    prepared leaves an empty folder: 35 files and folders in a whole run."""
    folder = tmp_path_factory.mktemp("tmp", numbered=False)
    with pytest.MonkeyPatch.context() as patch:  # both as they were once the session ends
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def cold_processes_share_the_jax_cache() -> Iterator[None]:
    """Every Python a test starts cold (under slurmd, a launcher's runs on another backend, a
    probe) shares the session's JAX cache as the warm JAX launches do: tests/cold_jax's
    ``sitecustomize``, last on ``PYTHONPATH`` (a folder before it with its own, as ops/mutation's
    mutants, wins). A process that never imports JAX runs as without it, and the warm processes
    ignore it (tests/jax_cache.py). Set here, where the tests run: the pytest-xdist workers, and
    the JAX they import in-process, keep JAX's own rules, which tests/test_warm_start.py checks."""
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    with pytest.MonkeyPatch.context() as patch:
        if str(jax_cache.COLD) not in path:
            patch.setenv("PYTHONPATH", os.pathsep.join([*path, str(jax_cache.COLD)]))
        yield


@pytest.fixture(scope="session")
def mirrored_strategy():
    """MirroredStrategy over the two logical CPUs, one per test session: like a real process,
    which has one strategy (two over the same devices would share collective keys)."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])


@pytest.fixture(scope="session")
def cifar_slices(pytestconfig) -> Path:
    """The folder of real CIFAR slices given by --cifar_slices=PATH (or $RESNET_NOBN_CIFAR_SLICES);
    the test is skipped where none is given or the folder is absent."""
    path = pytestconfig.getoption("cifar_slices")
    if not path:
        pytest.skip(f"no real CIFAR data: pass --cifar_slices=PATH or set {CIFAR_SLICES_ENV}")
    if not Path(path).is_dir():
        pytest.skip(f"--cifar_slices {path} is absent")
    return Path(path)


@pytest.fixture
def no_network(monkeypatch):
    """Every HTTP(S) request fails at once as on a machine without internet (requests'
    ConnectionError, what tfds' downloader raises offline): no test reaches the network."""
    import requests

    def offline(*args, **kwargs):
        raise requests.exceptions.ConnectionError("network access is disabled in the tests")

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", offline)


@pytest.fixture(scope="session")
def one_line():
    """check(excinfo, *fragments): the error's message is ONE line holding every fragment (what
    bad input gets: ``configs.errors``)."""

    def check(excinfo, *fragments):
        message = str(excinfo.value)
        assert "\n" not in message, message
        for fragment in fragments:
            assert fragment in message, (fragment, message)

    return check


@pytest.fixture(scope="session")
def wait_for():
    """wait_for(predicate, what, timeout=300): poll ``predicate`` every 0.5 s until it holds;
    fail naming ``what`` after ``timeout`` seconds (a job's state, a line in its log)."""

    def wait(predicate, what, timeout=300):
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.5)

    return wait


@pytest.fixture(scope="module")
def cifar_bin(request, tmp_path_factory, write_cifar):
    """A folder ``cifar-10-batches-bin`` of random CIFAR-10 records in the official binary
    layout, once per test module: the module's ``CIFAR_RECORDS`` records a file (default 16)."""
    folder = tmp_path_factory.mktemp("data") / "cifar-10-batches-bin"
    write_cifar(folder, "cifar10", getattr(request.module, "CIFAR_RECORDS", 16))
    return folder


@pytest.fixture(scope="session")
def write_cifar():
    """write(folder, dataset, records_per_file): `cifar_data.write_random`, random records in
    the official binary layout; returns {split: (uint8 images [N, 32, 32, 3], int labels [N])}
    in file order."""
    from resnet_noBN.datasets.cifar_data import write_random

    return write_random


@pytest.fixture(scope="session")
def write_image_tree():
    """write(root, dataset, per_class, classes=None, fmt="png") writes random 32x32 images as
    root/{train,test}/<class>/NNNN.<fmt>, classes in the order given (default: the data set's);
    returns {split: (uint8 images [N, 32, 32, 3], labels [N])} in label order, then file name.
    PNG is lossless, so what is read back must equal what was written."""
    import numpy as np
    import tensorflow as tf

    from resnet_noBN.datasets.cifar_input import DATASETS

    def write(root: Path, dataset: str, per_class: int, classes=None, fmt: str = "png"):
        spec = DATASETS[dataset]
        classes = spec.class_names if classes is None else classes
        rng = np.random.default_rng(1)
        encode = tf.io.encode_png if fmt == "png" else tf.io.encode_jpeg
        written = {}
        for split in ("train", "test"):
            by_label = {}
            for name in classes:
                folder = root / split / name
                folder.mkdir(parents=True)
                images = rng.integers(0, 256, (per_class, 32, 32, 3), dtype=np.uint8)
                for i, image in enumerate(images):
                    (folder / f"{i:04d}.{fmt}").write_bytes(encode(image).numpy())
                by_label[spec.class_names.index(name)] = images
            labels = sorted(by_label)
            written[split] = (
                np.concatenate([by_label[k] for k in labels]),
                np.repeat(labels, per_class),
            )
        return written

    return write


# Under pytest-xdist (the README's ``-n 2 --dist loadfile``: each file runs whole on one worker,
# its module fixtures once), the files are handed out longest first, by their seconds in
# ops/ci/suite_times.json (a file not there last): the last file to start is a short one, so
# neither worker waits long on the other at the end. Each worker orders its collection alike,
# and xdist keeps that order: its own (``loadscopereorder``, xdist 3.6 on) hands out the files
# with the most tests first, whatever their time, and is switched off (pytest_configure).
_SUITE_TIMES = Path(__file__).resolve().parents[1] / "ops" / "ci" / "suite_times.json"


def file_seconds() -> dict[str, float]:
    """Each test file's seconds in ops/ci/suite_times.json ({} without it)."""
    seconds: dict[str, float] = {}
    if _SUITE_TIMES.is_file():
        for test in json.loads(_SUITE_TIMES.read_text())["tests"]:
            file = test["test"].split("::")[0]
            seconds[file] = seconds.get(file, 0.0) + test["seconds"]
    return seconds


def _longest_files_first(items) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        seconds = file_seconds()
        items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))


# The quick tier (docs/testing.md, "The quick tier"): the tests of tests/quick_tier.json, chosen
# by ops/ci/quick_tier.py from their measured coverage, are marked ``quick``.
_COLLECTED = pytest.StashKey[frozenset]()

# ops/ci/quick_tier.py's measurement: with $QUICK_TIER_OUT set, each test's start, end and
# outcome are written to $QUICK_TIER_OUT/session.json, and where coverage.py measures this
# process each test's lines go to a coverage context named by its id.
_QUICK_TIER_OUT = os.environ.get("QUICK_TIER_OUT")
_SESSION: dict = {"pid": os.getpid(), "collected": [], "tests": {}}


class _LaunchCounts:
    """How many launches of ``launch/*.py`` the tests started warm and cold
    (tests/warm_start.py), summed over the xdist workers and printed at the end."""

    def __init__(self):
        self.counts = {"warm": 0, "cold": 0, "by launchers": 0}

    def pytest_sessionfinish(self, session):
        import launchers
        import warm_start

        counts = {**launchers.WARM.counts, "by launchers": warm_start.forked_by_launchers()}
        with contextlib.suppress(FileNotFoundError):
            os.remove(warm_start.COUNTS)
        if hasattr(session.config, "workeroutput"):
            session.config.workeroutput["launches"] = counts
        else:
            for kind, n in counts.items():
                self.counts[kind] += n

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        for kind, n in getattr(node, "workeroutput", {}).get("launches", {}).items():
            self.counts[kind] += n

    def pytest_terminal_summary(self, terminalreporter):
        warm, cold, theirs = (self.counts[k] for k in ("warm", "cold", "by launchers"))
        if warm or cold:
            terminalreporter.write_line(
                f"launchers started by the tests: {warm} warm, {cold} cold; by those "
                f"launchers, {theirs} warm (tests/warm_start.py)"
            )


def hands_out_the_tests(config) -> bool:
    """Whether this process is pytest-xdist's controller: it starts the workers and runs no
    test (not a worker, tests distributed, not ``--collect-only``, which xdist runs here)."""
    return (
        not hasattr(config, "workerinput")
        and getattr(config.option, "dist", "no") != "no"
        and not config.getoption("collectonly")
    )


@contextlib.contextmanager
def held_as_a_conftests_output(config) -> Iterator[None]:
    """What the block writes held by pytest, as the output of a conftest's import is (shown
    with -s)."""
    capture = config.pluginmanager.getplugin("capturemanager")  # None under -p no:capture
    if capture:
        capture.resume_global_capture()
    try:
        yield
    finally:
        if capture:
            capture.suspend_global_capture()


def pytest_configure(config):
    if not hands_out_the_tests(config):
        # Two logical CPU devices, so MirroredStrategy can be tested with two replicas on a
        # CPU. Before TensorFlow initialises its devices: before any test module is imported.
        # Not in xdist's controller, which runs no test: there its import took 5 CPU-s, and
        # TensorFlow's start-up lines came after the run's summary.
        with held_as_a_conftests_output(config):
            import tensorflow as tf

            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu,
                [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()],
            )
    config.pluginmanager.register(_LaunchCounts(), "launch-counts")
    if hasattr(config.option, "loadscopereorder"):  # the files' order is ours (above)
        config.option.loadscopereorder = False
    config.addinivalue_line(
        "markers",
        "quick: the quick tier (python -m pytest tests -q -m quick), chosen by measured coverage "
        "to execute code of every module (tests/quick_tier.json, docs/testing.md)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the quick tier's tests ``quick`` (before ``-m`` selects); under ``-m quick``, a
    listed test that this run should have collected and did not is an error, not a smaller
    tier."""
    _longest_files_first(items)
    tier = json.loads(Path(__file__).with_name("quick_tier.json").read_text())
    quick = {test["test"] for test in tier["tests"]}
    collected = frozenset(item.nodeid for item in items)
    config.stash[_COLLECTED] = collected
    if _QUICK_TIER_OUT:
        _SESSION["collected"] = sorted(collected)
    for item in items:
        if item.nodeid in quick:
            item.add_marker(pytest.mark.quick)
    if "quick" not in (config.option.markexpr or ""):
        return
    # the files this run collects whole: those named, or under a folder named, without "::"
    whole = [
        Path(config.invocation_params.dir, arg).resolve() for arg in config.args if "::" not in arg
    ]
    missing = sorted(
        test
        for test in quick - collected
        if any(config.rootpath.joinpath(test.split("::")[0]).is_relative_to(w) for w in whole)
    )
    if missing:
        raise pytest.UsageError(
            f"tests/quick_tier.json lists {len(missing)} test(s) that do not exist: "
            f"{', '.join(missing)}; measure their files again and choose again: {tier['rerun']}"
        )


@pytest.fixture(scope="session")
def collected_ids(pytestconfig) -> frozenset:
    """The ids of every test this session collected, before ``-m`` or ``-k`` selected."""
    return pytestconfig.stash[_COLLECTED]


if _QUICK_TIER_OUT:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        coverage = sys.modules.get("coverage")
        measuring = coverage and coverage.Coverage.current()
        test = _SESSION["tests"][item.nodeid] = {
            "start": time.time(),
            "outcome": "passed",
            "needs_slices": "cifar_slices" in item.fixturenames,
        }
        if measuring:
            measuring.switch_context(item.nodeid)
        yield
        if measuring:
            measuring.switch_context("")
        test["end"] = time.time()

    def pytest_runtest_logreport(report):
        test = _SESSION["tests"].get(report.nodeid)
        if test is None:
            return
        if report.failed:
            test["outcome"] = "failed"
        elif report.skipped and test["outcome"] == "passed":
            test["outcome"] = "skipped"

    def pytest_sessionfinish(session):
        Path(_QUICK_TIER_OUT, "session.json").write_text(json.dumps(_SESSION))
