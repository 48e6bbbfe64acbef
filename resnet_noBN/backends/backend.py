"""Which Keras backend runs the launchers, and a run's runtime on it. No TensorFlow here.

==============  ===============================================================================
TensorFlow      every ``--strategy`` (default, mirrored, multi_worker, parameter_server), SLURM
                and Kubernetes clusters: ``backends.distribute`` and ``training.Trainer``.
JAX             one host: ``--strategy=default`` (one device) or ``mirrored`` (every local
                device, each batch split between them): ``jax_training.JaxTrainer``.
==============  ===============================================================================

Keras picks the backend from ``KERAS_BACKEND`` (or ``~/.keras/keras.json``) when it is first
imported; ``KERAS_BACKEND=jax python launch/cifar.py ...`` imports nothing of TensorFlow.
"""

from __future__ import annotations

import dataclasses
import random
import sys

import keras

from resnet_noBN.backends import cpu
from resnet_noBN.configs.choices import JAX_STRATEGIES, PRECISIONS, RESOLVERS, STRATEGIES
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.flag_config import check_choices


def name() -> str:
    """The Keras backend in use: "tensorflow" or "jax" (others are refused by the launchers)."""
    return keras.backend.backend()


def is_tensorflow() -> bool:
    return name() == "tensorflow"


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Where and how a training launcher runs: its runtime flags, each declared here once (its
    name, default, choices and help are the flag's; ``resnet_noBN.configs.flag_config``)."""

    strategy: str = dataclasses.field(
        default="default",
        metadata={
            "choices": STRATEGIES,
            "help": "tf.distribute strategy; see resnet_noBN/backends/distribute.py and the README "
            "(batch semantics). On JAX: default (one device) or mirrored (every local device).",
        },
    )
    cluster_resolver: str = dataclasses.field(
        default="tf_config",
        metadata={
            "choices": RESOLVERS,
            "help": "Where multi_worker / parameter_server find the cluster: TF_CONFIG or the "
            "SLURM step's variables.",
        },
    )
    seed: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Seed of the weights, data order and augmentation (default: the seed of the "
            "run being resumed, recorded in its config.json, else drawn at random; printed "
            "either way)."
        },
    )
    precision: str = dataclasses.field(
        default="float32",
        metadata={
            "choices": PRECISIONS,
            "help": "mixed_bfloat16: bfloat16 compute, float32 weights and updates.",
        },
    )
    jit_compile: bool = dataclasses.field(
        default=False, metadata={"help": "Compile each replica's forward/backward with XLA."}
    )
    intra_op_threads: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Threads within an op (default: all cores on a CPU-only host, else TF's)."
        },
    )
    inter_op_threads: int | None = dataclasses.field(
        default=None,
        metadata={"help": "Ops run at once (default: 1 on a CPU-only host, else TF's)."},
    )
    deterministic: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "tf.config.experimental.enable_op_determinism(): bit-identical reruns on "
            "GPUs too (slower there; a CPU run is deterministic without it)."
        },
    )
    time_budget_s: float | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Stop after this many seconds of training: a checkpoint, then exit 3 (as on "
            "SIGTERM); rerunning the same command resumes. For machines lent by the hour. Not "
            "under multi_worker or parameter_server (the workers would not stop together: use "
            "the scheduler's time limit, which sends SIGTERM)."
        },
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag and the fix) for an impossible runtime."""
        check_choices(self)
        if self.time_budget_s is not None and (
            self.time_budget_s <= 0 or self.strategy in ("multi_worker", "parameter_server")
        ):
            raise ValueError(
                f"--time_budget_s={self.time_budget_s:g} needs a positive value and one process "
                "(--strategy=default or mirrored); a cluster job stops on the scheduler's SIGTERM"
            )


@dataclasses.dataclass(frozen=True)
class Runtime:
    """Where a launcher trains: the strategy (TensorFlow) or devices (JAX), and the seed."""

    strategy: object  # a tf.distribute.Strategy, or None on JAX
    is_chief: bool
    input_pipelines: int
    seed: int
    replicas: int
    devices: tuple = ()  # JAX: the devices that share each batch


def set_precision(precision: str, has_gpu: bool) -> None:
    """The Keras dtype policy (``mixed_bfloat16``: bfloat16 compute, float32 weights), with a
    warning line where the CPU must emulate bfloat16."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"--precision={precision} is unknown; choose one of {', '.join(PRECISIONS)}"
        )
    if precision == "mixed_bfloat16":
        warning = cpu.bf16_warning(has_gpu=has_gpu)
        if warning:
            print(warning, file=sys.stderr, flush=True)
    keras.mixed_precision.set_global_policy(precision)


