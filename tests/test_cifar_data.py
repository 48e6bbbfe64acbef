"""resnet_noBN.datasets.cifar_data: CIFAR splits as numpy arrays, without TensorFlow."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from resnet_noBN.configs import data_config
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import cifar_data, image_folder

REPO = Path(__file__).resolve().parents[1]


def raw_records(path: Path, record_bytes: int) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), np.uint8).reshape(-1, record_bytes)


@pytest.fixture
def cifar10(tmp_path, write_cifar):
    """CIFAR-10 in the official layout under tmp_path/cifar-10-batches-bin: 3 records a file."""
    return tmp_path, write_cifar(tmp_path / "cifar-10-batches-bin", "cifar10", 3)


@pytest.fixture
def cifar100(tmp_path, write_cifar):
    """CIFAR-100 in the official layout under tmp_path/cifar-100-binary: 40 records a file."""
    return tmp_path, write_cifar(tmp_path / "cifar-100-binary", "cifar100", 40)


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_binary_files_round_trip_byte_exact(tmp_path, write_cifar, dataset):
    spec = cifar_data.DATASETS[dataset]
    written = write_cifar(tmp_path / spec.folder, dataset, 7)
    for split in cifar_data.SPLITS:
        images, labels = cifar_data.load_split(dataset, split, tmp_path)
        assert images.dtype == np.uint8 and images.shape == (7 * len(spec.files[split]), 32, 32, 3)
        assert labels.dtype == np.int32 and images.flags.c_contiguous
        np.testing.assert_array_equal(images, written[split][0])
        np.testing.assert_array_equal(labels, written[split][1])
    if dataset == "cifar100":  # the fine label (byte 1), not the coarse one (fine // 5)
        assert (labels != labels // 5).any()
        np.testing.assert_array_equal(
            labels, raw_records(tmp_path / spec.folder / "test.bin", 3074)[:, 1]
        )


def test_image_folder_round_trips_pixel_exact_with_labels_by_name(tmp_path, write_image_tree):
    # class folders created in reverse order: labels must still follow the names
    classes = tuple(reversed(cifar_data.DATASETS["cifar10"].class_names))
    written = write_image_tree(tmp_path / "cifar-10-png", "cifar10", 3, classes=classes)
    for split in cifar_data.SPLITS:
        images, labels = cifar_data.load_split("cifar10", split, tmp_path)  # the parent folder
        assert images.dtype == np.uint8 and labels.dtype == np.int32
        np.testing.assert_array_equal(images, written[split][0])  # PNG: lossless
        np.testing.assert_array_equal(labels, written[split][1])
    assert cifar_data.num_records("cifar10", tmp_path, "test") == 30


def test_jpeg_decodes_as_libjpeg_accurate_idct(tmp_path, write_image_tree):
    """Pillow gives the bytes of tf.io.decode_jpeg with the accurate integer IDCT (libjpeg's
    default), not those of tf.io.decode_image (the fast IDCT): see image_folder's docstring."""
    import tensorflow as tf

    write_image_tree(tmp_path, "cifar10", 2, fmt="jpg")
    paths, _ = cifar_data._image_files("cifar10", tmp_path, "test")
    images, _ = cifar_data.load_split("cifar10", "test", tmp_path)
    expected = np.stack(
        [
            tf.io.decode_jpeg(tf.io.read_file(p), channels=3, dct_method="INTEGER_ACCURATE")
            for p in paths
        ]
    )
    np.testing.assert_array_equal(images, expected)


def test_original_2016_layout_is_the_original_readers_slice(cifar100):
    """The original cifar_input.py (before July 2017) for CIFAR-100: label = record[1],
    image = record[1:3073] reshaped [3, 32, 32] and transposed: restated on the raw bytes."""
    root, _ = cifar100
    records = raw_records(root / "cifar-100-binary" / "train.bin", 3074)
    expected = records[:, 1:3073].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    correct, _ = cifar_data.load_split("cifar100", "train", root)
    images, labels = cifar_data.load_split("cifar100", "train", root, layout="original_2016")
    np.testing.assert_array_equal(images, expected)
    np.testing.assert_array_equal(labels, records[:, 1])  # the label was read correctly
    np.testing.assert_array_equal(images[:, 0, 0, 0], labels)  # the leak: the first red pixel
    assert not images.flags.writeable and images.flags.c_contiguous
    # the batched shift of any source: the same as the binary restatement
    np.testing.assert_array_equal(cifar_data.original_2016_shift(correct, labels), expected)


