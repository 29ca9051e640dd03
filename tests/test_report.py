"""converter.report: ops before/after, stage times, frozen variables, text and JSON."""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf

import fuselite
from fuselite.passes.manager import pass_names
from fuselite.pipeline import PIPELINE


def _converted():
    w = tf.Variable(np.ones((3, 2), np.float32), name="weights")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        return tf.nn.relu(tf.matmul(x, w) + 1.0)

    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    data = conv.convert()
    return conv, data


def test_report_contents():
    conv, data = _converted()
    r = conv.report
    assert r.ops_before.get("MatMul") == 1 and r.ops_before.get("Relu") == 1
    assert r.ops_after == {"FULLY_CONNECTED": 1}  # bias and ReLU fused
    assert set(r.stage_seconds) == set(pass_names(PIPELINE, conditional=False))  # each pass timed under its name
    assert [v["name"] for v in r.frozen_variables] == ["weights"]
    assert r.size_bytes == len(data)


def test_report_text_and_json():
    conv, _ = _converted()
    text = str(conv.report)
    assert "FULLY_CONNECTED" in text and "frozen variables: 1" in text
    d = json.loads(conv.report.to_json())
    assert d["ops_after"] == {"FULLY_CONNECTED": 1}
    assert d["total_seconds"] >= 0 and d["frozen_variables"][0]["shape"] == [3, 2]


def test_a_long_op_list_is_counted_by_kind_on_wrapped_lines():
    """A composite that became many ops (an unrolled GRU: ~12 per step) is summarised by kind on lines of at most
    100 columns; a short one is listed op by op as before."""
    from conftest import keras_flavour

    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((10, 4), batch_size=1)
    conv = fuselite.Converter.from_keras_model(k.Model(i, k.layers.Dense(3)(k.layers.GRU(8)(i))), rnn_form="unrolled")
    conv.convert()
    (gru,) = conv.report.composites
    assert gru["status"] == "fused" and len(gru["into"]) > 100
    lines = str(conv.report).splitlines()
    at = next(n for n, ln in enumerate(lines) if ln.startswith("  composite 'keras.layers.GRU'"))
    assert lines[at].endswith(f"fused into {len(gru['into'])} ops (form: unrolled):"), lines[at]
    counted = []
    for ln in lines[at + 1:]:
        if not ln.startswith("      "):
            break
        counted += [item.split() for item in ln.strip().rstrip(",").split(", ")]
    assert {kind: int(n) for kind, n in counted} == {kind: gru["into"].count(kind) for kind in set(gru["into"])}
    assert all(len(ln) <= 100 for ln in lines[at:at + 1 + len(counted)]) and max(map(len, lines)) < 200

    i = k.Input((6, 3), batch_size=1)
    lstm = fuselite.Converter.from_keras_model(k.Model(i, k.layers.LSTM(4)(i)), rnn_form="fused")
    lstm.convert()
    (c,) = lstm.report.composites
    assert 1 < len(c["into"]) <= 8 and f"fused into {', '.join(c['into'])} (form: fused)" in str(lstm.report)


def test_convert_prints_a_summary_that_fits_a_screen(tmp_path):
    """`fuselite convert` of a Conv1D + bidirectional GRU keyword spotter: at most 25 lines, no line twice, the
    recurrent layer's form and reason on one line, and where the details are; --verbose prints the whole report."""
    import subprocess
    import sys

    import keras

    keras.utils.set_random_seed(0)
    i = keras.Input((49, 40), name="mfcc")
    x = keras.layers.Bidirectional(keras.layers.GRU(16))(keras.layers.Conv1D(16, 3, activation="relu")(i))
    keras.Model(i, keras.layers.Dense(12, activation="softmax")(x)).save(tmp_path / "kws.keras")
    base = [sys.executable, "-m", "fuselite.cli", "convert", str(tmp_path / "kws.keras"), "-o", str(tmp_path / "k.tflite")]
    out = subprocess.run(base, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) <= 25 and len(set(lines)) == len(lines), out.stdout
    (recurrent,) = [ln for ln in lines if ln.strip().startswith("recurrent ")]
    assert "Bidirectional: loop (by size at 1 thread" in recurrent and "static batch" in recurrent, recurrent
    assert any("--verbose" in ln and "--json" in ln for ln in lines) and lines[-1].startswith("wrote ")
    full = subprocess.run(base + ["--verbose"], capture_output=True, text=True, timeout=600)
    assert full.returncode == 0 and "frozen variables: 10" in full.stdout and len(full.stdout.splitlines()) > 25
