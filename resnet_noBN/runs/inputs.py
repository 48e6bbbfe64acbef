"""A launcher's data, for ``setup.start``: CIFAR's (through the backend) and ImageNet's
(TFRecord shards or tensorflow-datasets, read by tf.data); :func:`inputs_of` picks the run's
by its launcher. Each checks its data before a run writes anything (DataError: one line)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import cifar_data

if TYPE_CHECKING:
    from resnet_noBN.backends.base import Runtime
    from resnet_noBN.configs.run_config import RunConfig


class CifarInputs:
    """A launcher's data: :meth:`prepare` fetches or checks it (DataError, one line, before
    anything is written), :meth:`sources` builds the trainer's two sources, :attr:`label` names
    it in the banner. CIFAR's, through the backend."""

    def prepare(self, config: RunConfig, runtime: Runtime) -> None:
        registry.current().prepare_data(config.data)
        data, batch = config.data, config.recipe.batch_size
        held = {
            s: cifar_data.num_records(data.dataset, data.data_path, s) for s in cifar_data.SPLITS
        }
        if batch > held["train"]:
            raise DataError(
                f"--batch_size={batch} exceeds the {held['train']:,} training images of "
                f"{data.data_path or data.dataset}; use a smaller --batch_size"
            )
        official = {s: cifar_data.num_records(data.dataset, None, s) for s in held}
        if held != official and runtime.is_chief:
            print(
                f"note: {data.data_path} holds "
                + " and ".join(f"{held[s]:,} of the {official[s]:,} {s} images" for s in official)
                + f" of {data.dataset}: the figures are this subset's (config.json records it)",
                flush=True,
            )

    def sources(self, config: RunConfig, runtime: Runtime) -> tuple[object, object]:
        recipe = config.recipe
        return registry.current().cifar_sources(
            config.data, recipe.batch_size, recipe.eval_batch_size, runtime.seed
        )

    def label(self, config: RunConfig) -> str:
        return config.data.dataset


class ImageNetInputs:
    """ImageNet's data for ``setup.start``: TFRecord shards (file-based sharding needs a file
    per input pipeline: checked before anything is written) or tensorflow-datasets."""

    def prepare(self, config: RunConfig, runtime: Runtime) -> None:
        from resnet_noBN.datasets import imagenet_input  # tf.data: ImageNet's runs only

        data = config.data
        if data.data_path:
            imagenet_input.check_data_path(
                data.data_path, runtime.input_pipelines, data.label_offset
            )
        else:
            imagenet_input.tfds_builder(data.data_dir, runtime.input_pipelines)

    def sources(self, config: RunConfig, runtime: Runtime) -> tuple[object, object]:
        from resnet_noBN.datasets import imagenet_input
        from resnet_noBN.datasets.input_common import per_replica_dataset

        data, recipe = config.data, config.recipe

        def dataset_fn(split, global_batch):
            return per_replica_dataset(
                imagenet_input.build_dataset,
                split,
                global_batch=global_batch,
                data_path=data.data_path,
                data_dir=data.data_dir,
                label_offset=data.label_offset,
                image_size=config.network.image_size,
                normalization=data.normalization,
                seed=runtime.seed,
                shuffle_buffer=data.shuffle_buffer,
            )

        return dataset_fn("train", recipe.batch_size), dataset_fn(
            "validation", recipe.eval_batch_size
        )

    def label(self, config: RunConfig) -> str:
        from resnet_noBN.datasets.imagenet_input import TFDS_NAME

        return f"imagenet ({'tfrecords' if config.data.data_path else TFDS_NAME})"


def inputs_of(config: RunConfig) -> CifarInputs | ImageNetInputs:
    """The data of ``config``'s launcher: ImageNet's for launch/imagenet.py, else CIFAR's."""
    return ImageNetInputs() if config.launcher == "imagenet" else CifarInputs()
