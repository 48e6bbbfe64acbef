"""The TensorFlow backend: every ``--strategy`` (default, mirrored, multi_worker,
parameter_server; SLURM and Kubernetes clusters through ``backends.distribute``), tf.data input,
``trainers.tensorflow_training``'s trainers, every launcher."""

from __future__ import annotations

import tensorflow as tf

from resnet_noBN.backends import distribute, speed
from resnet_noBN.backends.base import Backend, Runtime
from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import TIME_BUDGET_ERROR, RuntimeConfig
from resnet_noBN.host import cpu, peers
from resnet_noBN.trainers.tensorflow_training import ParameterServerTrainer, Trainer


class TensorFlowBackend(Backend):
    name = "tensorflow"

    def refuse(self, cfg: RuntimeConfig, also: dict[str, object]) -> None:
        """--time_budget_s under multi_worker: each worker would stop at its own clock."""
        if cfg.time_budget_s is not None and cfg.strategy == "multi_worker":
            raise InputError(TIME_BUDGET_ERROR.format(cfg.time_budget_s))

    def open(self, cfg: RuntimeConfig) -> Runtime:
        """Threads (None: :func:`speed.default_threads`'), then the strategy (before any other
        TensorFlow op), then TF's op determinism if asked (bit-identical reruns on GPUs too).

        InputError for a bad cluster. A worker or parameter server of a parameter-server job
        never returns: it serves the chief.
        """
        default_intra, default_inter = speed.default_threads()
        speed.configure(
            default_intra if cfg.intra_op_threads is None else cfg.intra_op_threads,
            default_inter if cfg.inter_op_threads is None else cfg.inter_op_threads,
        )
        try:
            strategy, resolver = distribute.make_strategy(
                cfg.strategy, cfg.cluster_resolver, cfg.peer_timeout_s
            )
        except distribute.ClusterError as e:
            raise InputError(str(e)) from None
        if cfg.deterministic:
            tf.config.experimental.enable_op_determinism()
        return Runtime(
            strategy,
            distribute.is_chief(resolver),
            distribute.input_pipelines(strategy, resolver),
            seed=0,
            replicas=strategy.num_replicas_in_sync,
        )

    def agree_seed(self, runtime: Runtime, seed: int) -> int:
        """The chief's seed on every worker of a multi-worker job."""
        return distribute.chief_seed(runtime.strategy, seed, runtime.is_chief)

    def end_if_peer_lost(self, error: BaseException) -> None:
        """A lost peer of a multi-worker job (``host.peers``): one line, exit 5."""
        line = peers.lost_peer(error)
        if line is not None:
            peers.end(line)

    def has_gpu(self, runtime: Runtime) -> bool:
        return bool(tf.config.list_physical_devices("GPU"))

    def set_float32_math(self, true_float32: bool) -> None:
        tf.config.experimental.enable_tensor_float_32_execution(not true_float32)

    def float32_math(self) -> str:
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        return "tf32" if tf32 else "true_float32"

    def make_trainer(self, runtime: Runtime, build_model, cfg, model_dir: str, **kwargs):
        """``tensorflow_training.Trainer`` under ``runtime``'s strategy
        (``ParameterServerTrainer`` under parameter servers); ``jit_compile``: XLA."""
        parameter_server = distribute.is_parameter_server(runtime.strategy)
        trainer = ParameterServerTrainer if parameter_server else Trainer
        return trainer(
            runtime.strategy, build_model, cfg, model_dir, is_chief=runtime.is_chief, **kwargs
        )

    def prepare_tfds(self, data: DataConfig) -> None:
        """Download or verify the tfds data set (TF ops: after :meth:`start`)."""
        from resnet_noBN.datasets import cifar_input

        cifar_input.prepare_tfds(data.dataset, data.data_dir)

    def cifar_sources(self, data: DataConfig, train_batch: int, eval_batch: int, seed: int):
        """The ``dataset_fn``s of ``cifar_input.split_fns``."""
        from resnet_noBN.datasets import cifar_input  # tensorflow-datasets: only where read

        fn = cifar_input.split_fns(
            data.dataset,
            data_path=data.data_path,
            data_dir=data.data_dir,
            pad=data.pad,
            seed=seed,
            layout=data.cifar100_layout,
            jpeg_quality=data.jpeg_quality,
        )
        return fn("train", train_batch), fn("test", eval_batch)

    def evaluation_source(self, images, labels, batch: int):
        from resnet_noBN.datasets import cifar_input

        return lambda input_context: cifar_input.evaluation_dataset(images, labels, batch)

    def hardware(self, runtime: Runtime) -> dict:
        gpus = tf.config.list_physical_devices("GPU")
        kinds = [
            tf.config.experimental.get_device_details(g).get("device_name", "GPU") for g in gpus
        ]
        return {"devices": kinds or ["CPU"], **cpu.runtime_report()}

    def versions(self) -> dict:
        return {"tensorflow": tf.__version__}

    def where(self, report: dict) -> str:
        return f"oneDNN {'on' if report['onednn'] else 'off'}: {report['onednn_reason']}"
