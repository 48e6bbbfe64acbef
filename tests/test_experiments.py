"""configs.experiments and runs.run_config: every experiment this project runs, by name, builds
its whole run config; the learning rate's drops follow the run's length from one place; a
launcher runs an experiment with any field overridden by its flag."""

import dataclasses
import json

import launchers
import pytest

from resnet_noBN.configs import experiments
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.network_config import ImageNetConfig, ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.runs import run_config

NAMES = [
    "cifar10_paper",
    "cifar100_paper",
    "imagenet_paper",
    "demo",
    "cifar10_jpeg_q75",
    "cifar10_leaky",
    "cifar10_wd_2016",
    "cifar10_momentum_keras",
    "cifar10_preactivation",
    "cifar10_trained_head_2016",
    "cifar10_preactivation_trained_head",
    "cifar10_original_2016",
    "cifar10_original_2016_wd",
    "cifar10_13_59m",
    "cifar100_true_float32",
    "cifar100_lr0.02",
    "cifar100_leaky_lr0.02",
    "cifar100_2016_reader_lr0.02",
    "cifar100_original_2016",
    "cifar100_held_lr",
    "cifar100_held_lr_wd_2016",
    "cifar100_held_lr_original_2016",
    "cifar10_quarter",
    "cifar100_quarter",
    "cifar100_quarter_2016_reader",
    "cifar10_fixup",
    "cifar10_skipinit",
    "cifar10_zero_last",
    "cifar100_held_lr_fixup",
    "cifar100_held_lr_skipinit",
    "cifar100_held_lr_zero_last",
    *(f"near_identity_{init}_u{units}" for init in ("paper", "fixup") for units in (1, 2, 4, 8)),
    "claims_hardt_ma",
    "claims_standard",
    "claims_he",
    "claims_trainable_head",
    "claims_no_identity",
    "claims_leaky_relu",
    "claims_conv_bias",
    "claims_batch_norm",
]


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_builds_its_whole_run(name):
    exp = experiments.EXPERIMENTS[name]
    run = run_config.build(name, launcher=exp.launcher)
    assert run.experiment == name and run.launcher == exp.launcher
    network_cls = ImageNetConfig if exp.launcher == "imagenet" else ModelConfig
    assert type(run.network) is network_cls
    for section in ("network", "data", "recipe", "runtime"):
        for field, value in getattr(exp, section).items():
            assert getattr(getattr(run, section), field) == value, (name, section, field)
    record = run_config.record_of(run, "tensorflow", 0)
    assert record["experiment"] == name and record["recipe"]["lr_boundaries"] == list(
        run.recipe.boundary_steps()
    )


def test_the_experiments_are_the_ones_listed():
    assert list(experiments.EXPERIMENTS) == NAMES
    for arms in experiments.STUDIES.values():
        assert set(arms) <= set(NAMES)
    assert set(experiments.RETIRED) <= set(experiments.STUDIES)
    for retired in experiments.RETIRED.values():
        assert not set(retired) & set(NAMES)  # a name that runs is no retired arm


def test_the_runs_the_paper_reports_are_the_papers():
    cifar10, cifar100 = run_config.build("cifar10_paper"), run_config.build("cifar100_paper")
    assert cifar10.network == ModelConfig() and cifar10.recipe == TrainConfig()
    assert cifar100.network == ModelConfig(num_classes=100)
    assert cifar10.recipe.boundary_steps() == (30_000, 50_000)
    imagenet = run_config.build("imagenet_paper", launcher="imagenet").recipe
    assert (imagenet.learning_rate, imagenet.lr_decay, imagenet.batch_size) == (0.1, 0.94, 256)
    assert imagenet.train_steps == 700_000 and imagenet.boundary_steps() == ()