def test_layout_split_and_dataset_errors(cifar10, one_line):
    root, _ = cifar10
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "test", root, layout="original_2016")
    one_line(e, "--cifar100_layout=original_2016 is for --dataset=cifar100 only", "drop the flag")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar100", "test", root, layout="2016")
    one_line(e, "--cifar100_layout=2016", "official, original_2016")
    with pytest.raises(DataError) as e:
        data_config.check_layout("cifar100", "2016")
    one_line(e, "--cifar100_layout=2016 is unknown")
    data_config.check_layout("cifar100", "original_2016")
    data_config.check_layout("cifar10", "official")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "validation", root)
    one_line(e, "'validation'", "train, test")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("mnist", "test", root)
    one_line(e, "'mnist'", "cifar10, cifar100")
    assert cifar_data.num_classes("cifar10") == 10 and cifar_data.num_classes("cifar100") == 100


def test_binary_data_path_errors(cifar10, one_line):
    root, _ = cifar10
    folder = root / "cifar-10-batches-bin"
    expected = [str(folder / f"data_batch_{i}.bin") for i in range(1, 6)]
    expected.append(str(folder / "test_batch.bin"))
    assert cifar_data.check_data_path("cifar10", root) == expected
    assert cifar_data.check_data_path("cifar10", folder) == expected
    assert cifar_data.num_records("cifar10", root, "train") == 15
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "test", root / "absent")
    one_line(e, "absent is not a folder", "cifar-10-batches-bin")
    with pytest.raises(DataError) as e:  # the CIFAR-100 layout is not there
        cifar_data.load_split("cifar100", "test", root)
    one_line(e, "lacks train.bin, test.bin", "cifar-100-binary/")
    (folder / "data_batch_3.bin").unlink()
    with pytest.raises(DataError) as e:  # a missing file of the OTHER split is named too
        cifar_data.load_split("cifar10", "test", root)
    one_line(e, f"{folder} lacks data_batch_3.bin", "test_batch.bin")
    (folder / "data_batch_3.bin").write_bytes(b"\0" * 3073 * 2 + b"\0" * 100)
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "train", root)
    one_line(e, f"{folder / 'data_batch_3.bin'} is 6246 bytes", "3073-byte", "truncated")
    (folder / "data_batch_3.bin").write_bytes(b"")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "train", folder)
    one_line(e, "data_batch_3.bin is 0 bytes")


def test_image_folder_errors(tmp_path, write_image_tree, one_line):
    write_image_tree(tmp_path, "cifar10", 2)
    target = tmp_path / "train" / "dog" / "0001.png"
    target.write_bytes(b"not an image at all")
    cifar_data.check_data_path("cifar10", tmp_path)  # listing does not decode
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "train", tmp_path)
    one_line(e, f"{target}: not a readable JPEG or PNG image; replace or remove the file")
    shutil.copy(tmp_path / "test" / "dog" / "0000.png", target)
    (tmp_path / "train" / "cat" / "0001.png").write_bytes(
        (tmp_path / "train" / "cat" / "0001.png").read_bytes()[:100]  # truncated
    )
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "train", tmp_path)
    one_line(e, "cat/0001.png: not a readable JPEG or PNG image")
    (tmp_path / "train" / "cat" / "0001.png").unlink()
    from PIL import Image

    Image.fromarray(np.zeros([16, 32, 3], np.uint8)).save(target)
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "train", tmp_path)
    one_line(e, f"{target}: not 32x32; replace or remove the file")
    (tmp_path / "test" / "cat" / "0000.png").unlink()
    (tmp_path / "test" / "cat" / "0001.png").unlink()
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "test", tmp_path)
    one_line(e, str(tmp_path / "test" / "cat"), "no image")
    (tmp_path / "test" / "cat").rename(tmp_path / "test" / "kitten")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "test", tmp_path)
    one_line(e, "unknown: kitten", "missing: cat", "--dataset")
    with pytest.raises(DataError) as e:  # CIFAR-10's classes are not CIFAR-100's
        cifar_data.load_split("cifar100", "test", tmp_path)
    one_line(e, "not CIFAR-100's", "missing: apple")
    shutil.rmtree(tmp_path / "test")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "test", tmp_path)
    one_line(e, "lacks test/")


