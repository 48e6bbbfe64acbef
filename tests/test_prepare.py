"""data/prepare.py: preparing tfds CIFAR offline from a manual archive, and its errors.

No test reaches the network (the `no_network` fixture). The manual archive the tests build is
not the official one, so its checksum differs from the one tfds registers for the CIFAR-10 URL;
the end-to-end test registers the test archive's own checksum for that URL (monkeypatching
`Cifar10.url_infos`, only inside the test), so tfds still verifies the file it reads, and
`test_a_wrong_archive_is_refused` shows the real, strict path refusing that archive.
"""

import importlib.util
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import launchers
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import checksums

from resnet_noBN.datasets import cifar_input
from resnet_noBN.datasets.cifar_input import DataError

pytestmark = pytest.mark.usefixtures("no_network")

PREPARE = Path(__file__).resolve().parents[1] / "data" / "prepare.py"
ARCHIVE = "cifar-10-binary.tar.gz"


def load_prepare():
    """data/prepare.py as a module (it is a script, not part of the package); once per process,
    as it defines absl flags."""
    if "prepare" not in sys.modules:
        spec = importlib.util.spec_from_file_location("prepare", PREPARE)
        sys.modules["prepare"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["prepare"])
    return sys.modules["prepare"]


@pytest.fixture
def manual_dir(tmp_path, write_cifar):
    """A small cifar-10-binary.tar.gz (3 records a batch file, the official layout with
    batches.meta.txt) in tmp_path/manual; returns (folder, {split: (images, labels)})."""
    folder = tmp_path / "unpacked" / "cifar-10-batches-bin"
    written = write_cifar(folder, "cifar10", 3)
    names = cifar_input.DATASETS["cifar10"].class_names
    (folder / "batches.meta.txt").write_text("\n".join(names) + "\n\n")
    (tmp_path / "manual").mkdir()
    with tarfile.open(tmp_path / "manual" / ARCHIVE, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return tmp_path / "manual", written


def test_manual_archive_end_to_end(tmp_path, manual_dir, monkeypatch):
    manual, written = manual_dir
    cifar10 = tfds.builder_cls("cifar10")
    (url,) = cifar10.url_infos
    monkeypatch.setattr(cifar10, "url_infos", {url: checksums.compute_url_info(manual / ARCHIVE)})
    data_dir = tmp_path / "tfds"
    line = load_prepare().prepare("cifar10", str(data_dir), str(manual))
    assert line == f"prepared cifar10 (train: 15, test: 3 examples) in {data_dir}/cifar10/3.0.2"
    monkeypatch.undo()  # reading the prepared data needs no checksum

    train = cifar_input.build_dataset("cifar10", "train", 15, data_dir=data_dir, seed=0)
    _, labels = next(iter(train))
    assert sorted(labels.numpy()) == sorted(written["train"][1])
    test = list(
        cifar_input.build_dataset("cifar10", "test", 2, data_dir=data_dir).as_numpy_iterator()
    )
    assert [len(b[1]) for b in test] == [2, 1]
    images, labels = np.concatenate([b[0] for b in test]), np.concatenate([b[1] for b in test])
    # tfds stores the examples in its own order: match them by image.
    expected = tf.image.per_image_standardization(written["test"][0]).numpy()
    order = [int(np.argmin(np.abs(expected - image).sum(axis=(1, 2, 3)))) for image in images]
    assert sorted(order) == [0, 1, 2]
    np.testing.assert_allclose(images, expected[order], atol=1e-5)
    np.testing.assert_array_equal(labels, written["test"][1][order])

    # Two input pipelines over a one-file tfds split: by record (tfds.even_splits), covering it.
    shards = [
        cifar_input.read_records(
            "cifar10", "train", data_dir=data_dir, input_context=tf.distribute.InputContext(2, i, 2)
        )
        for i in range(2)
    ]
    keys = [{image.tobytes() for image, _ in shard.as_numpy_iterator()} for shard in shards]
    assert [len(k) for k in keys] == [8, 7]
    assert set().union(*keys) == {image.tobytes() for image in written["train"][0]}


def test_a_wrong_archive_is_refused(tmp_path, manual_dir):
    manual, _ = manual_dir
    with pytest.raises(DataError) as e:
        load_prepare().prepare("cifar10", str(tmp_path / "tfds"), str(manual))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(
        f"{manual / ARCHIVE}: not the checksum tfds registers for the official cifar10 archive"
    )


def test_missing_archive_and_offline_download(tmp_path):
    prepare = load_prepare()
    (tmp_path / "manual").mkdir()
    with pytest.raises(DataError, match=f"manual lacks {ARCHIVE}: put the official archive"):
        prepare.prepare("cifar10", str(tmp_path / "tfds"), str(tmp_path / "manual"))
    with pytest.raises(DataError, match="failed .ConnectionError.: this machine appears offline"):
        prepare.prepare("cifar100", str(tmp_path / "tfds"))


@pytest.mark.parametrize(
    "args,message",
    [
        (["mnist"], "error: unknown data set 'mnist'; known: cifar10, cifar100"),
        (["cifar100", "--manual_dir=."], "error: --manual_dir . lacks cifar-100-binary.tar.gz"),
    ],
)
def test_command_line_errors(tmp_path, args, message):
    """An unknown data set is answered before TensorFlow loads (no backend module imported)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **launchers.IMPORT_TIMES}
    done = subprocess.run(
        [sys.executable, str(PREPARE), *args, f"--data_dir={tmp_path}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(message)
    assert bool(launchers.imported(done) & launchers.BACKEND_MODULES) == (args != ["mnist"])
