"""The residual blocks (arXiv:1611.04231, Section 4), chosen by ``--block``: each a body
function registered in :data:`BLOCKS`, joined to its shortcut by :func:`residual_block`.

* ``_residual`` of the original ``resnet/resnet_model.py`` is :func:`residual_block` here, with
  batch norm and the pre-activation ReLU removed: ``x + C2(ReLU(C1(x)))`` (Section 4), the body
  :func:`hardt_ma_body` (``--block=hardt_ma``, the paper's).
* ``--block=preactivation`` is the original unit (:func:`preactivation_body`):
  ``x + C2(σ(N(C1(σ(N(x))))))``, N what ``--norm`` puts where the original normalises: nothing
  (``none``: the 2016 code with batch norm removed, as the paper says, and nothing else) or its
  batch norm (``batch``: the baseline the paper departs from); the stem's σ shared with the first
  shortcut, σ (after N) before the global pool (:func:`preactivation_end`).
* As the original picks ``res_func`` (and Keras applications take a ``block_fn``), a block is a
  function chosen by name: adding one is a body here, its entry in :data:`BLOCKS` and its name
  in ``network_config.BLOCKS`` (docs/extending.md). ``identity=False`` joins the same branch
  without its shortcut (:func:`plain_chain`, a plain chain of the same convs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras

from resnet_noBN.configs.network_config import BlockConfig
from resnet_noBN.models.layers import (
    INIT_STDDEVS,
    STREAM,
    Block,
    Scalar,
    activation,
    batch_norm,
    conv,
    shortcut,
)

# --- Block variants --------------------------------------------------------------------------
# A variant's body builds one block's branch F:
#     body(x, out_filters, strides, block, name, first) -> (source, F(x))
# ``source`` is the tensor the shortcut starts from (x itself, for most); ``first`` is True for
# the network's first block; ``block`` is the Block (read your switches from it, and build
# layers with ``dtype=block.dtype``); layer names start with ``name`` (``stageS_unitU``), which
# checkpoints and tests depend on.
# :func:`residual_block` then joins them: x + F(x), or F(x) alone with --noidentity.


def hardt_ma_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool):
    """C2(ReLU(C1(x))), the paper's block (arXiv:1611.04231, Section 4): no batch norm, one
    ReLU; C1 may have stride 2, C2 has stride 1; the shortcut starts from x."""
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    y = conv(x, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(y, block, f"{name}_relu")
    return x, conv(y, out_filters, 3, 1, stddev, block, name=f"{name}_conv2")


# --- Starting at the identity in other ways (the paper's argument, Section 2: a residual network
# near the identity is easy to train; its init, sigma = 1/(k^2 c), starts each branch near 0).
# Each body below starts its branch at exactly 0, so the residual stages are exactly their
# shortcuts at step 0 (tests/test_identity_init.py).

# Fixup's scalars learn at a tenth of the network's rate, as its CIFAR code's parameter groups
# (github.com/hongyi-zhang/Fixup, cifar/cifar_train.py: base_lr / 10 for its biases and scales)
FIXUP_SCALAR_RATE = 0.1


def fixup_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool):
    """Fixup (Zhang, Dauphin & Ma, ICLR 2019, arXiv:1901.09321, Section 3) on the paper's block:
    s * C2(ReLU(C1(x + b1) + b2) + b3) + b4. Its three rules: (1) the branch's last layer C2 at
    zero; (2) C1 drawn as ``--init`` (He, sqrt(2 / (k^2 c)), with ``--init=he``: Fixup's) and
    scaled by L^(-1/(2m-2)) = L^(-1/2), L the network's residual blocks, m = 2 layers a branch;
    (3) a multiplier s (from 1) and a scalar bias (from 0) before each convolution and the
    activation and at the branch's end, as its CIFAR code's ``FixupBasicBlock``, each at
    :data:`FIXUP_SCALAR_RATE` of the rate. Fixup's other zero, the classifier, is not taken:
    the last layer stays the paper's fixed random projection. No ReLU after the addition
    (Table 1's block; Fixup's code has the original ResNet's there), and the shortcut starts
    from x (its code's downsampling shortcut reads x + b1)."""

    def bias(y, which):
        return Scalar("add", 0.0, FIXUP_SCALAR_RATE, name=f"{name}_bias{which}", dtype=block.dtype)(
            y
        )

    stddev = INIT_STDDEVS[block.init](3, out_filters) * block.residual_blocks**-0.5
    y = conv(bias(x, 1), out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(bias(y, 2), block, f"{name}_relu")
    y = conv(bias(y, 3), out_filters, 3, 1, 0.0, block, name=f"{name}_conv2")
    scale = Scalar("multiply", 1.0, FIXUP_SCALAR_RATE, name=f"{name}_scale", dtype=block.dtype)
    return x, bias(scale(y), 4)


def skipinit_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool):
    """SkipInit (De & Smith, NeurIPS 2020, arXiv:2002.10444, Section 4) on the paper's block:
    alpha * C2(ReLU(C1(x))), alpha one learnable scalar starting at 0 (ReZero's, Bachlechner et
    al. 2020, arXiv:2003.04887, on this block), at the network's rate; both convolutions drawn
    as ``--init`` (He with ``--init=he``: SkipInit's)."""
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    y = conv(x, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(y, block, f"{name}_relu")
    y = conv(y, out_filters, 3, 1, stddev, block, name=f"{name}_conv2")
    return x, Scalar("multiply", 0.0, name=f"{name}_alpha", dtype=block.dtype)(y)


def zero_last_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool):
    """The paper's block and init (Section 4: C1 at sigma = 1/(k^2 c)) with C2 at zero: Fixup's
    first rule alone, the normalisation-free form of zero-gamma (Goyal et al. 2017,
    arXiv:1706.02677, Section 5.1)."""
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    y = conv(x, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(y, block, f"{name}_relu")
    return x, conv(y, out_filters, 3, 1, 0.0, block, name=f"{name}_conv2")


def no_norm(x, block: Block, name: str):
    """Nothing: where the original code had batch norm, the paper has none (Section 4)."""
    return x


# What stands where the original code's pre-activation unit normalises, by --norm
# (network_config.NORMS): nothing (the 2016 code with batch norm removed), or the original's
# batch norm
NORMALIZERS = {"none": no_norm, "batch": batch_norm}


def preactivation_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool):
    """The original code's pre-activation ``_residual`` (``--block=preactivation``):
    C2(σ(N(C1(σ(N(x)))))), N its batch norm (``--norm=batch``, the baseline the paper departs
    from) or nothing (``--norm=none``: the 2016 code with batch norm removed, two activations per
    block where Table 1's text has one).
    The shortcut starts from x, before the first N and σ, except in the network's first block,
    from σ(N(x)) (the original's first unit, ``activate_before_residual``: the stem's σ shared by
    the shortcut and the branch)."""
    normalize = NORMALIZERS[block.norm]
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    activated = activation(normalize(x, block, f"{name}_bn1"), block, f"{name}_relu0")
    y = conv(activated, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(normalize(y, block, f"{name}_bn2"), block, f"{name}_relu")
    y = conv(y, out_filters, 3, 1, stddev, block, name=f"{name}_conv2")
    return (activated if first else x), y


def preactivation_end(x, block: Block):
    """The original's ``unit_last``: N and σ after the last pre-activation block, before the
    global pool."""
    return activation(NORMALIZERS[block.norm](x, block, "final_bn"), block, "final_relu")


@dataclasses.dataclass(frozen=True)
class BlockVariant:
    """A registered block: its ``body`` (above), and ``end``, what the network applies to the
    last block's output before the global pool (``end(x, block) -> x``; None: nothing)."""

    body: Callable
    end: Callable | None = None


# The blocks, by their --block name (network_config.BLOCKS, on both networks). Adding one: a
# body function above, an entry here and its name in network_config.BLOCKS (docs/extending.md).
BLOCKS = {
    "hardt_ma": BlockVariant(hardt_ma_body),
    "preactivation": BlockVariant(preactivation_body, end=preactivation_end),
    "fixup": BlockVariant(fixup_body),
    "skipinit": BlockVariant(skipinit_body),
    "zero_last": BlockVariant(zero_last_body),
}


def block_variant(block: BlockConfig) -> BlockVariant:
    """The block a network's switches pick: ``BLOCKS[block.block]``."""
    return BLOCKS[block.block]


def add_shortcut(
    source, branch, in_filters: int, out_filters: int, strides: int, block: Block, name: str
):
    """x + F(x): the branch added to the shortcut (shape-adjusted where the block changes it),
    in float32 (the residual stream)."""
    return keras.layers.Add(name=f"{name}_add", dtype=STREAM)(
        [shortcut(source, in_filters, out_filters, strides, block, name), branch]
    )


def plain_chain(
    source, branch, in_filters: int, out_filters: int, strides: int, block: Block, name: str
):
    """F(x) alone: the same convolutions as a plain chain, no shortcut (``--noidentity``; the
    paper's title claim, Sections 1-2)."""
    return branch


def residual_block(
    x,
    in_filters: int,
    out_filters: int,
    strides: int,
    block: Block,
    name: str,
    activate_before_residual: bool,
):
    """One block: the variant :func:`block_variant` picks builds the branch F, then
    :func:`add_shortcut` gives x + F(x), or (``block.identity`` False) :func:`plain_chain`
    F(x). ``activate_before_residual``: the network's first block (the body's ``first``)."""
    source, branch = block_variant(block).body(
        x, out_filters, strides, block, name, activate_before_residual
    )
    join = add_shortcut if block.identity else plain_chain
    return join(source, branch, in_filters, out_filters, strides, block, name)
