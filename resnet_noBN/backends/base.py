"""What every Keras backend does for a run, behind one interface (:class:`Backend`), and the
runtime it starts (:class:`Runtime`). No TensorFlow or JAX here.

A backend starts the runtime (:meth:`Backend.start`: the flags it cannot take refused, its
devices or ``tf.distribute`` strategy, the batches checked against them, the global seed set),
builds the trainer (:meth:`Backend.make_trainer`) and the CIFAR sources
(:meth:`Backend.prepare_data`, :meth:`Backend.cifar_sources`,
:meth:`Backend.evaluation_source`), reports where it computes (:meth:`Backend.report`:
``config.json``'s ``runtime``). ``registry.current()`` picks the one of ``KERAS_BACKEND``;
``registry.LAUNCHERS`` says which launchers each serves.
"""

from __future__ import annotations

import dataclasses
import platform
import random
import sys

import keras

from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.host import cpu


@dataclasses.dataclass(frozen=True)
class Runtime:
    """Where a launcher trains: the strategy (TensorFlow) or devices (JAX, PyTorch) and the
    seed. (The precision is the run config's: ``RuntimeConfig.precision``.)"""

    strategy: object  # a tf.distribute.Strategy, or None on JAX and PyTorch
    is_chief: bool
    input_pipelines: int
    seed: int
    replicas: int
    devices: tuple = ()  # JAX: the devices that share each batch; PyTorch: its one device


