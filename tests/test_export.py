"""launch/export.py, resnet_noBN.load and launch/evaluate.py --model (trained/model_file.py): a
run's network in one .keras file that every Keras backend loads, taking raw pixels; a SavedModel
that serves uint8 images without the project; bad input one line, nothing written.

Two tiny runs of the small network on generated CIFAR-10, each exported once and shared: one on
TensorFlow with Fixup's blocks (their scalar layers), one on JAX with no TensorFlow importable,
brought back as a GPU lease brings a run (``weights-<step>.npz``). The TensorFlow run's file is
loaded here and on JAX and PyTorch in processes where TensorFlow cannot be imported; its logits
are compared with those the run's own evaluation computes (the network restored from the
checkpoint, on standardised images), its classes with the run's answers.jsonl, image by image.
"""

import errno
import functools
import itertools
import json
import shutil
import subprocess
import sys
import zipfile

import keras
import launchers
import numpy as np
import pytest
import tensorflow as tf
from doc_blocks import blocks
from launchers import REPO
from PIL import Image
from test_imagenet import TINY
from test_launch_cifar import SMALL, cifar
from test_tensorflow_free_backends import backend_env

import resnet_noBN
from ops.lease.collect import cut_weights
from resnet_noBN.configs.errors import CheckpointError, InputError, StorageError
from resnet_noBN.datasets import cifar_data, imagenet_input, stream
from resnet_noBN.models.networks import build_cifar_model
from resnet_noBN.runs import record, run_config, setup
from resnet_noBN.trained import model_file, model_paths, run_folder
from resnet_noBN.trainers.answers import final_predictions
from resnet_noBN.trainers.loop import weights_digest
from resnet_noBN.trainers.run_log import read_metrics

CIFAR_RECORDS = 24  # a file of the generated data: 120 training images, 24 test images
STEPS = ["--train_steps=4", "--checkpoint_every=2", "--eval_every=2"]  # steps 2 and 4 kept
TOLERANCE = 1e-5  # float32: the largest logit difference allowed, between backends or paths
DOCS = REPO / "docs" / "training.md"
DOCS_MARKER = "run by tests/test_export.py"


def export(*args, env=None):
    return launchers.run("launch/export.py", *args, env=env)


def evaluate(*args, env=None):
    return launchers.run("launch/evaluate.py", *args, env=env)


def last_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def split_images(data):
    return cifar_data.load_split("cifar10", "test", data)


def without_tensorflow_run(script: str, *args, env: dict) -> subprocess.CompletedProcess:
    """``python script args`` from the repository root, TensorFlow unimportable, ``env``'s
    backend."""
    return launchers.run(script, *args, env=env, cwd=REPO, unimportable=("tensorflow",))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cifar_bin):
    """{"tensorflow": (folder, final JSON), "jax": ..., "bfloat16": ...}: 4 steps each, two
    side by side; the last on TensorFlow in mixed_bfloat16, as every GPU run computes."""
    root = tmp_path_factory.mktemp("runs")
    args = [*SMALL, *STEPS, f"--data_path={cifar_bin}"]
    folders = {"tensorflow": root / "tf", "jax": root / "jax", "bfloat16": root / "bf16"}
    procs = launchers.run_many(
        [
            functools.partial(
                cifar, *args, "--block=fixup", f"--model_dir={folders['tensorflow']}"
            ),
            functools.partial(
                without_tensorflow_run,
                "launch/cifar.py",
                *args,
                f"--model_dir={folders['jax']}",
                env=backend_env("jax"),
            ),
            functools.partial(
                cifar, *args, "--precision=mixed_bfloat16", f"--model_dir={folders['bfloat16']}"
            ),
        ]
    )
    return {name: (folders[name], last_json(proc)) for name, proc in zip(folders, procs)}


@pytest.fixture(scope="module")
def lease_folder(runs, tmp_path_factory):
    """The JAX run as a GPU lease brings it back: its record, metrics and answers, and
    weights-4.npz (``ops.lease.collect.cut_weights``) in place of its checkpoints."""
    trained, final = runs["jax"]
    cut = cut_weights(trained, final)
    back = tmp_path_factory.mktemp("lease") / "cifar10_small"
    back.mkdir()
    for name in ("config.json", "metrics.jsonl", "answers.jsonl", cut["file"]):
        shutil.copy(trained / name, back / name)
    return back


