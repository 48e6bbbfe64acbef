"""Writing into a run's folder so that a failed write (a full disk, any ``OSError``) or a kill
damages nothing: a file replaced whole or not at all (:func:`atomic_write`, :func:`write_text`),
a line appended whole or not at all (:func:`append_line`), and the one line that names the failure
(:func:`storage_error`, exit ``errors.STORAGE_EXIT``); and where a folder's checkpoints are
listed (:func:`checkpoint_index`)."""

from __future__ import annotations

import contextlib
import os

from resnet_noBN.configs.errors import StorageError, first_line

TEMPORARY_SUFFIX = ".tmp"  # what atomic_write writes first, beside the file it replaces
# The file that lists a folder's checkpoints, on each backend: TensorFlow's CheckpointManager
# writes "checkpoint", ``jax_training.JaxTrainer`` "checkpoints.json".
CHECKPOINT_INDEXES = ("checkpoint", "checkpoints.json")


def checkpoint_index(model_dir: str) -> str | None:
    """The path of ``model_dir``'s checkpoint index (either backend's), None where it has none."""
    for name in CHECKPOINT_INDEXES:
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            return path
    return None


def atomic_write(path: str, write, temporary: str | None = None) -> None:
    """``write(file)`` into ``temporary`` (default: ``path`` + ".tmp", beside it), flushed to
    disk, then renamed over ``path``: a reader sees the old file or the new one, never a part.
    Where the write fails the temporary file is removed and the error raised; ``path`` is as it
    was."""
    temporary = temporary or path + TEMPORARY_SUFFIX
    try:
        with open(temporary, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def write_text(path: str, text: str) -> None:
    """``text`` (UTF-8) as the whole of ``path``, replaced atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text.encode()))


def append_line(path: str, line: str) -> None:
    """Append ``line`` and a newline to ``path``, whole or not at all: where the write fails
    (part of it written) the file is cut back to its size before, and the error raised."""
    data = (line + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def reason(error: BaseException) -> str:
    """The cause of a failed write, in a few words (an OSError's strerror, else the first line
    of the message)."""
    text = getattr(error, "strerror", None) or first_line(error, limit=None)
    if "No space left on device" in text:  # TensorFlow's messages end so, after long paths
        return "No space left on device"
    return text[:200]


def storage_error(what: str, folder: str, error: BaseException, resume: str) -> StorageError:
    """The one-line error of a failed write of ``what`` into ``folder``; ``resume``: where a
    rerun resumes from."""
    return StorageError(
        f"cannot write {what} into {folder} ({reason(error)}): free space there or move the run "
        f"to a larger disk, then rerun the same command to resume from {resume}"
    )
