"""Where a profiled step spends its device time: the top kernels of a ``jax.profiler`` (or
``tf.profiler``) trace by total time, as a small text table (``throughput.py --profile_dir=DIR
--kernel_summary=FILE``), so that a speed-up can aim at the slowest kernels without TensorBoard.

Reads the trace viewer's ``plugins/profile/<run>/<host>.trace.json.gz`` (Chrome trace events:
``X`` events with a name and a duration in microseconds, and ``M`` events naming each process
and thread). On a GPU the kernels are the events of the device's stream threads
(``/device:GPU:N``, ``Stream #...``); with no device in the trace (a CPU), the XLA compute
threads' operations. Standard library only.
"""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

TOP = 25
NAME_WIDTH = 90


def newest_trace(profile_dir: str | Path) -> Path:
    """The newest ``*.trace.json.gz`` under ``profile_dir``; FileNotFoundError without one."""
    traces = sorted(Path(profile_dir).rglob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise FileNotFoundError(f"no *.trace.json.gz under {profile_dir}")
    return traces[-1]


def kernel_times(events: list[dict]) -> tuple[str, dict[str, list[float]]]:
    """(what was summed, {kernel name: [calls, total microseconds]})."""
    procs = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    devices = {pid for pid, name in procs.items() if "/device:" in name}
    streams = {k for k, name in threads.items() if k[0] in devices and name.startswith("Stream")}

    def counted(e) -> bool:
        key = (e["pid"], e.get("tid"))
        if devices:
            return e["pid"] in devices and (not streams or key in streams)
        # the executor's own span holds the operations it runs: counted once, in them
        return threads.get(key, "").startswith("tf_XLAEigen") and not e["name"].startswith(
            "ThunkExecutor"
        )

    what = (
        f"device kernels ({', '.join(sorted(procs[p] for p in devices))})"
        if devices
        else "the host's XLA operations (no device in the trace)"
    )
    totals = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and counted(e):
            entry = totals[e["name"]]
            entry[0] += 1
            entry[1] += float(e.get("dur", 0))
    return what, dict(totals)


def summarize(profile_dir: str | Path, steps: int) -> tuple[str, list[list]]:
    """The table (text) of the top kernels of the newest trace under ``profile_dir`` over
    ``steps`` traced steps, and its rows [name, calls per step, ms per step, share]."""
    trace = newest_trace(profile_dir)
    data = json.loads(gzip.decompress(trace.read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    what, totals = kernel_times(events)
    busy = sum(t for _, t in totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:TOP]
    rows = [
        [name[:NAME_WIDTH], calls / steps, total / 1e3 / steps, total / busy]
        for name, (calls, total) in ranked
    ]
    lines = [
        f"{trace.name}: {what}; {steps} steps traced; busy {busy / 1e3 / steps:.3f} ms a step "
        f"in {sum(c for c, _ in totals.values()) / steps:.0f} kernels",
        f"{'ms/step':>9} {'share':>6} {'calls/step':>10}  kernel",
    ]
    lines += [f"{ms:9.3f} {share:6.1%} {calls:10.1f}  {name}" for name, calls, ms, share in rows]
    return "\n".join(lines) + "\n", rows