@pytest.fixture(scope="module")
def exported(runs, lease_folder, tmp_path_factory):
    """The TensorFlow run exported whole and, at step 2, as a SavedModel; the lease's JAX run
    exported on JAX with no TensorFlow importable: {name: (path, its record)}."""
    out = tmp_path_factory.mktemp("exported")
    tf_dir = runs["tensorflow"][0]
    lease_export = functools.partial(
        without_tensorflow_run,
        "launch/export.py",
        f"--model_dir={lease_folder}",
        f"--output={out / 'lease.keras'}",
        env=backend_env("jax"),
    )
    procs = launchers.run_many(
        [
            functools.partial(export, f"--model_dir={tf_dir}", f"--output={out / 'tf.keras'}"),
            functools.partial(
                export,
                f"--model_dir={tf_dir}",
                "--step=2",
                "--format=tf_saved_model",
                f"--output={out / 'tf_serving'}",
            ),
            lease_export,
        ]
    )
    found = {
        name: (out / file, last_json(proc))
        for name, file, proc in zip(
            ("tf", "tf_serving", "lease"), ("tf.keras", "tf_serving", "lease.keras"), procs
        )
    }
    # the documented route of a JAX or PyTorch run to a SavedModel, its file on TensorFlow
    # (launch/export.py --model=FILE --format=tf_saved_model), here in this process
    serving = out / "lease_serving"
    found["lease_serving"] = (
        serving,
        model_file.export_file(str(out / "lease.keras"), str(serving), "tf_saved_model"),
    )
    return found


def run_logits(model_dir, step: int, images) -> tuple[np.ndarray, str]:
    """What the TensorFlow run's own evaluation computes at ``step``: the network its
    config.json records, restored from ckpt-<step>, on standardised images; and its digest."""
    saved = json.loads((model_dir / "config.json").read_text())
    network = build_cifar_model(run_config.from_record(saved).network)
    tf.train.Checkpoint(model=network).restore(str(model_dir / f"ckpt-{step}")).expect_partial()
    logits = network(stream.standardize(images), training=False)
    return keras.ops.convert_to_numpy(logits), weights_digest(network.weights)


def test_the_record_beside_the_file_names_the_run(runs, exported, cifar_bin):
    model_dir, final = runs["tensorflow"]
    path, record = exported["tf"]
    assert json.loads(path.with_suffix(".json").read_text()) == record
    saved = json.loads((model_dir / "config.json").read_text())
    measured = read_metrics(str(model_dir))[-1]
    assert (record["step"], record["weights_sha256"]) == (4, final["weights_sha256"])
    assert (record["test_error"], record["test_examples"]) == (final["test_error"], 24)
    assert record["test_error"] == measured["test_error"]
    assert record["weights"] == str(model_dir / "ckpt-4")
    assert (record["experiment"], record["backend"]) == ("cifar10_paper", "tensorflow")
    assert (record["recipe"], record["data"]) == (saved["recipe"], saved["data"])
    assert record["classes"] == list(cifar_data.DATASETS["cifar10"].class_names)
    assert record["input"]["shape"] == [None, 32, 32, 3]
    assert record["features"] == {"layer": "global_pool", "width": 64}
    assert (
        record["command"].startswith("python ") and f"--model_dir={model_dir}" in record["command"]
    )
    assert path.stat().st_size > 100_000 and not list(path.parent.glob("*.partial*"))


# run by a process where TensorFlow cannot be imported: the file's logits on JAX or PyTorch
PROBE = """import sys
sys.modules["tensorflow"] = None
{imports}
import numpy as np
model = keras.saving.load_model(sys.argv[1])
images = np.load(sys.argv[2])
np.savez(sys.argv[3], uint8=model.predict(images, verbose=0),
    floats=model.predict(images.astype("float32"), verbose=0),
    load=resnet_noBN.load(sys.argv[1]).predict(images, verbose=0))
"""
# each backend's probe imports in another order: the layers registered either way
IMPORTS = {"jax": "import resnet_noBN\nimport keras", "torch": "import keras\nimport resnet_noBN"}
# run by a process where resnet_noBN cannot be imported: each SavedModel's logits
SERVE = """import sys
sys.modules["resnet_noBN"] = None
import numpy as np, tensorflow as tf
images = tf.constant(np.load(sys.argv[1]))
served = [tf.saved_model.load(path) for path in sys.argv[3:]]
np.savez(sys.argv[2], **{name: model.serve(images).numpy()
    for name, model in zip(("tf", "lease"), served)})
"""
REFUSED = {  # each bad input's line ({root}: the cases' folder, {run}: the run's, {file}: its file)
    "no_checkpoint": "error: --model_dir {root}/bare holds no checkpoint (ckpt-<step>) and no "
    "weights file (weights-<step>.npz); train it first, or name the folder that holds them",
    "step": "error: --step=3: {run} keeps the weights of steps 2, 4 only; give one of them",
    "output": "error: --output {root}/missing/x.keras: its folder {root}/missing does not exist; "
    "create it or name another",
    "suffix": "error: --output {root}/x.h5 must end in .keras (the Keras file format), or give "
    "--format=tf_saved_model for a SavedModel folder",
    "not_keras": "error: --model {root}/notes.keras is not a Keras file (a zip holding "
    "config.json and metadata.json, as Model.save writes); give a .keras file of "
    "launch/export.py",
    "not_keras_export": "error: --model {root}/notes.keras is not a Keras file (a zip holding "
    "config.json and metadata.json, as Model.save writes); give a .keras file of "
    "launch/export.py",
    "classes": "error: --model {file} gives 10 classes, but --data_path {root}/cifar-100-binary "
    "holds CIFAR-100 (100 classes): evaluate it on a copy of its own data set",
}

