"""The study near_identity summarised by depth (resnet_noBN/studies/near_identity_study.py,
``launch/near_identity.py --summarize``): the committed summary made again from the committed
records, the rows and slopes of records whose figures are known, the picture's lines, and a
study with nothing measured refused. Plain files: no Keras."""

import json
import math
import shutil
from pathlib import Path

import pytest

from resnet_noBN import plotting
from resnet_noBN.configs.errors import InputError
from resnet_noBN.studies import near_identity_study as study
from resnet_noBN.theory.near_identity import fitted_slope
from resnet_noBN.trained.model_paths import NEAR_IDENTITY_FILE

COMMITTED = Path(__file__).resolve().parents[1] / "results" / "near_identity"


def test_the_committed_summary_is_the_committed_records_summarised(tmp_path):
    """Each committed run's near_identity.json and metrics.jsonl, and nothing else, summarised
    again: the summary returned and written (one space indented) is the committed one, every
    figure within 1e-9 (a least-squares fit's last bits may differ on another CPU's BLAS); a
    line per init and one a series with the slopes results/near_identity/README.md quotes."""
    for run in sorted((COMMITTED / "runs").iterdir()):
        (tmp_path / "runs" / run.name).mkdir(parents=True)
        for name in (NEAR_IDENTITY_FILE, "metrics.jsonl"):
            shutil.copy(run / name, tmp_path / "runs" / run.name / name)
    lines = []
    result = study.summarize(str(tmp_path), lines.append)
    assert (tmp_path / study.SUMMARY).read_text() == json.dumps(result, indent=1) + "\n"
    assert_close(result, json.loads((COMMITTED / study.SUMMARY).read_text()))
    assert (tmp_path / study.PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(lines) == 2 * (1 + 8)
    assert lines[0] == "fixup (blocks 3, 6, 12, 24):" and lines[9] == "paper (blocks 3, 6, 12, 24):"
    assert lines[2] == "  trained_mean_ratio: slope -0.88 [-0.91, -0.86]"
    assert lines[5] == "  initialisation_largest_ratio: no slope"
    assert lines[11] == "  trained_mean_ratio: slope -0.86 [-1.00, -0.73]"
    assert lines[17] == "  initialisation_mean_lipschitz: slope 0.08 [0.01, 0.16]"


def assert_close(got, expected, where="summary"):
    """``got`` equal to ``expected`` in every key, item and string, each number within 1e-9."""
    if isinstance(expected, dict):
        assert sorted(got) == sorted(expected), where
        for key in expected:
            assert_close(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_close(a, b, f"{where}.{i}")
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), where
    else:
        assert got == expected and type(got) is type(expected), where


def measures(scale: float, blocks: int) -> dict:
    """A network's four figures: the largest ratio ``scale``/ℓ, the rest fixed multiples."""
    largest = scale / blocks
    return {
        "largest_ratio": largest,
        "mean_ratio": largest / 2,
        "largest_lipschitz": 10 * largest,
        "mean_lipschitz": 4 * largest,
    }


def write_run(root: Path, name: str, block: str, blocks: int, seed: int, errors=(), init=True):
    """A measured run: its near_identity.json (step 4,000; at initialisation a constant 0.01, or
    none) and, where ``errors`` are given, a metrics.jsonl of that many evaluations."""
    folder = root / "runs" / name
    folder.mkdir(parents=True)
    record = {
        "network": {"block": block},
        "residual_blocks": blocks,
        "seed": seed,
        "step": 4000,
        "trained": measures(6.0 * (1 + seed), blocks),
        "initialisation": measures(0.01 * blocks, blocks) if init else None,
    }
    (folder / NEAR_IDENTITY_FILE).write_text(json.dumps(record))
    if errors:
        (folder / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"step": 100 * i, "test_error": e}) + "\n" for i, e in enumerate(errors)
            )
        )


@pytest.fixture
def measured_study(tmp_path):
    """Four runs of the paper's init at depths 3, 6 and 12 (two seeds at 6, seed 4's figures
    five times seed 0's), written in another order than depth's; two of another block at depths
    3 and 6 (seed 1: twice the paper's seed 0; no metrics, none at initialisation)."""
    write_run(tmp_path, "a", "hardt_ma", 12, 0, errors=(0.5, 0.25))
    write_run(tmp_path, "b", "hardt_ma", 6, 4, errors=(0.5, 0.3))
    write_run(tmp_path, "c", "hardt_ma", 3, 0, errors=(0.4,))
    write_run(tmp_path, "d", "hardt_ma", 6, 0, errors=(0.7, 0.5, 0.35))
    write_run(tmp_path, "e", "zero_last", 3, 1, init=False)
    write_run(tmp_path, "f", "zero_last", 6, 1, init=False)
    return tmp_path


