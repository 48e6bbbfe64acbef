"""The run's config, one section a field: :class:`RunConfig` nests the four configs of a run,
each declared in this package with its flags, and names the experiment it was built from
(``configs.experiments``):

    network   the architecture: ``network_config.ModelConfig`` (CIFAR, Table 1 of
              arXiv:1611.04231 by default) or ``ImageNetConfig``
    data      what is read: ``data_config.DataConfig`` (CIFAR) or ``ImageNetData``
    recipe    how it is trained: ``recipe_config.TrainConfig`` (ImageNet: ``ImageNetRecipe``)
    runtime   where and how it computes: ``runtime_config.RuntimeConfig`` (the one place the
              precision lives)

``runs.run_config`` builds one from an experiment and the flags, reads one back from a run's
``config.json`` and writes it there (``record_of``: the sections, the data's counts, the backend,
the seed, the host).
"""

from __future__ import annotations

import dataclasses

from resnet_noBN.configs.data_config import DataConfig, ImageNetData
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.flag_config import validated
from resnet_noBN.configs.network_config import ImageNetConfig, NetworkConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.configs.runtime_config import RuntimeConfig


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole run: its network, data, recipe and runtime, and the experiment it came from."""

    network: NetworkConfig
    data: DataConfig | ImageNetData
    recipe: TrainConfig
    runtime: RuntimeConfig = RuntimeConfig()
    experiment: str | None = None

    @property
    def launcher(self) -> str:
        return "imagenet" if isinstance(self.network, ImageNetConfig) else "cifar"

    def replace(self, **sections) -> RunConfig:
        """This run with whole sections replaced (``recipe=...``), validated."""
        return validated_run(dataclasses.replace(self, **sections))

    def changed(self, section: str, **fields) -> RunConfig:
        """This run with ``fields`` of one section changed, validated (InputError)."""
        return self.replace(**{section: dataclasses.replace(getattr(self, section), **fields)})

    def sections(self) -> dict:
        """The run config alone, as ``config.json`` holds it (the schedule's boundaries as this
        run's steps), without the data's counts, the backend, the seed or the host (those
        ``runs.run_config.record_of`` adds)."""
        recipe = {
            **dataclasses.asdict(self.recipe),
            "lr_boundaries": list(self.recipe.boundary_steps()),
            # the objective's r * sum ||W||^2 / 2 puts r * W on the gradient (the 2016 code's
            # 0.0002 * tf.nn.l2_loss(W) is r = 2e-4)
            "weight_decay_gradient": f"{self.recipe.weight_decay:g} * W",
        }
        return {
            "experiment": self.experiment,
            "network": dataclasses.asdict(self.network),
            "recipe": recipe,
            "data": dataclasses.asdict(self.data),
            "runtime": dataclasses.asdict(self.runtime),
        }


def validated_run(run: RunConfig) -> RunConfig:
    """``run`` with every section validated (InputError, one line, naming the flag)."""
    for section in (run.network, run.data, run.recipe, run.runtime):
        validated(section)
    if run.network.block == "fixup" and run.recipe.optimizer == "adam":
        raise InputError(
            "--block=fixup gives its scalars a tenth of the rate by scaling their gradient, "
            "which Adam's update ignores: use a momentum --optimizer (momentum_2016, momentum, "
            "nesterov) or another --block"
        )
    return run