AFTER_THE_BACKEND = {"classes"}  # refused once the file is loaded: its classes read there


def python(code: str, *args, env: dict, cwd=None):
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


def listing(folder):
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def launched(runs, exported, cifar_bin, tmp_path_factory, write_cifar):
    """Every process that reads the exported files, two at a time: the JAX and PyTorch probes,
    the SavedModels served, launch/evaluate.py --model, each bad input of REFUSED. Returns the
    folder they write into, the refusals' folder, the listings before them, and the processes
    by name."""
    model_dir, _ = runs["tensorflow"]
    file = exported["tf"][0]
    out = tmp_path_factory.mktemp("launched")
    np.save(out / "images.npy", split_images(cifar_bin)[0])
    root = tmp_path_factory.mktemp("refused")
    (root / "bare").mkdir()  # a run's record, no checkpoint
    shutil.copy(model_dir / "config.json", root / "bare" / "config.json")
    (root / "notes.keras").write_text("not a model")
    c100 = root / "cifar-100-binary"
    write_cifar(c100, "cifar100", 4)
    launches = {
        **{
            backend: functools.partial(
                python,
                PROBE.format(imports=IMPORTS[backend]),
                file,
                out / "images.npy",
                out / f"{backend}.npz",
                env=backend_env(backend),
            )
            for backend in IMPORTS
        },
        "serve": functools.partial(
            python,
            SERVE,
            out / "images.npy",
            out / "served.npz",
            exported["tf_serving"][0],
            exported["lease_serving"][0],
            env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"},
            cwd=out,
        ),
        "evaluate": functools.partial(
            evaluate,
            f"--model={file}",
            f"--data_path={cifar_bin}",
            f"--compare_answers={model_dir / 'answers.jsonl'}",
            f"--answers_to={out / 'answers.jsonl'}",
        ),
    }
    refused = {
        "no_checkpoint": (export, f"--model_dir={root / 'bare'}", f"--output={root / 'x.keras'}"),
        "step": (export, f"--model_dir={model_dir}", "--step=3", f"--output={root / 'x.keras'}"),
        "output": (export, f"--model_dir={model_dir}", f"--output={root / 'missing' / 'x.keras'}"),
        "suffix": (export, f"--model_dir={model_dir}", f"--output={root / 'x.h5'}"),
        "not_keras": (evaluate, f"--model={root / 'notes.keras'}", f"--data_path={c100}"),
        "not_keras_export": (
            export,
            f"--model={root / 'notes.keras'}",
            f"--output={root / 'x.keras'}",
        ),
        "classes": (evaluate, f"--model={file}", f"--data_path={c100}"),
    }
    for name, (launcher, *args) in refused.items():  # each names the modules it imported
        env = None if name in AFTER_THE_BACKEND else launchers.IMPORT_TIMES
        launches[name] = functools.partial(launcher, *args, env=env)
    before = {folder: listing(folder) for folder in (root, model_dir, file.parent)}
    procs = launchers.run_many(list(launches.values()))
    return out, root, before, dict(zip(launches, procs))


def test_the_file_gives_the_runs_logits_and_classes_on_every_backend(
    runs, exported, launched, cifar_bin
):
    """TensorFlow here, JAX (``import resnet_noBN`` before Keras) and PyTorch (after it) each in
    a process without TensorFlow: ``keras.saving.load_model`` and ``resnet_noBN.load`` of the
    file, on uint8 pixels and on the same pixels as floats."""
    model_dir, _ = runs["tensorflow"]
    path, _ = exported["tf"]
    out, _, _, procs = launched
    for backend in IMPORTS:
        assert procs[backend].returncode == 0, procs[backend].stderr[-3000:]
    images, _ = split_images(cifar_bin)
    model = keras.saving.load_model(path)
    logits = {
        "tensorflow": {
            "uint8": model.predict(images, verbose=0),
            "floats": model.predict(images.astype("float32"), verbose=0),
            "load": resnet_noBN.load(str(path)).predict(images, verbose=0),
        },
        **{backend: dict(np.load(out / f"{backend}.npz")) for backend in IMPORTS},
    }
    expected, digest = run_logits(model_dir, 4, images)
    assert weights_digest(model.weights) == digest
    assert np.ptp(expected.argmax(axis=1)) > 0  # the classes differ from image to image
    answers = final_predictions(str(model_dir / "answers.jsonl"))
    assert answers.step == 4 and len(answers.predicted) == len(images)
    for backend, by_input in logits.items():
        for name, found in by_input.items():
            assert found.shape == (len(images), 10), (backend, name)
            np.testing.assert_allclose(found, expected, rtol=0, atol=TOLERANCE, err_msg=backend)
            assert np.array_equal(found.argmax(axis=1), answers.predicted), (backend, name)
    for a, b in itertools.combinations(logits, 2):
        assert np.abs(logits[a]["uint8"] - logits[b]["uint8"]).max() <= TOLERANCE, (a, b)


