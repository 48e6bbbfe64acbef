"""The ImageNet model, input pipeline and launcher (arXiv:1611.04231 Section 4); CPU, no network.

The full ResNet-34 variant is built (counts, shapes, init) and run once at 224x224; training
steps use a tiny variant (1 block per stage, narrow, 32x32 crops) on TFRecord shards of random
JPEGs of random sizes written by the tests.
"""

import json
import math
from pathlib import Path

import keras
import launchers
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from layer_kinds import assert_all_convolutional

from resnet_noBN.configs.data_config import IMAGENET_TRAIN_EXAMPLES
from resnet_noBN.configs.network_config import ImageNetConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.datasets import imagenet_input
from resnet_noBN.datasets.imagenet_input import DataError
from resnet_noBN.models.imagenet_model import build_imagenet_model
from resnet_noBN.models.networks import param_counts
from resnet_noBN.trainers import health
from resnet_noBN.trainers.recipe import exponential_learning_rate_schedule
from resnet_noBN.trainers.tensorflow_training import Trainer

TINY = ImageNetConfig(
    image_size=32, stem_filters=8, stage_units=(1, 1, 1, 1), stage_widths=(8, 16, 32, 64)
)
TINY_FLAGS = [
    "--image_size=32",
    "--stem_filters=8",
    "--stage_units=1,1,1,1",
    "--stage_widths=8,16,32,64",
]


def _jpeg(rng, height, width):
    return tf.io.encode_jpeg(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).numpy()


