"""The runtime's flags of the training launchers (:class:`RuntimeConfig`): where and how a run
computes. Plain declarations: the backends (``resnet_noBN.backends``) act on them."""

from __future__ import annotations

import dataclasses

from resnet_noBN.configs.choices import PRECISIONS, RESOLVERS, STRATEGIES
from resnet_noBN.configs.flag_config import check_choices

TIME_BUDGET_ERROR = (
    "--time_budget_s={:g} needs a positive value and one process (--strategy=default or "
    "mirrored; multi_worker on JAX); a cluster job stops on the scheduler's SIGTERM"
)


SEED_LIMIT = 2**32  # a seed is 32-bit (numpy's MT19937, the backends' generators)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Where and how a training launcher runs: its runtime flags, each declared here once (its
    name, default, choices and help are the flag's; ``resnet_noBN.configs.flag_config``).
    ``"tensorflow_only"`` marks the flags that mean something on TensorFlow alone: another
    backend refuses them when given (:meth:`tensorflow_only_given`)."""

    strategy: str = dataclasses.field(
        default="default",
        metadata={
            "choices": STRATEGIES,
            "help": "tf.distribute strategy; see resnet_noBN/backends/distribute.py and the README "
            "(batch semantics). On JAX: default (one device), mirrored (every local device) or "
            "multi_worker (every device of every process of the job; resnet_noBN/backends/"
            "jax_job.py).",
        },
    )
    cluster_resolver: str = dataclasses.field(
        default="tf_config",
        metadata={
            "choices": RESOLVERS,
            "help": "Where multi_worker / parameter_server find the cluster: TF_CONFIG or the "
            "SLURM step's variables (on JAX too: the coordinator and the process ids).",
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
            "may_change": True,
            "choices": PRECISIONS,
            "help": "float32 (the paper's; a GPU may run its matmuls in TF32), mixed_bfloat16 "
            "(bfloat16 convolutions and activations; the residual stream, weights and updates "
            "float32), or true_float32 (float32 everywhere, TF32 off, as on the paper's K40).",
        },
    )
    jit_compile: bool = dataclasses.field(
        default=False,
        metadata={
            "tensorflow_only": True,
            "help": "Compile each replica's forward/backward with XLA.",
        },
    )
    intra_op_threads: int | None = dataclasses.field(
        default=None,
        metadata={
            "tensorflow_only": True,
            "help": "Threads within an op (default: all cores on a CPU-only host, else TF's).",
        },
    )
    inter_op_threads: int | None = dataclasses.field(
        default=None,
        metadata={
            "tensorflow_only": True,
            "help": "Ops run at once (default: 1 on a CPU-only host, else TF's).",
        },
    )
    deterministic: bool = dataclasses.field(
        default=False,
        metadata={
            "tensorflow_only": True,
            "help": "tf.config.experimental.enable_op_determinism(): bit-identical reruns on "
            "GPUs too (slower there; a CPU run is deterministic without it).",
        },
    )
    time_budget_s: float | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Stop after this many seconds of training: a checkpoint, then exit 3 (as on "
            "SIGTERM); rerunning the same command resumes. For machines lent by the hour. Not "
            "under parameter_server, nor multi_worker on TensorFlow (the workers would not stop "
            "together: use the scheduler's time limit, which sends SIGTERM); a JAX job stops "
            "at process 0's clock."
        },
    )

    peer_timeout_s: float = dataclasses.field(
        default=60.0,
        metadata={
            "may_change": True,
            "help": "multi_worker (TensorFlow, JAX), parameter_server: a task of the job that "
            "has not answered for this many seconds (hung, or its process or host lost) ends the "
            "others, each in one line naming it and exit 5 (a dead one's at once); rerunning the "
            "job resumes from its latest checkpoint. A busy task still answers: keep it above "
            "the longest freeze of a healthy host (swapping, a live migration).",
        },
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag and the fix) for an impossible runtime."""
        check_choices(self)
        if self.time_budget_s is not None and (
            self.time_budget_s <= 0 or self.strategy == "parameter_server"
        ):
            raise ValueError(TIME_BUDGET_ERROR.format(self.time_budget_s))
        if self.seed is not None and not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(
                f"--seed={self.seed} is outside 0 to {SEED_LIMIT - 1:,} (numpy's and the "
                "backends' seeds are 32-bit): give a seed in that range, or none to draw one"
            )
        if self.peer_timeout_s <= 0:
            raise ValueError(
                f"--peer_timeout_s={self.peer_timeout_s:g} must be positive: the seconds a silent "
                "peer is waited for"
            )

    def tensorflow_only_given(self) -> dict[str, object]:
        """The TensorFlow-only flags given a value other than their default, by name."""
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.metadata.get("tensorflow_only") and getattr(self, field.name) != field.default
        }
