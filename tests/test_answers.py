"""trainers.answers, studies.original_eval and launch/figures.py: which test images each evaluation
got right, kept in the run's folder, and the figures computed from them: the whole-test final
and best, and the original 2016 code's best over 5,000-image windows; trainers.health's totals
of a compiled call."""

import json

import launchers
import numpy as np
import pytest

from resnet_noBN.studies import thinned
from resnet_noBN.studies.original_eval import figures, window_starts
from resnet_noBN.trainers import health
from resnet_noBN.trainers.answers import (
    ANSWERS_FILE,
    Answers,
    Evaluation,
    decode,
    final_predictions,
    read_answers,
)


def correct_bits(first_half: int, second_half: int) -> np.ndarray:
    """10,000 answers: ``first_half`` of images 0..4,999 right, ``second_half`` of the rest."""
    bits = np.zeros(10_000, bool)
    bits[:first_half] = True
    bits[5_000 : 5_000 + second_half] = True
    return bits


def test_answers_are_gathered_in_the_splits_order_and_read_back():
    rng = np.random.default_rng(0)
    correct, predicted = rng.random(10) < 0.5, rng.integers(0, 100, 10)
    order = rng.permutation(10)  # the batches of replicas and pipelines come in any order
    parts = [
        (order[i : i + 4], correct[order[i : i + 4]], predicted[order[i : i + 4]])
        for i in (0, 4, 8)
    ]
    answers = Answers.gathered(parts)
    assert np.array_equal(answers.correct, correct)
    assert np.array_equal(answers.predicted, predicted)
    assert Answers.gathered([(np.array([0, 0, 1]), correct[:3], predicted[:3])]) is None
    assert Answers.gathered([(np.array([1, 2]), correct[:2], predicted[:2])]) is None


def test_a_run_keeps_a_line_per_evaluation_and_its_final_predictions(tmp_path):
    answers = Answers(np.array([True, False, True]), np.array([3, 7, 300]))
    path = tmp_path / ANSWERS_FILE
    path.write_text(
        answers.line(5, final=False)
        + "\n"
        + Answers(~answers.correct, answers.predicted).line(10, final=False)
        + "\n"
        + answers.line(10, final=True)  # a resumed run evaluates step 10 again: the later wins
        + "\n"
    )
    read = read_answers(path)
    assert [e.step for e in read] == [5, 10]
    assert np.array_equal(read[0].correct, answers.correct) and read[0].predicted is None
    assert np.array_equal(read[1].correct, answers.correct)
    assert read[1].predicted.tolist() == [3, 7, 300]  # uint16 where a class is past 255
    assert json.loads(path.read_text().splitlines()[2])["predicted_dtype"] == "uint16"
    assert read_answers(tmp_path / "absent.jsonl") == []


def test_answers_keep_their_types_and_the_narrowest_type_of_their_classes():
    """Gathered and read back, the answers are bools and the classes int64; classes up to 255
    are stored as uint8, 256 and over as uint16 (256 as uint8 would read back 0); an empty
    split's line reads back empty."""
    gathered = Answers.gathered([(np.array([1, 0]), np.array([1, 0]), np.array([255, 3], "i4"))])
    assert gathered.correct.dtype == bool and gathered.correct.tolist() == [False, True]
    assert gathered.predicted.dtype == np.int64 and gathered.predicted.tolist() == [3, 255]
    for classes, dtype in (([0, 255], "uint8"), ([0, 256], "uint16")):
        record = json.loads(Answers(np.array([True, False]), np.array(classes)).line(3, True))
        assert record["predicted_dtype"] == dtype
        read = decode(record)
        assert read.predicted.dtype == np.int64 and read.predicted.tolist() == classes
        assert read.correct.dtype == bool and read.correct.tolist() == [True, False]
    empty = decode(json.loads(Answers(np.zeros(0, bool), np.zeros(0, int)).line(1, True)))
    assert (empty.step, empty.correct.size, empty.predicted.size) == (1, 0, 0)


