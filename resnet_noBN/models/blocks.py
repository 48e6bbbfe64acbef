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


def hardt_ma_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool = False):
    """C2(ReLU(C1(x))), the paper's block (arXiv:1611.04231, Section 4): no batch norm, one
    ReLU; C1 may have stride 2, C2 has stride 1; the shortcut starts from x."""
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    y = conv(x, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(y, block, f"{name}_relu")
    return x, conv(y, out_filters, 3, 1, stddev, block, name=f"{name}_conv2")


def no_norm(x, block: Block, name: str):
    """Nothing: where the original code had batch norm, the paper has none (Section 4)."""
    return x


# What stands where the original code's pre-activation unit normalises, by --norm
# (network_config.NORMS): nothing (the 2016 code with batch norm removed), or the original's
# batch norm
NORMALIZERS = {"none": no_norm, "batch": batch_norm}


def preactivation_body(
    x, out_filters: int, strides: int, block: Block, name: str, first: bool = False
):
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
    activate_before_residual: bool = False,
):
    """One block: the variant :func:`block_variant` picks builds the branch F, then
    :func:`add_shortcut` gives x + F(x), or (``block.identity`` False) :func:`plain_chain`
    F(x). ``activate_before_residual``: the network's first block (the body's ``first``)."""
    source, branch = block_variant(block).body(
        x, out_filters, strides, block, name, activate_before_residual
    )
    join = add_shortcut if block.identity else plain_chain
    return join(source, branch, in_filters, out_filters, strides, block, name)