def test_the_near_identity_study_deepens_the_small_network_at_its_budget():
    """near_identity: the small network's widths at 1, 2, 4 and 8 blocks a stage (8 to 50
    layers), the paper's init and Fixup's; at the study's budget 4,000 steps, the paper's drops
    at the same fractions (2,000 and 3,333)."""
    from resnet_noBN.studies import study

    budget = study.BUDGETS["near_identity"]
    assert (budget.model, budget.train_steps, budget.seeds) == ("small", 4000, 1)
    built = {
        name: run_config.build(name, budget.model, recipe={"train_steps": budget.train_steps})
        for name in experiments.STUDIES["near_identity"]
    }
    assert [(r.network.num_residual_units, r.network.block) for r in built.values()] == [
        (units, block) for block in ("hardt_ma", "fixup") for units in (1, 2, 4, 8)
    ]
    for run in built.values():
        assert run.network.stage_widths == (16, 32, 64)
        assert run.network.init == ("he" if run.network.block == "fixup" else "hardt_ma")
        assert run.recipe.boundary_steps() == (2000, 3333)


def test_the_2016_code_as_named_choices():
    """The 2016 code with batch norm removed: leaky 0.1, its activations, its head; and with its
    weight decay, 2e-4 * W on the gradient, recorded as such."""
    network = run_config.build("cifar10_original_2016").network
    assert (network.relu_leakiness, network.block, network.head) == (
        0.1,
        "preactivation",
        "original_2016",
    )
    assert (network.init, network.stage_widths, network.head_decay) == (
        "hardt_ma",
        (64, 128, 256),
        True,
    )
    with_decay = run_config.build("cifar10_original_2016_wd")
    assert with_decay.network == network and with_decay.recipe.weight_decay == 2e-4
    record = run_config.record_of(with_decay, "tensorflow", 0)
    assert record["recipe"]["weight_decay_gradient"] == "0.0002 * W"


@pytest.mark.parametrize(
    "steps, boundaries, expected",
    [
        (60_000, ("1/2", "5/6"), (30_000, 50_000)),
        (8_000, ("1/2", "5/6"), (4_000, 6_666)),
        (300, ("1/2", "5/6"), (150, 250)),
        (2, ("1/2", "5/6"), (1,)),
        (8_000, ("0.5",), (4_000,)),
        (8_000, (4_000, 6_667), (4_000, 6_667)),
    ],
)
def test_the_learning_rate_drops_follow_the_run(steps, boundaries, expected):
    recipe = TrainConfig(train_steps=steps, lr_boundaries=boundaries)
    recipe.validate()
    assert recipe.boundary_steps() == expected


def test_a_budget_and_a_network_preset_apply_over_an_experiment():
    run = run_config.build("claims_batch_norm", model="small", recipe={"train_steps": 6})
    assert run.network == ModelConfig.preset(
        "small", block="preactivation", norm="batch", init="he"
    )
    assert (run.recipe.train_steps, run.recipe.boundary_steps()) == (6, (3, 5))
    with pytest.raises(InputError, match="--experiment=nope is not an experiment of launch/cifar"):
        run_config.build("nope")
    with pytest.raises(InputError, match="--learning_rate must be positive"):
        run_config.build("demo", recipe={"learning_rate": -1.0})


def test_the_launcher_runs_an_experiment_with_its_flags_over_it():
    proc = launchers.run(
        "launch/cifar.py",
        "--experiment=cifar10_original_2016_wd",
        "--model=small",
        "--train_steps=800",
        "--relu_leakiness=0.2",
        "--print_config",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = json.loads(proc.stdout)
    run = run_config.build("cifar10_original_2016_wd", model="small")
    expected = dataclasses.replace(
        run, network=dataclasses.replace(run.network, relu_leakiness=0.2)
    ).changed("recipe", train_steps=800)
    assert printed == json.loads(json.dumps(expected.sections()))
    assert printed["recipe"]["lr_boundaries"] == [400, 666]
    bad = launchers.run("launch/cifar.py", "--experiment=imagenet_paper", "--print_config")
    assert bad.returncode == 2
    last = bad.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: --experiment=imagenet_paper is not an experiment of launch/cifar"
    )
