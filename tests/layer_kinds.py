"""What the paper's networks are made of (arXiv:1611.04231, Section 4: "no batch norm, no
dropout, no max-pool"): convolutions, ReLUs, additions, average pools, zero-padded channels and
one dense projection. Shared by the CIFAR and ImageNet model tests."""

import keras

PAPER_LAYER_KINDS = {
    "InputLayer",
    "Conv2D",
    "ReLU",
    "Add",
    "AveragePooling2D",
    "ZeroPadChannels",
    "GlobalAveragePooling2D",
    "Dense",
}


def assert_all_convolutional(model: keras.Model, relus: int) -> None:
    """``model`` has no normalisation, dropout or max-pool layer, only the kinds above, and
    exactly ``relus`` ReLU layers (one per residual block, none elsewhere)."""
    names = {type(layer).__name__ for layer in model.layers}
    assert not {n for n in names if "Norm" in n or "Dropout" in n or "MaxPool" in n}
    assert names <= PAPER_LAYER_KINDS
    assert sum(isinstance(layer, keras.layers.ReLU) for layer in model.layers) == relus