def test_runs_are_rows_by_depth_then_seed_with_their_slopes(measured_study):
    """summary: a row a run, by depth then seed, each with its layers (2ℓ + 2), its step, its
    last test error (None without metrics) and its eight figures (None where the record has no
    measure at initialisation); an init named by its block (hardt_ma: paper; others by their
    own name); each series' slope that of fitted_slope on its depths."""
    result = study.summary(study.runs(str(measured_study)))
    assert sorted(result) == ["paper", "zero_last"]
    rows = result["paper"]["runs"]
    assert [(r["run"], r["blocks"], r["seed"]) for r in rows] == [
        ("c", 3, 0),
        ("d", 6, 0),
        ("b", 6, 4),
        ("a", 12, 0),
    ]
    assert [r["layers"] for r in rows] == [8, 14, 14, 26]
    assert [r["test_error"] for r in rows] == [0.4, 0.35, 0.3, 0.25]
    assert {r["step"] for r in rows} == {4000}
    assert rows[2]["trained_largest_ratio"] == 5.0 and rows[2]["trained_mean_lipschitz"] == 20.0
    assert rows[0]["initialisation_largest_ratio"] == 0.01
    assert rows[0]["initialisation_mean_ratio"] == 0.005
    assert rows[0]["initialisation_largest_lipschitz"] == pytest.approx(0.1, rel=1e-15)
    depths = [3, 6, 6, 12]
    for key, fit in result["paper"]["slopes"].items():
        assert fit == fitted_slope(depths, [r[key] for r in rows]), key
    assert result["paper"]["slopes"]["initialisation_mean_ratio"]["slope"] == pytest.approx(0.0)
    other = result["zero_last"]["runs"]
    assert [(r["run"], r["layers"], r["test_error"]) for r in other] == [
        ("e", 8, None),
        ("f", 14, None),
    ]
    assert other[0]["initialisation_mean_lipschitz"] is None
    assert [r["trained_largest_ratio"] for r in other] == [4.0, 2.0]
    slopes = result["zero_last"]["slopes"]
    assert slopes["trained_largest_ratio"]["slope"] == pytest.approx(-1.0, abs=1e-12)
    assert "low" not in slopes["trained_largest_ratio"]  # two depths: no interval
    assert slopes["initialisation_largest_ratio"] is None


def drawn(result: dict, monkeypatch) -> list:
    """The axes study.plot draws for ``result``, the figure caught before it is saved."""
    caught = {}
    monkeypatch.setattr(plotting, "save", lambda fig, path: caught.update(fig=fig) or path)
    assert study.plot(result, "x.png") == "x.png"
    assert tuple(caught["fig"].get_size_inches()) == pytest.approx((3 * 5.2, 4.4))
    return caught["fig"].axes