def test_a_lease_run_of_jax_exported_without_tensorflow_loads_here(
    runs, exported, lease_folder, cifar_bin
):
    trained, final = runs["jax"]
    path, record = exported["lease"]
    assert (record["backend"], record["step"]) == ("jax", 4)
    assert record["weights"] == str(lease_folder / "weights-4.npz")
    assert record["weights_sha256"] == final["weights_sha256"]
    assert record["command"].startswith("KERAS_BACKEND=jax python ")
    images, _ = split_images(cifar_bin)
    predicted = resnet_noBN.load(str(path)).predict(images, verbose=0).argmax(axis=1)
    assert np.array_equal(predicted, final_predictions(str(trained / "answers.jsonl")).predicted)


def test_a_mixed_bfloat16_run_is_exported_in_float32(runs, cifar_bin, tmp_path):
    """A run trained in mixed_bfloat16: its file holds every layer in float32 (policy, weights
    and output) and gives the logits of its network built in float32 with the checkpoint's
    weights; the network in its own precision gives others (the test can tell the two)."""
    model_dir, final = runs["bfloat16"]
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["runtime"]["precision"] == "mixed_bfloat16"
    # in this process: the export starts no runtime (the launcher's own path: ``exported``)
    kept = run_folder.kept_weights(str(model_dir))
    record = model_file.export_run(kept, str(tmp_path / "bf16.keras"))
    assert (record["trained_precision"], record["weights_sha256"]) == (
        "mixed_bfloat16",
        final["weights_sha256"],
    )
    file = keras.saving.load_model(tmp_path / "bf16.keras")
    assert {layer.dtype_policy.name for layer in file.layers} == {"float32"}
    assert {w.dtype for w in file.weights} == {"float32"}
    images, _ = split_images(cifar_bin)
    logits = file.predict(images, verbose=0)
    assert logits.dtype == np.float32
    network = run_config.from_record(saved).network
    in_precision = {}
    for precision in ("float32", "mixed_bfloat16"):
        built = build_cifar_model(network, precision)
        tf.train.Checkpoint(model=built).restore(str(model_dir / "ckpt-4")).expect_partial()
        out = built(stream.standardize(images), training=False)
        in_precision[precision] = keras.ops.convert_to_numpy(out).astype(np.float32)
    scale = np.abs(in_precision["float32"]).max()
    np.testing.assert_allclose(logits, in_precision["float32"], rtol=0, atol=TOLERANCE * scale)
    assert np.abs(in_precision["mixed_bfloat16"] - logits).max() > 100 * TOLERANCE * scale


def test_weights_that_cannot_be_read_are_one_line_and_write_nothing(runs, tmp_path):
    """The export reads the files itself, no trainer built: a TensorFlow checkpoint cut short is
    CheckpointError naming it and the fix; a weights file of another model InputError naming the
    first array it lacks; a checkpoint's arrays of another shape CheckpointError. No file
    written."""
    model_dir = tmp_path / "run"
    shutil.copytree(runs["tensorflow"][0], model_dir)
    (data,) = model_dir.glob("ckpt-4.data-*")
    data.write_bytes(data.read_bytes()[:100])
    output = tmp_path / "out.keras"
    with pytest.raises(CheckpointError) as cut:
        model_file.export_run(run_folder.kept_weights(str(model_dir)), str(output))
    assert str(cut.value).startswith(f"checkpoint {model_dir / 'ckpt-4'} cannot be restored (")
    assert str(cut.value).endswith("); give another --step") and "\n" not in str(cut.value)
    assert not list(tmp_path.glob("out*"))
    run = run_config.from_record(json.loads((model_dir / "config.json").read_text()))
    served = model_file.served_model(run)
    other = tmp_path / "weights-4.npz"
    np.savez(other, step=4, **{"model/conv9/kernel": np.zeros(3)})
    with pytest.raises(InputError) as foreign:
        model_file.read_weights(served, str(other))
    assert str(foreign.value).startswith(f"{other} holds no weights of this run: {other} lacks ")
    assert " of the model's arrays, model/" in str(foreign.value)
    shapes = tmp_path / "ckpt-4.npz"
    np.savez(shapes, **{f"model/{v.path}": np.zeros(1) for v in served.weights})
    with pytest.raises(CheckpointError, match=r"has shape \(1,\), the model"):
        model_file.read_weights(served, str(shapes))


