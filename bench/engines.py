"""What ``throughput.py`` does differently on each Keras backend: the runtime, the device, the
trainer and what it trains from, the input alone, evaluation's input, profiling and GPU memory.

Everything else is backend-agnostic: the FLOP count (``flops.py``), the peaks (``peaks.py``), the
timing (``timing.py``, ``measure.py``) and the comparisons (``compare.py``). ``engine()`` picks
the class of the backend Keras loaded (``KERAS_BACKEND``), and each starts the runtime and builds
the trainer through the launchers' backend object (``resnet_noBN.backends.registry.current()``):
the same threads, precision, seed and refusals.

* TensorFlow: ``tensorflow_training.Trainer`` fed by ``cifar_input.build_dataset`` (tf.data on
  the host).
* JAX: ``jax_training.JaxTrainer``, which makes each augmented batch on the device inside the
  compiled step from the uint8 split held there; "the input alone" is that batch maker, compiled
  on its own.
* PyTorch: ``torch_training.TorchTrainer``, eager steps, each batch made on Keras' torch device
  from the uint8 split held there; "the input alone" is that batch maker, run eagerly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import numpy as np

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import RuntimeConfig


def engine(args) -> TensorFlowEngine | JaxEngine | TorchEngine:
    """The engine of the backend in use, after its runtime is started from ``args``."""
    try:
        backend = registry.current()
    except InputError as e:
        raise SystemExit(f"error: {e}") from None
    engines = {"tensorflow": TensorFlowEngine, "jax": JaxEngine, "torch": TorchEngine}
    if backend.name not in engines:
        raise SystemExit(
            f"error: bench/throughput.py has no engine for the {backend.name} backend; run it "
            f"with KERAS_BACKEND={' or '.join(engines)}"
        )
    return engines[backend.name](args)


def run_config(args):
    """The benchmarked run as a launcher's ``RunConfig``: the ``--model`` preset in
    ``--data_format``, the recipe's batches, the runtime's precision, XLA, threads and seed."""
    from resnet_noBN.configs.data_config import DataConfig
    from resnet_noBN.configs.network_config import ModelConfig
    from resnet_noBN.configs.recipe_config import TrainConfig
    from resnet_noBN.configs.run_config import RunConfig

    return RunConfig(
        ModelConfig.preset(args.model, data_format=args.data_format),
        DataConfig(),
        TrainConfig(batch_size=args.batch_size, eval_batch_size=args.eval_batch_size),
        RuntimeConfig(
            precision=args.precision,
            jit_compile=args.jit_compile,
            intra_op_threads=args.intra_op_threads,
            inter_op_threads=args.inter_op_threads,
            seed=args.seed,
        ),
    )


def _start(args):
    """The launchers' runtime for ``args`` (``setup.start_runtime`` of :func:`run_config`: one
    device), the flags the backend cannot take refused: 'error: ...' and exit 1."""
    from resnet_noBN.runs import setup

    config = run_config(args)
    try:
        registry.current().refuse(
            config.runtime, {"onednn": args.onednn, "synthetic": args.synthetic}
        )
        return setup.start_runtime(config)
    except InputError as e:
        raise SystemExit(f"error: {e}") from None


def _float32_as_tf32() -> bool:
    """Whether the backend runs float32 convolutions and matmuls as TF32 where the GPU has it
    (--precision=float32), read back from its library (``Backend.float32_math``); not under
    true_float32."""
    return registry.current().float32_math() == "tf32"


def _trainer(runtime, args, model_dir: str):
    """The launchers' trainer of :func:`run_config` (``setup.make_trainer``), on one device,
    writing no run log (a non-chief's)."""
    from resnet_noBN.runs import setup

    config = run_config(args)
    return setup.make_trainer(config, dataclasses.replace(runtime, is_chief=False), model_dir)


class TensorFlowEngine:
    """tf.data input, ``tensorflow_training.Trainer`` under the default strategy, tf.profiler."""

    name = "tensorflow"

    def __init__(self, args):
        import tensorflow as tf

        self.runtime = _start(args)
        self.intra = tf.config.threading.get_intra_op_parallelism_threads()
        self.inter = tf.config.threading.get_inter_op_parallelism_threads()
        self.tf, self.args = tf, args
        self.version = f"TF {tf.__version__}"
        gpus = tf.config.list_physical_devices("GPU")
        self.device = "gpu" if gpus else "cpu"
        self.gpu_name = (
            tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
            if gpus
            else None
        )
        self.float32_as_tf32 = bool(gpus) and _float32_as_tf32()
        self.input = "pipeline" if not args.synthetic else "synthetic (one cached batch)"

    def _dataset(self, data_path: str, split: str, batch_size: int, **kwargs):
        from resnet_noBN.datasets import cifar_input

        return cifar_input.build_dataset(
            "cifar10", split, batch_size, data_path=data_path, seed=self.args.seed, **kwargs
        )

    def input_rate(self, data_path: str, batches: int) -> tuple[float, str]:
        """(images/s of the training pipeline over ``batches``, how), after one pass of the
        records (which fills the cache and the shuffle buffer)."""
        from resnet_noBN.datasets import cifar_data

        records = cifar_data.num_records("cifar10", data_path, "train")
        warm = math.ceil(records / self.args.batch_size) + 1
        it = iter(self._dataset(data_path, "train", self.args.batch_size))
        for _ in range(warm):
            next(it)
        t0 = time.perf_counter()
        for _ in range(batches):
            next(it)
        rate = batches * self.args.batch_size / (time.perf_counter() - t0)
        return rate, f"tf.data, {batches} batches after {warm} warm-up batches"

    def trainer(self, data_path: str, model_dir: str):
        """(the Trainer, the iterator it trains from: the pipeline, or one cached batch)."""
        tf, args = self.tf, self.args
        trainer = _trainer(self.runtime, args, model_dir)
        if args.synthetic:
            batch = next(iter(self._dataset(data_path, "train", args.batch_size)))

            def train_fn(ctx):
                return tf.data.Dataset.from_tensors(batch).repeat()
        else:

            def train_fn(ctx):
                return self._dataset(
                    data_path, "train", ctx.get_per_replica_batch_size(args.batch_size)
                )

        return trainer, trainer.distribute(train_fn)

    def eval_source(self, data_path: str, batches: int):
        """What ``trainer.evaluate`` takes for ``batches`` test batches (the cached first one
        repeated, with --synthetic)."""
        tf, size = self.tf, self.args.eval_batch_size
        if self.args.synthetic:
            batch = next(iter(self._dataset(data_path, "test", size).repeat()))
            return lambda ctx: tf.data.Dataset.from_tensors(batch).repeat(batches)
        return lambda ctx: (
            self._dataset(data_path, "test", size, drop_remainder=True).repeat().take(batches)
        )

    def profile(self, folder: str):
        return _trace(
            self.tf.profiler.experimental.start, self.tf.profiler.experimental.stop, folder
        )

    def gpu_peak_mib(self) -> float:
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


class _SplitsEngine:
    """What the engines of the backends that train from the uint8 split held on the device
    (``backends.splits_in_memory``) share: the splits, the trainer and evaluation's input."""

    def _split(self, data_path: str, split: str):
        from resnet_noBN.datasets.cifar_data import load_split

        return load_split("cifar10", split, data_path)

    def _train_split(self, data_path: str):
        """The training source the trainer's steps take (its seed and crop padding too)."""
        from resnet_noBN.datasets.stream import TrainSplit

        return TrainSplit(*self._split(data_path, "train"), seed=self.args.seed)

    def trainer(self, data_path: str, model_dir: str):
        """(the trainer, the device-held split its steps make their batches from)."""
        trainer = _trainer(self.runtime, self.args, model_dir)
        return trainer, trainer.start(self._train_split(data_path), 0)

    def eval_source(self, data_path: str, batches: int):
        """The first ``batches`` x --eval_batch_size test images (repeated where fewer)."""
        images, labels = self._split(data_path, "test")
        count = batches * self.args.eval_batch_size
        order = np.arange(count) % len(images)
        return images[order], labels[order]


class JaxEngine(_SplitsEngine):
    """``JaxTrainer`` on the first local device, its batches made on the device."""

    name = "jax"

    def __init__(self, args):
        import jax

        self.runtime = runtime = _start(args)
        self.jax, self.args = jax, args
        self.intra = self.inter = None
        self.version = f"JAX {jax.__version__}"
        first = runtime.devices[0]
        self.device = "gpu" if first.platform == "gpu" else "cpu"
        self.gpu_name = first.device_kind if self.device == "gpu" else None
        self.float32_as_tf32 = self.device == "gpu" and _float32_as_tf32()
        self.input = "on the device, inside the step"

    def input_rate(self, data_path: str, batches: int) -> tuple[float, str]:
        """(images/s of the step's batch maker, ``stream.training_batch``, compiled on its own
        on the device, over ``batches`` batches after one, how)."""
        from resnet_noBN.datasets import stream

        jax, size, split = self.jax, self.args.batch_size, self._train_split(data_path)
        images, labels = jax.device_put(split.images), jax.device_put(split.labels)
        make = jax.jit(stream.training_batch, static_argnums=(4, 5))
        seed = np.uint32(split.seed % 2**32)
        jax.block_until_ready(make(images, labels, seed, np.int32(0), size, split.pad))
        t0 = time.perf_counter()
        for step in range(1, batches + 1):
            out = make(images, labels, seed, np.int32(step), size, split.pad)
        jax.block_until_ready(out)
        rate = batches * size / (time.perf_counter() - t0)
        return rate, f"stream.training_batch jitted alone on the device, {batches} batches"

    def profile(self, folder: str):
        return _trace(self.jax.profiler.start_trace, self.jax.profiler.stop_trace, folder)

    def gpu_peak_mib(self) -> float:
        return self.jax.devices()[0].memory_stats()["peak_bytes_in_use"] / 2**20


class TorchEngine(_SplitsEngine):
    """``TorchTrainer`` on Keras' torch device (a CUDA GPU where torch sees one), eager steps,
    its batches made on the device."""

    name = "torch"

    def __init__(self, args):
        import torch

        self.runtime = _start(args)
        self.torch, self.args = torch, args
        self.intra, self.inter = torch.get_num_threads(), torch.get_num_interop_threads()
        self.version = f"PyTorch {torch.__version__}"
        cuda = torch.cuda.is_available()
        self.device = "gpu" if cuda else "cpu"
        self.gpu_name = torch.cuda.get_device_name(0) if cuda else None
        self.float32_as_tf32 = cuda and _float32_as_tf32()
        self.input = "on the device, each eager step"

    def _synchronize(self):
        if self.device == "gpu":
            self.torch.cuda.synchronize()

    def input_rate(self, data_path: str, batches: int) -> tuple[float, str]:
        """(images/s of the step's batch maker, ``stream.training_batch``, run eagerly on the
        device, over ``batches`` batches after one, how)."""
        from keras import ops

        from resnet_noBN.datasets import stream

        size, split = self.args.batch_size, self._train_split(data_path)
        images, labels = ops.convert_to_tensor(split.images), ops.convert_to_tensor(split.labels)
        stream.training_batch(images, labels, split.seed, 0, size, split.pad)
        self._synchronize()
        t0 = time.perf_counter()
        for step in range(1, batches + 1):
            stream.training_batch(images, labels, split.seed, step, size, split.pad)
        self._synchronize()
        rate = batches * size / (time.perf_counter() - t0)
        return rate, f"stream.training_batch eagerly on the device, {batches} batches"

    def profile(self, folder: str):
        profiler = self.torch.profiler.profile(
            on_trace_ready=self.torch.profiler.tensorboard_trace_handler(folder)
        )
        return _trace(lambda _: profiler.start(), profiler.stop, folder)

    def gpu_peak_mib(self) -> float:
        return self.torch.cuda.max_memory_allocated() / 2**20


@contextlib.contextmanager
def _trace(start, stop, folder: str):
    """A profiler trace (TensorBoard's Profile tab) of what runs inside the block."""
    start(folder)
    try:
        yield
    finally:
        stop()
