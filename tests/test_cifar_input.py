"""datasets.cifar_input: binary records, augmentation, batching, sharding, tfds, errors."""

import numpy as np
import pytest
import requests
import tensorflow as tf
import tensorflow_datasets as tfds

from resnet_noBN.configs import data_config
from resnet_noBN.datasets import cifar_input, stream
from resnet_noBN.datasets.cifar_input import DataError

pytestmark = pytest.mark.usefixtures("no_network")


def arrays(dataset):
    """Every element of an (image, label) dataset, as two stacked numpy arrays."""
    images, labels = zip(*dataset.as_numpy_iterator())
    return np.stack(images), np.stack(labels)


def context(pipelines, index):
    return tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=index, num_replicas_in_sync=pipelines
    )


@pytest.fixture
def cifar10(tmp_path, write_cifar):
    """CIFAR-10 in the official layout under tmp_path/cifar-10-batches-bin: 3 records a file."""
    written = write_cifar(tmp_path / "cifar-10-batches-bin", "cifar10", 3)
    return tmp_path, written


def test_num_classes_and_unknown_dataset(one_line):
    assert cifar_input.num_classes("cifar10") == 10
    assert cifar_input.num_classes("cifar100") == 100
    with pytest.raises(DataError) as e:
        cifar_input.num_classes("mnist")
    one_line(e, "'mnist'", "cifar10, cifar100")


@pytest.mark.parametrize("split", ["train", "test"])
def test_binary_records_round_trip_byte_exact(cifar10, split):
    root, written = cifar10
    images, labels = arrays(cifar_input.read_records("cifar10", split, data_path=root))
    assert images.dtype == np.uint8 and labels.dtype == np.int32
    np.testing.assert_array_equal(images, written[split][0])
    np.testing.assert_array_equal(labels, written[split][1])


