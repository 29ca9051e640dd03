"""Masked recurrent layers (Embedding(mask_zero=True) -> LSTM / GRU / SimpleRNN, every padded text model)
without TensorLists, in both forms that take a mask: the loop form (the default: a WHILE whose body ends in
SELECT_V2s, rnn/forms/loop.py) and the unrolled form (SELECT_V2s per step,
rnn/forms/unrolled.py). At a masked step the state keeps its value and the output repeats the previous output (zeros
before the first; zeros with Keras' zero_output_for_mask, which Bidirectional sets for sequences), as Keras
does, for any mask (right and left padding, holes); within 1e-5 of Keras on LiteRT with and without XNNPACK,
stateless."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_stateless_and_matches, keras_flavour

import fuselite

TOL = 1e-5
TOKENS = np.array([[5, 3, 9, 4, 0, 0, 0, 0],      # right padding
                   [0, 0, 0, 7, 2, 8, 1, 6],      # left padding
                   [4, 0, 6, 0, 0, 3, 0, 2]], np.int32)  # holes
FORMS = ["loop", "unrolled"]


def _all_op_names(data: bytes) -> list[str]:
    """The ops of every subgraph (a WHILE's body included), by name."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    return [names[m.operatorCodes[op.opcodeIndex].builtinCode] for sg in m.subgraphs for op in sg.operators]


def _model(k, build, batch=3, steps=8):
    k.utils.set_random_seed(0)
    i = k.Input((steps,), dtype="int32", batch_size=batch)
    y = build(k.layers, k.layers.Embedding(20, 6, mask_zero=True)(i))
    return k.Model(i, list(y) if isinstance(y, (list, tuple)) else y)


def _check(model, form, whiles=1, tokens=TOKENS):
    """Converted in ``form`` (None: the default): a WHILE per direction in the loop form, none unrolled, no
    TensorList, SELECT_V2s; the report says the form; exact and stateless."""
    conv = fuselite.Converter.from_keras_model(model, **({"rnn_form": form} if form else {}))
    data = conv.convert()
    ops = _all_op_names(data)
    assert ops.count("WHILE") == (whiles if form in (None, "loop") else 0), ops
    assert "SELECT_V2" in ops and not any(op.startswith("TENSOR_LIST") for op in ops), ops
    assert {r.get("form") for r in conv.report.composites} == {f"{form or 'loop'} (masked)"}, conv.report.composites
    assert_stateless_and_matches(data, model, [tokens], TOL)
    return conv


GRUS = {"last": {}, "sequences": {"return_sequences": True}, "state": {"return_state": True},
        "backwards": {"go_backwards": True}, "sequences_backwards": {"return_sequences": True, "go_backwards": True},
        "reset_before": {"reset_after": False}}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("name", sorted(GRUS))
def test_masked_gru(name, flavour, form):
    _check(_model(keras_flavour(flavour), lambda L, x: L.GRU(5, **GRUS[name])(x)), form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "SimpleRNN"])
@pytest.mark.parametrize("options", [{}, {"return_sequences": True}, {"return_state": True}, {"go_backwards": True}],
                         ids=["last", "sequences", "state", "backwards"])
def test_masked_lstm_and_simple_rnn(options, layer, flavour, form):
    _check(_model(keras_flavour(flavour), lambda L, x: getattr(L, layer)(5, **options)(x)), form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "GRU", "SimpleRNN"])
@pytest.mark.parametrize("options", [{"merge_mode": "concat"}, {"merge_mode": "sum", "sequences": True},
                                     {"merge_mode": "concat", "state": True}], ids=["concat", "sum_sequences", "state"])
