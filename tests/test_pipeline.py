"""The declared pipeline: conversions share no state, the IR can be printed after a pass, the pipeline is printed."""

from __future__ import annotations

import io
import subprocess
import sys
import threading

import pytest

import fuselite
from fuselite.errors import InputError
from fuselite.passes.manager import format_pipeline, iter_passes, pass_names
from fuselite.pipeline import PIPELINE
from fuselite.testing import models as zoo

# Four different models: fused composites (LSTM, stacked tf-keras LSTM, Embedding -> LSTM) and a CNN.
CONCURRENT = [("keras3", "lstm_64"), ("keras3", "cnn"), ("tf_keras", "stacked_lstm"), ("keras3", "text_lstm")]


def _build(flavour: str, name: str):
    return zoo.build(name, zoo.keras3() if flavour == "keras3" else zoo.tf_keras())


def test_four_conversions_in_four_threads_equal_sequential_ones():
    models = [_build(*key) for key in CONCURRENT]
    sequential = [fuselite.Converter.from_keras_model(m).convert() for m in models]
    results: list = [None] * len(models)
    errors: list = []
    start = threading.Barrier(len(models))

    def convert(i: int) -> None:
        try:
            start.wait()
            results[i] = fuselite.Converter.from_keras_model(models[i]).convert()
        except BaseException as e:  # reported below, with the model
            errors.append(("/".join(CONCURRENT[i]), repr(e)))

    threads = [threading.Thread(target=convert, args=(i,)) for i in range(len(models))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a conversion hung"
    assert not errors, errors
    for key, seq, par in zip(CONCURRENT, sequential, results):
        assert seq == par, f"{'/'.join(key)}: the threaded conversion gave other bytes"


def test_converting_the_same_model_twice_gives_the_same_bytes():
    model = _build("keras3", "stacked_lstm")  # two composites, so TF trace counters in the names
    assert fuselite.Converter.from_keras_model(model).convert() == fuselite.Converter.from_keras_model(model).convert()


def test_every_pass_is_timed_under_its_own_name_and_documented():
    conv = fuselite.Converter.from_keras_model(_build("keras3", "mlp"))
    conv.convert()
    assert set(conv.report.stage_seconds) == set(pass_names(PIPELINE, conditional=False))  # float: no quantize
    assert all(p.doc and "\n" not in p.doc for p in iter_passes(PIPELINE))
    text = format_pipeline(PIPELINE)
    assert all(name in text for name in pass_names(PIPELINE))


def test_print_after_a_pass():
    stream = io.StringIO()
    conv = fuselite.Converter.from_keras_model(_build("keras3", "mlp"), print_after=["lower"], print_stream=stream)
    conv.convert()
    out = stream.getvalue()
    assert out.startswith("// ----- IR after lower -----")
    assert "tfl.FULLY_CONNECTED(" in out and "tf.MatMul" not in out


def test_print_after_an_unknown_pass_is_an_input_error():
    with pytest.raises(InputError, match="no pass named 'lowering'"):
        fuselite.Converter.from_keras_model(_build("keras3", "mlp"), print_after=["lowering"])


def test_cli_pipeline_and_print_after(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fuselite.cli", "pipeline"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "fuse-composites" in out.stdout and "export" in out.stdout
    model = _build("keras3", "mlp")
    model.save(tmp_path / "m.keras")
    out = subprocess.run([sys.executable, "-m", "fuselite.cli", "convert", str(tmp_path / "m.keras"), "-o",
                          str(tmp_path / "m.tflite"), "--print-after", "optimize", "--verify-ir"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "// ----- IR after optimize -----" in out.stderr and "tfl.FULLY_CONNECTED(" in out.stderr
    assert (tmp_path / "m.tflite").exists()


def test_docs_show_the_pipeline_as_the_code_declares_it():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text()
    assert format_pipeline(PIPELINE) in doc, "docs/architecture.md: paste the output of 'fuselite pipeline'"
