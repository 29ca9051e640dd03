"""rnn_form: the form of Keras LSTM and SimpleRNN layers (issue 18).

"fused" (LiteRT's sequence op), "unrolled" (one FULLY_CONNECTED for every step's input, then the
recurrent product and the cell per step), "auto" (both converted, timed here, the faster kept) and
the default per family. Every form exact (1e-5 against Keras, on LiteRT with and without XNNPACK)
and stateless, for every variant of the layers.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_stateless_and_matches, keras_flavour, litert_op_names

import fuselite
from fuselite.errors import InputError
from fuselite.fusion.rnn import DEFAULT_FORMS

TOL = 1e-5
SEQUENCE_OPS = {"LSTM": "UNIDIRECTIONAL_SEQUENCE_LSTM", "SimpleRNN": "UNIDIRECTIONAL_SEQUENCE_RNN"}

LAYERS = {
    "lstm_last": ("LSTM", lambda L, i: L.LSTM(6)(i)),
    "lstm_sequences_backwards": ("LSTM", lambda L, i: L.LSTM(6, return_sequences=True, go_backwards=True)(i)),
    "lstm_state": ("LSTM", lambda L, i: L.LSTM(6, return_state=True)(i)),
    "lstm_relu_no_bias": ("LSTM", lambda L, i: L.LSTM(5, activation="relu", use_bias=False)(i)),
    "stacked_lstm": ("LSTM", lambda L, i: L.LSTM(4)(L.LSTM(5, return_sequences=True)(i))),
    "bidirectional_lstm": ("LSTM", lambda L, i: L.Bidirectional(L.LSTM(4, return_sequences=True))(i)),
    "simple_rnn": ("SimpleRNN", lambda L, i: L.SimpleRNN(6)(i)),
    "simple_rnn_sequences_state": ("SimpleRNN", lambda L, i: L.SimpleRNN(6, return_sequences=True,
                                                                         return_state=True)(i)),
    "bidirectional_simple_rnn_sum": ("SimpleRNN", lambda L, i: L.Bidirectional(L.SimpleRNN(4), merge_mode="sum")(i)),
}


def _model(k, build, shape=(7, 3)):
    k.utils.set_random_seed(0)
    i = k.Input(shape)
    return k.Model(i, build(k.layers, i))


def _inputs(model, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, *t.shape[1:])).astype(np.float32) for t in model.inputs]


@pytest.mark.parametrize("form", ["fused", "unrolled"])
@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_every_form_is_exact_and_stateless(flavour, name, form):
    kind, build = LAYERS[name]
    model = _model(keras_flavour(flavour), build)
    conv = fuselite.Converter.from_keras_model(model, rnn_form=form)
    data = conv.convert()
    ops = litert_op_names(data)
    assert "WHILE" not in ops, ops
    assert (SEQUENCE_OPS[kind] in ops or "BIDIRECTIONAL" in " ".join(ops)) == (form == "fused"), ops
    assert {r.get("form") for r in conv.report.composites} == {form}, conv.report.composites
    assert_stateless_and_matches(data, model, _inputs(model), TOL)


@pytest.mark.parametrize("form", ["fused", "unrolled"])
def test_cell_state_beyond_ten_is_exact_in_every_form(form):
    """Gates pinned open, a constant candidate: the cell state grows ~1 per step to ~40 (the official converter
    clips it at 10)."""
    k = keras_flavour("keras3")
    model = _model(k, lambda L, i: L.LSTM(3, return_state=True)(i), shape=(40, 2))
    lstm = model.layers[-1]
    kernel, rec, bias = lstm.get_weights()
    bias[:] = 8.0
    lstm.set_weights([kernel * 0.01, rec * 0.0, bias])
    assert float(np.min(model(np.ones((1, 40, 2), np.float32))[2])) > 30
    data = fuselite.Converter.from_keras_model(model, rnn_form=form).convert()
    assert_stateless_and_matches(data, model, [np.ones((1, 40, 2), np.float32)], TOL)


@pytest.mark.parametrize("form", ["fused", "unrolled"])
def test_text_classifier_in_every_form(form):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((12,), dtype="int32")
    x = k.layers.Embedding(30, 8)(i)
    model = k.Model(i, k.layers.Dense(2)(k.layers.LSTM(6)(x)))
    data = fuselite.Converter.from_keras_model(model, rnn_form=form).convert()
    ids = np.random.default_rng(0).integers(0, 30, (1, 12)).astype(np.int32)
    assert_stateless_and_matches(data, model, [ids], TOL)


def test_unrolled_form_keeps_the_batch_dynamic():
    from ai_edge_litert.interpreter import Interpreter

    model = _model(keras_flavour("keras3"), LAYERS["lstm_state"][1])
    conv = fuselite.Converter.from_keras_model(model, rnn_form="unrolled")
    data = conv.convert()
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    runner = Interpreter(model_content=data).get_signature_runner()
    (name,) = runner.get_input_details()
    for batch in (3, 1):
        x = _inputs(model, batch)[0]
        got = sorted(runner(**{name: x}).values(), key=lambda v: float(v.sum()))
        want = sorted((np.asarray(w) for w in model(x)), key=lambda v: float(v.sum()))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, atol=TOL)


def test_unrolled_form_falls_back_to_the_fused_op_where_it_cannot_be_written():
    """A dynamic number of steps cannot be unrolled: the fused op, and the report says why."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((None, 3))
    model = k.Model(i, k.layers.LSTM(4)(i))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="unrolled")
    data = conv.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in litert_op_names(data)
    (record,) = conv.report.composites
    assert record["form"].startswith("fused (not unrolled") and "time steps" in record["form"], record


def test_default_forms_are_the_measured_ones():
    k = keras_flavour("keras3")
    for name in ("lstm_last", "simple_rnn"):
        kind, build = LAYERS[name]
        conv = fuselite.Converter.from_keras_model(_model(k, build))
        conv.convert()
        assert [r["form"] for r in conv.report.composites] == [DEFAULT_FORMS[kind]]


def test_auto_times_both_forms_and_keeps_the_faster():
    model = _model(keras_flavour("keras3"), LAYERS["simple_rnn"][1], shape=(20, 8))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="auto")
    data = conv.convert()
    (note,) = [w for w in conv.report.warnings if w.startswith("rnn_form='auto'")]
    fused_us, unrolled_us = (float(note.split(f"{f} ")[1].split(" us")[0]) for f in ("(fused", "unrolled"))
    chosen = "unrolled" if unrolled_us < fused_us else "fused"
    assert f"the {chosen} form is faster" in note
    assert [r["form"] for r in conv.report.composites] == [chosen]
    assert_stateless_and_matches(data, model, _inputs(model), TOL)


def test_auto_without_recurrent_layers_converts_once_and_says_nothing():
    k = keras_flavour("keras3")
    model = _model(k, lambda L, i: L.Dense(2)(i))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="auto")
    conv.convert()
    assert not any("rnn_form" in w for w in conv.report.warnings)


@pytest.mark.parametrize("bad", ["loop", "Fused", 1])
def test_unknown_form_is_a_clear_error(bad):
    model = _model(keras_flavour("keras3"), LAYERS["simple_rnn"][1])
    with pytest.raises(InputError, match="rnn_form must be one of 'default', 'fused', 'unrolled', 'auto'"):
        fuselite.Converter.from_keras_model(model, rnn_form=bad).convert()
