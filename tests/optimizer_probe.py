"""The named momentum optimizers' updates on the Keras backend this process runs
(``KERAS_BACKEND``): tests/test_training.py calls :func:`trajectories` in-process on TensorFlow
and runs this file on JAX and PyTorch, ``python tests/optimizer_probe.py`` with TensorFlow
unimportable, which prints its JSON.

Each of ``NAMES`` updates the same weights with the same gradients for ``STEPS`` steps of the
recipe's schedule (``trainers.recipe``: lr 0.05, momentum 0.9, a tenfold drop at step ``DROP``)
as that backend's trainer applies them (JAX: ``stateless_apply`` in ``jax.jit``, as
``trainers.jax_training``; TensorFlow and PyTorch: ``apply``), and once more stopped after
``RESUME_AT`` steps and carried on by a new optimizer given the first's variables by their
paths (what a checkpoint holds, ``trainers.one_process``).
"""

import json
import sys

import numpy as np

NAMES = ("momentum", "momentum_2016")
STEPS, DROP, RESUME_AT = 8, 4, 3  # updates; the first at the decayed rate; the resumed run's cut
LEARNING_RATE, MOMENTUM = 0.05, 0.9
SHAPES = ((3, 2), (5,))


def initial_weights() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.normal(size=shape).astype(np.float32) for shape in SHAPES]


def gradients() -> list[list[np.ndarray]]:
    """The gradients of each step, one per weight."""
    rng = np.random.default_rng(8)
    return [[rng.normal(size=shape).astype(np.float32) for shape in SHAPES] for _ in range(STEPS)]


def _optimizer(name: str, weights):
    from resnet_noBN.configs.recipe_config import TrainConfig
    from resnet_noBN.trainers.recipe import make_optimizer

    cfg = TrainConfig(
        learning_rate=LEARNING_RATE,
        momentum=MOMENTUM,
        lr_boundaries=(str(DROP),),
        train_steps=STEPS,
        optimizer=name,
    )
    cfg.validate()
    optimizer = make_optimizer(cfg)
    optimizer.build(weights)
    return optimizer


def _path(variable) -> str:
    """An optimizer variable's path without the optimizer's name (``sgd_2/...``: numbered by
    the optimizers made before in this process; a trainer's process makes one)."""
    return variable.path.split("/", 1)[1]


def _run(name: str, steps, state=None):
    """The weights after each of ``steps`` (lists of gradients) from the initial weights, or
    from ``state`` ({"weights": [...], "optimizer": {path: value}}); and the state at the end."""
    import keras

    start = state["weights"] if state else initial_weights()
    weights = [keras.Variable(w, name=f"weight{i}") for i, w in enumerate(start)]
    optimizer = _optimizer(name, weights)
    if state:
        for variable in optimizer.variables:
            variable.assign(state["optimizer"][_path(variable)])
    after = []
    if keras.backend.backend() == "jax":
        import jax

        apply = jax.jit(optimizer.stateless_apply)
        trainable = [w.value for w in weights]
        values = [v.value for v in optimizer.variables]
        for grads in steps:
            trainable, values = apply(values, grads, trainable)
            after.append([np.asarray(w) for w in trainable])
        for variable, value in zip([*weights, *optimizer.variables], [*trainable, *values]):
            variable.assign(value)
    else:
        for grads in steps:
            optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], weights)
            after.append([keras.ops.convert_to_numpy(w) for w in weights])
    paths = [_path(v) for v in optimizer.variables]
    assert len(set(paths)) == len(paths), paths  # a checkpoint names each by its path
    end = {
        "weights": [keras.ops.convert_to_numpy(w) for w in weights],
        "optimizer": {_path(v): keras.ops.convert_to_numpy(v) for v in optimizer.variables},
    }
    return after, end


def trajectories() -> dict:
    """{name: {"weights": [STEPS][weights] lists, "resumed": the same from a resumed run,
    "variables": the optimizer's variable count}} on this backend."""
    out = {}
    for name in NAMES:
        steps = gradients()
        after, _ = _run(name, steps)
        first, state = _run(name, steps[:RESUME_AT])
        rest, _ = _run(name, steps[RESUME_AT:], state)
        out[name] = {
            "weights": [[w.tolist() for w in ws] for ws in after],
            "resumed": [[w.tolist() for w in ws] for ws in first + rest],
            "variables": len(state["optimizer"]),
        }
    return out


if __name__ == "__main__":
    sys.modules["tensorflow"] = None  # any import of TensorFlow fails
    print(json.dumps(trajectories()))
