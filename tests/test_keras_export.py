"""``fuselite.export(model, path, input_signature=..., **converter attributes)``: Keras 3's own
``model.export(path, format="litert", ...)`` call shape, converted by fuselite."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import tensorflow as tf
from conftest import keras_flavour

import fuselite
from fuselite.converter import UnknownOptionError
from fuselite.quantize import QuantizationOptionError
from fuselite.runtime import run


@pytest.fixture(scope="module")
def model():
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((None, 8), name="frames")
    return k.Model(i, k.layers.Dense(3)(k.layers.GRU(4)(i)))


def test_the_call_takes_keras_arguments():
    """The same parameters as keras.src.export.litert.export_litert (model, filepath, input_signature, verbose,
    **kwargs): switching is one word."""
    from keras.src.export.litert import export_litert

    ours, keras_own = inspect.signature(fuselite.export), inspect.signature(export_litert)
    assert list(ours.parameters) == list(keras_own.parameters)
    assert [p.default for p in ours.parameters.values()] == [p.default for p in keras_own.parameters.values()]


def test_export_writes_the_model_and_says_where(model, tmp_path, capsys):
    """As Keras does: the file, and "Saved artifact at '...'." unless verbose=False; any length (the GRU's loop)."""
    report = fuselite.export(model, tmp_path / "m.tflite")
    assert capsys.readouterr().out.strip() == f"Saved artifact at '{tmp_path / 'm.tflite'}'."
    data = (tmp_path / "m.tflite").read_bytes()
    for steps in (5, 11):
        x = np.random.default_rng(steps).standard_normal((2, steps, 8)).astype(np.float32)
        np.testing.assert_allclose(next(iter(run(data, [x]).values())), np.asarray(model(x)), atol=1e-5)
    assert report.size_bytes == len(data)
    fuselite.export(model, tmp_path / "quiet.tflite", verbose=False)
    assert capsys.readouterr().out == ""


def test_input_signature_and_converter_attributes(model, tmp_path):
    """input_signature as Keras takes it (a list, one spec per positional argument), quantization attributes with
    target_spec as a dict, and the attributes Keras' exporter sets that fuselite always honours (SELECT_TF_OPS
    besides the builtins: allowed, none written; resource variables: always), each said in the report."""
    calibration = [np.random.default_rng(s).standard_normal((1, 12, 8)).astype(np.float32) for s in range(8)]
    report = fuselite.export(
        model, tmp_path / "q.tflite", input_signature=[tf.TensorSpec([None, 12, 8], tf.float32, name="frames")],
        verbose=False, optimizations=[tf.lite.Optimize.DEFAULT],
        representative_dataset=lambda: ([x] for x in calibration),
        target_spec={"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]},
        experimental_enable_resource_variables=True, rnn_form="unrolled")
    assert report.quantization["mode"] == "int8"
    text = "\n".join(report.warnings)
    assert "allows SELECT_TF_OPS: fuselite writes TFLite builtins only" in text
    assert "experimental_enable_resource_variables=True" in text
    data = (tmp_path / "q.tflite").read_bytes()
    from fuselite.runtime import interpreter

    assert list(interpreter(data).get_input_details()[0]["shape_signature"]) == [1, 12, 8]
    want = np.asarray(model(calibration[0]))
    assert np.abs(next(iter(run(data, [calibration[0]]).values())) - want).max() < 0.05 * (want.max() - want.min())


def test_what_fuselite_does_not_take_is_refused_before_anything_is_written(model, tmp_path):
    cases = [({"enable_select_tf_ops": True}, UnknownOptionError, "has no option 'enable_select_tf_ops'"),
             ({"target_spec": {"nope": 1}}, QuantizationOptionError, "target_spec has no option 'nope'"),
             ({"experimental_new_converter": False}, fuselite.InputError, "there is no other converter"),
             ({"input_signature": [tf.TensorSpec([None, 12, 9], tf.float32)]}, fuselite.InputError,
              "cannot be called on input_signature")]
    for kwargs, error, says in cases:
        with pytest.raises(error, match=says):
            fuselite.export(model, tmp_path / "x.tflite", verbose=False, **kwargs)
    with pytest.raises(fuselite.InputError, match="to end with '.tflite'"):
        fuselite.export(model, tmp_path / "x.bin")
    assert not list(tmp_path.iterdir())


def test_allow_custom_ops_false_is_checked_on_the_model(model, tmp_path):
    """allow_custom_ops=False holds for a model without custom ops (written), and is said in the report."""
    report = fuselite.export(model, tmp_path / "m.tflite", verbose=False, allow_custom_ops=False)
    assert "allow_custom_ops=False" in "\n".join(report.warnings) and (tmp_path / "m.tflite").exists()
