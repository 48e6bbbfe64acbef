"""Each residual block of a trained network against the identity (arXiv:1611.04231, Section 2:
Theorem 2.1's optimum has every layer within O(1/ℓ) of it): ``launch/near_identity.py``.

For a block ``stageS_unitU`` (``models.networks``), x ↦ s(x) + h(x) with s its shortcut and h its
branch, two measures (``theory.near_identity``):

* ``ratio``: ‖h(x)‖ / ‖s(x)‖ over the test images, their mean and largest. s(x) is what the
  branch is added to: the block's input x itself, except in a block that changes the shape (the
  first of stages 2 and 3), where it is x pooled and zero-padded (``models.layers``);
* ``lipschitz``: ‖C2‖₂ · ‖C1‖₂ times the branch's multipliers (Fixup's s, SkipInit's α), each
  convolution's spectral norm as an operator on its real input, by power iteration
  (``theory.near_identity.spectral_norm``). A bound on the branch's Lipschitz constant: its ReLU
  is 1-Lipschitz, its scalar biases move nothing. Beside each stride-1 convolution, ``circular``:
  the exact norm of the circular convolution on the grid padded by the kernel (n + k - 1), of
  which the zero-padded one is a cropped part, so an upper bound the power iteration's value
  must not pass.

Measured on the trained weights and on the network at initialisation, rebuilt from the run's
``config.json`` and seed as the run drew it. Written to ``near_identity.json`` in the run folder
(beside a ``.keras`` file: ``FILE.near_identity.json``; ``model_paths.near_identity_path``); the
study's summary across depths:
``studies.near_identity_study``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re

import keras
import numpy as np

from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import InputError
from resnet_noBN.datasets import cifar_data
from resnet_noBN.host import storage
from resnet_noBN.models.layers import Scalar
from resnet_noBN.runs import run_config
from resnet_noBN.theory import near_identity as theory
from resnet_noBN.trained import evaluation, model_file, model_paths, run_folder
from resnet_noBN.trainers.loop import weights_digest

BLOCK = re.compile(r"(stage(\d+)_unit(\d+))_add")  # a residual block's join (models.blocks)
BATCH = 250  # test images a forward pass


@dataclasses.dataclass(frozen=True)
class BlockLayers:
    """One residual block's layers: its name (stage from 1, unit from 0, as the network names
    them), its join (``*_add``: inputs the shortcut's output and the branch's), the convolutions
    of its branch in order, and its multipliers."""

    name: str
    stage: int
    unit: int
    join: keras.layers.Layer
    convs: tuple
    multipliers: tuple


def blocks(model: keras.Model, what: str) -> list[BlockLayers]:
    """The residual blocks of ``model``, in order; InputError (one line, ``what`` naming it)
    where it holds none (not a network of this project) or one the bound does not cover (a
    batch norm in a branch)."""
    found = []
    for layer in model.layers:
        match = BLOCK.fullmatch(layer.name)
        if not match:
            continue
        name = match[1]
        own = [other for other in model.layers if other.name.startswith(f"{name}_")]
        if any(isinstance(other, keras.layers.BatchNormalization) for other in own):
            raise InputError(
                f"{what}: block {name} normalises its branch (batch norm); the bound covers "
                "convolutions, ReLU and scalars only: measure a network without --norm=batch"
            )
        convs = tuple(
            other
            for other in own
            if isinstance(other, keras.layers.Conv2D) and not other.name.endswith("_projection")
        )
        multipliers = tuple(
            other for other in own if isinstance(other, Scalar) and other.op == "multiply"
        )
        found.append(BlockLayers(name, int(match[2]), int(match[3]), layer, convs, multipliers))
    if not found:
        raise InputError(
            f"{what} holds no residual block of this project's networks (layers "
            "stageS_unitU_add); give a run of launch/cifar.py or a file of launch/export.py"
        )
    return found


def _spatial(layer: keras.layers.Conv2D) -> tuple[int, int]:
    shape = layer.input.shape
    return tuple(shape[1:3]) if layer.data_format == "channels_last" else tuple(shape[2:4])


def lipschitz(block: BlockLayers, print_fn=print) -> dict:
    """The bound ‖C2‖₂ · ‖C1‖₂ · Π|multiplier| of ``block``'s branch, with each convolution's
    spectral norm, its power iteration's iterations and last relative change, and (stride 1) the
    circular value on the padded grid (an upper bound on it)."""
    convs, bound = [], 1.0
    for layer in block.convs:
        kernel = np.asarray(keras.ops.convert_to_numpy(layer.kernel), np.float64)
        size, stride = _spatial(layer), int(layer.strides[0])
        norm = theory.spectral_norm(kernel, size, stride)
        padded = (size[0] + kernel.shape[0] - 1, size[1] + kernel.shape[1] - 1)
        circular = theory.circular_spectral_norm(kernel, padded) if stride == 1 else None
        convs.append(
            {
                "layer": layer.name,
                "input": [*size, int(kernel.shape[2])],
                "stride": stride,
                "spectral_norm": norm["value"],
                "iterations": norm["iterations"],
                "last_change": norm["last_change"],
                "circular": circular,
            }
        )
        bound *= norm["value"]
    scalars = [float(keras.ops.convert_to_numpy(m.scalar)) for m in block.multipliers]
    bound *= math.prod(abs(s) for s in scalars)
    print_fn(f"  {block.name}: Lipschitz bound {bound:.4g}", flush=True)
    return {"lipschitz": bound, "multipliers": scalars, "convs": convs}


def ratios(model: keras.Model, found: list[BlockLayers], images: np.ndarray) -> list[dict]:
    """‖h(x)‖ / ‖s(x)‖ of every block over ``images`` (uint8, as the model takes them): each
    block's mean and largest over the images."""
    joins = [tensor for block in found for tensor in block.join.input]
    probe = keras.Model(model.inputs, joins)
    per_block = [[] for _ in found]
    for begin in range(0, len(images), BATCH):
        outputs = probe.predict_on_batch(images[begin : begin + BATCH])
        for i in range(len(found)):
            stream, branch = (keras.ops.convert_to_numpy(t) for t in outputs[2 * i : 2 * i + 2])
            per_block[i].append(theory.ratios(branch, stream))
    return [
        {"ratio_mean": float(np.mean(r)), "ratio_max": float(np.max(r))}
        for r in map(np.concatenate, per_block)
    ]