def test_the_picture_draws_each_series_its_references_and_the_errors(measured_study, monkeypatch):
    """plot: the ratio and the bound against ℓ on log-log axes, a line a series in its init's
    colour, with a marker at each run (trained thick, at initialisation thin; largest solid,
    mean dashed; its slope, and its interval where it has one, in its label; none where the run
    has no figure), 1/ℓ (dotted) and log ℓ / ℓ (dash-dot) in grey from the largest trained
    figure at the least depth, and the test error in percent by depth; a labelled tick at each
    depth run and no minor tick; the titles and legends."""
    result = study.summary(study.runs(str(measured_study)))
    ratio_ax, bound_ax, error_ax = drawn(result, monkeypatch)
    paper, other = plotting.colour(0), plotting.colour(1)
    for ax, measure, factor in ((ratio_ax, "ratio", 1), (bound_ax, "lipschitz", 10)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert len(lines) == 4 + 2 + 2  # the paper's four, zero_last's two, two references
        fit = result["paper"]["slopes"][f"trained_largest_{measure}"]
        interval = f"[{fit['low']:.2f}, {fit['high']:.2f}]"
        trained = lines[f"paper, trained, largest: slope {fit['slope']:.2f} {interval}"]
        assert list(trained.get_xdata()) == [3, 6, 6, 12]
        assert list(trained.get_ydata()) == [factor * v for v in (2.0, 1.0, 5.0, 0.5)]
        assert (trained.get_linestyle(), trained.get_linewidth()) == ("-", 2.0)
        assert (trained.get_marker(), trained.get_markersize(), trained.get_color()) == (
            "o",
            6.0,
            paper,
        )
        mean = next(v for k, v in lines.items() if k.startswith("paper, initialisation, mean"))
        assert (mean.get_linestyle(), mean.get_linewidth(), mean.get_markersize()) == (
            "--",
            0.8,
            pytest.approx(2.4),
        )
        expected = {"ratio": 0.005, "lipschitz": 0.04}[measure]
        assert list(mean.get_ydata()) == pytest.approx([expected] * 4)
        slope = result["zero_last"]["slopes"][f"trained_largest_{measure}"]["slope"]
        assert [k for k in lines if k.startswith("zero_last")] == [
            f"zero_last, trained, largest: slope {slope:.2f}",  # two depths: no interval
            f"zero_last, trained, mean: slope {slope:.2f}",
        ]
        assert lines[f"zero_last, trained, largest: slope {slope:.2f}"].get_color() == other
        top = 4.0 * factor  # the largest trained figure at ℓ = 3: zero_last's, not b's at 6
        inverse, log_over = lines["1/ℓ"], lines["log ℓ / ℓ"]
        assert list(inverse.get_xdata()) == list(log_over.get_xdata()) == [3, 6, 12]
        assert list(inverse.get_ydata()) == pytest.approx([top, top / 2, top / 4])
        assert list(log_over.get_ydata()) == pytest.approx(
            [top * math.log(d) * 3 / (math.log(3) * d) for d in (3, 6, 12)]
        )
        assert (inverse.get_linestyle(), log_over.get_linestyle()) == (":", "-.")
        assert inverse.get_color() == log_over.get_color() == "grey"
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
        assert ax.get_legend().get_texts()[0].get_fontsize() == 5.5
    for ax in (ratio_ax, bound_ax, error_ax):
        assert list(ax.get_xticks()) == [3, 6, 12]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["3", "6", "12"]
        assert ax.get_xlabel() == "residual blocks ℓ"
        minor = ax.xaxis.get_minor_ticks()
        assert not any(t.tick1line.get_visible() or t.label1.get_visible() for t in minor)
    (errors,) = error_ax.get_lines()
    assert (errors.get_label(), errors.get_color()) == ("paper", paper)
    assert (errors.get_linestyle(), errors.get_marker()) == ("-", "o")
    assert list(errors.get_xdata()) == [3, 6, 6, 12]
    assert list(errors.get_ydata()) == pytest.approx([40.0, 35.0, 30.0, 25.0])
    assert (error_ax.get_xscale(), error_ax.get_ylabel()) == ("log", "test error (%)")
    assert error_ax.get_legend().get_texts()[0].get_fontsize() == 7
    assert [ax.get_title() for ax in (ratio_ax, bound_ax, error_ax)] == [
        "‖h(x)‖ / ‖s(x)‖ on the test images",
        "Lipschitz bound ‖C2‖·‖C1‖ of each branch",
        "test error by depth",
    ]


@pytest.mark.filterwarnings("error")  # no empty legend where no run was evaluated
def test_references_need_two_depths(measured_study, monkeypatch):
    """1/ℓ and log ℓ / ℓ are drawn from two depths on, not for one."""
    result = study.summary(study.runs(str(measured_study)))
    two = {"zero_last": result["zero_last"]}
    one = {"zero_last": {**two["zero_last"], "runs": two["zero_last"]["runs"][:1]}}
    labels = [
        [line.get_label() for line in drawn(r, monkeypatch)[0].get_lines()] for r in (two, one)
    ]
    assert labels[0][-2:] == ["1/ℓ", "log ℓ / ℓ"]
    assert not {"1/ℓ", "log ℓ / ℓ"} & set(labels[1]) and len(labels[1]) == 2


def test_summary_refuses_a_study_with_nothing_measured(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "metrics.jsonl").write_text("")
    with pytest.raises(InputError) as excinfo:
        study.summarize(str(tmp_path))
    assert str(excinfo.value) == (
        f"--summarize {tmp_path}: no run there holds near_identity.json; measure each run first "
        "(python launch/near_identity.py --model_dir=RUN)"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "metrics.jsonl", "runs"]