def test_cifar100_uses_the_fine_label(tmp_path, write_cifar):
    written = write_cifar(tmp_path / "cifar-100-binary", "cifar100", 40)
    images, labels = arrays(cifar_input.read_records("cifar100", "test", data_path=tmp_path))
    np.testing.assert_array_equal(images, written["test"][0])
    np.testing.assert_array_equal(labels, written["test"][1])  # fine; coarse is fine // 5
    assert (labels != labels // 5).any()


def test_original_2016_layout_is_the_original_readers_slice(tmp_path, write_cifar):
    """The original cifar_input.py (before July 2017) for CIFAR-100: label_bytes = 1,
    label_offset = 1, record_bytes = 3,074; label = record[1], image = record[1:3073]
    reshaped [3, 32, 32] and transposed: restated here on the raw bytes of each record."""
    write_cifar(tmp_path / "cifar-100-binary", "cifar100", 12)
    raw = np.frombuffer((tmp_path / "cifar-100-binary" / "train.bin").read_bytes(), np.uint8)
    records = raw.reshape(-1, 3074)
    expected = records[:, 1:3073].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    correct, _ = arrays(cifar_input.read_records("cifar100", "train", data_path=tmp_path))
    images, labels = arrays(
        cifar_input.read_records("cifar100", "train", data_path=tmp_path, layout="original_2016")
    )
    np.testing.assert_array_equal(images, expected)
    np.testing.assert_array_equal(labels, records[:, 1])  # the label was read correctly
    # the leak: the first red pixel of every image is its fine label
    np.testing.assert_array_equal(images[:, 0, 0, 0], labels)
    # every plane moved one byte on: red from the label, green and blue from the plane before
    planes = correct.transpose(0, 3, 1, 2).reshape(-1, 3, 1024)
    shifted = images.transpose(0, 3, 1, 2).reshape(-1, 3, 1024)
    np.testing.assert_array_equal(shifted[:, 0, 1:], planes[:, 0, :-1])
    np.testing.assert_array_equal(shifted[:, 1:, 0], planes[:, :-1, -1])
    np.testing.assert_array_equal(shifted[:, 1:, 1:], planes[:, 1:, :-1])


def test_original_2016_layout_is_for_cifar100_only(cifar10, one_line):
    root, _ = cifar10
    with pytest.raises(DataError) as e:
        cifar_input.read_records("cifar10", "test", data_path=root, layout="original_2016")
    one_line(e, "--dataset=cifar100 only", "drop the flag")
    with pytest.raises(DataError) as e:
        data_config.check_layout("cifar100", "2016")
    one_line(e, "--cifar100_layout=2016", "official, original_2016")


def test_check_data_path_accepts_the_folder_or_its_parent(cifar10):
    root, _ = cifar10
    folder = root / "cifar-10-batches-bin"
    expected = [str(folder / f"data_batch_{i}.bin") for i in range(1, 6)] + [
        str(folder / "test_batch.bin")
    ]
    assert cifar_input.check_data_path("cifar10", root) == expected
    assert cifar_input.check_data_path("cifar10", folder) == expected


def test_data_path_errors(cifar10, one_line):
    root, _ = cifar10
    folder = root / "cifar-10-batches-bin"
    with pytest.raises(DataError) as e:
        cifar_input.check_data_path("cifar10", root / "absent")
    one_line(e, "absent is not a folder", "cifar-10-batches-bin")
    with pytest.raises(DataError) as e:  # the CIFAR-100 layout is not there
        cifar_input.check_data_path("cifar100", root)
    one_line(e, "lacks train.bin, test.bin", "cifar-100-binary/")
    (folder / "data_batch_3.bin").unlink()
    with pytest.raises(DataError) as e:
        cifar_input.check_data_path("cifar10", root)
    one_line(e, f"{folder} lacks data_batch_3.bin", "test_batch.bin")
    (folder / "data_batch_3.bin").write_bytes(b"\0" * 3073 * 2 + b"\0" * 100)
    with pytest.raises(DataError) as e:  # build_dataset validates too, before any TF work
        cifar_input.build_dataset("cifar10", "train", 4, data_path=root)
    one_line(e, f"{folder / 'data_batch_3.bin'} is 6246 bytes", "3073-byte")
    (folder / "data_batch_3.bin").write_bytes(b"")
    with pytest.raises(DataError) as e:
        cifar_input.check_data_path("cifar10", folder)
    one_line(e, "data_batch_3.bin is 0 bytes")
    with pytest.raises(DataError) as e:
        cifar_input.build_dataset("cifar10", "validation", 4, data_path=root)
    one_line(e, "'validation'", "train, test")


@pytest.mark.parametrize("pad", [0, 2, 4])
def test_augment_crops_and_flips_each_image_of_the_batch_on_its_own(pad):
    """Each output image is ITS padded input, cropped at a uniform offset, flipped half the time."""
    n = 2000
    rows, cols = np.meshgrid(np.arange(1, 33), np.arange(1, 33), indexing="ij")  # 0 = padding
    images = np.empty((n, 32, 32, 3), np.uint8)
    images[..., 0], images[..., 1] = rows, cols  # where each pixel came from
    images[..., 2] = np.random.default_rng(0).integers(0, 256, (n, 32, 32))  # which image
    offsets, flips = stream.draws(37, 0, n, pad)
    out = stream.augment(tf.constant(images), offsets, flips, pad).numpy()
    assert out.shape == images.shape and out.dtype == np.uint8
    source = out.astype(int)
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kinds = []
    for i in range(n):
        dy = source[i, 16, 16, 0] - 17 + pad
        flip = source[i, 16, 16, 1] < source[i, 16, 15, 1]
        dx = (source[i, 16, 15, 1] if flip else source[i, 16, 16, 1]) - 17 + pad
        expected = padded[i, dy : dy + 32, dx : dx + 32][:, :: -1 if flip else 1]
        np.testing.assert_array_equal(out[i], expected)
        kinds.append((dy, dx, flip))
    # Uniform over the (2·pad + 1)² offsets × 2 flips: a chi-square far below a 5-sigma bound.
    counts = np.array(
        [
            kinds.count((dy, dx, f))
            for dy in range(2 * pad + 1)
            for dx in range(2 * pad + 1)
            for f in (False, True)
        ]
    )
    dof = counts.size - 1
    chi2 = ((counts - n / counts.size) ** 2 / (n / counts.size)).sum()
    assert chi2 < dof + 5 * np.sqrt(2 * dof), (chi2, counts)
    again = stream.augment(tf.constant(images), *stream.draws(37, 0, n, pad), pad)
    np.testing.assert_array_equal(again, out)
    for seed, step in ((38, 0), (37, 1)):  # stateless: the seed and the step decide
        other = stream.augment(tf.constant(images), *stream.draws(seed, step, n, pad), pad)
        assert not np.array_equal(other, out)


def test_training_batches_shapes_ranges_and_repeatability(cifar10):
    root, written = cifar10

    def first_batches(seed):
        ds = cifar_input.build_dataset("cifar10", "train", 8, data_path=root, seed=seed)
        return list(ds.take(4).as_numpy_iterator())  # 32 > 15 records: repeats, reshuffled

    batches = first_batches(seed=7)
    assert cifar_input.build_dataset("cifar10", "train", 8, data_path=root).element_spec == (
        tf.TensorSpec([8, 32, 32, 3], tf.float32),
        tf.TensorSpec([8], tf.int32),
    )
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    np.testing.assert_allclose(images.mean(axis=(1, 2, 3)), 0, atol=1e-4)
    np.testing.assert_allclose(images.std(axis=(1, 2, 3)), 1, atol=1e-3)
    assert set(labels) <= set(written["train"][1])
    # Each epoch of 15 holds each training record once (the first 15 labels are a permutation).
    assert sorted(labels[:15]) == sorted(written["train"][1])
    for a, b in zip(batches, first_batches(seed=7)):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(images, np.concatenate([b[0] for b in first_batches(seed=8)]))


@pytest.mark.parametrize("start_step", [1, 2, 5])
def test_training_stream_is_a_function_of_seed_and_step(cifar10, start_step):
    """Resuming at step s yields the batches s, s+1, ... of a run from step 0, across epoch
    boundaries (15 records, batches of 4: epochs end inside batches 3, 7, 11, ...)."""
    root, _ = cifar10

    def batches(start, count):
        ds = cifar_input.build_dataset(
            "cifar10", "train", 4, data_path=root, seed=5, start_step=start
        )
        return list(ds.take(count).as_numpy_iterator())

    uninterrupted = batches(0, start_step + 6)
    for a, b in zip(uninterrupted[start_step:], batches(start_step, 6), strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    with pytest.raises(cifar_input.DataError, match="start_step must be >= 0"):
        cifar_input.build_dataset("cifar10", "train", 4, data_path=root, start_step=-1)


def test_evaluation_is_one_ordered_pass_with_a_partial_last_batch(cifar10):
    root, written = cifar10
    ds = cifar_input.build_dataset("cifar10", "train", 4, data_path=root, train=False)
    batches = list(ds.as_numpy_iterator())
    assert [len(b[1]) for b in batches] == [4, 4, 4, 3]
    images = np.concatenate([b[0] for b in batches])
    expected = tf.image.per_image_standardization(written["train"][0]).numpy()
    np.testing.assert_allclose(images, expected, rtol=1e-5, atol=1e-5)  # no augmentation
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), written["train"][1])