def write_shards(
    folder: Path,
    train_shards=2,
    validation_shards=1,
    per_shard=4,
    label_offset=1,
    labels=None,
    seed=0,
):
    """TFRecord shards of random JPEGs (random sizes 24..90) in the standard layout; returns
    {split: stored labels in file order}. Stored label = class + label_offset unless given."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, shards in (("train", train_shards), ("validation", validation_shards)):
        written[split] = []
        for i in range(shards):
            with tf.io.TFRecordWriter(str(folder / f"{split}-{i:05d}-of-{shards:05d}")) as w:
                for _ in range(per_shard):
                    label = (
                        int(rng.integers(0, 1000)) + label_offset
                        if labels is None
                        else labels[len(written[split]) % len(labels)]
                    )
                    h, w_ = (int(v) for v in rng.integers(24, 90, 2))
                    example = tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "image/encoded": tf.train.Feature(
                                    bytes_list=tf.train.BytesList(value=[_jpeg(rng, h, w_)])
                                ),
                                "image/class/label": tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[label])
                                ),
                            }
                        )
                    )
                    w.write(example.SerializeToString())
                    written[split].append(label)
    return written


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imagenet_shards")
    return folder, write_shards(folder)


# ----------------------------------------------------------------------------- the model
@pytest.fixture(scope="module")
def paper_model():
    keras.utils.set_random_seed(0)
    return build_imagenet_model()


def test_paper_model_counts_and_shapes(paper_model):
    assert param_counts(paper_model) == {
        "trainable_params": 21_095_616,
        "non_trainable_params": 512 * 1000,
        "convolutions": 33,
        "conv_kernel_weights": 21_095_616,
    }
    for name, shape in [
        ("stem_conv", (None, 112, 112, 64)),
        ("stage1_unit0_add", (None, 56, 56, 64)),
        ("stage2_unit0_add", (None, 28, 28, 128)),
        ("stage3_unit5_add", (None, 14, 14, 256)),
        ("stage4_unit2_add", (None, 7, 7, 512)),
    ]:
        assert tuple(paper_model.get_layer(name).output.shape) == shape
    out = paper_model(np.zeros((1, 224, 224, 3), np.float32))
    assert out.shape == (1, 1000)


def test_no_batch_norm_or_max_pool_and_fixed_head(paper_model):
    assert_all_convolutional(paper_model, relus=16)
    head = paper_model.get_layer("projection")
    assert not head.trainable and head.bias is None and head.kernel.shape == (512, 1000)
    assert all(w is not head.kernel for w in paper_model.trainable_weights)
    assert float(np.std(head.kernel.numpy())) == pytest.approx(1 / math.sqrt(512), rel=0.02)


def test_residual_init_is_one_over_k2c(paper_model):
    """sigma = 1/(k^2 c) for every residual conv (>= 36,864 draws: within 3%), He's
    sqrt(2/(k^2 c)) for the 7x7 stem (9,408 draws: within 5%)."""
    convs = [layer for layer in paper_model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == 33
    for layer in convs:
        std = float(np.std(layer.kernel.numpy()))
        if layer.name == "stem_conv":
            assert layer.kernel.shape == (7, 7, 3, 64) and layer.strides == (2, 2)
            assert std == pytest.approx(math.sqrt(2 / (49 * 64)), rel=0.05)
        else:
            assert layer.name.startswith("stage") and layer.kernel.shape[:2] == (3, 3)
            assert std == pytest.approx(1 / (9 * layer.filters), rel=0.03), layer.name
            assert layer.bias is None  # kernels only, as Table 1 and the original _conv


@pytest.mark.parametrize(
    "kwargs, trainable, non_trainable",
    [
        (dict(conv_bias=True), 21_103_232, 512_000),
        (dict(shortcut="projection"), 21_271_744, 512_000),
        (dict(downsample="conv"), 21_132_480, 512_000),
        (dict(head="trainable"), 21_607_616, 0),
        (dict(stage_units=(3, 4, 6, 6)), 35_251_392, 512_000),  # the nearest to the paper's 35.7M
    ],
)
def test_variant_counts(kwargs, trainable, non_trainable):
    counts = param_counts(build_imagenet_model(ImageNetConfig(**kwargs)))
    assert (counts["trainable_params"], counts["non_trainable_params"]) == (
        trainable,
        non_trainable,
    )


def test_conv_downsample_replaces_max_pool_by_a_strided_conv():
    model = build_imagenet_model(ImageNetConfig(downsample="conv", stage_units=(1, 1, 1, 1)))
    layer = model.get_layer("stem_downsample")
    assert layer.kernel.shape == (3, 3, 64, 64) and layer.strides == (2, 2)
    assert tuple(layer.output.shape) == (None, 56, 56, 64)
    assert tuple(model.get_layer("stage1_unit0_add").output.shape) == (None, 56, 56, 64)
    assert tuple(model.get_layer("stage4_unit0_add").output.shape) == (None, 7, 7, 512)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(stage_units=(3, 4, 6)), "give one width per stage"),
        (dict(stage_units=(3, 0, 6, 3)), "--stage_units must be >= 1"),
        (dict(downsample="maxpool"), "--downsample=maxpool is unknown"),
        (dict(stage_widths=(64, 127, 256, 512)), "cannot go from 64 to 127 channels"),
        (dict(init="xavier"), "--init=xavier is unknown"),
        (dict(norm="layer"), "--norm=layer is unknown"),
        (dict(head="linear"), "--head=linear is unknown"),
        (dict(relu_leakiness=-0.1), "--relu_leakiness must be in"),
    ],
)
def test_impossible_architectures(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImageNetConfig(**kwargs).validate()


def test_every_block_switch_reaches_the_imagenet_blocks():
    """The CIFAR model's block switches are ImageNet's too (one BlockConfig): batch norm, no
    identity, leaky ReLU each change the network they used to leave untouched."""
    tiny = dict(
        image_size=32, stem_filters=8, stage_units=(1, 2, 1, 1), stage_widths=(8, 16, 32, 64)
    )
    bn = build_imagenet_model(
        ImageNetConfig(**tiny, block="preactivation", norm="batch", init="he")
    )
    names = [layer.name for layer in bn.layers]
    assert [n for n in names if n.startswith("stage2_unit1_")] == [
        "stage2_unit1_bn1",
        "stage2_unit1_relu0",
        "stage2_unit1_conv1",
        "stage2_unit1_bn2",
        "stage2_unit1_relu",
        "stage2_unit1_conv2",
        "stage2_unit1_add",
    ]
    assert names[-4:] == ["final_bn", "final_relu", "global_pool", "projection"]
    plain = build_imagenet_model(ImageNetConfig(**tiny, identity=False))
    assert not [layer for layer in plain.layers if isinstance(layer, keras.layers.Add)]
    leaky = build_imagenet_model(ImageNetConfig(**tiny, relu_leakiness=0.1, downsample="conv"))
    for name in ("stem_relu", "stage1_unit0_relu"):
        relu = leaky.get_layer(name)
        np.testing.assert_allclose(relu(np.array([[-2.0, 3.0]], np.float32)), [[-0.2, 3.0]])


def test_learning_rate_schedule():
    """0.1 x 0.94 every 2 epochs; an epoch is 1,281,167 / 256 steps; decay_steps = 10,009."""
    schedule = exponential_learning_rate_schedule(256, IMAGENET_TRAIN_EXAMPLES)
    assert schedule.decay_steps == 10_009
    for step, lr in [
        (0, 0.1),
        (10_008, 0.1),
        (10_009, 0.094),
        (20_018, 0.1 * 0.94**2),
        (700_000, 0.1 * 0.94**69),
    ]:
        assert float(schedule(step)) == pytest.approx(lr, rel=1e-5)
    assert exponential_learning_rate_schedule(512, IMAGENET_TRAIN_EXAMPLES).decay_steps == 5_004


# ----------------------------------------------------------------------------- preprocessing
def test_random_resized_crop_ranges():
    """Crop windows: area 8%..100%, aspect 3/4..4/3 (up to rounding), both ends reached."""
    shape = tf.constant([300, 400, 3])
    areas, aspects = [], []
    for i in range(400):
        _, size = imagenet_input.sample_crop(shape, tf.constant([i, 7], tf.int64))
        h, w = size.numpy()
        areas.append(h * w / (300 * 400))
        aspects.append(w / h)
    areas, aspects = np.array(areas), np.array(aspects)
    assert areas.min() >= 0.08 - 0.005 and areas.max() <= 1.0
    assert areas.min() < 0.15 and areas.max() > 0.8
    assert aspects.min() >= 0.75 * 0.97 and aspects.max() <= 4 / 3 * 1.03


def test_train_crop_shape_range_and_determinism():
    rng = np.random.default_rng(0)
    for h, w in [(37, 91), (120, 60), (224, 224)]:
        jpeg = tf.constant(_jpeg(rng, h, w))
        seed = tf.constant([3, h], tf.int64)
        image = imagenet_input.train_crop(jpeg, seed, 224)
        assert image.shape == (224, 224, 3) and image.dtype == tf.float32
        assert 0 <= float(tf.reduce_min(image)) and float(tf.reduce_max(image)) <= 255
        np.testing.assert_array_equal(image, imagenet_input.train_crop(jpeg, seed, 224))
    outputs = {
        imagenet_input.train_crop(jpeg, tf.constant([s, 0], tf.int64), 32).numpy().tobytes()
        for s in range(5)
    }
    assert len(outputs) > 1


def test_eval_crop_is_the_central_crop_after_resizing_the_shorter_side():
    rng = np.random.default_rng(1)
    # shorter side already 256: no resize, the central 224 x 224 of a 256 x 512 image
    jpeg = tf.constant(_jpeg(rng, 256, 512))
    decoded = tf.io.decode_jpeg(jpeg, channels=3).numpy().astype(np.float32)
    crop = imagenet_input.eval_crop(jpeg, 224).numpy()
    np.testing.assert_allclose(crop, decoded[16:240, 144:368], atol=1e-3)
    for h, w in [(50, 80), (600, 300), (31, 700)]:
        assert imagenet_input.eval_crop(tf.constant(_jpeg(rng, h, w)), 224).shape == (224, 224, 3)
    assert imagenet_input.eval_crop(tf.constant(_jpeg(rng, 50, 80)), 32).shape == (32, 32, 3)


def test_normalizations():
    image = tf.random.stateless_uniform([32, 32, 3], [1, 2], 0, 255)
    per_image = imagenet_input.normalize(image, "per_image")
    assert float(tf.reduce_mean(per_image)) == pytest.approx(0, abs=1e-4)
    assert float(tf.math.reduce_std(per_image)) == pytest.approx(1, rel=1e-3)
    mean_std = imagenet_input.normalize(tf.fill([2, 2, 3], 0.485 * 255), "mean_std")
    np.testing.assert_allclose(mean_std[..., 0], 0, atol=1e-5)
    with pytest.raises(DataError, match="--normalization=none is unknown"):
        imagenet_input.normalize(image, "none")


# ----------------------------------------------------------------------------- sources
def test_tfrecord_pipeline_batches_and_one_based_labels(shards):
    folder, written = shards
    records = list(imagenet_input.read_records("validation", data_path=folder))
    assert [int(label) for _, label in records] == [x - 1 for x in written["validation"]]
    train = imagenet_input.build_dataset(
        "train", 3, data_path=folder, image_size=32, seed=1, shuffle_buffer=8
    )
    for images, labels in train.take(5):  # repeats past the 8 training records
        assert images.shape == (3, 32, 32, 3) and labels.dtype == tf.int32
        assert set(labels.numpy()) <= {x - 1 for x in written["train"]}
    first, again = (
        imagenet_input.build_dataset(
            "train", 3, data_path=folder, image_size=32, seed=1, shuffle_buffer=8
        )
        for _ in range(2)
    )
    for (a, x), (b, y) in zip(first.take(3), again.take(3)):  # the same seed, the same batches
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(x, y)
    evaluation = list(
        imagenet_input.build_dataset("validation", 3, data_path=folder, image_size=32)
    )
    assert [len(labels) for _, labels in evaluation] == [3, 1]  # the whole split, in order


@pytest.mark.parametrize(
    "offset, stored, hint",
    [
        (1, [0, 5, 999], "--label_offset=0"),  # 0-based shards read as 1-based
        (0, [1000, 5, 1], "--label_offset=1"),  # TF-slim's 1..1000 read as 0-based
    ],
)
def test_label_convention_errors(tmp_path, offset, stored, hint):
    write_shards(tmp_path, labels=stored)
    with pytest.raises(DataError, match=hint) as e:
        imagenet_input.check_data_path(tmp_path, label_offset=offset)
    assert "\n" not in str(e.value)
    # the in-graph check catches what the sample missed
    with pytest.raises(tf.errors.InvalidArgumentError, match=imagenet_input.LABEL_ERROR) as e:
        list(imagenet_input.read_records("train", data_path=tmp_path, label_offset=offset))
    error = imagenet_input.label_error(e.value, offset)  # what the launcher prints
    assert hint in str(error) and f"holds label {stored[0]}," in str(error)
    assert imagenet_input.label_error(ValueError("other"), offset) is None


def test_zero_based_shards_with_offset_zero(tmp_path):
    write_shards(tmp_path, labels=[0, 999, 3])
    imagenet_input.check_data_path(tmp_path, label_offset=0)
    labels = [
        int(y) for _, y in imagenet_input.read_records("train", data_path=tmp_path, label_offset=0)
    ]
    assert sorted(set(labels)) == [0, 3, 999]


def test_sharding_per_input_pipeline(shards):
    folder, written = shards
    parts = [
        [
            int(y)
            for _, y in imagenet_input.read_records(
                "train", data_path=folder, input_context=tf.distribute.InputContext(2, i, 2)
            )
        ]
        for i in range(2)
    ]
    assert parts == [[x - 1 for x in written["train"][:4]], [x - 1 for x in written["train"][4:]]]
    for split, n in (("train", 3), ("validation", 2)):
        with pytest.raises(
            DataError,
            match=rf"has \d {split} file\(s\) but the job runs {n} "
            "input pipelines",
        ):
            imagenet_input.read_records(
                split, data_path=folder, input_context=tf.distribute.InputContext(n, 0, n)
            )
    with pytest.raises(DataError, match="1 validation file"):
        imagenet_input.check_data_path(folder, num_input_pipelines=2)


def test_bad_data_paths(tmp_path):
    with pytest.raises(DataError, match="is not a folder"):
        imagenet_input.shard_files(tmp_path / "absent", "train")
    with pytest.raises(DataError, match="holds no train-NNNNN-of-MMMMM files"):
        imagenet_input.shard_files(tmp_path, "train")
    write_shards(tmp_path, train_shards=3)
    (tmp_path / "train-00001-of-00003").unlink()
    with pytest.raises(DataError, match="holds 2 train shards, not the complete set"):
        imagenet_input.check_data_path(tmp_path)


def test_missing_manual_download_names_both_tars(tmp_path, no_network):
    with pytest.raises(DataError) as e:
        imagenet_input.tfds_builder(tmp_path)
    message = str(e.value)
    assert "\n" not in message
    assert "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar" in message
    assert f"{tmp_path}/downloads/manual/" in message
    assert list(tmp_path.iterdir()) == []  # nothing written
    manual = tmp_path / "downloads" / "manual"
    manual.mkdir(parents=True)
    (manual / "ILSVRC2012_img_train.tar").touch()
    with pytest.raises(DataError, match=r"manual/ lacks ILSVRC2012_img_val.tar: imagenet2012 is"):
        imagenet_input.tfds_builder(tmp_path)


def test_tfds_mock_pipeline(tmp_path, monkeypatch):
    """tfds imagenet2012 (mocked: random JPEGs of random sizes) through the whole pipeline."""
    monkeypatch.setattr(imagenet_input, "_is_prepared", lambda builder: True)
    with tfds.testing.mock_data(num_examples=6, data_dir=str(tmp_path)):
        train = imagenet_input.build_dataset(
            "train", 2, data_dir=tmp_path, image_size=32, seed=0, shuffle_buffer=4
        )
        for images, labels in train.take(4):
            assert images.shape == (2, 32, 32, 3) and labels.dtype == tf.int32
            assert all(0 <= y < 1000 for y in labels.numpy())
        evaluation = list(
            imagenet_input.build_dataset("validation", 4, data_dir=tmp_path, image_size=32)
        )
        assert [tuple(images.shape) for images, _ in evaluation] == [(4, 32, 32, 3), (2, 32, 32, 3)]


# ----------------------------------------------------------------------------- training
def test_training_steps_through_trainer(shards, tmp_path, mirrored_strategy):
    """Two steps of the tiny variant on 2 replicas (MirroredStrategy over 2 CPU devices)."""
    folder, written = shards
    strategy = mirrored_strategy
    cfg = TrainConfig(
        batch_size=4, train_steps=2, learning_rate=0.1, lr_boundaries=(), eval_batch_size=4
    )
    keras.utils.set_random_seed(0)
    trainer = Trainer(
        strategy,
        lambda: build_imagenet_model(TINY),
        cfg,
        str(tmp_path),
        schedule=exponential_learning_rate_schedule(4, 1_281_167),
        top5=True,
    )
    head = trainer.model.get_layer("projection").kernel.numpy().copy()

    def dataset_fn(split, global_batch):
        return lambda ctx: imagenet_input.build_dataset(
            split,
            ctx.get_per_replica_batch_size(global_batch),
            data_path=folder,
            image_size=TINY.image_size,
            seed=0,
            input_context=ctx,
            shuffle_buffer=8,
        )

    sums = trainer.run_steps(trainer.distribute(dataset_fn("train", 4)), 2)
    assert list(sums) == list(health.METRICS)
    assert math.isfinite(sums["loss"]) and sums["loss"] > 0 and sums["examples"] == 8
    assert 0 <= sums["correct"] <= 8 and sums["grad_norm_sq"] > 0
    assert trainer.step == 2
    np.testing.assert_array_equal(trainer.model.get_layer("projection").kernel.numpy(), head)
    result = trainer.evaluate(dataset_fn("validation", 4))
    assert result["test_examples"] == len(written["validation"])
    assert 0 <= result["test_error"] <= 1 and 0 <= result["test_top5_error"] <= 1
    assert result["test_top5_error"] <= result["test_error"]


# ----------------------------------------------------------------------------- the launcher
def _launch(*args, cwd, timeout=120):
    """launch/imagenet.py run from ``cwd``, in the environment most launches share: warm from
    the tests' usual warm process (tests/warm_start.py)."""
    return launchers.run("launch/imagenet.py", *args, timeout=timeout, cwd=cwd)


