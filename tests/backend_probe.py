"""Run on the JAX or the PyTorch backend (KERAS_BACKEND) by
tests/test_tensorflow_free_backends.py, in a process where TensorFlow cannot be imported:
``python tests/backend_probe.py IN.npz OUT.npz``.

IN holds the inputs the TensorFlow side used; OUT gets what this backend computes from them:
the logits of each weights file, the losses of steps of this backend's trainer from the
``trained`` networks' weights on the stream's batches, the dtypes of a residual add's and a
convolution's output under mixed_bfloat16, the stream's uint8 batches, the parameter and
layer counts of the named experiments' networks, and how the backend computes float32 after a
start in each precision (read back from the library).
"""

import json
import os
import sys

sys.modules["tensorflow"] = None  # any import of TensorFlow fails

import keras  # noqa: E402
import numpy as np  # noqa: E402

from resnet_noBN.backends import registry  # noqa: E402
from resnet_noBN.configs.network_config import ModelConfig  # noqa: E402
from resnet_noBN.configs.recipe_config import TrainConfig  # noqa: E402
from resnet_noBN.configs.runtime_config import RuntimeConfig  # noqa: E402
from resnet_noBN.datasets import stream  # noqa: E402
from resnet_noBN.datasets.stream import TrainSplit  # noqa: E402
from resnet_noBN.models.networks import build_cifar_model, param_counts  # noqa: E402
from resnet_noBN.runs import run_config  # noqa: E402

given = np.load(sys.argv[1])
spec = json.loads(str(given["spec"]))
backend = registry.current()
assert backend.name == spec["backend"], backend.name
runtime = backend.open(RuntimeConfig())
out = {}
for name in spec["models"]:
    model_cfg = ModelConfig.preset(name)
    weights = os.path.join(spec["dir"], f"{name}.weights.h5")
    model = build_cifar_model(model_cfg)
    model.load_weights(weights)
    out[f"logits_{name}"] = keras.ops.convert_to_numpy(model(given["inputs"], training=False))
    if name not in spec["trained"]:
        continue

    def build(model_cfg=model_cfg, weights=weights):
        net = build_cifar_model(model_cfg)
        net.load_weights(weights)
        return net

    model_dir = os.path.join(spec["dir"], f"{backend.name}_{name}")
    trainer = backend.make_trainer(runtime, build, TrainConfig(**spec["train"]), model_dir)
    data = trainer.start(TrainSplit(given["images"], given["labels"], spec["seed"]), 0)
    out[f"losses_{name}"] = np.array([trainer.run_steps(data, 1)["loss"] for _ in range(3)])
mixed = build_cifar_model(ModelConfig.preset("small"), "mixed_bfloat16")
probe = keras.Model(
    mixed.input, [mixed.get_layer(f"stage1_unit0_{part}").output for part in ("add", "conv2")]
)
out["mixed_dtypes"] = [keras.backend.standardize_dtype(t.dtype) for t in probe(given["inputs"])]
for seed, step in spec["batches"]:
    images, labels = stream.augmented_batch(
        keras.ops.convert_to_tensor(given["images"]),
        keras.ops.convert_to_tensor(given["labels"]),
        seed,
        step,
        spec["train"]["batch_size"],
        2,
    )
    out[f"batch_{seed}_{step}"] = keras.ops.convert_to_numpy(images)
    out[f"labels_{seed}_{step}"] = keras.ops.convert_to_numpy(labels)
for name in spec["experiments"]:
    # Shapes only: the variables are declared and none is drawn (on JAX an initialiser
    # compiles once per shape: the seven counted in 0.75 CPU-s alone, against 13.4 drawn).
    # They stay undrawn only because nothing below opens a StatelessScope, whose exit would
    # draw every variable left so.
    with keras.StatelessScope(initialize_variables=False):
        net = build_cifar_model(run_config.build(name).network)
    out[f"counts_{name}"] = [*param_counts(net).values(), len(net.layers)]
for precision in ("true_float32", "float32"):
    backend.start(RuntimeConfig(precision=precision), {"batch_size": 1}, 0)
    out[f"float32_math_{precision}"] = backend.float32_math()
np.savez(sys.argv[2], **out)