def test_masked_bidirectional(options, layer, flavour, form):
    """Both directions over the mask (the backward one reversed, its outputs back in time order); Keras outputs
    zeros at masked steps of a Bidirectional's sequences (zero_output_for_mask)."""
    def build(L, x):
        cell = getattr(L, layer)(5, return_sequences=options.get("sequences", False),
                                 return_state=options.get("state", False))
        return L.Bidirectional(cell, merge_mode=options["merge_mode"])(x)

    _check(_model(keras_flavour(flavour), build), form, whiles=2)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_masked_layer_with_initial_states(kind, form):
    """With initial states the output differs from the state before the first unmasked step (zeros, where the
    state is the initial one): the loop carries the output of its own."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((8,), dtype="int32", batch_size=3)
    states = [k.Input((5,), batch_size=3) for _ in range(2 if kind == "LSTM" else 1)]
    y = getattr(k.layers, kind)(5, return_sequences=True, return_state=True)(  # Keras passes no mask beside
        k.layers.Embedding(20, 6)(i), initial_state=states, mask=k.ops.not_equal(i, 0))  # initial states itself
    model = k.Model([i, *states], list(y))
    conv = fuselite.Converter.from_keras_model(model, rnn_form=form)
    data = conv.convert()
    assert [r["form"] for r in conv.report.composites] == [f"{form} (masked)"]
    rng = np.random.default_rng(0)
    xs = [TOKENS, *(rng.standard_normal((3, 5)).astype(np.float32) for _ in states)]
    out = model(xs)
    assert not np.asarray(out[0])[1, 0].any()  # left padding: zeros first, not the state
    assert_stateless_and_matches(data, model, xs, TOL)


def test_masked_loop_form_keeps_the_batch_dynamic():
    """The loop form's ops take any batch, a mask's too (the unrolled masked form needs a static one)."""
    from ai_edge_litert.interpreter import Interpreter

    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((8,), dtype="int32")
    model = k.Model(i, k.layers.Dense(2)(k.layers.LSTM(5)(k.layers.Embedding(20, 6, mask_zero=True)(i))))
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    assert [r["form"] for r in conv.report.composites] == ["loop (masked)"]
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    runner = Interpreter(model_content=data).get_signature_runner()
    (name,) = fuselite.runtime.signature_inputs(data, "serving_default")
    for tokens in (TOKENS, TOKENS[:1], np.concatenate([TOKENS, TOKENS[::-1]])):
        (got,) = runner(**{name: tokens}).values()
        np.testing.assert_allclose(got, np.asarray(model(tokens)), atol=TOL)


def test_masked_loop_form_takes_any_number_of_steps():
    """The unrolled form stops at 512 steps; the loop form's size does not grow with them."""
    k = keras_flavour("keras3")
    model = _model(k, lambda L, x: L.SimpleRNN(3)(x), batch=2, steps=600)
    tokens = np.random.default_rng(0).integers(0, 20, (2, 600)).astype(np.int32)
    tokens[0, 300:] = 0
    _check(model, None, tokens=tokens)
    unrolled = fuselite.Converter.from_keras_model(model, rnn_form="unrolled")
    unrolled.convert()
    assert "static number of time steps <= 512, got 600" in str(unrolled.report)


def test_fused_form_writes_a_masked_layer_unrolled():
    """The fused ops have no mask: rnn_form="fused" (and the quantized conversions) unroll a masked layer."""
    model = _model(keras_flavour("keras3"), lambda L, x: L.LSTM(5)(x))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="fused")
    data = conv.convert()
    assert [r["form"] for r in conv.report.composites] == ["unrolled (masked)"]
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in _all_op_names(data)
    assert_stateless_and_matches(data, model, [TOKENS], TOL)


@pytest.mark.parametrize("form", FORMS)
def test_masked_layers_run_on_tflite_micro(form, tmp_path):
    """The mask is gathered (loop) or unstacked (unrolled) as float32 (TFLite Micro's GATHER and UNPACK take no
    bool): TFLM's interpreter gives Keras' numbers."""
    from test_micro import check_micro, keras_outputs

    model = _model(keras_flavour("keras3"), lambda L, x: L.Dense(2)(L.GRU(4)(L.LSTM(5, return_sequences=True)(x))))
    runs = [[TOKENS], [TOKENS[::-1].copy()]]
    conv = check_micro(model, tmp_path, runs, [keras_outputs(model, xs) for xs in runs], rnn_form=form)
    assert [r["form"] for r in conv.report.composites] == [f"{form} (masked)"] * 2
