"""The PyTorch training loop: :class:`trainers.loop.TrainLoop` on one device (the CPU, or the
CUDA GPU Keras' torch backend places its tensors on), with Keras 3's torch backend and no
TensorFlow.

The same network (:mod:`models.networks`), recipe (:mod:`trainers.recipe`) and training stream
(:mod:`resnet_noBN.datasets.stream`) as the TensorFlow and JAX loops; how they run here:

* **Eager steps.** Each step is the forward pass, the paper's loss plus weight decay
  (``recipe.objective``, ``model.weight_decay_loss``), ``loss.backward()`` and the Keras
  optimizer's ``apply`` on the gradients, as Keras' own torch ``train_step``; a call runs its
  steps back to back and the host reads the call's totals once, at its end.
* **Batches made on the device.** The uint8 training split is copied to the device once; each
  step gathers, crops, flips and standardises its batch there (``stream.training_batch``).
* **Checkpoints and preemption**: :class:`trainers.one_process.OneProcessTrainer`'s
  (``ckpt-<step>.npz`` and ``checkpoints.json``; the Keras variables are the weights trained).
"""

from __future__ import annotations

import numpy as np
import torch
from keras import ops

from resnet_noBN.datasets import stream
from resnet_noBN.models.networks import decayed_weights, weight_decay_loss
from resnet_noBN.trainers import health
from resnet_noBN.trainers.one_process import OneProcessTrainer
from resnet_noBN.trainers.recipe import objective, top_classes


class TorchTrainer(OneProcessTrainer):
    """:class:`OneProcessTrainer` with eager steps on Keras' torch device."""

    def __init__(self, build_model, cfg, model_dir: str, **kwargs):
        super().__init__(build_model, cfg, model_dir, **kwargs)
        self._decayed = decayed_weights(self.model)

    def _train_step(self, images, labels, seed: int, step: int, pad: int):
        """One update on the batch of ``step`` (made here, from the uint8 split on the device):
        its ``health.step_metrics``, tensors on the device."""
        batch = self.cfg.batch_size
        x, y = stream.training_batch(images, labels, seed, step, batch, pad)
        logits = self.model(x, training=True)
        decay = weight_decay_loss(self._decayed, self.cfg.weight_decay)
        loss, parts = objective(logits, y, decay, self.cfg)
        self.model.zero_grad(set_to_none=True)
        loss.backward()
        variables = self.model.trainable_variables
        grads = [v.value.grad for v in variables]
        with torch.no_grad():
            norm_sq = health.grad_norm_sq(grads)
            self.optimizer.apply(grads, variables)
            parts = {name: value.detach() for name, value in parts.items()}
            return health.step_metrics(loss.detach(), parts, batch, norm_sq)

    # ----------------------------------------------------------------- the backend's part
    def place(self, source) -> dict:
        return {
            "images": ops.convert_to_tensor(source.images),
            "labels": ops.convert_to_tensor(source.labels),
            "seed": source.seed,
            "pad": source.pad,
        }

    def run_steps(self, data: dict, num_steps: int) -> dict:
        """``num_steps`` eager steps back to back; the host reads their metrics once."""
        totals = health.zeros()
        for i in range(num_steps):
            step = self._train_step(
                data["images"], data["labels"], data["seed"], self._step + i, data["pad"]
            )
            totals = health.add_step(totals, step)
        self._step += num_steps
        return health.to_numpy(totals)

    def eval_batches(self, eval_source):
        images, labels = eval_source
        size = self.cfg.eval_batch_size
        with torch.no_grad():
            for begin in range(0, len(images), size):
                x = stream.standardize(ops.convert_to_tensor(images[begin : begin + size]))
                top = top_classes(self.model(x, training=False), self.top5)
                end = min(begin + size, len(images))
                yield labels[begin:end], ops.convert_to_numpy(top), np.arange(begin, end)
