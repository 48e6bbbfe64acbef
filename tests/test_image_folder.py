"""Image-folder input (datasets.image_folder via cifar_input): split/class/image trees."""

import numpy as np
import pytest
import tensorflow as tf

from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import cifar_data, cifar_input


def records(root, split, dataset="cifar10", **kwargs):
    images, labels = zip(
        *cifar_input.read_records(dataset, split, data_path=root, **kwargs).as_numpy_iterator()
    )
    return np.stack(images), np.stack(labels)


def test_png_tree_round_trips_pixel_exact_with_labels_by_name(tmp_path, write_image_tree):
    # class folders created in reverse order: labels must still follow the names
    classes = tuple(reversed(cifar_input.DATASETS["cifar10"].class_names))
    written = write_image_tree(tmp_path / "tree", "cifar10", 3, classes=classes)
    for split in ("train", "test"):
        images, labels = records(tmp_path / "tree", split)
        assert images.dtype == np.uint8 and labels.dtype == np.int32
        np.testing.assert_array_equal(images, written[split][0])
        np.testing.assert_array_equal(labels, written[split][1])
    assert len(cifar_data.check_data_path("cifar10", tmp_path / "tree")) == 2 * 10 * 3
    assert cifar_data.num_records("cifar10", tmp_path / "tree", "train") == 30


def test_the_one_folder_inside_data_path_is_found_and_jpeg_decodes(tmp_path, write_image_tree):
    written = write_image_tree(tmp_path / "cifar-10-jpeg", "cifar10", 2, fmt="jpg")
    images, labels = records(tmp_path, "test")  # the archive's parent folder
    np.testing.assert_array_equal(labels, written["test"][1])
    # JPEG is lossy: close to what was written, not equal (random noise compresses badly)
    assert images.shape == (20, 32, 32, 3)
    assert np.abs(images.astype(int) - written["test"][0]).mean() < 60


def test_sharded_pipelines_cover_the_split_once(tmp_path, write_image_tree):
    write_image_tree(tmp_path, "cifar10", 3)
    shards = [
        records(
            tmp_path,
            "train",
            input_context=tf.distribute.InputContext(
                num_input_pipelines=2, input_pipeline_id=i, num_replicas_in_sync=2
            ),
        )
        for i in range(2)
    ]
    whole = records(tmp_path, "train")
    assert len(shards[0][0]) + len(shards[1][0]) == len(whole[0])
    together = np.concatenate([s[0] for s in shards]).reshape(len(whole[0]), -1)
    assert len({row.tobytes() for row in together}) == len(whole[0])


def test_training_batches_from_a_tree(tmp_path, write_image_tree):
    write_image_tree(tmp_path, "cifar10", 4)
    images, labels = next(
        iter(cifar_input.build_dataset("cifar10", "train", 16, data_path=tmp_path, seed=3))
    )
    assert images.shape == (16, 32, 32, 3) and images.dtype == tf.float32
    np.testing.assert_allclose(tf.reduce_mean(images, axis=[1, 2, 3]), 0, atol=1e-4)


def test_missing_split_unknown_and_missing_classes_empty_class(
    tmp_path, write_image_tree, one_line
):
    write_image_tree(tmp_path, "cifar10", 1)
    (tmp_path / "test" / "cat" / "0000.png").unlink()
    with pytest.raises(DataError) as e:
        cifar_data.check_data_path("cifar10", tmp_path)
    one_line(e, str(tmp_path / "test" / "cat"), "no image")
    (tmp_path / "test" / "cat").rename(tmp_path / "test" / "kitten")
    with pytest.raises(DataError) as e:
        cifar_data.check_data_path("cifar10", tmp_path)
    one_line(e, "unknown: kitten", "missing: cat", "--dataset")
    with pytest.raises(DataError) as e:  # CIFAR-10's classes are not CIFAR-100's
        cifar_data.check_data_path("cifar100", tmp_path)
    one_line(e, "not CIFAR-100's", "missing: apple")
    import shutil

    shutil.rmtree(tmp_path / "test")
    with pytest.raises(DataError) as e:
        cifar_data.check_data_path("cifar10", tmp_path)
    one_line(e, "lacks test/")


@pytest.mark.parametrize(
    "bad, why", [(b"not an image at all", "not a readable JPEG or PNG"), ("small", "not 32x32")]
)
def test_a_bad_image_is_named(tmp_path, write_image_tree, bad, why, one_line):
    write_image_tree(tmp_path, "cifar10", 2)
    target = tmp_path / "train" / "dog" / "0001.png"
    if bad == "small":
        bad = tf.io.encode_png(np.zeros([16, 32, 3], np.uint8)).numpy()
    target.write_bytes(bad)
    cifar_data.check_data_path("cifar10", tmp_path)  # listing does not decode
    with pytest.raises(DataError) as e:
        records(tmp_path, "train")
    one_line(e, str(target), why)
