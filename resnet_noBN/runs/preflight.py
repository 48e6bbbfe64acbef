"""What ``launch/cifar.py`` checks of its run before its backend loads (TensorFlow's import takes
seconds of CPU, JAX's and PyTorch's as long): the cluster a multi-process strategy joins, the
--data_path's files and (``--check_only``, for launch/study.py) what --model_dir holds, each
refused in one line (``configs.errors``). The backend checks the same as it starts
(``runs.setup.start``: the runtime, then the data), so a caller that skips these refuses the
same input with the same line, only later. Plain file-system and environment reads: no
backend."""

from __future__ import annotations

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.run_config import RunConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.host.cluster import ClusterError, parse_tf_config
from resnet_noBN.runs import run_config

MULTI_PROCESS = ("multi_worker", "parameter_server")  # the strategies that join a cluster


def check(config: RunConfig) -> None:
    """InputError for a ``TF_CONFIG`` that describes no cluster the strategy can join
    (``host.cluster.parse_tf_config``), DataError for a CIFAR --data_path that holds no copy of
    the data set (``datasets.cifar_data.check_data_path``); one line each, naming the fix."""
    runtime = config.runtime
    if runtime.strategy in MULTI_PROCESS and runtime.cluster_resolver == "tf_config":
        try:
            parse_tf_config(runtime.strategy)
        except ClusterError as e:
            raise InputError(str(e)) from None
    if config.launcher == "cifar" and config.data.data_path is not None:
        cifar_data.check_data_path(config.data.dataset, config.data.data_path)


def check_folder(config: RunConfig, model_dir: str) -> None:
    """InputError (one line) where ``model_dir`` holds a run that ``config`` cannot resume
    (``run_config.checked_record``, as the run's set-up checks it, with the Keras backend
    chosen and the seed the run would take); reads the folder, writes nothing."""
    seed = run_config.resumed_seed(config, model_dir)
    resumed = run_config.resumed(config, model_dir)
    run_config.checked_record(resumed, model_dir, registry.check_chosen(), seed)
