"""runs.record and runs.run_config: config.json records the whole run, and a resumed run is
refused, naming the field, where it changes the objective or the stream; the committed runs'
config.json (older, flat records) still resume with their own flags. Checkpoints are not
committed: the config check is what is tested here, on copies."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from resnet_noBN.configs import experiments
from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import InputError, StorageError
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.configs.run_config import RunConfig
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.runs import record, run_config

RESULTS = Path(__file__).resolve().parents[1] / "results"
CIFAR100 = sorted((RESULTS / "cifar100_cpu").glob("*/config.json"))
CLAIMS = sorted((RESULTS / "claims" / "runs").glob("*/config.json"))
# the flags of results/cifar100_cpu/README.md's command (and of the CIFAR-10 JPEG run's)
CPU_RUN = TrainConfig(
    train_steps=8000, lr_boundaries=(4000, 6667), eval_every=500, checkpoint_every=500
)
QUARTER = {"stage_widths": (16, 32, 64)}
# the committed runs ran in Keras' form of momentum, the default before 2026-11-28: they resume
# with it, and refuse today's default (the 2016 form)
COMMITTED_RUN = dataclasses.replace(CPU_RUN, optimizer="momentum")


def copied(tmp_path, config: Path) -> str:
    shutil.copy(config, tmp_path / record.CONFIG_FILE)
    return str(tmp_path)


def resume(model_dir, network, recipe=CPU_RUN, data=None, precision="float32"):
    """What launch/cifar.py checks before resuming ``model_dir`` with these configs."""
    run = RunConfig(network, data or DataConfig(), recipe, RuntimeConfig(precision=precision))
    return run_config.checked_record(run, model_dir, "tensorflow", 0)


@pytest.mark.parametrize("config", CIFAR100, ids=lambda p: p.parent.name)
def test_the_committed_cifar100_runs_resume_with_their_flags_and_refuse_a_change(tmp_path, config):
    assert len(CIFAR100) == 4
    saved = json.loads(config.read_text())
    model_dir = copied(tmp_path, config)
    data = DataConfig(dataset="cifar100", cifar100_layout=saved["cifar100_layout"])
    network = ModelConfig(num_classes=100, **QUARTER)
    # the same flags; and what a resumed run may change: more steps, other intervals, the
    # evaluation batch, the precision, the layout of the convolutions, another copy of the data
    resume(model_dir, network, COMMITTED_RUN, data=data)
    with pytest.raises(InputError, match=r"\(optimizer='momentum' there, 'momentum_2016' now\)"):
        resume(model_dir, network, CPU_RUN, data=data)
    resume(
        model_dir,
        dataclasses.replace(network, data_format="channels_first"),
        dataclasses.replace(
            COMMITTED_RUN, train_steps=12_000, eval_every=1000, eval_batch_size=100
        ),
        dataclasses.replace(data, data_path=None, data_dir="/elsewhere"),
        precision="mixed_bfloat16",
    )
    with pytest.raises(InputError) as refused:
        resume(
            model_dir,
            dataclasses.replace(network, num_residual_units=3),
            COMMITTED_RUN,
            data=data,
        )
    assert str(refused.value) == (
        f"--model_dir {model_dir} holds a run of another model (num_residual_units=9 there, 3 "
        "now); use a new --model_dir or the same flags"
    )
    other_layout = "official" if data.cifar100_layout == "original_2016" else "original_2016"
    with pytest.raises(InputError, match=f"cifar100_layout='{data.cifar100_layout}' there"):
        resume(
            model_dir,
            network,
            COMMITTED_RUN,
            data=dataclasses.replace(data, cifar100_layout=other_layout),
        )
    # a switch added since stands for its default (label smoothing 0): another is refused
    with pytest.raises(InputError, match=r"\(label_smoothing=0.0 there, 0.1 now\)"):
        resume(
            model_dir, network, dataclasses.replace(COMMITTED_RUN, label_smoothing=0.1), data=data
        )


def test_the_committed_cifar10_run_resumes(tmp_path):
    model_dir = copied(tmp_path, RESULTS / "cifar10_jpeg_cpu" / "config.json")
    resume(model_dir, ModelConfig(**QUARTER), COMMITTED_RUN)
    with pytest.raises(InputError, match=r"\(num_classes=10 there, 100 now; dataset='cifar10' th"):
        resume(
            model_dir,
            ModelConfig(num_classes=100, **QUARTER),
            COMMITTED_RUN,
            data=DataConfig("cifar100"),
        )


def test_the_committed_claims_runs_resume_and_refuse_another_recipe(tmp_path):
    """Each committed run of the claims study (``runs/claims_<arm>-seed<k>``) resumes as its
    experiment at the study's budget (the claims experiments' own: 300 steps), in Keras' form
    of momentum, as it ran; a longer run moves the drops, and another rate, are refused."""
    assert len(CLAIMS) == 24
    for config in CLAIMS:
        model_dir = copied(tmp_path, config)
        experiment = config.parent.name.rsplit("-seed", 1)[0]
        assert experiment in experiments.STUDIES["claims"]
        run = run_config.build(experiment, model="quarter", recipe={"optimizer": "momentum"})
        assert run.recipe.train_steps == 300
        resume(model_dir, run.network, run.recipe)
    longer = dataclasses.replace(run.recipe, train_steps=600)  # drops at 1/2 and 5/6 of it
    with pytest.raises(InputError, match=r"\(lr_boundaries=\[150, 250\] there, \[300, 500\] now"):
        resume(model_dir, run.network, longer)
    with pytest.raises(InputError, match=r"\(learning_rate=0.05 there, 0.1 now\)"):
        resume(model_dir, run.network, dataclasses.replace(run.recipe, learning_rate=0.1))


def test_a_new_record_holds_the_whole_run_and_refuses_what_changes_the_stream(tmp_path):
    network, recipe = ModelConfig.preset("small"), TrainConfig(batch_size=64)
    run = resume(str(tmp_path), network, recipe, DataConfig(pad=4))
    assert set(run) == {"experiment", "network", "recipe", "data", "backend", "seed", "runtime"}
    assert run["recipe"] == {
        **dataclasses.asdict(recipe),
        "lr_boundaries": [30_000, 50_000],  # the paper's 1/2 and 5/6 of 60,000 steps, as steps
        "weight_decay_gradient": "0.0001 * W",
    }
    assert run["runtime"] == {**dataclasses.asdict(RuntimeConfig()), "seed": 0}
    assert run["data"]["pad"] == 4 and run["data"]["train_examples"] == 50_000
    assert run["data"]["test_examples"] == 10_000 and run["backend"] == "tensorflow"
    record.record_config(str(tmp_path), run)
    # read back whole: the same run (its boundaries as steps, the same schedule)
    again = run_config.from_record(record.read_config(str(tmp_path)))
    assert again.network == network and again.data == DataConfig(pad=4)
    assert again.recipe == dataclasses.replace(recipe, lr_boundaries=("30000", "50000"))
    assert again.recipe.boundary_steps() == recipe.boundary_steps() == (30_000, 50_000)
    # more or fewer steps: the drops stay fractions of the length the run started with
    shorter = RunConfig(network, DataConfig(pad=4), dataclasses.replace(recipe, train_steps=1))
    kept = run_config.resumed(shorter, str(tmp_path))
    assert kept.recipe.schedule_steps == 60_000
    assert kept.recipe.boundary_steps() == (30_000, 50_000)
    resume(str(tmp_path), network, kept.recipe, DataConfig(pad=4))
    assert run_config.resumed(shorter, str(tmp_path / "new")) == shorter
    # moved on purpose (--schedule_steps): refused; as steps, accepted
    moved = dataclasses.replace(recipe, train_steps=1, schedule_steps=2)
    assert (
        run_config.resumed(RunConfig(network, DataConfig(pad=4), moved), str(tmp_path)).recipe
        == moved
    )
    with pytest.raises(InputError, match=r"lr_boundaries=\[30000, 50000\] there, \[1\] now"):
        resume(str(tmp_path), network, moved, DataConfig(pad=4))
    as_steps = dataclasses.replace(recipe, train_steps=1, lr_boundaries=(30_000, 50_000))
    resume(str(tmp_path), network, as_steps, DataConfig(pad=4))
    for recipe_change, data, field in (
        ({"batch_size": 128}, DataConfig(pad=4), "batch_size=64 there, 128 now"),
        ({"weight_decay": 0.0}, DataConfig(pad=4), "weight_decay=0.0001 there, 0.0 now"),
        ({}, DataConfig(pad=2), "pad=4 there, 2 now"),
    ):
        with pytest.raises(InputError, match=field):
            resume(str(tmp_path), network, dataclasses.replace(recipe, **recipe_change), data)


def test_a_run_of_one_momentum_form_refuses_the_other(tmp_path, one_line):
    """config.json records the momentum form (Keras' ``momentum``, the 2016 code's
    ``momentum_2016``); a run started with either is not resumed with the other (their state
    is in other units: velocity -lr a against the accumulator a), and an older record without
    the field stands for Keras' form, the one there was."""
    network = ModelConfig.preset("small")
    for form, other in (("momentum_2016", "momentum"), ("momentum", "momentum_2016")):
        model_dir = tmp_path / form
        run = resume(str(model_dir), network, dataclasses.replace(CPU_RUN, optimizer=form))
        assert run["recipe"]["optimizer"] == form
        record.record_config(str(model_dir), run)
        assert run_config.from_record(record.read_config(str(model_dir))).recipe.optimizer == form
        resume(str(model_dir), network, dataclasses.replace(CPU_RUN, optimizer=form))
        with pytest.raises(InputError) as refused:
            resume(str(model_dir), network, dataclasses.replace(CPU_RUN, optimizer=other))
        one_line(refused, f"(optimizer='{form}' there, '{other}' now)")
    saved = record.read_config(str(tmp_path / "momentum"))
    del saved["recipe"]["optimizer"]
    record.record_config(str(tmp_path / "old"), saved)
    # Keras' form, not today's default (momentum_2016 since 2026-11-28): the one there was
    assert run_config.from_record(saved).recipe.optimizer == "momentum"
    resume(str(tmp_path / "old"), network, dataclasses.replace(CPU_RUN, optimizer="momentum"))
    assert CPU_RUN.optimizer == "momentum_2016"
    with pytest.raises(InputError, match=r"\(optimizer='momentum' there, 'momentum_2016' now\)"):
        resume(str(tmp_path / "old"), network, CPU_RUN)