@pytest.mark.parametrize("split,pipelines", [("train", 2), ("train", 5), ("train", 6), ("test", 2)])
def test_sharding_gives_disjoint_shards_covering_the_split(cifar10, split, pipelines):
    root, written = cifar10
    shards = [
        arrays(
            cifar_input.read_records(
                "cifar10", split, data_path=root, input_context=context(pipelines, i)
            )
        )[0]
        for i in range(pipelines)
    ]
    all_images = written[split][0]
    keys = [{image.tobytes() for image in shard} for shard in shards]
    assert sum(len(k) for k in keys) == len(all_images)  # disjoint ...
    assert set().union(*keys) == {image.tobytes() for image in all_images}  # ... and covering
    for i, shard in enumerate(shards):  # pipeline i reads records i, i + n, ...
        np.testing.assert_array_equal(shard, all_images[i::pipelines])


def test_evaluation_with_input_context_covers_the_split(cifar10):
    root, _ = cifar10
    shards = [
        np.concatenate(
            [
                index
                for _, _, index in cifar_input.build_dataset(
                    "cifar10", "test", 2, data_path=root, input_context=context(2, i)
                ).as_numpy_iterator()
            ]
        )
        for i in range(2)
    ]
    # each image numbered by its place in the split: pipeline i reads i, i + 2, ...
    assert [list(shard) for shard in shards] == [[0, 2], [1]]


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_tfds_reading_with_mock_data(tmp_path, dataset, monkeypatch):
    # mock_data makes the download a no-op: so is the offline probe that precedes it
    monkeypatch.setattr(cifar_input, "_probe", lambda url_infos: None)
    with tfds.testing.mock_data(num_examples=10):
        train = cifar_input.build_dataset(dataset, "train", 4, data_dir=tmp_path, seed=1)
        images, labels = next(iter(train))
        evaluation = list(
            cifar_input.build_dataset(dataset, "test", 4, data_dir=tmp_path).as_numpy_iterator()
        )
    assert images.shape == (4, 32, 32, 3) and images.dtype == tf.float32
    assert labels.shape == (4,) and labels.dtype == tf.int32
    np.testing.assert_allclose(tf.reduce_mean(images, axis=(1, 2, 3)), 0, atol=1e-4)
    assert [len(b[1]) for b in evaluation] == [4, 4, 2]
    all_labels = np.concatenate([b[1] for b in evaluation])
    assert all_labels.min() >= 0 and all_labels.max() < cifar_input.num_classes(dataset)
    assert all(np.isfinite(b[0]).all() for b in evaluation)


