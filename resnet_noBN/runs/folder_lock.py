"""One run per folder: a run's exclusive lock on its ``--model_dir``, for as long as it lives.

The lock is a kernel lock (``fcntl.flock``, exclusive, not waiting) on ``<model_dir>/run.lock``,
taken before anything else is written there. The file says who holds it (host, process id,
start time), which a refusal names. A process that ends by itself (its work done, an error, a
stop: SIGTERM, SIGINT) removes the file as it exits (``atexit``). The kernel releases the lock
when the process ends, however it ends: a lock file left by one killed (``kill -9``, a node
lost) is stale exactly when no living process holds its lock, and the next run (a rerun, a
SLURM requeue, ``launch/local_cluster.py`` run again) takes it over at once, in one line naming
the holder that left it, and resumes.

Where it keeps runs apart: a local file system; NFS (the Linux client emulates ``flock`` with
POSIX byte-range locks, which the server keeps: NFSv4, and NFSv3 where lockd runs), Lustre
mounted with ``-o flock`` and GPFS: across hosts. Where the file system locks only within one
host (Lustre's ``-o localflock``, a FUSE file system that does not implement locks, e.g. an
object-store mount, where the kernel locks locally) it keeps apart the runs of one host only.
Where it cannot lock at all (ENOLCK: NFSv3 without lockd; EOPNOTSUPP) one warning line says so
and the run goes on unlocked.

A multi-worker job locks its folder once: the chief's lock stands for the job (non-chief
tasks write nothing there).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import errno
import json
import os
import socket
import sys

from resnet_noBN.configs.errors import InputError
from resnet_noBN.host import storage

LOCK_FILE = "run.lock"
# flock's errors where the file system cannot lock: the run goes on unlocked, with a warning
CANNOT_LOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class FolderBusy(InputError):
    """Another living process holds the folder's lock (exit 2, like other bad input)."""


class FolderLock:
    """The lock on one folder: held until :meth:`release` or the end of the process, which
    removes its file; ``created``: the paths taking it made (the folder and those of its parents
    that were not there, its lock file), which :meth:`withdraw` removes; ``previous``: what a
    lock file there before held (the holder that left it) and its times (access, modification;
    ns), which it puts back."""

    def __init__(
        self,
        folder: str,
        fd: int | None,
        created: tuple[str, ...] = (),
        previous: bytes = b"",
        previous_times: tuple[int, int] | None = None,
    ):
        self.folder, self._fd, self.created = folder, fd, created
        self.previous, self.previous_times = previous, previous_times
        self._pid = os.getpid()  # a forked child inherits the object, not the lock's end

    @property
    def locked(self) -> bool:
        """Whether the file system took the lock (False: it cannot lock; the run is unlocked)."""
        return self._fd is not None

    def release(self) -> None:
        """Remove the lock file, then release the lock (a run that ended leaves no lock)."""
        if self._fd is not None and os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.folder, LOCK_FILE))
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def withdraw(self) -> None:
        """Release the lock of a run refused before it wrote anything, and remove what taking
        it made (the lock file, then each folder it created where it is left empty, deepest
        first): the file system as the command found it."""
        if self._fd is not None and self.previous_times is not None:  # the file was there
            try:
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, self.previous, 0)
                os.utime(self._fd, ns=self.previous_times)
            except OSError:  # a lock file only names its holder: the refusal stands
                pass
        self._close()
        for path in reversed(self.created):
            try:
                os.rmdir(path) if os.path.isdir(path) else os.remove(path)
            except OSError:  # the folder holds something else now: it stays
                pass


def missing_folders(folder: str) -> list[str]:
    """``folder`` and those of its parents not there yet, outermost first: what
    ``os.makedirs(folder)`` will create."""
    missing, path = [], os.path.abspath(folder)
    while path and not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing[::-1]


def holder() -> dict:
    """Who locks: this host, process and the time now (local, with its zone)."""
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": started}


def describe(text: bytes) -> str:
    """The holder a lock file's ``text`` names, in words."""
    try:
        who = json.loads(text)
        return f"host {who['host']}, process {who['pid']}, started {who['started']}"
    except (ValueError, KeyError, TypeError):
        return "its holder not recorded yet"


def file_in_the_way(folder: str) -> str | None:
    """``folder``, or the first of its parents, where that path is a file: what keeps the
    folder from being made (None: nothing)."""
    path = os.path.abspath(folder)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return None if os.path.isdir(path) else path


def _open(folder: str, flag: str) -> int:
    """The lock file of ``folder``, opened (made where need be, the folder too); InputError,
    one line, where it cannot be."""
    in_the_way = file_in_the_way(folder)
    if in_the_way == os.path.abspath(folder):
        raise InputError(f"{flag} {folder} is a file, not a folder; pick a folder")
    if in_the_way is not None:
        raise InputError(
            f"{flag} {folder} cannot be made: {in_the_way} is a file, not a folder; pick a folder"
        )
    try:
        os.makedirs(folder, exist_ok=True)
        return os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise InputError(
            f"{flag} {folder} cannot be written ({e.strerror}); pick a writable folder"
        ) from None


def lock(folder: str, flag: str = "--model_dir", print_fn=None) -> FolderLock:
    """Lock ``folder`` (``flag``'s value; created if need be) for this process, until it ends
    (:meth:`FolderLock.release` at exit): :class:`FolderBusy` (one line naming the holder) where
    a living process holds it; InputError where the folder cannot be created or written. A lock
    file left by a process that ended without removing it (killed) is taken over, in one note.
    ``print_fn`` (default: stderr) gets that note, and the one warning where the file system
    cannot lock."""
    import fcntl

    say = print_fn or (lambda line: print(line, file=sys.stderr, flush=True))
    lock_path = os.path.join(folder, LOCK_FILE)
    created = tuple(p for p in (*missing_folders(folder), lock_path) if not os.path.exists(p))
    while True:  # until the file locked is the one the path names (a release removes it)
        fd = _open(folder, flag)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy = FolderBusy(
                f"{flag} {folder} is in use by another run ({describe(os.pread(fd, 4096, 0))}); "
                f"wait for it to end or stop it, or use another {flag}"
            )
            os.close(fd)
            raise busy from None
        except OSError as e:
            os.close(fd)
            if e.errno not in CANNOT_LOCK:
                raise
            say(
                f"warning: the file system of {folder} cannot lock ({e.strerror}): this run "
                "does not lock it, so nothing stops a second run from writing there too"
            )
            return FolderLock(folder, None, created)
        with contextlib.suppress(OSError):
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                break
        os.close(fd)
    try:
        before = os.fstat(fd)
        previous = os.pread(fd, 4096, 0)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder()).encode(), 0)
    except OSError as e:
        os.close(fd)
        raise storage.storage_error(LOCK_FILE, folder, e, "the latest checkpoint") from None
    if previous.strip():
        say(
            f"note: {flag} {folder} was locked by {describe(previous)}, which has ended "
            "without releasing it: taking it over"
        )
    times = None if lock_path in created else (before.st_atime_ns, before.st_mtime_ns)
    held = FolderLock(folder, fd, created, previous, times)
    atexit.register(held.release)
    return held