def test_the_final_predictions_are_the_last_evaluation_with_classes(tmp_path):
    """Classes at steps 10, 30 and 50, none at 20 and 60: step 50's; a file without classes
    has none."""
    path, right = tmp_path / ANSWERS_FILE, np.array([True, False])
    lines = [
        Answers(right, np.array([step, step + 1])).line(step, final=step in (10, 30, 50))
        for step in (10, 20, 30, 50, 60)
    ]
    path.write_text("\n".join(lines) + "\n")
    final = final_predictions(str(path))
    assert final.step == 50 and final.predicted.tolist() == [50, 51]
    path.write_text(lines[1] + "\n")
    assert final_predictions(str(path)) is None


def test_the_original_windows_cycle_through_the_test_split():
    assert window_starts(10_000) == [0, 5_000]
    assert window_starts(1_017) == [0]
    assert window_starts(12_000) == [
        0,
        5_000,
        10_000,
        3_000,
        8_000,
        1_000,
        6_000,
        11_000,
        4_000,
        9_000,
        2_000,
        7_000,
    ]


def test_the_figures_of_a_run_whose_answers_are_known():
    """Three evaluations; the original code's figure is the best of one window each (the first
    half, then the second, then the first again) and the best of either window each."""
    evaluations = [
        Evaluation(500, correct_bits(4_000, 3_000), None),  # halves 80%, 60%: whole 70%
        Evaluation(1000, correct_bits(3_000, 4_500), None),  # 60%, 90%: whole 75%
        Evaluation(1500, correct_bits(3_600, 3_500), None),  # 72%, 70%: whole 71%
    ]
    result = figures(evaluations)
    assert result == {
        "evaluations": 3,
        "test_examples": 10_000,
        "final_step": 1500,
        "final_error": pytest.approx(29.0),
        "best_error": pytest.approx(25.0),
        "best_step": 1000,
        # one window each: 80% (first half at 500), 90% (second half at 1000), 72% (first at 1500)
        "original_2016_error": pytest.approx(10.0),
        "original_2016_step": 1000,
        "original_2016_either_window_error": pytest.approx(10.0),
        "original_2016_either_window_step": 1000,
    }
    # a second half that is good only where the first evaluation reads the first half
    one_each = figures(evaluations[:1] + [Evaluation(1000, correct_bits(4_600, 1_000), None)])
    assert one_each["original_2016_error"] == pytest.approx(20.0)  # 80% (first), 20% (second)
    assert one_each["original_2016_either_window_error"] == pytest.approx(8.0)  # 92%
    assert figures([]) == {}


def test_a_figure_is_a_percentage_to_four_decimals():
    """On the slices' 1,017 test images (one window: the whole split), 317 wrong is 31.170108...%,
    written 31.1701 (a hundredth of an image in 10,000); all right, 0.0. The window of a split
    exactly its size is the whole split too."""
    right = np.zeros(1_017, bool)
    right[:700] = True
    result = figures([Evaluation(100, right, None)])
    assert (result["final_error"], result["original_2016_error"]) == (31.1701, 31.1701)
    assert result["original_2016_either_window_error"] == 31.1701
    assert figures([Evaluation(100, ~np.zeros(1_017, bool), None)])["final_error"] == 0.0
    assert window_starts(5_000) == [0]


