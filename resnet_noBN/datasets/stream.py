"""The CIFAR training stream, written once in ``keras.ops`` so that every Keras backend trains on
the same batches: the data order, the augmentation and the standardisation of arXiv:1611.04231,
Section 4 ("standard data augmentation", as the original ``cifar_input.py``).

The stream is a pure function of (seed, step), so a run resumed at any step sees exactly the
batches the uninterrupted run saw, on TensorFlow (``cifar_input.build_dataset`` maps
:func:`training_batch` over a step counter in ``tf.data``), on JAX (``jax_training`` calls it
inside the compiled step, on the accelerator, from the uint8 training set kept there) and on
PyTorch (``torch_training`` calls it before each eager step, on the device):

* **Order**: epoch e is a permutation of the split keyed by (seed, e) (:func:`epoch_permutation`);
  the stream is epoch 0, epoch 1, ... back to back, and the batch of step s is its positions
  [s·B, (s+1)·B) (:func:`stream_indices`).
* **Augmentation** of the batch of step s, keyed by (seed, s) (:func:`draws`, :func:`augment`):
  per image, zero-pad to (32 + 2·pad)², a random 32×32 crop (offsets uniform in 0..2·pad), a
  random left-right flip; then :func:`standardize`, ``tf.image.per_image_standardization``'s
  definition. Evaluation: standardisation only.

The random draws come from a counter-based hash on uint32 (:func:`random_bits`: MurmurHash3's
finaliser, a bijection of uint32) because no library gives the same stateless random numbers on
every backend: TensorFlow's stateless ops are Philox-based, JAX's threefry-based, and host-side
numpy would leave the accelerator waiting and could not run inside a traced ``tf.data`` function
(parameter-server workers run the dataset function as a graph). uint32 multiply, xor and shift
wrap identically on TensorFlow, JAX and numpy, so the draws are bit-identical. PyTorch has no
uint32 arithmetic (Keras holds "uint32" there as torch.int64), so each product and each cast to
"uint32" is masked to its low 32 bits (:func:`_wrap32`): a no-op on TensorFlow and JAX, and on
torch the int64 products agree with uint32's modulo 2**32 (int64 multiplication wraps modulo
2**64), so PyTorch draws the same bits too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from keras import ops

IMAGE_SIZE = 32


@dataclasses.dataclass(frozen=True)
class TrainSplit:
    """A training split kept whole, as the JAX trainer makes its batches from it on the device:
    uint8 images [N, 32, 32, 3], int32 labels [N], the run's seed and the crop padding of
    :func:`training_batch`."""

    images: np.ndarray
    labels: np.ndarray
    seed: int
    pad: int = 2


# Domain separation of the two uses of the seed.
_ORDER, _AUGMENT = 1, 2
_GOLDEN = 0x9E3779B9


def _u32(value):
    return ops.convert_to_tensor(np.asarray(value, np.uint32))


def _wrap32(x):
    """``x`` modulo 2**32: uint32 as it is (TensorFlow, JAX); PyTorch's int64 stand-in for
    "uint32" cut to the low 32 bits, as uint32 arithmetic would have wrapped."""
    return ops.bitwise_and(x, _u32(0xFFFFFFFF))


def mix32(x):
    """MurmurHash3's 32-bit finaliser (fmix32) of a uint32 tensor: a bijection of uint32 in
    which every input bit flips each output bit with probability about 1/2."""
    x = ops.bitwise_xor(x, ops.right_shift(x, _u32(16)))
    x = _wrap32(ops.multiply(x, _u32(0x85EBCA6B)))
    x = ops.bitwise_xor(x, ops.right_shift(x, _u32(13)))
    x = _wrap32(ops.multiply(x, _u32(0xC2B2AE35)))
    return ops.bitwise_xor(x, ops.right_shift(x, _u32(16)))


def stream_key(*words):
    """A uint32 key hashed from integers (Python ints or integer scalar tensors), in order."""
    key = _u32(_GOLDEN)
    for word in words:
        word = _u32(word % 2**32) if isinstance(word, int) else _wrap32(ops.cast(word, "uint32"))
        key = mix32(ops.bitwise_xor(key, word))
    return key


def random_bits(key, count: int):
    """``count`` uint32 words of the stream ``key``: word i is mix32(mix32(i ^ key) ^ key), so
    for one key the words are distinct (a composition of bijections of i)."""
    counters = ops.cast(ops.arange(count, dtype="int32"), "uint32")
    return mix32(ops.bitwise_xor(mix32(ops.bitwise_xor(counters, key)), key))


def epoch_permutation(seed, epoch, n: int):
    """The order of the n records in epoch ``epoch``: int32 [n], a permutation keyed by (seed,
    epoch) (the arg sort of n distinct hashed words; uint32 -> int32 is a bijection)."""
    words = random_bits(stream_key(seed, _ORDER, epoch), n)
    return ops.cast(ops.argsort(ops.cast(words, "int32")), "int32")


def stream_indices(seed, step, batch: int, n: int):
    """Record indices (int32 [batch]) of the batch of ``step``: positions [step·batch,
    (step+1)·batch) of the epochs laid back to back. ``batch`` <= ``n`` (checked by the
    callers), so a batch spans at most two epochs; the second epoch's permutation is only
    computed for a batch that reaches into it."""
    positions = ops.cast(step, "int32") * batch + ops.arange(batch, dtype="int32")
    epochs, within = positions // n, positions % n
    first = epochs[0]
    this_epoch = ops.take(epoch_permutation(seed, first, n), within)
    return ops.cond(
        epochs[-1] == first,
        lambda: this_epoch,
        lambda: ops.where(
            epochs == first, this_epoch, ops.take(epoch_permutation(seed, first + 1, n), within)
        ),
    )


def draws(seed, step, batch: int, pad: int):
    """The augmentation of the batch of ``step``: (crop offsets int32 [batch, 2] (row, column),
    each uniform in 0..2·pad, flips bool [batch])."""
    bits = ops.reshape(random_bits(stream_key(seed, _AUGMENT, step), 3 * batch), [batch, 3])
    offsets = ops.cast(ops.mod(bits[:, :2], _u32(2 * pad + 1)), "int32")
    flips = ops.equal(ops.bitwise_and(bits[:, 2], _u32(1)), _u32(1))
    return offsets, flips


def augment(images, offsets, flips, pad: int):
    """Each uint8 image [B, 32, 32, 3] zero-padded by ``pad``, cropped to 32×32 at its own
    ``offsets`` and flipped left-right where ``flips``: two gathers (rows, then the maybe
    reversed columns), not a per-image loop."""
    batch = ops.shape(images)[0]
    padded = ops.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    size = IMAGE_SIZE + 2 * pad
    pixels = ops.arange(IMAGE_SIZE, dtype="int32")
    rows = offsets[:, :1] + pixels[None, :]  # [B, 32]
    cols = offsets[:, 1:] + ops.where(flips[:, None], IMAGE_SIZE - 1 - pixels, pixels)
    rows = ops.broadcast_to(rows[:, :, None, None], [batch, IMAGE_SIZE, size, 3])
    cropped = ops.take_along_axis(padded, rows, axis=1)
    cols = ops.broadcast_to(cols[:, None, :, None], [batch, IMAGE_SIZE, IMAGE_SIZE, 3])
    return ops.take_along_axis(cropped, cols, axis=2)


def standardize(images):
    """``tf.image.per_image_standardization``'s definition, per image of [B, H, W, C]:
    (x − mean) / max(stddev, 1/√(H·W·C)), in float32."""
    x = ops.cast(images, "float32")
    mean = ops.mean(x, axis=(1, 2, 3), keepdims=True)
    stddev = ops.std(x, axis=(1, 2, 3), keepdims=True)
    min_stddev = 1.0 / float(np.sqrt(np.prod(images.shape[1:])))
    return (x - mean) / ops.maximum(stddev, min_stddev)


def augmented_batch(images, labels, seed, step, batch: int, pad: int):
    """The uint8 batch of ``step`` before standardisation (uint8 [batch, 32, 32, 3], labels)."""
    indices = stream_indices(seed, step, batch, int(images.shape[0]))
    offsets, flips = draws(seed, step, batch, pad)
    return augment(ops.take(images, indices, axis=0), offsets, flips, pad), ops.take(
        labels, indices, axis=0
    )


def training_batch(images, labels, seed, step, batch: int, pad: int):
    """The batch of ``step``: (float32 standardised images [batch, 32, 32, 3], int32 labels)."""
    augmented, batch_labels = augmented_batch(images, labels, seed, step, batch, pad)
    return standardize(augmented), batch_labels
