"""One call of the lease, as ``launch/gpu_lease.sh`` runs it on the GPU machine.

On a bare machine (no ``runs/lease/status.json``): say whether it is the lease's first call or
a machine lost (``LEASE_BACK`` set: the caller had replies from an earlier machine), check that
JAX sees a GPU and that JAX and Keras import from the carried wheels, keep the machine's own copy
of ``parts.json`` and the unpack tool (``carry.keep``: the supervisor never reads ``.carry``,
which every call replaces), start the supervisor in a session of its own, and return. On every
call: take in the data part carried (``carry.receive``), then return at once while a part the
plan wants is still to come, or else wait (at most ``LEASE_WAIT_S``) for news (weights to bring
back, a run ended while none trains, the plan done: ``news``); fill ``$OUT``
(``collect.fill_out``), print the table, and last the next call: the paths to carry and the
command, with ``LEASE_BACK`` saying what this reply brought.

Exit 0: the plan is done and everything came back (give the machine back); 3: call again
within 30 s; 1: the supervisor is gone before the plan was done; 2: bad input, a carried file
missing, or no GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ops.lease import carry, collect, plan
from ops.lease.supervisor import OWN, POLL_S, STORE, WORK, child_env, read_json, write_json
from resnet_noBN.host import processes

CALL_STARTED = time.time()  # the lease's GPU time counts from its first call's start
CHECK_GPU = """
import json, jax, keras
d = jax.devices()[0]
print(json.dumps({"backend": jax.default_backend(), "device": getattr(d, "device_kind", str(d)),
                  "devices": [str(x) for x in jax.devices()],
                  "versions": f"JAX {jax.__version__}, Keras {keras.__version__}"}))
