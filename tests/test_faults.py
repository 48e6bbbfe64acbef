"""Faults a real run meets, each on the TensorFlow and the JAX backend where both can meet it:
bad labels and a folder of checkpoints without its config.json (refused before anything is
written, exit 2)."""

import json

import launchers
import pytest

from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import cifar_data

SMALL = [
    "--model=small",
    "--batch_size=8",
    "--eval_batch_size=16",
    "--log_every=2",
    "--checkpoint_every=2",
    "--eval_every=4",
    "--seed=3",
]
BACKENDS = ("tensorflow", "jax")


def cifar(backend: str, *args):
    """launch/cifar.py on ``backend`` (JAX on the CPU)."""
    return launchers.run(
        "launch/cifar.py", *args, env={"KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"}
    )


def last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cifar_bin(tmp_path_factory, write_cifar):
    folder = tmp_path_factory.mktemp("data") / "cifar-10-batches-bin"
    write_cifar(folder, "cifar10", 8)
    return folder


@pytest.fixture(scope="module")
def bad_labels(tmp_path_factory, cifar_bin):
    """A copy of ``cifar_bin`` whose data_batch_2.bin holds label 200 in its record 3."""
    folder = tmp_path_factory.mktemp("bad") / "cifar-10-batches-bin"
    folder.mkdir()
    for path in cifar_bin.iterdir():
        data = bytearray(path.read_bytes())
        if path.name == "data_batch_2.bin":
            data[3 * cifar_data.DATASETS["cifar10"].record_bytes] = 200
        (folder / path.name).write_bytes(bytes(data))
    return folder


def test_a_label_outside_the_classes_names_the_file(bad_labels):
    cifar_data.clear_cache()
    with pytest.raises(DataError) as excinfo:
        cifar_data.load_split("cifar10", "train", bad_labels)
    assert str(excinfo.value) == (
        f"{bad_labels / 'data_batch_2.bin'}: record 3 has label 200 (1 record(s) with labels "
        "outside CIFAR-10's 0-9): the file is damaged or not CIFAR-10; unpack the official "
        "archive again"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_labels_and_checkpoints_without_config_write_nothing(
    tmp_path, bad_labels, cifar_bin, backend
):
    """Bad labels: one line naming the file, exit 2, the folder not created. Checkpoints whose
    config.json is gone: refused, naming the way out, and no config.json written over them."""
    model_dir = tmp_path / "run"
    proc = cifar(backend, f"--data_path={bad_labels}", f"--model_dir={model_dir}", *SMALL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_line(proc).startswith(f"error: {bad_labels / 'data_batch_2.bin'}: record 3 ")
    assert "Traceback" not in proc.stderr and not model_dir.exists()

    index = "checkpoint" if backend == "tensorflow" else "checkpoints.json"
    model_dir.mkdir()
    (model_dir / index).write_text(json.dumps({"checkpoints": ["ckpt-2.npz"]}))
    proc = cifar(backend, f"--data_path={cifar_bin}", f"--model_dir={model_dir}", *SMALL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_line(proc) == (
        f"error: --model_dir {model_dir} holds checkpoints ({index}) but no config.json, so "
        "they cannot be checked against this run; put back its config.json, or move the "
        "checkpoints away to start afresh"
    )
    assert sorted(p.name for p in model_dir.iterdir()) == [index]
