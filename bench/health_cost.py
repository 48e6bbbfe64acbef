"""What logging the run's health costs a training step (resnet_noBN/trainers/health.py: the
global gradient norm of every step, the largest |logit|, the weight norm at each record), on the
TensorFlow trainer, in one process: the launchers' trainer against the same trainer with the
gradient norm and the weight norm taken out, in calls of --chunk steps, A B A B..., the ratio
taken pair by pair (the machine's speed may drift between pairs, not within one).

    python bench/health_cost.py                        # the quarter network, batch 128
    python bench/health_cost.py --model=small --pairs=3 --chunk=5

Prints a line per pair and, last, one line of JSON: the median ratio with health / without.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf

from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.models.networks import build_cifar_model
from resnet_noBN.trainers.tensorflow_training import Trainer


class WithoutHealth(Trainer):
    """The launchers' trainer without the gradient norm's sum of squares (and its all-reduce)
    and without the weight norm: what the health costs is the difference."""

    def _grad_norm_sq(self, grads):
        return tf.zeros([])

    def weight_norm(self) -> float:
        return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="quarter", help="a presets.MODELS name")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--chunk", type=int, default=10, help="steps per timed call")
    p.add_argument("--pairs", type=int, default=6)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch_size, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, 10, args.batch_size).astype(np.int32)
    cfg = TrainConfig(batch_size=args.batch_size)
    strategy = tf.distribute.get_strategy()

    def batches(context, start_step=0):
        return tf.data.Dataset.from_tensors((images, labels)).repeat()

    trainers = {}
    scratch = tempfile.TemporaryDirectory(prefix="health_cost-")  # removed as the process ends
    for name, cls in (("with", Trainer), ("without", WithoutHealth)):
        trainer = cls(
            strategy,
            lambda: build_cifar_model(ModelConfig.preset(args.model)),
            cfg,
            f"{scratch.name}/{name}",
            is_chief=False,
        )
        iterator = trainer.start(batches, 0)
        trainer.run_steps(iterator, args.chunk)  # trace, compile, warm up
        trainers[name] = trainer, iterator

    def call(name: str) -> float:
        trainer, iterator = trainers[name]
        t0 = time.perf_counter()
        trainer.run_steps(iterator, args.chunk)
        trainer.weight_norm()  # once per call, as at each progress record
        return (time.perf_counter() - t0) / args.chunk

    ratios = []
    for i in range(args.pairs):
        with_s, without_s = call("with"), call("without")
        ratios.append(with_s / without_s)
        print(
            f"pair {i + 1}: {with_s:.4f} s/step with health, {without_s:.4f} without: "
            f"x{ratios[-1]:.4f}",
            flush=True,
        )
    print(
        json.dumps(
            {
                "model": args.model,
                "batch_size": args.batch_size,
                "chunk": args.chunk,
                "ratios": [round(r, 4) for r in ratios],
                "median_ratio": round(statistics.median(ratios), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