def start_jax_runtime(
    strategy: str,
    *,
    batch_sizes: dict[str, int],
    seed: int | None,
    precision: str,
    tensorflow_only: dict[str, object],
) -> Runtime:
    """The JAX runtime: precision, devices, seed.

    ``tensorflow_only``: the flags that mean something on TensorFlow alone, by name, with the
    value given (None or False: not given); any given one is an InputError naming it, as is a
    strategy other than default/mirrored or a batch the devices cannot split evenly.
    """
    import jax

    if strategy not in JAX_STRATEGIES:
        raise InputError(
            f"--strategy={strategy} needs TensorFlow (the JAX backend trains on one host: "
            f"--strategy={' or '.join(JAX_STRATEGIES)}); run with KERAS_BACKEND=tensorflow"
        )
    given = [flag for flag, value in tensorflow_only.items() if value not in (None, False)]
    if given:
        raise InputError(
            f"{', '.join('--' + flag for flag in given)} only apply on the TensorFlow backend "
            "(JAX compiles every step with XLA and sets its own threads); drop "
            f"{'it' if len(given) == 1 else 'them'} or run with KERAS_BACKEND=tensorflow"
        )
    devices = jax.local_devices() if strategy == "mirrored" else jax.local_devices()[:1]
    for flag, size in batch_sizes.items():
        if size % len(devices):
            raise InputError(
                f"--{flag}={size} is not divisible by the {len(devices)} devices; use a "
                f"multiple of {len(devices)}"
            )
    set_precision(precision, has_gpu=devices[0].platform == "gpu")
    seed = random.randrange(2**31) if seed is None else seed
    keras.utils.set_random_seed(seed)
    return Runtime(None, True, 1, seed, len(devices), tuple(devices))


def report(runtime: Runtime) -> dict:
    """What config.json and the run banner say about where the run computes."""
    if is_tensorflow():
        return {"backend": "tensorflow", **cpu.runtime_report()}
    return {
        "backend": "jax",
        "devices": [str(d.device_kind) for d in runtime.devices],
        "cpu_isa": [isa for isa, present in cpu.isa().items() if present],
    }


def local_runtime(seed: int) -> Runtime:
    """One process on one device (TensorFlow's default strategy, or JAX's first device)."""
    if is_tensorflow():
        import tensorflow as tf

        return Runtime(tf.distribute.get_strategy(), True, 1, seed, 1)
    import jax

    return Runtime(None, True, 1, seed, 1, tuple(jax.local_devices()[:1]))


def make_trainer(runtime: Runtime, build_model, cfg, model_dir: str, jit_compile=False, **kwargs):
    """The trainer of ``runtime``'s backend: ``training.trainer_for`` its strategy (TensorFlow;
    ``jit_compile``: XLA) or ``jax_training.JaxTrainer`` on its devices. ``kwargs``: title,
    schedule, top5, time_budget_s."""
    if is_tensorflow():
        from resnet_noBN.trainers.training import trainer_for

        return trainer_for(
            runtime.strategy,
            build_model,
            cfg,
            model_dir,
            is_chief=runtime.is_chief,
            jit_compile=jit_compile,
            **kwargs,
        )
    from resnet_noBN.trainers.jax_training import JaxTrainer

    return JaxTrainer(build_model, cfg, model_dir, devices=list(runtime.devices), **kwargs)
