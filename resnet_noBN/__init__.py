"""Hardt & Ma, "Identity Matters in Deep Learning" (ICLR 2017), in TensorFlow 2 / Keras 3.

Modules:
  model        the paper's all-convolutional residual network (Table 1).
  cifar_input  CIFAR-10/100 input pipeline (tfds, the official binary files, an image folder).
  training     the strategy-aware custom training loop.
  theory       Sections 2 and 3 of the paper, executable.
  cpu          the CPU's extensions; oneDNN on by default on x86: every entry point calls
               ``cpu.default_onednn()`` first, before anything loads TensorFlow.
"""
