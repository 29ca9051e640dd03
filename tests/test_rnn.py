"""Keras recurrent layers -> fused LiteRT sequence ops, Keras 3 and tf-keras, vs Keras on LiteRT."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    assert_stateless_and_matches,
    form_name,
    invoke_twice,
    keras_flavour,
    litert_op_names,
    match_outputs,
)

import fuselite

FLAVOURS = ["keras3", "tf_keras"]
TOL = 1e-5


def _model(k, build, shape=(7, 3), seed=0):
    k.utils.set_random_seed(seed)
    i = k.Input(shape)
    return k.Model(i, build(k.layers, i))




def check(model, fused_op: str | None, batch=1, batch_size=None, seed=0, scale=1.0, **options):
    """Convert, assert the fused op (and no WHILE), run twice on LiteRT, compare with Keras. The layers in their
    fused form (rnn_form="fused"; tests/test_rnn_forms.py has the other forms) unless ``options`` say otherwise."""
    options.setdefault("rnn_form", "fused")
    conv = fuselite.Converter.from_keras_model(model, batch_size=batch_size, **options)
    data = conv.convert()
    ops = litert_op_names(data)
    if fused_op:
        assert fused_op in ops, ops
        assert "WHILE" not in ops, ops
    rng = np.random.default_rng(seed)
    xs = []
    for t in model.inputs:
        shape = [batch] + list(t.shape[1:])
        if "int" in str(t.dtype):  # token ids
            xs.append(rng.integers(0, 20, shape).astype(np.int32))
        else:
            xs.append((rng.standard_normal(shape) * scale).astype(np.float32))
    assert_stateless_and_matches(data, model, xs, TOL)
    return conv, ops




LSTM_VARIANTS = {
    "last_step": lambda L, i: L.LSTM(6)(i),
    "sequences": lambda L, i: L.LSTM(6, return_sequences=True)(i),
    "state": lambda L, i: L.LSTM(6, return_state=True)(i),
    "go_backwards": lambda L, i: L.LSTM(6, go_backwards=True, return_sequences=True)(i),
    "go_backwards_last": lambda L, i: L.LSTM(6, go_backwards=True)(i),
    "no_bias": lambda L, i: L.LSTM(6, use_bias=False)(i),
    "no_unit_forget_bias": lambda L, i: L.LSTM(6, unit_forget_bias=False, bias_initializer="random_normal")(i),
    "relu": lambda L, i: L.LSTM(6, activation="relu")(i),
    "dropout": lambda L, i: L.LSTM(6, dropout=0.5, recurrent_dropout=0.3)(i),
    "stacked": lambda L, i: L.LSTM(4)(L.LSTM(5, return_sequences=True)(L.LSTM(6, return_sequences=True)(i))),
    "dense_head": lambda L, i: L.Dense(2)(L.LSTM(6)(i)),
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", sorted(LSTM_VARIANTS))
def test_lstm_fused(flavour, variant):
    k = keras_flavour(flavour)
    model = _model(k, LSTM_VARIANTS[variant])
    # the batch stays dynamic (the states' FILL takes it from the input at run time; see
    # test_fused_rnn_keeps_the_batch_dynamic)
    conv, ops = check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM")
    n = 3 if variant == "stacked" else 1
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == n
    assert all(c["status"] == "fused" for c in conv.report.composites), conv.report.composites
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_lstm_with_initial_states_as_inputs(flavour):
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    x, h, c = k.Input((5, 3)), k.Input((4,)), k.Input((4,))
    model = k.Model([x, h, c], k.layers.LSTM(4, return_sequences=True)(x, initial_state=[h, c]))
    check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_lstm_cell_state_beyond_ten_is_not_clipped(flavour):
    """Gates pinned open and a constant candidate: the cell state grows ~1 per step to ~40."""
    k = keras_flavour(flavour)
    model = _model(k, lambda L, i: L.LSTM(3, return_state=True)(i), shape=(40, 2))
    lstm = model.layers[-1]
    kernel, rec, bias = lstm.get_weights()
    bias[:] = 8.0  # i, f, c(candidate tanh(8)~1), o all saturated
    lstm.set_weights([kernel * 0.01, rec * 0.0, bias])
    _, state_h, state_c = model(np.ones((1, 40, 2), np.float32))
    assert float(np.min(state_c)) > 30  # far beyond the official converter's clip at 10
    check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_explicit_batch_size(flavour):
    k = keras_flavour(flavour)
    model = _model(k, LSTM_VARIANTS["sequences"])
    conv, _ = check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM", batch=3, batch_size=3)
    assert not any("batch size of 1" in w for w in conv.report.warnings)


def test_tf_keras_time_major():
    k = keras_flavour("tf_keras")
    model = _model(k, lambda L, i: L.LSTM(5, time_major=True, return_sequences=True)(i), shape=(7, 3))
    # time-major: the Input's "batch" axis is time; tf-keras then treats axis 1 as the batch
    conv = fuselite.Converter.from_keras_model(model, batch_size=7, rnn_form="fused")
    data = conv.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in litert_op_names(data)
    x = np.random.default_rng(0).standard_normal((7, 7, 3)).astype(np.float32)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [x]).values())), model(x), atol=TOL)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", ["last_step", "sequences", "state", "relu_backwards"])
def test_simple_rnn_fused(flavour, variant):
    k = keras_flavour(flavour)
    build = {
        "last_step": lambda L, i: L.SimpleRNN(6)(i),
        "sequences": lambda L, i: L.SimpleRNN(6, return_sequences=True)(i),
        "state": lambda L, i: L.SimpleRNN(6, return_state=True)(i),
        "relu_backwards": lambda L, i: L.SimpleRNN(6, activation="relu", go_backwards=True)(i),
    }[variant]
    check(_model(k, build), "UNIDIRECTIONAL_SEQUENCE_RNN")


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
@pytest.mark.parametrize("return_sequences", [True, False])
@pytest.mark.parametrize("form", ["split", "fused"])
def test_bidirectional_lstm_forms(flavour, merge_mode, return_sequences, form):
    """Default: two UNIDIRECTIONAL_SEQUENCE_LSTM (the form every tool opens); bidirectional="fused": one
    BIDIRECTIONAL_SEQUENCE_LSTM. Both as Keras."""
    k = keras_flavour(flavour)
    model = _model(k, lambda L, i: L.Bidirectional(L.LSTM(4, return_sequences=return_sequences),
                                                   merge_mode=merge_mode)(i))
    if form == "fused":
        _, ops = check(model, "BIDIRECTIONAL_SEQUENCE_LSTM", bidirectional="fused")
        assert ops.count("BIDIRECTIONAL_SEQUENCE_LSTM") == 1 and "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops
    else:
        _, ops = check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM")
        assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 2 and "BIDIRECTIONAL_SEQUENCE_LSTM" not in ops


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_bidirectional_lstm_return_state(flavour):
    k = keras_flavour(flavour)
    model = _model(k, lambda L, i: L.Bidirectional(L.LSTM(4, return_state=True))(i))
    check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM")
    check(model, "BIDIRECTIONAL_SEQUENCE_LSTM", bidirectional="fused")


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("merge_mode", ["concat", "ave"])
@pytest.mark.parametrize("form", ["split", "fused"])
def test_bidirectional_simple_rnn(flavour, merge_mode, form):
    k = keras_flavour(flavour)
    model = _model(k, lambda L, i: L.Bidirectional(L.SimpleRNN(4, return_sequences=True), merge_mode=merge_mode)(i))
    if form == "fused":
        check(model, "BIDIRECTIONAL_SEQUENCE_RNN", bidirectional="fused")
    else:
        _, ops = check(model, "UNIDIRECTIONAL_SEQUENCE_RNN")
        assert ops.count("UNIDIRECTIONAL_SEQUENCE_RNN") == 2 and "BIDIRECTIONAL_SEQUENCE_RNN" not in ops


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_text_classifier(flavour):
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    i = k.Input((12,), dtype="int32")
    x = k.layers.Embedding(100, 8)(i)
    x = k.layers.LSTM(16)(x)
    model = k.Model(i, k.layers.Dense(3, activation="softmax")(x))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="fused")
    data = conv.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in litert_op_names(data)
    ids = np.random.default_rng(0).integers(0, 100, (1, 12)).astype(np.int32)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [ids]).values())), model(ids), atol=TOL)


# -- what the fused ops cannot express: converted correctly, with the reason in the report ----------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_hard_sigmoid_gates_are_declined(flavour):
    k = keras_flavour(flavour)
    model = _model(k, lambda L, i: L.LSTM(5, recurrent_activation="hard_sigmoid")(i))
    conv, ops = check(model, None)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops
    assert "always use sigmoid" in str(conv.report)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_masked_lstm_unrolled_needs_a_static_batch(flavour):
    """No mask input on the fused op: a masked LSTM in the unrolled form (rnn_form="unrolled"; the default is
    the loop form, tests/test_masked_rnn.py) becomes builtins with SELECT_V2s, no loop; the unknown batch is
    fixed to 1 and the report says so."""
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    i = k.Input((6,), dtype="int32")
    model = k.Model(i, k.layers.LSTM(4)(k.layers.Embedding(20, 3, mask_zero=True)(i)))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="unrolled")
    data = conv.convert()
    ops = litert_op_names(data)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops and "WHILE" not in ops and "SELECT_V2" in ops, ops
    assert [c["status"] for c in conv.report.composites] == ["fused"], conv.report.composites
    assert "the unrolled masked LSTM needs a static batch size" in str(conv.report)
    ids = np.array([[3, 5, 1, 0, 0, 0]], np.int32)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [ids]).values())), model(ids), atol=TOL)


# -- GRU: no LiteRT builtin; unrolled into builtins (no WHILE, stateless by construction) ----------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", ["last_step", "sequences", "go_backwards", "state", "no_bias", "relu",
                                     "initial_state"])
def test_gru_unrolled(flavour, variant):
    k = keras_flavour(flavour)
    build = {
        "last_step": lambda L, i: L.GRU(5)(i),
        "sequences": lambda L, i: L.GRU(5, return_sequences=True)(i),
        "go_backwards": lambda L, i: L.GRU(5, go_backwards=True, return_sequences=True)(i),
        "state": lambda L, i: L.GRU(5, return_state=True)(i),
        "no_bias": lambda L, i: L.GRU(5, use_bias=False)(i),
        "relu": lambda L, i: L.GRU(5, activation="relu")(i),
    }.get(variant)
    if variant == "initial_state":
        k.utils.set_random_seed(0)
        x, h = k.Input((7, 3)), k.Input((5,))
        model = k.Model([x, h], k.layers.GRU(5)(x, initial_state=[h]))
    else:
        model = _model(k, build)
    conv, ops = check(model, None)
    assert "WHILE" not in ops and conv.report.composites[0]["status"] == "fused"


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("sequences", [False, True])
def test_gru_reset_before_is_unrolled(flavour, sequences):
    """reset_after=False: the reset gate multiplies the state before the recurrent projection."""
    k = keras_flavour(flavour)
    model = _model(k, lambda L, i: L.GRU(5, reset_after=False, return_sequences=sequences,
                                         bias_initializer="random_normal")(i))
    conv, ops = check(model, None, scale=2.0)
    assert "WHILE" not in ops and conv.report.composites[0]["status"] == "fused", conv.report.composites


# -- the benchmark's RNN models (batch 1, full size) -------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", sorted(__import__("fuselite.testing.models", fromlist=["x"]).RNN_BUILDERS))
def test_benchmark_rnn_models(flavour, name):
    from fuselite.testing import models as zoo

    model = zoo.build(name, keras_flavour(flavour))
    fused = {"gru": None, "simple_rnn": "UNIDIRECTIONAL_SEQUENCE_RNN"}
    conv, ops = check(model, fused.get(name, "UNIDIRECTIONAL_SEQUENCE_LSTM"))
    assert "WHILE" not in ops


# -- Keras 3 SavedModels (model.export): the LSTM while loop is recognised and verified ----------------


def _export_and_convert(model, tmp_path, **kwargs):
    path = str(tmp_path / "sm")
    model.export(path, verbose=False)
    conv = fuselite.Converter.from_saved_model(path, **kwargs)
    return conv, conv.convert()


K3_SAVED = {
    "last_step": lambda L, i: L.LSTM(6)(i),
    "sequences": lambda L, i: L.LSTM(6, return_sequences=True)(i),
    "go_backwards": lambda L, i: L.LSTM(6, go_backwards=True)(i),
    "go_backwards_sequences": lambda L, i: L.LSTM(6, go_backwards=True, return_sequences=True)(i),
    "relu": lambda L, i: L.LSTM(6, activation="relu")(i),
    "no_bias": lambda L, i: L.LSTM(6, use_bias=False)(i),
    "stacked": lambda L, i: L.LSTM(4)(L.LSTM(5, return_sequences=True)(i)),
    "bidirectional": lambda L, i: L.Bidirectional(L.LSTM(4, return_sequences=True))(i),
    "bidirectional_sum_last": lambda L, i: L.Bidirectional(L.LSTM(4), merge_mode="sum")(i),
    "dense_head": lambda L, i: L.Dense(2)(L.LSTM(6)(i)),
}


@pytest.mark.parametrize("variant", sorted(K3_SAVED))
@pytest.mark.parametrize("form", ["fused", "loop"])
def test_keras3_saved_model_lstm_is_fused(tmp_path, variant, form):
    """A recognised Keras 3 LSTM loop in the fused op, or in the loop form (the default: a WHILE without
    TensorLists per layer and direction)."""
    k = keras_flavour("keras3")
    model = _model(k, K3_SAVED[variant])
    conv, data = _export_and_convert(model, tmp_path, rnn_form=form)
    ops = litert_op_names(data)
    loops = [r for r in conv.report.composites if r["interface"] == "Keras LSTM loop (recognised)"]
    assert loops and all(r["form"] == form for r in loops), loops
    if form == "loop":
        assert ops.count("WHILE") == len(loops) and "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops, ops
    else:
        assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in ops and "WHILE" not in ops, ops
    if variant.startswith("bidirectional") and form == "fused":  # the loops paired, then split for every tool
        assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 2 and "BIDIRECTIONAL_SEQUENCE_LSTM" not in ops, ops
    x = np.random.default_rng(1).standard_normal((1, 7, 3)).astype(np.float32)
    first, second = invoke_twice(data, [x])
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_allclose(first[0], model(x), atol=TOL)
    assert all(r["status"] == "fused" for r in conv.report.composites)


def test_keras3_saved_model_lstm_loops_follow_the_thread_count(tmp_path):
    """A recognised Keras 3 LSTM loop takes the default form of the thread count, as an in-memory layer: for
    the Interpreter (litert_api="interpreter") the fused op at two threads (a small layer, by its size) and at
    three (by the thread count); by default (a file CompiledModel loads too) the unrolled form and the loop."""
    k = keras_flavour("keras3")
    model = _model(k, K3_SAVED["sequences"])
    x = np.random.default_rng(1).standard_normal((1, 7, 3)).astype(np.float32)
    for threads, form, api in ((2, "fused", "interpreter"), (3, "fused", "interpreter"), (2, "unrolled", "any"),
                               (3, "loop", "any")):
        conv, data = _export_and_convert(model, tmp_path / f"{threads}{api}", threads=threads, litert_api=api)
        loops = [r for r in conv.report.composites if r["interface"] == "Keras LSTM loop (recognised)"]
        assert [form_name(r["form"]) for r in loops] == [form], loops
        first, second = invoke_twice(data, [x], num_threads=threads)
        np.testing.assert_array_equal(first[0], second[0])
        np.testing.assert_allclose(first[0], model(x), atol=TOL)


def test_keras3_saved_model_lstm_with_batch_size(tmp_path):
    model = _model(keras_flavour("keras3"), K3_SAVED["sequences"])
    conv, data = _export_and_convert(model, tmp_path, batch_size=3)
    x = np.random.default_rng(2).standard_normal((3, 7, 3)).astype(np.float32)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [x]).values())), model(x), atol=TOL)


def test_keras3_saved_model_unfusable_loop_stays_a_correct_loop(tmp_path):
    model = _model(keras_flavour("keras3"), lambda L, i: L.LSTM(5, recurrent_activation="hard_sigmoid")(i))
    conv, data = _export_and_convert(model, tmp_path)
    assert "WHILE" in litert_op_names(data)
    x = np.random.default_rng(1).standard_normal((1, 7, 3)).astype(np.float32)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [x]).values())), model(x), atol=TOL)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", ["last_step", "sequences", "go_backwards", "relu"])
def test_saved_model_simple_rnn_loop_is_fused(tmp_path, flavour, variant):
    import tensorflow as tf

    k = keras_flavour(flavour)
    kw = {"last_step": {}, "sequences": {"return_sequences": True}, "go_backwards": {"go_backwards": True},
          "relu": {"activation": "relu"}}[variant]
    model = _model(k, lambda L, i: L.Dense(2)(L.SimpleRNN(5, **kw)(i)))
    path = str(tmp_path / "sm")
    if flavour == "keras3":
        model.export(path, verbose=False)
    else:
        tf.saved_model.save(model, path)
    for form, op in (("fused", "UNIDIRECTIONAL_SEQUENCE_RNN"), ("loop", "WHILE")):
        data = fuselite.Converter.from_saved_model(path, rnn_form=form).convert()
        ops = litert_op_names(data)
        assert ops.count(op) == 1 and not {"UNIDIRECTIONAL_SEQUENCE_RNN", "WHILE"} - {op} & set(ops), ops
        x = np.random.default_rng(3).standard_normal((1, 7, 3)).astype(np.float32)
        first, second = invoke_twice(data, [x])
        np.testing.assert_array_equal(first[0], second[0])
        np.testing.assert_allclose(first[0], model(x), atol=TOL)


DYNAMIC_BATCH_MODELS = {
    "lstm": lambda L, i: L.LSTM(6, return_sequences=True)(i),
    "lstm_state": lambda L, i: L.LSTM(6, return_state=True)(i),
    "simple_rnn": lambda L, i: L.SimpleRNN(5)(i),
    "bidirectional_lstm": lambda L, i: L.Bidirectional(L.LSTM(4, return_sequences=True))(i),
    "bidirectional_rnn_state": lambda L, i: L.Bidirectional(L.SimpleRNN(4, return_state=True))(i),
}


@pytest.mark.parametrize("bidirectional", ["split", "fused"])
@pytest.mark.parametrize("name", sorted(DYNAMIC_BATCH_MODELS))
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fused_rnn_keeps_the_batch_dynamic(flavour, name, bidirectional):
    """One model, one interpreter, resized between invokes to batch 2, 5 and 1: the fused sequence ops'
    state tensors take the batch from the input at run time (was: fixed to batch 1, and batch 2 failed)."""
    from ai_edge_litert.interpreter import Interpreter

    if bidirectional == "fused" and not name.startswith("bidirectional"):
        pytest.skip("the bidirectional form only matters for Bidirectional")
    k = keras_flavour(flavour)
    model = _model(k, DYNAMIC_BATCH_MODELS[name])
    conv = fuselite.Converter.from_keras_model(model, bidirectional=bidirectional, rnn_form="fused")
    data = conv.convert()
    assert "WHILE" not in litert_op_names(data)
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    interp = Interpreter(model_content=data)
    runner = interp.get_signature_runner()
    (name_in,) = runner.get_input_details()
    rng = np.random.default_rng(0)
    for batch in (2, 5, 1):
        x = rng.standard_normal((batch, *model.inputs[0].shape[1:])).astype(np.float32)
        got = runner(**{name_in: x})
        want = model(x)
        want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
        assert len(got) == len(want)
        for g, w in match_outputs(list(got.values()), want):
            np.testing.assert_allclose(g, w, atol=TOL, err_msg=f"batch {batch}")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fused_lstm_given_initial_states_gets_a_fixed_batch(flavour):
    """An initial state copied into a state tensor of a run-time batch came out wrong beyond the first row on
    LiteRT 2.3: a fused layer given initial states keeps the fixed batch, and the report says why."""
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    x, h, c = k.Input((5, 3)), k.Input((4,)), k.Input((4,))
    model = k.Model([x, h, c], k.layers.LSTM(4, return_sequences=True)(x, initial_state=[h, c]))
    conv, _ = check(model, "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert any("batch size of 1" in w and "initial state" in w for w in conv.report.warnings), conv.report.warnings