def test_tfds_download_offline_is_a_one_line_data_error(tmp_path, one_line):
    with pytest.raises(DataError) as e:
        cifar_input.build_dataset("cifar10", "train", 8, data_dir=tmp_path)
    one_line(
        e,
        "downloading cifar10",
        "failed (ConnectionError)",
        "appears offline",
        "--data_path",
        "--data_dir",
        "python data/prepare.py cifar10 --manual_dir",
    )
    assert isinstance(e.value.__cause__, requests.exceptions.ConnectionError)


def test_real_cifar10_test_batch(cifar_slices):
    files = cifar_input.check_data_path("cifar10", cifar_slices)
    assert [f.rsplit("/", 1)[1] for f in files][-1] == "test_batch.bin"
    images, labels = arrays(cifar_input.read_records("cifar10", "test", data_path=cifar_slices))
    assert images.shape == (1017, 32, 32, 3)
    assert labels.min() == 0 and labels.max() == 9
    raw = np.fromfile(files[-1], np.uint8).reshape(1017, 3073)
    np.testing.assert_array_equal(labels, raw[:, 0])
    np.testing.assert_array_equal(images, raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def test_real_cifar100_and_training_batch(cifar_slices):
    folder = cifar_slices / "cifar-100-binary"
    _, labels = arrays(cifar_input.read_records("cifar100", "test", data_path=folder))
    raw = np.fromfile(folder / "test.bin", np.uint8).reshape(-1, 3074)
    assert len(labels) == 916 and labels.max() <= 99 and raw[:, 0].max() <= 19
    np.testing.assert_array_equal(labels, raw[:, 1])
    images, labels = next(
        iter(cifar_input.build_dataset("cifar100", "train", 32, data_path=cifar_slices, seed=0))
    )
    assert images.shape == (32, 32, 32, 3) and labels.shape == (32,)