def test_launcher_summary_only(tmp_path):
    done = _launch("--summary_only", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trainable_params: 21095616" in done.stdout.splitlines()
    assert "non_trainable_params: 512000" in done.stdout.splitlines()
    assert "stage4_unit2_conv2" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_launcher_missing_manual_download(tmp_path):
    done = _launch(
        f"--data_dir={tmp_path / 'tfds'}", f"--model_dir={tmp_path / 'run'}", cwd=tmp_path
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"error: {tmp_path / 'tfds'}/downloads/manual/ lacks "
        "ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar: imagenet2012 is not "
        "prepared"
    )
    assert "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar" in last
    assert not (tmp_path / "run").exists() and not (tmp_path / "tfds").exists()


def test_launcher_trains_tiny_variant_on_shards(shards, tmp_path):
    folder, written = shards
    done = _launch(
        f"--data_path={folder}",
        f"--model_dir={tmp_path / 'run'}",
        *TINY_FLAGS,
        "--train_steps=2",
        "--batch_size=2",
        "--eval_batch_size=4",
        "--shuffle_buffer=8",
        "--log_every=1",
        "--eval_every=2",
        "--checkpoint_every=2",
        "--seed=0",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["final_step"] == 2 and result["test_examples"] == len(written["validation"])
    assert 0 <= result["test_top5_error"] <= result["test_error"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["data"]["dataset"] == "imagenet2012"
    assert config["network"]["stage_units"] == [1, 1, 1, 1]
    assert config["recipe"]["epochs_per_decay"] == 2.0 and config["recipe"]["lr_boundaries"] == []
