"""One run of the claims' sweep (``runs.claims``, arXiv:1611.04231 Section 4): an arm's seed
trained on the sweep's runtime, its result written where the summary reads it. Loads the
backend; ``launch/claims.py`` imports it once its flags hold."""

from __future__ import annotations

import keras

from resnet_noBN.backends import registry
from resnet_noBN.backends.base import Runtime
from resnet_noBN.configs.errors import TrainingDiverged
from resnet_noBN.runs import setup
from resnet_noBN.runs.arm_runs import write_result
from resnet_noBN.runs.claims import Arm
from resnet_noBN.runs.run_config import RunConfig


def train_one(
    arm: Arm, seed: int, config: RunConfig, model_dir: str, runtime: Runtime, print_fn=print
) -> dict:
    """Train one (arm, seed) of run config ``config`` to the end on ``runtime`` (started once,
    reseeded here), resuming from ``model_dir``'s checkpoint; writes and returns its result. A
    run whose loss stops being finite is a result (``diverged``), not an error: its curves up to
    that point stay in ``model_dir``."""
    keras.backend.clear_session()
    runtime = registry.current().reseed(runtime, seed)
    trainer = setup.make_trainer(config, runtime, model_dir, title=f"{arm.name}, seed {seed}")
    sources = setup.Inputs().sources(config, runtime)
    try:
        result = {
            **trainer.train(*sources, print_fn=print_fn),
            "diverged": False,
        }
    except TrainingDiverged as e:
        print_fn(f"diverged: {e}")
        result = {"final_step": trainer.step, "diverged": True, "why": str(e)}
    result = {"arm": arm.name, "seed": seed, **result}
    write_result(model_dir, result)
    return result


# ------------------------------------------------------------------------------ summary
