"""Options declared once (fuselite/options/): the converter's attributes and keywords, its checks, the conversion
context and the CLI's flags all follow from one declaration, and a bad or unknown option gets the same message
from the API and from the command line."""

from __future__ import annotations

import argparse

import keras
import pytest

import fuselite
from fuselite.cli import main
from fuselite.converter import UnknownOptionError
from fuselite.errors import InputError
from fuselite.options import OPTIONS, Option, add_flags, boolean, from_flags, register


@pytest.fixture(scope="module")
def model():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])


@pytest.fixture(scope="module")
def keras_file(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("options") / "m.keras"
    model.save(path)
    return str(path)


def _api_message(model, name, value) -> str:
    with pytest.raises(InputError) as e:
        fuselite.Converter.from_keras_model(model, **{name: value}).convert()
    return str(e.value)


def _cli_message(keras_file, tmp_path, capsys, *flags) -> str:
    with pytest.raises(SystemExit) as e:
        main(["convert", keras_file, "-o", str(tmp_path / "m.tflite"), *flags])
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# (option, a bad value as the API takes it, the same as the flag's text)
BAD = [("threads", 0, "0"), ("threads", "many", "many"), ("batch_size", 0, "0"), ("rnn_form", "while", "while"),
       ("target", "dsp", "dsp"), ("bidirectional", "both", "both"), ("max_quantization_error", 2.0, "2"),
       ("accelerator_config", "ethos-u99", "ethos-u99")]


@pytest.mark.parametrize("name,value,text", BAD, ids=[f"{n}={t}" for n, _, t in BAD])
def test_a_bad_value_is_refused_with_the_same_message_from_the_api_and_the_flag(model, keras_file, tmp_path, capsys,
                                                                               name, value, text):
    said = _api_message(model, name, value)
    assert said.startswith(name), said  # the option's own check
    assert _cli_message(keras_file, tmp_path, capsys, OPTIONS[name].flag, text).endswith(f": {said}")


def test_an_unknown_option_is_refused_with_the_same_message_from_the_api_and_the_cli(model, keras_file, tmp_path,
                                                                                    capsys):
    with pytest.raises(UnknownOptionError) as keyword:
        fuselite.Converter.from_keras_model(model, enable_select_tf_ops=True)
    conv = fuselite.Converter.from_keras_model(model)
    with pytest.raises(UnknownOptionError) as attribute:
        conv.enable_select_tf_ops = True
    said = _cli_message(keras_file, tmp_path, capsys, "--enable-select-tf-ops")
    assert str(keyword.value) == str(attribute.value) == said.split("error: ", 1)[1]
    assert "has no option 'enable_select_tf_ops'; its options: batch_size" in said
    listed = said.split("its options: ", 1)[1].split(", ")
    assert listed == list(OPTIONS)
    for name in listed:  # every option the message lists is a keyword too (rules, whose other keyword is fusions)
        fuselite.Converter.from_keras_model(model, **{name: None})


def test_every_flag_and_keyword_follows_from_the_declarations():
    parser = argparse.ArgumentParser()
    add_flags(parser)
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"}
    assert flags == {n: o.flag for n, o in OPTIONS.items() if o.flag}
    # from_flags: only the flags given, as from_* keywords (rules as fusions), append flags through from_cli
    args = parser.parse_args(["--threads", "2", "--input-shape", "x:?,3", "--no-check-fusions"])
    assert from_flags(args) == {"threads": 2, "input_shapes": {"x": (None, 3)}, "check_fusions": False}
    conv = fuselite.Converter.from_keras_model(keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)]),
                                               **from_flags(args))
    assert (conv.threads, conv.check_fusions, conv.rnn_form) == (2, False, "default")


def test_an_option_of_ones_own_reaches_the_api_the_cli_and_the_passes(model, monkeypatch, tmp_path):
    """One declaration (as a module of fuselite/options/ would make it) and the option is a keyword, an attribute,
    a flag and ``ctx.<name>`` in every pass."""
    import fuselite.pipeline
    from fuselite.passes.manager import Pass

    option = register(Option("note_passes", False, "record the passes that ran", boolean("note_passes"),
                             "--note-passes", {"action": "store_true"}))
    seen = []
    monkeypatch.setattr(fuselite.pipeline, "PIPELINE", [*fuselite.pipeline.PIPELINE, Pass(
        "note", lambda m, ctx: seen.append(ctx.note_passes), "what the option says, read in a pass")])
    monkeypatch.setattr(fuselite.converter, "PIPELINE", fuselite.pipeline.PIPELINE)
    try:
        fuselite.Converter.from_keras_model(model, note_passes=True).convert()
        conv = fuselite.Converter.from_keras_model(model)
        conv.convert()
        assert seen == [True, False]
        conv.note_passes = "yes"
        with pytest.raises(InputError, match="note_passes is True or False, got 'yes'"):
            conv.convert()
        parser = argparse.ArgumentParser()
        add_flags(parser)
        assert from_flags(parser.parse_args(["--note-passes"])) == {"note_passes": True}
    finally:
        del OPTIONS[option.name]
