"""launch/compare_runs.py: several runs' curves in one PNG and their last and best figures."""

import json
from pathlib import Path

import launchers


def compare(*args):
    return launchers.run("launch/compare_runs.py", *args)


def write_run(folder: Path, errors: dict[int, float]) -> Path:
    folder.mkdir()
    lines = [
        json.dumps({"step": s, "test_error": e, "train_precision": 1 - e / 2})
        for s, e in errors.items()
    ]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_two_runs_in_one_png_with_their_last_and_best(tmp_path):
    a = write_run(tmp_path / "a", {500: 0.9, 1000: 0.7, 1500: 0.75})
    b = write_run(tmp_path / "b", {500: 0.8, 1000: 0.6})
    png = tmp_path / "out" / "both.png"
    proc = compare(f"--run=correct={a}", f"--run=original 2016={b}", f"--output={png}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["runs"] == {
        "correct": {"last_step": 1500, "last_test_error": 0.75, "best_test_error": 0.7},
        "original 2016": {"last_step": 1000, "last_test_error": 0.6, "best_test_error": 0.6},
    }
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_folder_without_evaluations_is_one_line(tmp_path):
    a = write_run(tmp_path / "a", {500: 0.9})
    (tmp_path / "empty").mkdir()
    png = tmp_path / "both.png"
    proc = compare(f"--run=a={a}", f"--run=b={tmp_path / 'empty'}", f"--output={png}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --run b: {tmp_path / 'empty'} has no metrics.jsonl (no evaluation yet); name a "
        "folder launch/cifar.py has evaluated in"
    )
    assert not png.exists()
    bad = compare("--run=nodir", f"--output={png}")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: --run=nodir is not NAME=MODEL_DIR; write e.g. --run=baseline=runs/a"
    )


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's IHDR chunk."""
    header = path.read_bytes()[16:24]
    return int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")


def test_more_than_three_runs_get_their_legend_beside_the_curves(tmp_path):
    """Up to 3 runs: a 6 x 4 inch figure, the legend inside; from 4 on (a legend of 8 lines and
    more would hide the curves): 11 x 4.5 inches, the legend to the right of the axes."""
    from resnet_noBN.trainers import run_log

    records = [{"step": s, "test_error": 0.5, "train_precision": 0.6} for s in (100, 200)]
    for n, size in ((3, (720, 480)), (4, (1320, 540))):
        png = tmp_path / f"{n}.png"
        run_log.plot_error_curves({f"run {i}": records for i in range(n)}, str(png), "t")
        assert png_size(png) == size
