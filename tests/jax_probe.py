"""Run on the JAX backend by tests/test_jax_backend.py, in a process where TensorFlow cannot be
imported: ``python tests/jax_probe.py IN.npz OUT.npz``.

IN holds the inputs the TensorFlow side used; OUT gets what the JAX side computes from them:
the logits of each weights file, the losses of steps of the JAX trainer from those weights on
the stream's batches, and the stream's uint8 batches.
"""

import json
import os
import sys

sys.modules["tensorflow"] = None  # any import of TensorFlow fails

import keras  # noqa: E402
import numpy as np  # noqa: E402

from resnet_noBN.datasets import stream  # noqa: E402
from resnet_noBN.datasets.stream import TrainSplit  # noqa: E402
from resnet_noBN.models.model import ModelConfig, build_cifar_model  # noqa: E402
from resnet_noBN.trainers.jax_training import JaxTrainer  # noqa: E402
from resnet_noBN.trainers.recipe import TrainConfig  # noqa: E402

assert keras.backend.backend() == "jax"
given = np.load(sys.argv[1])
spec = json.loads(str(given["spec"]))
out = {}
for name in spec["models"]:
    model_cfg = ModelConfig.preset(name)
    weights = os.path.join(spec["dir"], f"{name}.weights.h5")
    model = build_cifar_model(model_cfg)
    model.load_weights(weights)
    out[f"logits_{name}"] = keras.ops.convert_to_numpy(model(given["inputs"], training=False))

    def build(model_cfg=model_cfg, weights=weights):
        net = build_cifar_model(model_cfg)
        net.load_weights(weights)
        return net

    trainer = JaxTrainer(build, TrainConfig(**spec["train"]), os.path.join(spec["dir"], name))
    data = trainer.start(TrainSplit(given["images"], given["labels"], spec["seed"]), 0)
    out[f"losses_{name}"] = np.array([trainer.run_steps(data, 1)[0] for _ in range(3)])
for seed, step in spec["batches"]:
    images, labels = stream.augmented_batch(
        given["images"], given["labels"], seed, step, spec["train"]["batch_size"], 2
    )
    out[f"batch_{seed}_{step}"] = keras.ops.convert_to_numpy(images)
    out[f"labels_{seed}_{step}"] = keras.ops.convert_to_numpy(labels)
np.savez(sys.argv[2], **out)
