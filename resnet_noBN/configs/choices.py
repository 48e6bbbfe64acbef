"""The plain choices of the runtime's flags, declared once: the launchers' flags, the backends and
the benchmark read them from here (no Keras, TensorFlow or JAX is imported)."""

from __future__ import annotations

# tf.distribute strategies (resnet_noBN/backends/distribute.py); the JAX backend runs the first
# three (multi_worker: resnet_noBN/backends/jax_job.py)
STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server")
JAX_STRATEGIES = ("default", "mirrored", "multi_worker")
# where multi_worker / parameter_server find their cluster: TF_CONFIG or SLURM's variables
RESOLVERS = ("tf_config", "slurm")
# Keras dtype policies: float32 (the paper's), or bfloat16 compute with float32 weights
PRECISIONS = ("float32", "mixed_bfloat16")