def measured(model: keras.Model, images: np.ndarray, what: str, print_fn=print) -> dict:
    """Both measures of every block of ``model`` (``what`` names it in the lines and errors),
    and the largest and the mean over the blocks of each (the ratio's: of its mean over
    images)."""
    found = blocks(model, what)
    expected = tuple(model.input_shape[1:])
    if tuple(images.shape[1:]) != expected:
        raise InputError(
            f"the test images are {'x'.join(map(str, images.shape[1:]))}, but {what} takes "
            f"{'x'.join(map(str, expected))}; give --data_path a copy of the data it trained on"
        )
    print_fn(f"{what}: {len(found)} blocks, on {len(images):,} test images", flush=True)
    rows = [
        {"block": b.name, "stage": b.stage, "unit": b.unit, **r, **lipschitz(b, print_fn)}
        for b, r in zip(found, ratios(model, found, images))
    ]
    return {"blocks": rows, **overall(rows)}


def overall(rows: list[dict]) -> dict:
    """The largest and the mean over the blocks: of the ratio (each block's mean over images)
    and of the Lipschitz bound."""
    return {
        f"{which}_{key}": fn([row[source] for row in rows])
        for key, source in (("ratio", "ratio_mean"), ("lipschitz", "lipschitz"))
        for which, fn in (("largest", max), ("mean", lambda v: float(np.mean(v))))
    }


