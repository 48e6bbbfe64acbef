"""What the trainers that run in one process without TensorFlow share (JAX's
``jax_training.JaxTrainer``, PyTorch's ``torch_training.TorchTrainer``): :class:`OneProcessTrainer`
builds the model, the optimizer and the run log, reads the learning rate, checks the batch
against the training split, guards the loop against SIGTERM/SIGINT (``preemption.local_guard``:
the call ends, a checkpoint, ``Preempted``) and keeps the checkpoints: ``ckpt-<step>.npz`` (every
model and optimizer variable, by its Keras path) and the index ``checkpoints.json``, each written
to a temporary file and renamed (``storage.atomic_write``), so a kill during a save leaves the
previous checkpoint the latest; an unreadable newest checkpoint is named and the one before it
restored (``loop.TrainLoop.restore``). The files hold numpy arrays only; ``runs.record`` keeps a
run on the backend it started on."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import zipfile
from collections.abc import Callable

import keras
import numpy as np

from resnet_noBN.configs.errors import DataError
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.host import preemption, storage
from resnet_noBN.host.storage import CHECKPOINT_INDEXES
from resnet_noBN.trainers.loop import TrainLoop
from resnet_noBN.trainers.recipe import learning_rate_schedule, make_optimizer
from resnet_noBN.trainers.run_log import RunLog

INDEX_FILE = CHECKPOINT_INDEXES[1]


class OneProcessTrainer(TrainLoop):
    """The model, optimizer, run log and checkpoints of a one-process trainer; a subclass
    supplies :meth:`place`, ``run_steps`` and ``eval_counts``, and :meth:`_sync` where it keeps
    the values elsewhere than in the Keras variables between calls.

    ``train(source, eval_source)``: ``source`` a ``stream.TrainSplit``, ``eval_source`` the test
    split as (uint8 images, int32 labels), evaluated whole, in order, standardised only.
    ``schedule`` and ``top5`` as in ``tensorflow_training.Trainer``.
    """

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        cfg: TrainConfig,
        model_dir: str,
        title: str = "",
        schedule=None,
        top5: bool = False,
        time_budget_s: float | None = None,
        chief: bool = True,
    ):
        self.cfg, self.model_dir, self.top5, self.time_budget_s = (
            cfg,
            model_dir,
            top5,
            time_budget_s,
        )
        self.model = build_model()
        self._schedule = schedule or learning_rate_schedule(cfg)
        self.optimizer = make_optimizer(cfg, self._schedule)
        self.optimizer.build(self.model.trainable_variables)
        # in a job of several processes (JAX's) the chief alone writes the log and checkpoints
        self.is_chief = chief
        self.log = RunLog(model_dir, title, enabled=chief, redraw_every_s=cfg.redraw_every_s)
        self._step = 0

    def place(self, source) -> dict:
        """What ``run_steps`` draws its batches from: the split of ``source`` (a ``TrainSplit``)
        on the device, its seed and crop padding."""
        raise NotImplementedError

    def _sync(self) -> None:
        """Bring the Keras variables up to date (here: they are)."""

    def _variables(self):
        return (
            self.model.trainable_variables,
            self.model.non_trainable_variables,
            self.optimizer.variables,
        )

    # ----------------------------------------------------------------- the loop's part
    @property
    def step(self) -> int:
        return self._step

    def learning_rate(self) -> float:
        return float(keras.ops.convert_to_numpy(self._schedule(self._step)))

    def start(self, source, step: int):
        if self.cfg.batch_size > len(source.images):
            raise DataError(
                f"--batch_size={self.cfg.batch_size} exceeds the {len(source.images)} training "
                "images; use a smaller batch"
            )
        return self.place(source)

    def guard(self, print_fn):
        return preemption.local_guard(self.save_if_new, self.preempted_message, print_fn)

    def weights_digest(self) -> str:
        self._sync()
        return super().weights_digest()

    # ----------------------------------------------------------------- checkpoints
    def _named_variables(self) -> dict:
        named = {}
        for prefix, group in zip(("model", "model", "optimizer"), self._variables()):
            for variable in group:
                name = f"{prefix}/{variable.path}"
                if name in named:
                    raise ValueError(f"two variables named {name}: checkpoints need unique paths")
                named[name] = variable
        return named

    def _index(self) -> list[str]:
        path = os.path.join(self.model_dir, INDEX_FILE)
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as f:
            return json.load(f)["checkpoints"]

    def checkpoints(self) -> list[str]:
        return [os.path.join(self.model_dir, name) for name in self._index()]

    def save(self) -> None:
        """Write ``ckpt-<step>.npz`` and then the index, each atomically (temporary file, fsync,
        rename); drop checkpoints beyond ``cfg.max_checkpoints``. In a job the chief alone."""
        if not self.is_chief:
            self._saved_step = self._step
            return
        self._sync()
        os.makedirs(self.model_dir, exist_ok=True)
        name = f"ckpt-{self._step}.npz"
        arrays = {k: keras.ops.convert_to_numpy(v) for k, v in self._named_variables().items()}
        storage.atomic_write(os.path.join(self.model_dir, name), lambda f: np.savez(f, **arrays))
        names = [n for n in self._index() if n != name] + [name]
        keep, drop = names[-self.cfg.max_checkpoints :], names[: -self.cfg.max_checkpoints]
        storage.atomic_write(
            os.path.join(self.model_dir, INDEX_FILE),
            lambda f: f.write(json.dumps({"checkpoints": keep}, indent=1).encode()),
        )
        for old in drop:
            try:
                os.remove(os.path.join(self.model_dir, old))
            except FileNotFoundError:
                pass
        self._saved_step = self._step

    unreadable = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)

    def remove_partial(self) -> None:
        """Remove the temporary files of writes cut short (``storage.atomic_write``'s)."""
        for path in glob.glob(
            os.path.join(glob.escape(self.model_dir), "*" + storage.TEMPORARY_SUFFIX)
        ):
            with contextlib.suppress(OSError):
                os.remove(path)

    def read_checkpoint(self, path: str) -> None:
        """Every variable read and its shape checked before any is assigned."""
        variables = self._named_variables()
        with np.load(path) as saved:
            values = {name: saved[name] for name in variables}
        assign_checked(variables, values)
        self._step = int(keras.ops.convert_to_numpy(self.optimizer.iterations))

    def read_weights(self, path: str) -> None:
        """A weights file (the ``model/`` arrays of a checkpoint and its ``step``, no optimizer
        state: what a GPU lease brings back, ``ops.lease.collect.cut_weights``) into the
        model, every array's shape checked before any is assigned; the step is the file's."""
        variables = {n: v for n, v in self._named_variables().items() if n.startswith("model/")}
        values = read_arrays(path, variables, also=("step",))
        step = int(values.pop("step"))
        assign_checked(variables, values)
        self._step = step


def read_arrays(path: str, names, also: tuple[str, ...] = ()) -> dict:
    """The arrays ``names`` (and ``also``) of the ``.npz`` file ``path``, every one read before
    any is used; ValueError naming the first of ``names`` it lacks (a file of another model)."""
    with np.load(path) as saved:
        missing = sorted(set(names) - set(saved.files))
        if missing:
            raise ValueError(
                f"{path} lacks {len(missing)} of the model's arrays, {missing[0]} first"
            )
        return {name: saved[name] for name in [*names, *also]}


def assign_checked(variables: dict, values: dict) -> None:
    """Each array of ``values`` into its variable, every shape checked before any is assigned
    (ValueError naming the first that differs): a file of another model changes nothing."""
    for name, value in values.items():
        if value.shape != tuple(variables[name].shape):
            raise ValueError(
                f"{name} has shape {value.shape}, the model {tuple(variables[name].shape)}"
            )
    for name, value in values.items():
        variables[name].assign(value)
