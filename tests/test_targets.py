"""Targets are objects in a registry (fuselite/targets/): the converter, the CLI and the pipeline read it, so a
target registered by one file is a choice everywhere; its groups decide which pipeline groups run."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.errors import InputError
from fuselite.targets import TARGETS, register, target_named
from fuselite.targets.micro import Micro


class MicroBuildOnly(Micro):
    name = "micro-build-only-test"
    help = "micro-build-only-test: TFLite Micro's forms and checks; not run on its interpreter"
    groups = Micro.groups - {"on-micro"}


@pytest.fixture
def build_only():
    target = register(MicroBuildOnly())
    yield target
    del TARGETS[target.name]


def _int8(model, target: str):
    conv = fuselite.Converter.from_keras_model(model, target=target)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    conv.representative_dataset = lambda: ([rng.random((1, 8), np.float32)] for _ in range(8))
    conv.convert()
    return conv


def test_a_registered_target_selects_its_groups(build_only):
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu")])
    ran = _int8(model, "micro").report
    assert ran.micro.get("ran") is True and "run-on-tflite-micro" in ran.stage_seconds
    built = _int8(model, build_only.name).report
    assert built.micro["runs"] and "ran" not in built.micro and "run-on-tflite-micro" not in built.stage_seconds
    assert "check-micro-target" in built.stage_seconds  # the micro target's check is still its


def test_the_cli_takes_its_target_choices_from_the_registry(build_only, capsys):
    from fuselite.cli import main

    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    shown = "".join(capsys.readouterr().out.split())  # (argparse wraps long words at their hyphens)
    assert "{litert,micro,ethos-u,gpu,npu,micro-build-only-test}" in shown and "".join(build_only.help.split()) in shown


def test_unknown_and_duplicate_targets_are_refused():
    with pytest.raises(InputError, match="target must be one of 'litert', 'micro', 'ethos-u', 'gpu', 'npu', got 'dsp'"):
        target_named("dsp")
    with pytest.raises(ValueError, match="'micro' is empty or taken"):
        register(Micro())


def test_another_targets_options_are_refused():
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    conv = fuselite.Converter.from_keras_model(model, target="micro", accelerator_config="ethos-u55-128")
    with pytest.raises(InputError, match=r"accelerator_config is for target='ethos-u' \(Arm's Vela compiler\) or "
                                         r"target='gpu' .* or target='npu' .*, not target='micro'"):
        conv.convert()