class Backend:
    """One Keras backend's way of running the launchers (subclasses: ``tensorflow_backend``,
    ``jax_backend``). A subclass sets :attr:`name` and :attr:`replicas_are` and implements
    :meth:`open`, :meth:`has_gpu`, :meth:`set_float32_math`, :meth:`float32_math`,
    :meth:`make_trainer`, :meth:`prepare_tfds`, :meth:`cifar_sources`,
    :meth:`evaluation_source`, :meth:`hardware`, :meth:`versions` and :meth:`where`;
    :meth:`refuse` and :meth:`agree_seed` where it has something to refuse or agree on."""

    name = ""
    replicas_are = "replicas"  # what the batch is split over, in the error naming them

    # ------------------------------------------------------------ the one way to start
    def start(
        self, cfg: RuntimeConfig, batch_sizes: dict[str, int], seed: int | None = None
    ) -> Runtime:
        """The runtime ``cfg`` describes: the flags this backend cannot take refused, its
        devices or strategy opened, the global batches (by flag name) checked to split evenly
        over them, and the seed (``seed``; None draws one) agreed and set.

        InputError for any of those. Call it once per process, before anything is built.
        """
        self.refuse(cfg, {})
        runtime = self.open(cfg)
        self.set_float32_math(cfg.precision == "true_float32")
        if cfg.precision == "mixed_bfloat16":
            warning = cpu.bf16_warning(has_gpu=self.has_gpu(runtime))
            if warning:
                print(warning, file=sys.stderr, flush=True)
        for flag, size in batch_sizes.items():
            if size % runtime.replicas:
                raise InputError(
                    f"--{flag}={size} is not divisible by the {runtime.replicas} "
                    f"{self.replicas_are}; use a multiple of {runtime.replicas}"
                )
        seed = random.randrange(2**31) if seed is None else seed
        return self.reseed(runtime, self.agree_seed(runtime, seed))

    @staticmethod
    def reseed(runtime: Runtime, seed: int) -> Runtime:
        """``runtime`` with ``seed``, set as the global seed of Keras, Python and numpy (of
        TensorFlow or JAX's Keras generator too): the one place the seed is set."""
        keras.utils.set_random_seed(seed)
        return dataclasses.replace(runtime, seed=seed)

    def refuse(self, cfg: RuntimeConfig, also: dict[str, object]) -> None:
        """InputError for a flag of ``cfg`` (or of ``also``, a launcher's own flags by name,
        None or False: not given) that means nothing on this backend. Here: none."""

    def refuse_tensorflow_only(
        self, cfg: RuntimeConfig, also: dict[str, object], strategies: tuple[str, ...], why: str
    ) -> None:
        """:meth:`refuse` for a backend that runs ``strategies`` and none of TensorFlow's own
        flags: a strategy outside them, then any TensorFlow-only flag given (of ``cfg``, then
        ``also``), in one line naming them; ``why``: why those flags mean nothing here."""
        if cfg.strategy not in strategies:
            runs = (
                f"trains on one device: --strategy={strategies[0]}"
                if len(strategies) == 1
                else f"runs --strategy={', '.join(strategies[:-1])} or {strategies[-1]}"
            )
            raise InputError(
                f"--strategy={cfg.strategy} needs TensorFlow (the {self.name} backend {runs}); "
                "run with KERAS_BACKEND=tensorflow"
            )
        given = [*cfg.tensorflow_only_given()] + [
            flag for flag, value in also.items() if value not in (None, False)
        ]
        if given:
            raise InputError(
                f"{', '.join('--' + flag for flag in given)} "
                f"{'only applies' if len(given) == 1 else 'only apply'} on the TensorFlow backend "
                f"({why}); drop {'it' if len(given) == 1 else 'them'} or run with "
                "KERAS_BACKEND=tensorflow"
            )

    def agree_seed(self, runtime: Runtime, seed: int) -> int:
        """The seed every process of the job uses (one process: ``seed``)."""
        return seed

    def end_now_in_job(self, status: int, error: BaseException | None = None) -> None:
        """In a job whose peers wait for this process, after a failure only it met (input
        only it read, a write only it made, ``error`` of its own: printed first): end it with
        ``status`` at once (never returns). Else nothing (one process, TensorFlow's jobs:
        the launcher exits as usual)."""

    def end_if_peer_lost(self, error: BaseException) -> None:
        """Where ``error`` says a peer of this process's job died or stopped answering: one
        line ``error: ...`` naming it, and the process ends with PEER_LOST_EXIT (never
        returns). Else nothing (one process: never)."""

    # ------------------------------------------------------------ what a backend supplies
    def open(self, cfg: RuntimeConfig) -> Runtime:
        """The devices or the strategy (seed 0 until :meth:`start` sets it)."""
        raise NotImplementedError

    def has_gpu(self, runtime: Runtime) -> bool:
        raise NotImplementedError

    def set_float32_math(self, true_float32: bool) -> None:
        """Float32 convolutions and matmuls in true float32 (``--precision=true_float32``), or as
        the library does by default on a GPU that has TF32 (``float32``: TF32 there)."""
        raise NotImplementedError

    def float32_math(self) -> str:
        """How this process computes float32 convolutions and matmuls, read back from the
        library: "true_float32", or "tf32" (TF32 where the GPU has it; a CPU computes float32
        either way)."""
        raise NotImplementedError

    def make_trainer(self, runtime: Runtime, build_model, cfg, model_dir: str, **kwargs):
        """The trainer of this backend on ``runtime``; ``build_model()`` builds the network
        (in the run's precision: the caller passes it to the builder). ``kwargs``: title,
        schedule, top5, time_budget_s, jit_compile (TensorFlow's XLA; refused elsewhere by
        :meth:`refuse`)."""
        raise NotImplementedError

    def prepare_data(self, data: DataConfig) -> None:
        """Fetch or check what :meth:`cifar_sources` will read, before anything is written
        (DataError, one line, where it cannot be read): a --data_path's two splits read now
        (``cifar_data.load_split``, kept for :meth:`cifar_sources`), their labels checked;
        without one, :meth:`prepare_tfds`."""
        if data.data_path is None:
            return self.prepare_tfds(data)
        for split in cifar_data.SPLITS:
            cifar_data.read_split(data, split)

    def prepare_tfds(self, data: DataConfig) -> None:
        """Download or verify the tensorflow-datasets copy of ``data.dataset``."""
        raise NotImplementedError

    def cifar_sources(self, data: DataConfig, train_batch: int, eval_batch: int, seed: int):
        """(training source, test source) of a CIFAR run, in the form this backend's trainer
        takes, for global batches ``train_batch`` and ``eval_batch`` (after
        :meth:`prepare_data`)."""
        raise NotImplementedError

    def evaluation_source(self, images, labels, batch: int):
        """What this backend's trainer evaluates from, for given uint8 images [N, 32, 32, 3]
        and int32 labels [N], in one process."""
        raise NotImplementedError

    def hardware(self, runtime: Runtime) -> dict:
        """What ``runtime`` computes on: ``devices``, the kind of each device it uses, and
        what else the backend knows (TensorFlow: oneDNN on or not, and why)."""
        raise NotImplementedError

    def versions(self) -> dict:
        """The versions of this backend's libraries, by name."""
        raise NotImplementedError

    def where(self, report: dict) -> str:
        """The banner's words for where the run computes (from :meth:`report`'s dict)."""
        raise NotImplementedError

    # ------------------------------------------------------------ the record
    def report(self, runtime: Runtime, strategy: str = "default") -> dict:
        """What config.json and the run banner say about where the run computes: the backend,
        the strategy, the devices, the CPU's vector extensions, the versions."""
        return {
            "backend": self.name,
            "strategy": strategy,
            "replicas": runtime.replicas,
            "input_pipelines": runtime.input_pipelines,
            **self.hardware(runtime),
            "cpu_isa": [name for name, present in cpu.isa().items() if present],
            "float32_math": self.float32_math(),
            "python": platform.python_version(),
            "keras": keras.__version__,
            **self.versions(),
        }
