"""The README's ten-minute demo runs as written, on generated data: its command's flags, with the
data path, a few steps and a folder of the test's own added after them (absl takes the last)."""

import json
import re
import shlex

from launchers import REPO, run


def readme_demo_flags() -> list[str]:
    """The flags of the README's demo command (the block that trains into runs/demo)."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    (demo,) = [b for b in blocks if "--model_dir=runs/demo" in b]
    words = shlex.split(demo.replace("\\\n", " "))
    return words[words.index("launch/cifar.py") + 1 :]


def test_the_readme_demo_runs_as_written_on_generated_data(tmp_path, write_cifar):
    flags = readme_demo_flags()
    assert flags[0] == "--model=small" and "--train_steps=8000" in flags
    data = tmp_path / "cifar-10-batches-bin"
    write_cifar(data, "cifar10", 64)
    proc = run(
        "launch/cifar.py",
        *flags,
        f"--data_path={data}",
        "--train_steps=4",
        "--lr_boundaries=2,3",
        "--eval_every=2",
        "--batch_size=32",
        f"--model_dir={tmp_path / 'demo'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["final_step"] == 4 and result["test_examples"] == 64
    config = json.loads((tmp_path / "demo" / "config.json").read_text())
    assert config["network"]["num_residual_units"] == 1
    assert config["network"]["stage_widths"] == [16, 32, 64]
    assert "the first call took " in proc.stdout and " steps left take " in proc.stdout
