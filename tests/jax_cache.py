"""Each process of the tests' JAX jobs writes its compiles to the session's compilation cache
(``JAX_COMPILATION_CACHE_DIR``, set in tests/conftest.py).

JAX writes that cache from process 0 alone (``jax/_src/compiler.py``, ``_cache_write``), so that
processes do not contend on a shared file system. Its other processes only read. On the CPU a
computation's key differs from process to process: in a second 2 x 2 job, process 1 missed the
cache in each of its 43 compiles, the step included. So process 1 compiled everything again in
every job, and process 0 waited for it. Letting it write cut that second job from 11.2 CPU-s to
3.7, and from 7.4 s to 2.4 (2 Zen 4 cores).

:func:`write_every_process` lets every process write. A process then reads back what the same
process of an earlier job wrote. The executables are the ones XLA made, bit for bit: a job's
weights are the same.

:func:`keys_free_of_device_ids` lets a process read what another process compiled for another
device of the same layout: the network's initial draws are compiled once in the session, not in
every process of every job.

Together they make processes write the same entry at once, and read what another is writing.
JAX writes an entry in place (``jax/_src/lru_cache.py``, ``LRUCache.put``): a reader could load
an executable cut short, and two writers could interleave. :func:`whole_entries_only` writes each
entry beside it, then renames it into place: a reader finds the whole entry or none.

The JAX warm process (tests/warm_start.py) calls all three (:func:`share`) before it forks, so
every warm JAX launch has them. A cold launch does too: tests/conftest.py puts tests/cold_jax
(:data:`COLD`) last on the ``PYTHONPATH`` of every process a test starts, and its
``sitecustomize`` calls :func:`share` once JAX is imported: the SLURM JAX job's tasks under
``slurmd``, the probes, a launcher's runs on another backend, the JAX peer of
``--compare_backend``. A test that sets ``PYTHONPATH`` keeps it there (``backend_env``,
tests/test_tensorflow_free_backends.py). The warm processes ignore it
(``warm_start.import_variables``): their launches' variables read at import are a user's. The
pytest workers do not have it: the JAX they import keeps JAX's rules.
"""

import os
import threading
from pathlib import Path

COLD = Path(__file__).resolve().parent / "cold_jax"  # last on the session's PYTHONPATH
FOLDER = "JAX_COMPILATION_CACHE_DIR"  # the session's cache (tests/conftest.py); empty: off
SETTINGS = {  # every compile written to it, however quick or small
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}
_shared = False


def environment() -> dict[str, str]:
    """The session's cache as this process has it: :data:`FOLDER` and :data:`SETTINGS`, for a
    process started with an environment of its own (tests/test_gpu_lease.py's)."""
    return {name: os.environ.get(name, "") for name in (FOLDER, *SETTINGS)}


def share() -> None:
    """The three below, once a process: what every JAX process of the tests does to the
    session's cache."""
    global _shared
    if _shared:  # a warm process started on COLD's path: its sitecustomize called it first
        return
    _shared = True
    write_every_process()  # in a job, not process 0 alone
    keys_free_of_device_ids()  # one device's programs compiled once
    whole_entries_only()  # what they share is read whole


def write_every_process() -> None:
    """Every process writes its compiles, whatever its index, under JAX's other conditions (no
    host callbacks; at least the minimum compile time)."""
    from jax._src import compilation_cache, compiler, config, distributed

    process_0_writes = compiler._cache_write

    def write(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks):
        if distributed.global_state.process_id == 0:
            process_0_writes(
                cache_key, compile_time_secs, module_name, backend, executable, host_callbacks
            )
        elif not host_callbacks and (
            compile_time_secs >= config.persistent_cache_min_compile_time_secs.value
        ):
            compilation_cache.put_executable_and_time(
                cache_key, module_name, executable, backend, int(compile_time_secs)
            )

    compiler._cache_write = write


def keys_free_of_device_ids() -> None:
    """A computation's key names how many devices run it, on how many processes, not which.

    JAX's key holds the devices' ids twice: in the compile options' device assignment, and in the
    topology's fingerprint (``jax/_src/cache_key.py``). On a GPU JAX strips the first, so that the
    processes of a job share one key. On the CPU it keeps both, so a program compiled for device
    0 is compiled again for device 1, 2 or 3. Each process of a job is a different device: every
    process of every JAX job compiled the network's initial draws again, 7 programs of
    ``jax.random.normal`` of the small network (5 to 7 CPU-s a process), though each is one
    device's program and the same in all.

    Here both are left out of the key. A program for one device is then compiled once in the
    session. A program for several devices is compiled once per layout (its devices, its
    processes), as before: the 2 x 2 job, the 4 x 1 job and one process of 4 devices each
    compile their own step, so their weights, compared bit for bit, still come from three
    compilations. An executable read from the cache runs on the process's own devices: JAX
    passes them, and the compile options, as it loads it. A process without :data:`COLD` on its
    path keeps JAX's key, so it reads none of these entries.
    """
    from jax._src import cache_key

    hash_options = cache_key._hash_serialized_compile_options

    def options_without_assignment(hash_obj, options, strip_device_assignment=False):
        return hash_options(hash_obj, options, strip_device_assignment=True)

    def layout(hash_obj, devices):
        processes = len({device.process_index for device in devices.flat})
        hash_obj.update(f"{devices.flat[0].platform} {devices.size} {processes}".encode())

    cache_key._hash_serialized_compile_options = options_without_assignment
    cache_key._hash_accelerator_config = layout


def whole_entries_only() -> None:
    """An entry of the cache (eviction off, JAX's default) is written as the project writes a
    run's files (``storage.atomic_write``: a file of its own, then renamed into place); an entry
    already there is kept, and a write that fails leaves nothing."""
    from jax._src import lru_cache

    put = lru_cache.LRUCache.put

    def put_whole(self, key: str, value: bytes) -> None:
        # imported at the first write: resnet_noBN imports Keras, which may be importing JAX
        # as this runs (tests/cold_jax)
        from resnet_noBN.host import storage

        if self.eviction_enabled or not key:  # JAX's lock and checks
            return put(self, key, value)
        entry = self.path / f"{key}{lru_cache._CACHE_SUFFIX}"
        if entry.exists():
            return
        part = f"{entry}.{os.getpid()}-{threading.get_ident()}.part"  # one a writer
        storage.atomic_write(str(entry), lambda f: f.write(value), temporary=part)

    lru_cache.LRUCache.put = put_whole