def test_near_identity_measures_a_lease_on_jax_and_its_file_alike(
    runs, lease_folder, exported, cifar_bin, tmp_path
):
    """launch/near_identity.py on the lease's folder (its weights-4.npz, on JAX, TensorFlow
    unimportable) and on the .keras file exported from it (here, on TensorFlow): the same three
    blocks, the same spectral norms to the last bit (the same float32 kernels, in float64), the
    same ratios within float32's reach; the lease measured at initialisation too (its config
    and seed), the file not (it holds no seed). The Fixup run's file, its multipliers s set to
    -2 (in this process): each bound is |s| ‖C2‖ ‖C1‖."""
    from resnet_noBN.trained import near_identity

    folder = tmp_path / "lease"
    shutil.copytree(lease_folder, folder)
    file = tmp_path / "lease.keras"
    shutil.copy(exported["lease"][0], file)
    shutil.copy(exported["lease"][0].with_suffix(".json"), tmp_path / "lease.json")
    measure = functools.partial(launchers.run, "launch/near_identity.py")
    lease_proc, file_proc = launchers.run_many(
        [
            functools.partial(
                without_tensorflow_run,
                "launch/near_identity.py",
                f"--model_dir={folder}",
                f"--data_path={cifar_bin}",
                env=backend_env("jax"),
            ),
            functools.partial(measure, f"--model={file}", f"--data_path={cifar_bin}"),
        ]
    )
    assert lease_proc.returncode == 0, lease_proc.stderr[-3000:]
    assert file_proc.returncode == 0, file_proc.stderr[-3000:]
    lease = json.loads((folder / model_paths.NEAR_IDENTITY_FILE).read_text())
    from_file = json.loads((tmp_path / f"lease.{model_paths.NEAR_IDENTITY_FILE}").read_text())
    assert lease["backend"] == "jax" and lease["step"] == from_file["step"] == 4
    assert lease["weights_sha256"] == from_file["weights_sha256"]
    assert from_file["initialisation"] is None and len(lease["initialisation"]["blocks"]) == 3
    for a, b in zip(lease["trained"]["blocks"], from_file["trained"]["blocks"], strict=True):
        assert a["block"] == b["block"]
        assert [c["spectral_norm"] for c in a["convs"]] == [c["spectral_norm"] for c in b["convs"]]
        assert a["lipschitz"] == b["lipschitz"]
        assert a["ratio_mean"] == pytest.approx(b["ratio_mean"], rel=1e-4)
    fixup = model_file.load(str(exported["tf"][0]))
    for layer in fixup.layers:
        if layer.name.endswith("_scale"):
            layer.scalar.assign(-2.0)  # away from its init, 1
    images = split_images(cifar_bin)[0]
    measured = near_identity.measured(fixup, images, "fixup", print_fn=lambda *a, **k: 0)
    for row in measured["blocks"]:
        first, second = (c["spectral_norm"] for c in row["convs"])
        assert row["multipliers"] == [-2.0]
        assert row["lipschitz"] == pytest.approx(2.0 * first * second, rel=1e-12) and second > 0


def test_a_saved_model_serves_uint8_images_without_the_project(runs, exported, launched, cifar_bin):
    """The TensorFlow run's SavedModel of step 2 and the JAX run's, made from its .keras file,
    loaded by ``tf.saved_model.load`` in a process where resnet_noBN cannot be imported: the
    logits of the run's evaluation at step 2, and of the JAX file."""
    model_dir, _ = runs["tensorflow"]
    _, record = exported["tf_serving"]
    images, _ = split_images(cifar_bin)
    expected, digest = run_logits(model_dir, 2, images)
    assert (record["format"], record["step"], record["weights_sha256"]) == (
        "tf_saved_model",
        2,
        digest,
    )
    assert record["test_error"] == read_metrics(str(model_dir))[0]["test_error"]
    lease_path, lease_record = exported["lease"]
    from_file = exported["lease_serving"][1]
    assert from_file["exported_from"] == str(lease_path)
    assert from_file["weights_sha256"] == lease_record["weights_sha256"]
    out, _, _, procs = launched
    assert procs["serve"].returncode == 0, procs["serve"].stderr[-3000:]
    served = np.load(out / "served.npz")
    np.testing.assert_allclose(served["tf"], expected, rtol=0, atol=TOLERANCE)
    lease = resnet_noBN.load(str(lease_path)).predict(images, verbose=0)
    np.testing.assert_allclose(served["lease"], lease, rtol=0, atol=TOLERANCE)


