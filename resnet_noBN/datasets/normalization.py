"""The input pipelines' last step, the normalisation of each image, as a Keras layer: the first
layer of an exported model (``runs.export``), so that it takes images as they are stored
(uint8, or float in 0-255) and a user feeds it raw pixels.

* CIFAR (both data sets, every backend) and ImageNet's ``--normalization=per_image``:
  :class:`PerImageStandardization`, ``stream.standardize`` (the definition of
  ``tf.image.per_image_standardization``, arXiv:1611.04231 Section 4's "standard" input, as the
  original ``cifar_input.py``), the function the training stream and every evaluation apply.
* ImageNet's ``--normalization=mean_std``: Keras' own ``Normalization`` with ImageNet's channel
  means and variances (``configs.data_config.IMAGENET_MEAN_RGB``, ``IMAGENET_STDDEV_RGB`` squared).

No TensorFlow: the layer runs and loads on every Keras backend.
"""

from __future__ import annotations

import keras

from resnet_noBN.configs.data_config import (
    IMAGENET_MEAN_RGB,
    IMAGENET_NORMALIZATIONS,
    IMAGENET_STDDEV_RGB,
)
from resnet_noBN.datasets import stream

LAYER_NAME = "standardize"  # the exported model's first layer after its input


@keras.saving.register_keras_serializable(package="resnet_noBN")
class PerImageStandardization(keras.layers.Layer):
    """Each image of [B, H, W, C] to mean 0 and variance 1: ``stream.standardize``, in float32,
    whatever the input's dtype (uint8 or float pixels in 0-255)."""

    def call(self, images):
        return stream.standardize(images)

    def compute_output_shape(self, input_shape):
        return input_shape


def input_normalization(normalization: str) -> keras.layers.Layer:
    """The layer that normalises raw pixels as a run's input pipeline did: ``per_image`` (every
    CIFAR run, ImageNet's default) or ``mean_std`` (ImageNet's other ``--normalization``);
    ValueError for any other name."""
    if normalization not in IMAGENET_NORMALIZATIONS:
        raise ValueError(f"normalization {normalization!r}: one of {IMAGENET_NORMALIZATIONS}")
    if normalization == "mean_std":
        return keras.layers.Normalization(
            mean=IMAGENET_MEAN_RGB,
            variance=[s * s for s in IMAGENET_STDDEV_RGB],
            name=LAYER_NAME,
            dtype="float32",
        )
    return PerImageStandardization(name=LAYER_NAME, dtype="float32")
