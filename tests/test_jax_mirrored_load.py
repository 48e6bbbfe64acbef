"""`--strategy=mirrored` on JAX with 2 forced CPU devices runs to the end when three such runs
share the machine's cores and their calls dispatch a hundred steps each (``JaxTrainer.run_steps``
bounds the steps in flight on a multi-device CPU mesh; without that bound XLA aborts each run
after 40 s in a collective, rc 134).

Each run is a subprocess with KERAS_BACKEND=jax and ``sys.modules["tensorflow"] = None``. A run
of one step goes first, on the three runs' schedule (``--schedule_steps``), so its step is theirs.
It fills the session's compilation cache (tests/conftest.py): the three read every program from
it, none compiles, and they reach their long calls together.
"""

import pytest

pytest.importorskip("jax")
from test_tensorflow_free_backends import final_json, launch  # noqa: E402

RUNS = 3
# one call of this many steps, 3 times the 32 unfinished computations XLA admits per device.
# Without the bound, runs of 100 aborted in 5 tries of 5 (300: 1 of 1; 50: 1 of 3), 2026-12-06;
# after the one-step run (their programs read from the cache), in 2 tries of 2, 2026-12-07
STEPS = 100


def test_three_concurrent_mirrored_runs_of_long_calls_all_finish_alike(
    tmp_path, write_cifar, monkeypatch
):
    """Three runs at once, 2 CPU devices each, batch 8, each in one call of :data:`STEPS` steps
    dispatched back to back, after a run of one step with the same flags: every run exits 0, at
    its last step, with the same weights (same seed)."""
    data = tmp_path / "data"
    write_cifar(data / "cifar-10-batches-bin", "cifar10", 8)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

    def launched(folder: str, steps: int, *more: str):
        every = ("train_steps", "log_every", "eval_every", "checkpoint_every")
        return launch(
            [
                "--strategy=mirrored",
                "--model=small",
                f"--data_path={data}",
                f"--model_dir={tmp_path / folder}",
                "--batch_size=8",
                "--eval_batch_size=16",
                "--learning_rate=0.005",
                "--seed=4",
                *(f"--{name}={steps}" for name in every),
                *more,
            ]
        )

    primer = launched("primer", 1, f"--schedule_steps={STEPS}")
    output = primer.communicate(timeout=600)[0]
    assert primer.returncode == 0, output[-3000:]
    runs = [launched(f"run{i}", STEPS) for i in range(RUNS)]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-3000:]
    finals = [final_json(output) for output in outputs]
    assert [final["final_step"] for final in finals] == [STEPS] * RUNS
    assert len({final["weights_sha256"] for final in finals}) == 1
