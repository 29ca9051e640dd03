"""tf.Module / concrete-function frontends, signatures, names, control flow, RNN loops."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import litert_op_names

import fuselite
from fuselite.runtime import run


class TwoSignatures(tf.Module):
    def __init__(self):
        self.w = tf.Variable(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], name="a")])
    def project(self, a):
        return {"y": tf.matmul(a, self.w)}

    @tf.function(input_signature=[tf.TensorSpec([2, 3], name="b")])
    def scale(self, b):
        return {"z": tf.nn.relu(b) * 2.0}


def test_multiple_signatures_become_subgraphs(tmp_path):
    m = TwoSignatures()
    path = str(tmp_path / "sm")
    tf.saved_model.save(m, path, signatures={"project": m.project, "scale": m.scale})
    conv = fuselite.Converter.from_saved_model(path)
    data = conv.convert()
    from ai_edge_litert.interpreter import Interpreter

    sigs = Interpreter(model_content=data).get_signature_list()
    assert sigs == {"project": {"inputs": ["a"], "outputs": ["y"]}, "scale": {"inputs": ["b"], "outputs": ["z"]}}
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(run(data, {"a": x}, "project")["y"], m.project(x)["y"], atol=1e-6)
    b = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    np.testing.assert_array_equal(run(data, {"b": b}, "scale")["z"], m.scale(b)["z"])
    assert [v["name"] for v in conv.report.frozen_variables]


def test_selected_signature_key(tmp_path):
    m = TwoSignatures()
    path = str(tmp_path / "sm")
    tf.saved_model.save(m, path, signatures={"project": m.project, "scale": m.scale})
    conv = fuselite.Converter.from_saved_model(path, signature_keys=["scale"])
    data = conv.convert()
    assert conv.report.signatures == ["scale"]
    assert "FULLY_CONNECTED" not in litert_op_names(data)


def test_concrete_function_with_control_flow():
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")])
    def f(x):
        i = tf.constant(0)
        _, y = tf.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, y * 1.5 + 1.0), [i, x])
        return tf.cond(tf.reduce_sum(y) > 0, lambda: y * 2.0, lambda: -y)

    cf = f.get_concrete_function()
    data = fuselite.Converter.from_concrete_functions([cf]).convert()
    ops = litert_op_names(data)
    assert "WHILE" in ops and "IF" in ops
    for x in (np.array([1, 2, 3], np.float32), np.array([-10, -20, -30], np.float32)):
        np.testing.assert_allclose(next(iter(run(data, [x]).values())), f(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("return_sequences", [False, True])
def test_keras3_lstm_loop_converts_without_flex(return_sequences):
    """An LSTM the fused op cannot express (hard_sigmoid gates): the Keras 3 RNN while loop
    with TensorLists lowers to WHILE + builtins, its lists of a run-time batch (the batch stays dynamic)."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 3)), keras.layers.LSTM(
        5, return_sequences=return_sequences, recurrent_activation="hard_sigmoid")])
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    ops = litert_op_names(data)
    assert "WHILE" in ops
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 6, 3)).astype(np.float32)
        np.testing.assert_allclose(next(iter(run(data, [x]).values())), model(x), atol=1e-5)


def test_keras3_lstm_saved_model(tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 3)), keras.layers.LSTM(5), keras.layers.Dense(2)])
    path = str(tmp_path / "sm")
    model.export(path, verbose=False)
    data = fuselite.Converter.from_saved_model(path, batch_size=2).convert()
    x = np.random.default_rng(0).standard_normal((2, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(next(iter(run(data, [x]).values())), model(x), atol=1e-5)


def test_output_is_deterministic(tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    a = fuselite.Converter.from_keras_model(model).convert()
    b = fuselite.Converter.from_keras_model(model).convert()
    assert a == b
