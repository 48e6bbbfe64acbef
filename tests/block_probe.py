"""Run on the JAX or the PyTorch backend (KERAS_BACKEND) by tests/test_identity_init.py, in a
process where TensorFlow cannot be imported: ``python tests/block_probe.py OUT.npz``.

For each variant and stride of ``block_formulas``: the block built on this backend with its
weights away from their inits, its output and the gradients of Σ out·probe for each weight,
by this backend's own autodiff, written to OUT as ``VARIANT-STRIDE-output`` and
``VARIANT-STRIDE-LAYER``.
"""

import os
import sys

sys.modules["tensorflow"] = None  # any import of TensorFlow fails

import block_formulas as bf  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402


def output_and_grads(model, x, probe) -> tuple[np.ndarray, dict]:
    """The model's output on ``x`` and d(Σ out·probe)/d(weight), by layer name."""
    backend = keras.backend.backend()
    names = [bf.layer_of(v.path) for v in model.trainable_variables]
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        fixed = [v.value for v in model.non_trainable_variables]

        def loss(trainable):
            out, _ = model.stateless_call(trainable, fixed, jnp.asarray(x, jnp.float32))
            return jnp.sum(out * probe), out

        grads, out = jax.grad(loss, has_aux=True)([v.value for v in model.trainable_variables])
        return np.asarray(out), {n: np.asarray(g) for n, g in zip(names, grads)}
    import torch

    out = model(torch.tensor(x, dtype=torch.float32))
    (out * torch.tensor(probe, dtype=torch.float32)).sum().backward()
    grads = {n: v.value.grad.numpy() for n, v in zip(names, model.trainable_variables)}
    return out.detach().numpy(), grads


result = {}
for variant in bf.VARIANTS:
    for stride in bf.SHAPES:
        model = bf.build(variant, stride)
        bf.set_weights(model, bf.params(variant, stride))
        out, grads = output_and_grads(model, *bf.inputs(stride))
        result[f"{variant}-{stride}-output"] = out
        result.update({f"{variant}-{stride}-{name}": g for name, g in grads.items()})
np.savez(sys.argv[1], backend=os.environ["KERAS_BACKEND"], **result)