def test_evaluating_the_file_gives_the_runs_figures(runs, launched):
    model_dir, final = runs["tensorflow"]
    out, _, _, procs = launched
    result = last_json(procs["evaluate"])
    assert (result["step"], result["test_examples"]) == (4, 24)
    assert result["test_error"] == final["test_error"] and result["predictions_differ"] == 0
    assert result["weights_sha256"] == final["weights_sha256"]
    again = final_predictions(str(out / "answers.jsonl"))
    kept = final_predictions(str(model_dir / "answers.jsonl"))
    assert np.array_equal(again.correct, kept.correct)


@pytest.mark.parametrize("case", REFUSED)
def test_bad_input_is_one_line_and_writes_nothing(runs, exported, launched, case):
    _, root, before, procs = launched
    proc = procs[case]
    assert proc.returncode == 2, proc.stderr[-2000:]
    expected = REFUSED[case].format(root=root, run=runs["tensorflow"][0], file=exported["tf"][0])
    assert proc.stderr.strip().splitlines()[-1] == expected
    assert {folder: listing(folder) for folder in before} == before
    if case not in AFTER_THE_BACKEND:  # answered before any backend loads: file-system checks
        assert not launchers.imported(proc) & launchers.BACKEND_MODULES


def test_a_folder_without_a_run_is_refused_before_any_backend_loads(tmp_path):
    proc = export(
        f"--model_dir={tmp_path}", f"--output={tmp_path / 'x.keras'}", env=launchers.IMPORT_TIMES
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir {tmp_path} has no config.json: not a run of launch/cifar.py; name "
        "the folder a run wrote"
    )
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES
    assert list(tmp_path.iterdir()) == []


def test_load_refuses_what_is_no_model_in_one_line(tmp_path, one_line):
    with pytest.raises(InputError) as refused:
        resnet_noBN.load(str(tmp_path))
    one_line(refused, f"--model {tmp_path} is a folder, not a Keras file")
    with pytest.raises(InputError) as refused:
        resnet_noBN.load(str(tmp_path / "none.keras"))
    one_line(refused, "does not exist")


