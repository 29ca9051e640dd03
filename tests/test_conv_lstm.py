"""Keras ConvLSTM2D -> unrolled builtins, no WHILE loop (rnn/cells/conv_lstm.py; issue 17).

Keras 3 and tf-keras (whose default recurrent activation is its own hard_sigmoid), every
option the rule takes, on LiteRT (with and without XNNPACK) within 1e-5 of Keras; the micro
target on TFLite Micro's interpreter; what it declines stays an exact WHILE loop.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_stateless_and_matches, keras_flavour, litert_op_names

import fuselite

TOL = 1e-5
FLAVOURS = ["keras3", "tf_keras"]

VARIANTS = {
    "same": dict(padding="same"),
    "valid_strides_sequences": dict(padding="valid", strides=2, return_sequences=True),
    "dilated": dict(padding="same", dilation_rate=2),
    "backwards_state": dict(padding="same", go_backwards=True, return_state=True),
    "sigmoid_relu": dict(padding="same", recurrent_activation="sigmoid", activation="relu"),
    "hard_sigmoid": dict(padding="valid", recurrent_activation="hard_sigmoid", return_sequences=True),
}


def _model(k, options, shape=(4, 8, 8, 2), initial_state=False):
    k.utils.set_random_seed(0)
    i = k.Input(shape)
    layer = k.layers.ConvLSTM2D(3, 3, **options)
    if not initial_state:
        return k.Model(i, layer(i))
    h, c = k.Input((8, 8, 3)), k.Input((8, 8, 3))
    return k.Model([i, h, c], layer(i, initial_state=[h, c]))


def _inputs(model, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, *t.shape[1:])).astype(np.float32) for t in model.inputs]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_conv_lstm2d_is_unrolled_and_exact(flavour, variant):
    model = _model(keras_flavour(flavour), VARIANTS[variant])
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    ops = litert_op_names(data)
    assert "WHILE" not in ops, ops
    assert [(r["interface"], r["status"]) for r in conv.report.composites] == [("keras.layers.ConvLSTM2D", "fused")], \
        conv.report.composites
    # the input convolution of all steps is one op; each step after the first one recurrent convolution
    assert ops.count("CONV_2D") == 1 + 3, ops
    assert_stateless_and_matches(data, model, _inputs(model), TOL)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_conv_lstm2d_with_initial_states(flavour):
    model = _model(keras_flavour(flavour), dict(padding="same", return_sequences=True), initial_state=True)
    data = fuselite.Converter.from_keras_model(model).convert()
    assert "WHILE" not in litert_op_names(data)
    assert_stateless_and_matches(data, model, _inputs(model), TOL)


def test_declined_conv_lstm2d_stays_an_exact_loop():
    """An activation the unrolled form has no op for: declined with the reason, converted from the body."""
    model = _model(keras_flavour("keras3"), dict(padding="same", activation="softsign"), shape=(4, 6, 6, 2))
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    (record,) = [r for r in conv.report.composites if r["interface"] == "keras.layers.ConvLSTM2D"]
    assert record["status"] == "declined" and "softsign" in record["reason"], record
    x = _inputs(model)[0]
    (got,) = fuselite.runtime.run(data, [x]).values()
    np.testing.assert_allclose(got, np.asarray(model(x)), atol=TOL)


def test_stateful_conv_lstm2d_carries_its_state_between_invokes():
    """A stateful layer's states are variables read before and assigned after the unrolled steps."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    layer = k.layers.ConvLSTM2D(3, 3, padding="same", stateful=True)
    model = k.Sequential([k.Input((4, 6, 6, 2), batch_size=1), layer])
    data = fuselite.Converter.from_keras_model(model).convert()
    assert "WHILE" not in litert_op_names(data)
    xs = [_inputs(model, seed=s)[0] for s in (1, 2, 3)]
    layer.reset_state()
    want = [np.asarray(model(x)) for x in xs]
    interp = fuselite.runtime.interpreter(data)
    runner = interp.get_signature_runner("serving_default")
    (name,) = runner.get_input_details()
    got = [next(iter(runner(**{name: x}).values())) for x in xs]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=TOL)


def test_conv_lstm2d_runs_on_tflite_micro(tmp_path):
    from test_micro import check_micro, keras_outputs

    model = _model(keras_flavour("keras3"), dict(padding="same", return_sequences=True), shape=(3, 6, 6, 2))
    runs = [_inputs(model, seed=s) for s in (1, 2)]
    check_micro(model, tmp_path, runs, [keras_outputs(model, xs) for xs in runs])