"""


def error(line: str) -> int:
    print(f"error: {line}", file=sys.stderr)
    return 2


def unpack_wheels(knobs: plan.Knobs, root: Path) -> None:
    wheels = sorted((root / carry.BASE / "wheels").glob("*.whl"))
    if wheels:
        subprocess.run(
            [knobs.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
            + ["--no-cache-dir", "--target", str(root / WORK / "site"), *map(str, wheels)],
            check=True,
        )


def check_gpu(knobs: plan.Knobs, root: Path) -> dict | str:
    """What JAX sees and the versions (a dict), or why nothing may start (a line)."""
    done = subprocess.run(
        [knobs.python, "-c", CHECK_GPU], env=child_env(root), capture_output=True, text=True
    )
    if done.returncode:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"JAX and Keras do not import ({why}): carry .carry/base (its wheels)"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if seen["backend"] != "gpu" and not knobs.smoke:
        return f"JAX sees no GPU ({seen['backend']}: {seen['devices']}): nothing started"
    return seen


def first_status(knobs: plan.Knobs, back: plan.Back, manifest: dict, seen: dict) -> dict:
    data = {
        dataset: {
            "state": "travelling",
            "label": manifest["datasets"][dataset]["label"],
            "parts": manifest["datasets"][dataset]["parts"],
        }
        for dataset in knobs.datasets()
    }
    runs = {}
    for run in knobs.runs:
        runs[run.name] = {
            "state": "done earlier" if run.name in back.items else "pending",
            "experiment": run.experiment,
            "seed": run.seed,
            "dataset": run.dataset,
            "data": data[run.dataset]["label"],
            "precision": run.precision,
            "steps": run.steps,
            "step": 0,
        }
    return {
        "phase": "starting",
        "done": False,
        "smoke": knobs.smoke,
        "since": back.since or CALL_STARTED,
        "starts": back.starts + 1,
        "start_s": knobs.start_s,
        "lease_s": knobs.lease_s,
        "margin_s": knobs.margin_s,
        "lost_machines": back.starts,
        "device": seen["device"],
        "versions": seen["versions"],
        "data": data,
        "wanted": list(
            dict.fromkeys(r["dataset"] for r in runs.values() if r["state"] == "pending")
        ),
        "speed": {"tries": [], "chosen": back.speed},
        "probe": {},
        "runs": runs,
    }


def start(knobs: plan.Knobs, root: Path, back: plan.Back, manifest: dict) -> int:
    """A bare machine: say which, check, start the supervisor detached."""
    work = root / WORK
    missing = [d for d in knobs.datasets() if d not in manifest["datasets"]]
    if missing:
        return error(
            f"the runs need {missing} and .carry/base/parts.json has no parts of them: "
            "prepare with these LEASE_RUNS"
        )
    if back.since:
        done = [n for n in back.items if "." not in n]
        print(
            f"the machine was lost: a bare machine, while LEASE_BACK says the lease started "
            f"{time.time() - back.since:,.0f} s ago on {back.starts} machine(s); what was on it "
            "(parts, data, runs under way) is gone; "
            + (f"the runs whose results came back {done} are not redone; " if done else "")
            + "the plan starts again on this machine (a start more counted)"
        )
    else:
        print("a bare machine and no LEASE_BACK: the lease's first call; starting the plan")
    work.mkdir(parents=True, exist_ok=True)
    carry.keep(root / carry.BASE, root / OWN)
    unpack_wheels(knobs, root)
    seen = check_gpu(knobs, root)
    if isinstance(seen, str):
        shutil.rmtree(work, ignore_errors=True)
        return error(seen)
    print(f"{seen['versions']} on {seen['devices']} ({seen['device']})")
    write_json(work / "status.json", first_status(knobs, back, manifest, seen))
    with open(work / "supervisor.log", "w") as log:
        proc = subprocess.Popen(
            [knobs.python, "-m", "ops.lease", "supervise"],
            cwd=root,
            env=child_env(root),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # setsid: it runs on after this call returns
        )
    (work / "supervisor.pid").write_text(str(proc.pid))
    return 0


def next_part(status: dict, manifest: dict, store: Path) -> str | None:
    """The first part, in the manifest's order, of a data set the plan wants that is neither
    on this machine nor restored."""
    for dataset in status.get("wanted", []):
        if status["data"][dataset]["state"] != "travelling":
            continue
        for name in manifest["datasets"][dataset]["parts"]:
            if not (store / name).is_file():
                return name
    return None


def news(status: dict, back: plan.Back) -> bool:
    """Whether this call has something to bring that the caller has not had: the plan done, a
    run's weights' parts, or a run ended without weights while no other run trains. Every return
    risks the machine (it goes back 30 s after a call returns unless the next one comes: the
    lease of 2026-12-04 lost a run under way so), so a failed run's small results wait on the
    machine for the next return while the run after it trains."""
    training = any(run["state"] == "running" for run in status["runs"].values())
    for name, run in status["runs"].items():
        if run["state"] not in collect.ENDED:
            continue
        parts = (run.get("weights") or {}).get("parts", [])
        if any(f"{name}.{p['name']}" not in back.items for p in parts):
            return True
        if name not in back.items and not (training and not parts):
            return True
    return status["done"]


def call(knobs: plan.Knobs, root: Path, env=os.environ) -> int:
    work, store = root / WORK, root / STORE
    try:
        back = plan.Back.parse(env.get("LEASE_BACK", ""))
    except ValueError as e:
        return error(str(e))
    manifest = carry.load_manifest(root / carry.BASE)
    if manifest is None:
        return error(
            ".carry/base/parts.json is missing: run `bash launch/gpu_lease.sh prepare DATA_DIR` "
            "here and carry .carry/base on every call"
        )
    fresh = read_json(work / "status.json") is None
    if fresh:
        rc = start(knobs, root, back, manifest)
        if rc:
            return rc
    for line in carry.receive(root, store, manifest):
        print(line)
    pid = int((work / "supervisor.pid").read_text())
    deadline = time.time() + (0 if fresh else knobs.wait_s)
    while True:
        time.sleep(1 if fresh else POLL_S)
        status = read_json(work / "status.json")
        wanted = next_part(status, manifest, store)
        if wanted or fresh or news(status, back) or not processes.running(pid):
            break
        if time.time() > deadline:
            break
    return report(knobs, root, env, back, manifest, status, pid)


def report(knobs, root: Path, env, back: plan.Back, manifest: dict, status: dict, pid: int) -> int:
    work, store = root / WORK, root / STORE
    items, left = [], []
    out = env.get("OUT")
    if out:
        items, left = collect.fill_out(work, Path(out), status, set(back.items))
    print_table(status, manifest, store)
    gone = not status["done"] and not processes.running(pid)
    if gone:
        print(f"the supervisor (pid {pid}) is gone before the plan was done: see plan.log")
        return 1
    acked = plan.Back(
        since=status["since"],
        starts=status["starts"],
        speed=status["speed"].get("chosen"),
        items=tuple(dict.fromkeys([*back.items, *items])),
    )
    if status["done"] and not left:
        print("the plan is done and everything came back: give the machine back now (give_back)")
        return 0
    part = next_part(status, manifest, store)
    carried = [str(carry.BASE)] + ([str(carry.PARTS / part)] if part else [])
    size = manifest.get("tree_bytes", 0) + manifest.get("base_bytes", 0)
    size += manifest["parts"][part]["bytes"] if part else 0
    print(
        f"next call, within 30 s of this one's return (timeout_s 600), carrying "
        f"{json.dumps(carried)} (about {size / carry.MiB:.1f} MiB):"
    )
    print(f"  {plan.next_command(env, acked)}")
    return 3


def print_table(status: dict, manifest: dict, store: Path) -> None:
    """The short account a call prints: GPU time, the data and its parts, the speed tries, the
    probe, each run."""
    used, left = plan.gpu_time(status, time.time())
    print(
        f"lease: phase {status['phase']}{', done' if status['done'] else ''}; GPU time used "
        f"{used:,.0f} s, left {left:,.0f} s of {status['lease_s']:,.0f} ({status['starts']} "
        f"machine start(s) of {status['start_s']:.0f} s counted); {status['device']}, "
        f"{status['versions']}"
    )
    on_machine = carry.present(store, manifest)
    for dataset, entry in status["data"].items():
        if entry["state"] == "travelling":
            here = [p for p in entry["parts"] if p in on_machine]
            todo = [p for p in entry["parts"] if p not in here]
            wanted = (
                "wanted" if dataset in status.get("wanted", []) else "not wanted: no run of it fits"
            )
            print(
                f"data {dataset}: travelling; parts on this machine {here}, to come {todo} "
                f"({wanted})"
            )
        else:
            print(f"data {dataset}: {entry['state']} {entry.get('why') or entry['label']}")
    for t in status["speed"]["tries"]:
        print(f"speed {t['name']}: {t.get('result', 'running')}")
    if status["speed"].get("chosen"):
        print(f"speed: the runs train with {status['speed']['chosen']}")
    for name, p in status["probe"].items():
        print(f"probe {name}: {json.dumps(p)[:200]}")
    print(f"{'run':30} {'state':14} {'step':>15} {'images/s':>9} {'test error':>10}  time")
    for name, run in status["runs"].items():
        error = run.get("test_error")
        if run["state"] == "running":
            end = run.get("projected_end_s")
            when = f"started, projected {run['projected_s']:,} s" + (
                f", ends in {end:,} s" if end is not None else ""
            )
        elif "wall_s" in run:
            when = f"{run['wall_s']:,} s"
        elif run["state"] == "done earlier":
            when = "its results came back from a machine since lost"
        else:
            when = run.get("fits", "")
        print(
            f"{name:30} {run['state'][:14]:14} {run.get('step', 0):>7,}/{run['steps']:<7,} "
            f"{run.get('images_per_s') or 0:>9,.0f} "
            f"{'-' if error is None else f'{error:.4f}':>10}  "
            f"{run.get('why') or when}"
        )