def test_an_export_cut_short_keeps_the_file_before_it_and_leaves_no_partial(
    tmp_path, monkeypatch, one_line
):
    """A write that fails (a full disk, faked: ``Model.save`` writes half a file, then ENOSPC)
    leaves the file and record already there byte for byte, removes its partial file, and says
    one line naming the output and the fix; a partial file a write cut short left earlier is
    removed by the next write."""
    served = model_file.served_model(run_config.build("cifar10_paper", "small", "cifar"))
    out = tmp_path / "m.keras"
    record = tmp_path / "m.json"
    assert model_paths.record_path(str(out)) == str(record)
    left = tmp_path / "m.keras.partial.keras"
    left.write_bytes(b"cut short")
    model_file.write(served, str(out), "keras", {"step": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.keras"]
    before = out.read_bytes(), record.read_text()
    assert json.loads(before[1]) == {"step": 1}

    def half(self, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(before[0][:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(served), "save", half)
    with pytest.raises(StorageError) as refused:
        model_file.write(served, str(out), "keras", {"step": 2})
    one_line(
        refused,
        f"cannot write {out} (No space left on device): free space there or name another --output",
    )
    assert (out.read_bytes(), record.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.keras"]


def test_a_saved_model_written_here_serves_uint8_images_and_replaces_the_folder_there(
    tmp_path, one_line
):
    """``model_file.write`` as a SavedModel, in this process: the small network of a
    mixed_bfloat16 run served in float32 (every layer), its serving signature uint8 images of
    the network's shape with any batch, its logits the model's; the folder there before and a
    partial folder a write cut short left are replaced, the record beside it. A .keras file
    Keras cannot read is refused in one line."""
    run = run_config.build(
        "cifar10_paper", "small", "cifar", runtime={"precision": "mixed_bfloat16"}
    )
    keras.utils.set_random_seed(2)
    network = setup.build_model(run)()
    served = model_file.served_model(run)
    assert {layer.dtype_policy.name for layer in served.layers[1:]} == {"float32"}
    model_file.copy_weights(network, served)
    out = tmp_path / "serving"
    for folder in (out, tmp_path / "serving.partial"):
        folder.mkdir()
        (folder / "old.txt").write_text("before")
    model_file.write(served, str(out), "tf_saved_model", {"step": 3})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serving", "serving.json"]  # first
    assert not (out / "old.txt").exists()
    assert (tmp_path / "serving.json").read_text() == json.dumps({"step": 3}, indent=2) + "\n"
    model_file.write(served, str(tmp_path / "fresh"), "tf_saved_model", {"step": 3})  # none there
    assert (tmp_path / "fresh" / "saved_model.pb").is_file()
    serve = tf.saved_model.load(str(out)).signatures["serving_default"]
    (spec,) = serve.structured_input_signature[1].values()
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, 32, 32, 3]
    pixels = np.random.default_rng(3).integers(0, 256, (2, 32, 32, 3), np.uint8)
    (logits,) = serve(tf.constant(pixels)).values()
    expected = served.predict(pixels, verbose=0)
    assert np.abs(expected).max() > 1e-3  # the network's weights, not the zeros served starts with
    np.testing.assert_allclose(logits.numpy(), expected, rtol=0, atol=TOLERANCE)
    broken = tmp_path / "broken.keras"
    with zipfile.ZipFile(broken, "w") as archive:
        for name in model_paths.KERAS_MEMBERS:
            archive.writestr(name, "not what Keras wrote")
    with pytest.raises(InputError) as refused:
        resnet_noBN.load(str(broken))
    one_line(refused, f"--model {broken} cannot be loaded (")


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_load_reads_a_run_folders_latest_weights(precision, tmp_path):
    """``resnet_noBN.load`` of a run folder (its config.json, two weights files as a GPU lease
    brings them back, no trainer): the served model of the run with the weights of its latest
    step, every array as written. A lease's run computes in mixed_bfloat16: its model is
    float32 in every layer all the same, and so is the file it is exported to."""
    run = run_config.build("cifar10_paper", "small", "cifar", runtime={"precision": precision})
    folder = tmp_path / "run"
    record.record_config(str(folder), run_config.checked_record(run, str(folder), "tensorflow", 0))
    digests = {}
    for step, seed in ((3, 1), (5, 2)):
        keras.utils.set_random_seed(seed)
        network = setup.build_model(run)()
        arrays = {f"model/{v.path}": keras.ops.convert_to_numpy(v) for v in network.weights}
        np.savez(folder / f"weights-{step}.npz", step=step, **arrays)
        digests[step] = weights_digest(network.weights)
    assert digests[3] != digests[5]
    loaded = resnet_noBN.load(str(folder))
    assert isinstance(loaded, keras.Model) and loaded.input_shape == (None, 32, 32, 3)
    assert weights_digest(loaded.weights) == digests[5]
    assert {layer.dtype_policy.name for layer in loaded.layers[1:]} == {"float32"}
    if precision != "float32":
        out = tmp_path / "lease.keras"
        saved = model_file.export_run(run_folder.kept_weights(str(folder)), str(out))
        assert (saved["step"], saved["trained_precision"]) == (5, precision)
        exported = resnet_noBN.load(str(out))
        assert {layer.dtype_policy.name for layer in exported.layers[1:]} == {"float32"}
        assert weights_digest(exported.weights) == digests[5]


def test_a_write_that_cannot_remove_its_partial_is_one_line_and_says_the_first_failure(
    tmp_path, monkeypatch, one_line
):
    """A partial folder a cut-short write left that cannot be removed (``shutil.rmtree`` made to
    fail): the write is refused in one line naming the reason, the file there before kept. A
    SavedModel whose export fails (a full disk) and whose partial then cannot be removed either:
    the line names the full disk, the first failure."""
    served = model_file.served_model(run_config.build("cifar10_paper", "small", "cifar"))
    out = tmp_path / "serving"
    out.mkdir()
    (out / "saved_model.pb").write_text("before")
    (tmp_path / "serving.partial").mkdir()

    def refused_rmtree(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refused_rmtree)
    with pytest.raises(StorageError) as refused:
        model_file.write(served, str(out), "tf_saved_model", {"step": 1})
    one_line(refused, f"cannot write {out} (Permission denied): free space there or name")
    assert (out / "saved_model.pb").read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serving", "serving.partial"]

    monkeypatch.undo()
    shutil.rmtree(tmp_path / "serving.partial")

    def full_disk(self, path, *args, **kwargs):
        (tmp_path / "serving.partial" / "variables").mkdir(parents=True)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "rmtree", refused_rmtree)
    monkeypatch.setattr(type(served), "export", full_disk)
    with pytest.raises(StorageError) as refused:
        model_file.write(served, str(out), "tf_saved_model", {"step": 1})
    one_line(refused, f"cannot write {out} (No space left on device): free space there or name")
    assert (out / "saved_model.pb").read_text() == "before"


def test_a_file_keras_cannot_load_is_one_line_with_keras_first_line(
    tmp_path, monkeypatch, one_line
):
    """Keras' own refusal of a Keras file, its first line in the one line said."""
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as archive:
        for name in model_paths.KERAS_MEMBERS:
            archive.writestr(name, "{}")

    def refuse(*args, **kwargs):
        raise ValueError("no layer named conv9\nthe layers it has: ...")

    monkeypatch.setattr(keras.saving, "load_model", refuse)
    with pytest.raises(InputError) as refused:
        resnet_noBN.load(str(path))
    assert str(refused.value) == f"--model {path} cannot be loaded (no layer named conv9)"


TINY_NETWORK = {  # test_imagenet's TINY: the ImageNet network, 1 block a stage, 32x32 crops
    "image_size": TINY.image_size,
    "stem_filters": TINY.stem_filters,
    "stage_units": TINY.stage_units,
    "stage_widths": TINY.stage_widths,
}


@pytest.mark.parametrize(
    "experiment, changes",
    [
        ("cifar10_original_2016", {}),
        ("imagenet_paper", {"network": TINY_NETWORK}),
        ("imagenet_paper", {"network": TINY_NETWORK, "data": {"normalization": "mean_std"}}),
    ],
    ids=["original_2016", "imagenet_per_image", "imagenet_mean_std"],
)
def test_every_network_in_a_file_takes_raw_pixels(experiment, changes, tmp_path):
    """The 2016 code's network (its pre-activation blocks and trained head) and the ImageNet
    ResNet-34 (either normalisation): the file's logits on raw pixels are the network's on the
    images its input pipeline makes (the ImageNet pipeline's own normalize)."""
    launcher = "imagenet" if experiment.startswith("imagenet") else "cifar"
    model = "small" if launcher == "cifar" else None
    run = run_config.build(experiment, model, launcher, **changes)
    keras.utils.set_random_seed(1)
    network = setup.build_model(run)()
    served = model_file.served_model(run)
    model_file.copy_weights(network, served)
    size = served.input_shape[1]
    pixels = np.random.default_rng(0).integers(0, 256, (3, size, size, 3), np.uint8)
    if launcher == "imagenet":
        floats = tf.cast(pixels, tf.float32)
        normalized = tf.stack([imagenet_input.normalize(p, run.data.normalization) for p in floats])
    else:
        normalized = stream.standardize(pixels)
    expected = keras.ops.convert_to_numpy(network(normalized, training=False))
    model_file.write(served, str(tmp_path / "m.keras"), "keras", {})
    loaded = resnet_noBN.load(str(tmp_path / "m.keras"))
    np.testing.assert_allclose(loaded.predict(pixels, verbose=0), expected, rtol=0, atol=TOLERANCE)
    assert weights_digest(loaded.weights) == weights_digest(network.weights)
    # what load_model draws before it reads the weights: zeros, no random draw to compile
    initializers = [
        v for layer in loaded.layers for k, v in vars(layer).items() if k.endswith("_initializer")
    ]
    assert initializers and all(isinstance(i, keras.initializers.Zeros) for i in initializers)


def docs_blocks() -> list[str]:
    found = [b.text for b in blocks(DOCS) if b.language == "python" and b.marker == DOCS_MARKER]
    assert len(found) >= 4, "docs/training.md's Python blocks are gone"
    return found


def test_the_docs_python_blocks_run(runs, exported, cifar_bin, write_image_tree, tmp_path, capsys):
    """docs/training.md's Python, in order, in one namespace: the tiny run's files in place of
    its paths, a PNG of a test image, an image folder of PNGs."""
    path, record = exported["tf"]
    images, _ = split_images(cifar_bin)
    Image.fromarray(images[0]).save(tmp_path / "cat.png")
    tree = write_image_tree(tmp_path / "cifar-10-png", "cifar10", 2)
    paths = {
        '"runs/cifar10.keras"': path,
        '"runs/cifar10.json"': path.with_suffix(".json"),
        '"runs/cifar10_serving"': exported["tf_serving"][0],
        '"cat.png"': tmp_path / "cat.png",
        '"/data/cifar-10-png"': tmp_path / "cifar-10-png",
    }
    namespace = {}
    for text in docs_blocks():
        for written, here in paths.items():
            text = text.replace(written, f'"{here}"')
        exec(compile(text, str(DOCS), "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    expected = keras.saving.load_model(path).predict(images[:1], verbose=0)
    assert printed[0] == record["classes"][int(expected.argmax())]
    assert printed[1] == "(1, 64)"
    test_labels = tree["test"][1]
    assert printed[2].startswith("test error ") and printed[2].endswith(
        f"on {len(test_labels)} images"
    )
    assert printed[3] == "(1, 10)"