def test_what_a_resumed_run_may_change_is_declared_on_the_fields():
    assert run_config.FREE_ON_RESUME == {
        "train_steps",
        "schedule_steps",
        "eval_every",
        "checkpoint_every",
        "log_every",
        "log_every_s",
        "redraw_every_s",
        "max_checkpoints",
        "replay_divergence",
        "eval_batch_size",
        "precision",
        "data_format",
        "data_path",
        "data_dir",
        "shuffle_buffer",
        "peer_timeout_s",
    }


def test_the_fields_a_resumed_run_may_change_are_read_from_their_declarations():
    """may_change reads the metadata of each class's fields: the recipe's steps and intervals,
    not its rate; the runtime's precision; the network's layout of its convolutions; none of
    no class."""
    recipe = record.may_change(TrainConfig)
    assert {"train_steps", "eval_every", "eval_batch_size"} <= recipe
    assert "learning_rate" not in recipe and "batch_size" not in recipe
    assert record.may_change(TrainConfig, RuntimeConfig) == recipe | {"precision", "peer_timeout_s"}
    assert record.may_change(ModelConfig) == {"data_format"} and record.may_change() == set()


def test_a_record_holds_each_section_and_a_change_is_named_with_both_values():
    """record(): the network, the recipe with the precision and a launcher's own fields, the
    data and the backend. changes(): a field recorded as None that now has a value is a change;
    a field the record lacks, with no default in ``absent``, is not compared, in a section
    ``absent`` does not name too; the backend compared with the record's, TensorFlow where it
    records none."""
    made = record.record(ModelConfig(), TrainConfig(), {"dataset": "cifar10"}, "jax", "p", epochs=3)
    assert list(made) == ["network", "recipe", "data", "backend"]
    assert made["network"] == dataclasses.asdict(ModelConfig())
    assert made["recipe"] == {**dataclasses.asdict(TrainConfig()), "precision": "p", "epochs": 3}
    assert (made["data"], made["backend"]) == ({"dataset": "cifar10"}, "jax")
    run = {"network": {"x": 1}, "recipe": {"y": 2}, "data": {"jpeg_quality": 75}, "backend": "jax"}
    saved = {"network": {"x": 1}, "recipe": {}, "data": {"jpeg_quality": None}, "backend": "jax"}
    assert record.changes(saved, run, {}, frozenset()) == ["jpeg_quality=None there, 75 now"]
    assert record.changes(saved, run, {"recipe": {"y": 1}}, frozenset()) == [
        "y=1 there, 2 now",
        "jpeg_quality=None there, 75 now",
    ]
    assert record.changes(saved, run, {}, frozenset({"jpeg_quality"})) == []
    older = {key: value for key, value in saved.items() if key != "backend"}
    assert record.changes(older, run, {}, frozenset({"jpeg_quality"})) == [
        "backend='tensorflow' there, 'jax' now"
    ]
    on_tf = {**run, "backend": "tensorflow"}
    assert record.changes(saved, on_tf, {}, frozenset({"jpeg_quality"})) == [
        "backend='jax' there, 'tensorflow' now"
    ]


