"""Declarations, the lowest layer of the package: plain constants and named settings that every
other part reads and that import nothing of Keras, TensorFlow or JAX (the benchmark and its
PyTorch twin read them before any backend loads). Modules here import only the standard library,
absl's flags and each other."""
