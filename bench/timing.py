"""Timing and its statistics, shared by the benchmark and its PyTorch twin: a call timed
``count`` times in wall and CPU seconds (``time_each``), the median and spread of the durations
(``summarize``), and a timed matmul, the practical peak that a step's FLOP/s is held against
beside the stated one (``measure_matmul``).

Plain Python; Keras is imported only inside ``measure_matmul``.
"""

from __future__ import annotations

import statistics
import time


def time_each(call, count: int) -> tuple[list[float], list[float], object]:
    """(wall seconds, CPU seconds of this process, all threads) of each of ``count`` calls of
    ``call()``, and what the last one returned (None if ``count`` is 0)."""
    wall, cpu_seconds, out = [], [], None
    for _ in range(count):
        c0, t0 = time.process_time(), time.perf_counter()
        out = call()
        wall.append(time.perf_counter() - t0)
        cpu_seconds.append(time.process_time() - c0)
    return wall, cpu_seconds, out


def summarize(seconds) -> dict:
    """median, mean, p10, p90, min, max of a list of durations (seconds)."""
    seconds = sorted(seconds)
    if len(seconds) == 1:
        q = seconds * 9
    else:
        q = statistics.quantiles(seconds, n=10, method="inclusive")
    return {
        "median": statistics.median(seconds),
        "mean": statistics.fmean(seconds),
        "p10": q[0],
        "p90": q[-1],
        "min": seconds[0],
        "max": seconds[-1],
        "n": len(seconds),
    }


def rounded(stats: dict, digits: int = 5) -> dict:
    """A ``summarize`` result with its durations rounded to ``digits``, as the JSON holds it."""
    return {k: (v if k == "n" else round(v, digits)) for k, v in stats.items()}


def measure_matmul(dtype: str, n: int = 2048, reps: int = 5) -> float:
    """FLOP/s of an n x n x n matmul on the current device (a practical peak), in keras.ops:
    the backend's own kernel; reading one element back waits for the last product."""
    import keras

    a = keras.ops.cast(keras.random.normal([n, n], seed=0), dtype)

    def finish(out):
        return float(keras.ops.convert_to_numpy(keras.ops.cast(out[:1, :1], "float32"))[0, 0])

    finish(keras.ops.matmul(a, a))
    t0 = time.perf_counter()
    for _ in range(reps):
        out = keras.ops.matmul(a, a)
    finish(out)
    return 2 * n**3 * reps / (time.perf_counter() - t0)