def test_checkpoints_without_a_config_are_refused_and_a_config_is_written_sorted(tmp_path):
    """A folder holding a checkpoint index and no config.json: refused, naming the index; with
    its config.json, the same run resumes. config.json is written indented by 2, its keys
    sorted (the committed runs' diffs stay small); a folder that cannot be made is one line."""
    run = record.record(ModelConfig(), TrainConfig(), {"dataset": "cifar10"}, "tensorflow", "p")
    (tmp_path / "checkpoint").write_text("")
    with pytest.raises(InputError) as refused:
        record.check_resumable(str(tmp_path), run, {}, frozenset())
    assert str(refused.value) == (
        f"--model_dir {tmp_path} holds checkpoints (checkpoint) but no config.json, so they "
        "cannot be checked against this run; put back its config.json, or move the checkpoints "
        "away to start afresh"
    )
    record.record_config(str(tmp_path), {"b": {"d": 1, "c": [2]}, "a": None})
    assert (tmp_path / "config.json").read_text() == (
        '{\n  "a": null,\n  "b": {\n    "c": [\n      2\n    ],\n    "d": 1\n  }\n}'
    )
    record.record_config(str(tmp_path), run)
    record.check_resumable(str(tmp_path), run, {}, frozenset())
    with pytest.raises(StorageError) as failed:
        record.record_config(str(tmp_path / "checkpoint" / "run"), run)
    assert str(failed.value) == (
        f"cannot write config.json into {tmp_path / 'checkpoint' / 'run'} (Not a directory): "
        "free space there or move the run to a larger disk, then rerun the same command to "
        "resume from the latest checkpoint"
    )