def test_the_figures_command_reads_a_run_folder(tmp_path):
    lines = [
        Answers(correct_bits(4_000, 3_000), np.zeros(10_000, int)).line(500, final=False),
        Answers(correct_bits(3_000, 4_500), np.zeros(10_000, int)).line(1000, final=True),
    ]
    (tmp_path / ANSWERS_FILE).write_text("\n".join(lines) + "\n")
    proc = launchers.run("launch/figures.py", f"--model_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert (result["final_error"], result["best_error"]) == (25.0, 25.0)
    assert result["original_2016_error"] == pytest.approx(10.0)
    # thinned to its committed form (studies/thinned.py), the folder gives the same figures, of
    # both evaluations, though its answers.jsonl keeps the last one's only
    thinned.thin(str(tmp_path))
    assert len((tmp_path / ANSWERS_FILE).read_text().splitlines()) == 1
    proc = launchers.run("launch/figures.py", f"--model_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == result
    assert result["evaluations"] == 2
    missing = launchers.run("launch/figures.py", f"--model_dir={tmp_path / 'none'}")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'none' / ANSWERS_FILE} does not exist: the run kept no answers (a run "
        "from before them, or not a run's folder); write them with launch/evaluate.py "
        f"--every_checkpoint --answers_to={tmp_path / 'none' / ANSWERS_FILE}"
    ]


def parts(correct, cross_entropy, weight_decay, max_abs_logit):
    """``recipe.objective``'s parts of one step."""
    return dict(
        correct=correct,
        cross_entropy=cross_entropy,
        weight_decay=weight_decay,
        max_abs_logit=max_abs_logit,
    )


def test_a_calls_health_sums_its_steps_keeps_the_last_gradient_and_the_largest_logit():
    # two steps of loss 2.5 (cross-entropy 2.4 + decay 0.1), 10 of 16 right, |g| 3 then 4
    first = health.step_metrics(2.5, parts(10.0, 2.4, 0.1, 7.0), 16, 9.0)
    second = health.step_metrics(2.5, parts(10.0, 2.4, 0.1, 5.0), 16, 16.0)
    totals = health.to_numpy(health.add_step(health.add_step(health.zeros(), first), second))
    expected = dict(
        loss=5.0,
        correct=20.0,
        examples=32.0,
        cross_entropy=4.8,
        weight_decay=0.2,
        grad_norm_sq=16.0,
        max_abs_logit=7.0,
    )
    assert list(totals) == list(expected)
    assert totals == pytest.approx(expected, rel=1e-6)
    values = health.scalars(totals, 2)
    assert values == pytest.approx(
        {
            "loss": 2.5,
            "precision": 20 / 32,
            "cross_entropy": 2.4,
            "weight_decay": 0.1,
            "grad_norm": 4.0,
            "max_abs_logit": 7.0,
        }
    )
    # one-step calls of the parameter-server trainer, combined as one call
    combined = health.combine_calls([health.to_numpy(first), health.to_numpy(second)])
    assert combined == pytest.approx(expected, rel=1e-6)
    assert health.text({**values, "weight_norm": 12.0}) == (
        "cross_entropy 2.4, weight_decay 0.1, weight_norm 12, grad_norm 4, max_abs_logit 7"
    )


def test_a_calls_gradient_is_its_last_steps_and_its_logit_the_largest():
    """|g|^2 16 then 9: the call's is 9, the last step's, not the largest; |logit| 7 then 5: 7.
    The same for one-step calls combined (the parameter-server trainer)."""
    first = health.step_metrics(2.5, parts(10.0, 2.4, 0.1, 7.0), 16, 16.0)
    second = health.step_metrics(2.5, parts(10.0, 2.4, 0.1, 5.0), 16, 9.0)
    totals = health.to_numpy(health.add_step(health.add_step(health.zeros(), first), second))
    assert (totals["grad_norm_sq"], totals["max_abs_logit"]) == (9.0, 7.0)
    combined = health.combine_calls([health.to_numpy(first), health.to_numpy(second)])
    assert (combined["grad_norm_sq"], combined["max_abs_logit"]) == (9.0, 7.0)
    assert all(np.asarray(value).dtype == np.float32 for value in first.values())


def test_the_gradient_norm_squares_every_gradient_in_float32_and_skips_a_missing_one():
    """(3, 4), none, and a bfloat16 1 + 2^-7 (its square 1.0156860 in float32, 1.015625 in
    bfloat16): 25 + 1.0156860, in float32."""
    import ml_dtypes

    grads = [np.array([3.0, 4.0], np.float32), None, np.array([1 + 2**-7], ml_dtypes.bfloat16)]
    total = health.grad_norm_sq(grads)
    assert np.asarray(total).dtype == np.float32
    assert float(total) == np.float32(25 + (1 + 2**-7) ** 2)


def test_a_gradient_norm_is_the_root_of_its_square_and_nan_without_one():
    """0.25 logs 0.5, 0 logs 0, a negative one (no squared norm) NaN, not a ValueError."""
    call = dict(
        loss=2.0, correct=1.0, examples=2.0, cross_entropy=1.0, weight_decay=1.0, max_abs_logit=3.0
    )
    assert health.scalars({**call, "grad_norm_sq": 0.25}, 1)["grad_norm"] == 0.5
    assert health.scalars({**call, "grad_norm_sq": 0.0}, 1)["grad_norm"] == 0.0
    assert np.isnan(health.scalars({**call, "grad_norm_sq": -1.0}, 1)["grad_norm"])