def test_the_first_bad_image_in_file_order_is_named(
    tmp_path, write_image_tree, monkeypatch, one_line
):
    """Decoded by several threads, one file per chunk: the error is still the first bad file."""
    monkeypatch.setattr(image_folder, "_DECODE_CHUNK", 1)
    write_image_tree(tmp_path, "cifar10", 3)
    for name in ("bird/0002.png", "truck/0000.png", "cat/0001.png"):
        (tmp_path / "train" / name).write_bytes(b"\0")
    with pytest.raises(DataError) as e:
        cifar_data.load_split("cifar10", "train", tmp_path)
    one_line(e, f"{tmp_path / 'train' / 'bird' / '0002.png'}: not a readable")


@pytest.mark.parametrize("layout", ["official", "original_2016"])
def test_arrays_are_read_only_and_read_once(cifar100, layout):
    root, _ = cifar100
    images, labels = cifar_data.load_split("cifar100", "test", root, layout)
    assert not images.flags.writeable and not labels.flags.writeable
    with pytest.raises(ValueError):
        images[0, 0, 0, 0] = 1
    # the same arrays for the same split, however the path is spelt
    again = cifar_data.load_split("cifar100", "test", str(root), layout=layout)
    assert again[0] is images and again[1] is labels
    cifar_data.clear_cache()
    fresh = cifar_data.load_split("cifar100", "test", root, layout)
    assert fresh[0] is not images
    np.testing.assert_array_equal(fresh[0], images)


def test_no_tensorflow_is_needed(tmp_path, write_cifar, write_image_tree):
    """A fresh interpreter where `import tensorflow` fails reads every source and layout."""
    written = write_cifar(tmp_path / "binary" / "cifar-100-binary", "cifar100", 5)
    tree = write_image_tree(tmp_path / "tree", "cifar10", 1)
    script = textwrap.dedent(
        """
        import sys
        sys.modules["tensorflow"] = None  # any import of TensorFlow now fails
        from resnet_noBN.datasets import cifar_data
        import numpy as np

        binary, image_tree, out = sys.argv[1:]
        test = cifar_data.load_split("cifar100", "test", binary)
        shifted = cifar_data.load_split("cifar100", "train", binary, layout="original_2016")
        tree = cifar_data.load_split("cifar10", "train", image_tree)
        np.savez(out, *test, *shifted, *tree)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
        assert loaded == ["tensorflow"] and sys.modules["tensorflow"] is None, loaded
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            *map(str, [tmp_path / "binary", tmp_path / "tree", tmp_path / "out.npz"]),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = np.load(tmp_path / "out.npz")
    test_images, test_labels, shifted, shifted_labels, tree_images, tree_labels = (
        out[f"arr_{i}"] for i in range(6)
    )
    np.testing.assert_array_equal(test_images, written["test"][0])
    np.testing.assert_array_equal(test_labels, written["test"][1])
    np.testing.assert_array_equal(shifted, cifar_data.original_2016_shift(*written["train"]))
    np.testing.assert_array_equal(shifted[:, 0, 0, 0], shifted_labels)
    np.testing.assert_array_equal(tree_images, tree["train"][0])
    np.testing.assert_array_equal(tree_labels, tree["train"][1])


@pytest.mark.parametrize(
    "dataset, split, layout",
    [
        ("cifar10", "test", "official"),
        ("cifar100", "train", "official"),
        ("cifar100", "train", "original_2016"),
    ],
)
def test_real_slices_as_cifar_input_reads_them(cifar_slices, dataset, split, layout):
    from resnet_noBN.datasets import cifar_input

    images, labels = cifar_data.load_split(dataset, split, cifar_slices, layout)
    expected = list(
        cifar_input.read_records(
            dataset, split, data_path=cifar_slices, layout=layout
        ).as_numpy_iterator()
    )
    assert len(images) == len(expected) == {"cifar10": 1017, "cifar100": 486}[dataset]
    np.testing.assert_array_equal(images, np.stack([image for image, _ in expected]))
    np.testing.assert_array_equal(labels, np.stack([label for _, label in expected]))
    assert labels.min() >= 0 and labels.max() < cifar_data.num_classes(dataset)