def split_images(data: DataConfig) -> np.ndarray:
    """The test split's images as the run's reader makes them."""
    cifar_data.check_data_path(data.dataset, data.data_path)
    return evaluation.probed_test_split(data)[0]


def measure_run(model_dir: str, step: int | None, data_path: str | None, print_fn=print) -> dict:
    """The record of the run in ``model_dir``: its weights at ``step`` (None: the latest) and its
    network at initialisation (the run's config and seed: ``evaluation.reading_trainer`` draws
    it as the run did), measured on the test split of ``data_path`` (None: the run's own)."""
    kept = run_folder.kept_weights(model_dir, step)
    saved, run = kept.record, run_config.from_record(kept.record)
    data = dataclasses.replace(run.data, data_path=data_path or run.data.data_path)
    images = split_images(data)
    network = evaluation.reading_trainer(saved, run, model_dir).model  # the runtime starts
    initial = model_file.served_model(run)
    model_file.copy_weights(network, initial)
    trained = model_file.served_model(run)
    model_file.read_weights(trained, kept.path)
    return {
        "model_dir": os.path.abspath(model_dir),
        "experiment": run.experiment,
        "backend": saved.get("backend", "tensorflow"),
        "seed": saved.get("seed", 0),
        "step": kept.step,
        "weights_sha256": weights_digest(trained.weights),
        "network": dataclasses.asdict(run.network),
        "residual_blocks": run.network.residual_blocks,
        "data": {"dataset": data.dataset, "data_path": os.path.abspath(data.data_path)},
        **power_iteration(),
        "trained": measured(trained, images, f"step {kept.step:,}", print_fn),
        "initialisation": measured(initial, images, "initialisation", print_fn),
    }


def measure_file(path: str, data_path: str, print_fn=print) -> dict:
    """The record of the ``.keras`` file ``path`` (launch/export.py's): its trained weights
    only (a file holds no seed), on the test split of ``data_path`` read as
    ``model_file.file_data`` says (InputError for a model of other classes)."""
    model, recorded = model_file.load(path), model_paths.read_beside(path)
    read = model_file.file_data(path, model, recorded, data_path)
    images = split_images(read)
    print_fn("a .keras file holds no seed: its trained weights only", flush=True)
    return {
        "model": os.path.abspath(path),
        "experiment": recorded.get("experiment"),
        "step": recorded.get("step"),
        "weights_sha256": recorded.get("weights_sha256"),
        "data": {"dataset": read.dataset, "data_path": os.path.abspath(data_path)},
        **power_iteration(),
        "trained": measured(model, images, path, print_fn),
        "initialisation": None,
    }


def power_iteration() -> dict:
    """How the spectral norms were computed, for the record."""
    return {
        "power_iteration": {
            "tolerance": theory.TOLERANCE,
            "max_iterations": theory.MAX_ITERATIONS,
            "padding": "SAME (zeros), as the network's",
        }
    }


def write(record: dict, path: str) -> None:
    """``record`` to ``path``, replaced whole."""
    storage.write_text(path, json.dumps(record, indent=1) + "\n")


def table(record: dict) -> str:
    """The record as a Markdown table, a row a block: ratio (mean, largest) and bound, trained
    and at initialisation."""
    initial = {r["block"]: r for r in (record.get("initialisation") or {}).get("blocks", [])}
    lines = [
        "| block | ratio mean | ratio max | Lipschitz bound | at init: ratio mean | bound |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["trained"]["blocks"]:
        start = initial.get(row["block"])
        init = f"{start['ratio_mean']:.4g} | {start['lipschitz']:.4g}" if start else "- | -"
        lines.append(
            f"| {row['block']} | {row['ratio_mean']:.4g} | {row['ratio_max']:.4g} | "
            f"{row['lipschitz']:.4g} | {init} |"
        )
    return "\n".join(lines)
