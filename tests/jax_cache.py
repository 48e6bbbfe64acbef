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

The JAX warm process (tests/warm_start.py) calls it before it forks, so every warm JAX launch
has it. A cold launch keeps JAX's rule.
"""


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
