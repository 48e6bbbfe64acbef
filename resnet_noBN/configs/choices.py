"""The plain choices of the runtime's flags, declared once: the launchers' flags, the backends and
the benchmark read them from here (no Keras, TensorFlow or JAX is imported)."""

from __future__ import annotations

# tf.distribute strategies (resnet_noBN/backends/distribute.py); the JAX backend runs the first
# three (multi_worker: resnet_noBN/backends/jax_job.py)
STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server")
JAX_STRATEGIES = ("default", "mirrored", "multi_worker")
# where multi_worker / parameter_server find their cluster: TF_CONFIG or SLURM's variables
RESOLVERS = ("tf_config", "slurm")
# --precision: float32 (the paper's; TF32 convolutions and matmuls on GPUs that have it, each
# library's default there), mixed_bfloat16 (bfloat16 compute, float32 weights and updates), or
# true_float32 (float32 everywhere: TF32 off on every backend, as on the paper's K40)
PRECISIONS = ("float32", "mixed_bfloat16", "true_float32")


def dtype_policy(precision: str) -> str:
    """The Keras dtype policy a network is built in under ``--precision``: the precision itself,
    but true_float32's, which is float32 (the backend, not the policy, turns TF32 off)."""
    return "float32" if precision == "true_float32" else precision


# launch/evaluate.py --first_red_pixel (resnet_noBN/trained/evaluation.py): the images as the run's
# reader makes them, or the pixel the 2016 CIFAR-100 reader leaked the label into replaced by
# another class's label or by the image's real pixel
FIRST_RED_PIXEL = ("as_read", "wrong_label", "true_pixel")

# launch/export.py --format (resnet_noBN/trained/model_file.py): one .keras file that every Keras
# backend loads (Model.save), or a TensorFlow SavedModel to serve (Model.export)
EXPORT_FORMATS = ("keras", "tf_saved_model")
