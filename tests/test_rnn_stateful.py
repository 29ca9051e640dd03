"""Stateful Keras RNNs (``stateful=True``) -> fused sequence ops (GRU: unrolled) whose state carries across invokes.

A long sequence fed in chunks must give Keras' outputs chunk by chunk on LiteRT, and a
reset must bring both back to zero state: ``fuselite.runtime.reset_variables``, LiteRT's
``interpreter.reset_all_variables()`` and the ``reset_variables`` signature, each alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import interpreter, reset_variables

TOL = 1e-5
# GRU has no builtin: it is unrolled into FULLY_CONNECTED and friends
FUSED = {"LSTM": "UNIDIRECTIONAL_SEQUENCE_LSTM", "SimpleRNN": "UNIDIRECTIONAL_SEQUENCE_RNN", "GRU": "FULLY_CONNECTED"}
BATCH, STEPS, FEATURES = 2, 6, 3


def _model(k, layer: str, **kw):
    k.utils.set_random_seed(1)
    i = k.Input(shape=(STEPS, FEATURES), batch_size=BATCH)
    y = getattr(k.layers, layer)(5, stateful=True, **kw)(i)
    if isinstance(y, (list, tuple)):
        return k.Model(i, list(y))
    return k.Model(i, k.layers.Dense(2)(y))


def _reset_keras(model) -> None:
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_states()


def _invoke(interp, x):
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def _keras(model, x):
    y = model(x, training=False)
    return [np.asarray(t) for t in (y if isinstance(y, (list, tuple)) else [y])]


def _assert_same(got, want):
    assert len(got) == len(want)
    for w in want:  # output order of the signature may differ from Keras': pair by closeness
        err = min(float(np.abs(g - w).max()) for g in got if g.shape == w.shape)
        assert err <= TOL, err


def _check_chunks(model, data, chunks, witness: bool = False):
    from ai_edge_litert.interpreter import OpResolverType

    _check_chunks_on(model, interpreter(data), chunks, witness)
    # LiteRT's builtin kernels alone (no XNNPACK): the state copies must not alias a variable tensor
    _check_chunks_on(model, interpreter(data, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES),
                     chunks, witness)


def _check_chunks_on(model, interp, chunks, witness: bool = False):
    _reset_keras(model)
    for x in chunks:
        _assert_same(_invoke(interp, x), _keras(model, x))
    for how, reset in _resets(interp, witness).items():
        # the state really carries: the first chunk again gives another answer than from zero state
        carried = _invoke(interp, chunks[0])
        _reset_keras(model)
        reset()
        fresh = _invoke(interp, chunks[0])
        assert max(float(np.abs(a - b).max()) for a, b in zip(carried, fresh)) > 1e-3, how
        _assert_same(fresh, _keras(model, chunks[0]))
        for x in chunks[1:3]:
            _assert_same(_invoke(interp, x), _keras(model, x))


def _resets(interp, witness: bool = True) -> dict:
    """The three ways to reset a converted model's state, each alone (``reset_all_variables()`` only where the
    file has the reset witness: litert_api="interpreter")."""
    resets = {"fuselite.runtime.reset_variables": lambda: reset_variables(interp),
              "interpreter.reset_all_variables": interp.reset_all_variables,
              "reset_variables signature": lambda: interp.get_signature_runner("reset_variables")()}
    if not witness:
        del resets["interpreter.reset_all_variables"]
    return resets


@pytest.mark.parametrize("api", ["interpreter", "any"])
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "SimpleRNN", "GRU"])
@pytest.mark.parametrize("variant", ["last", "sequences", "state"])
def test_stateful_rnn_carries_state_across_invokes_and_resets(flavour, layer, variant, api):
    """litert_api="interpreter": the fused op's in-place state and the reset witness (all three resets); the
    default: unrolled (a file CompiledModel loads too), reset by the reset_variables signature."""
    from fuselite.runtime.compiled import loader_problems

    k = keras_flavour(flavour)
    kw = {"last": {}, "sequences": {"return_sequences": True}, "state": {"return_state": True}}[variant]
    model = _model(k, layer, **kw)
    conv = fuselite.Converter.from_keras_model(model, litert_api=api)
    data = conv.convert()
    ops = litert_op_names(data)
    if api == "interpreter":
        assert FUSED[layer] in ops and "WHILE" not in ops, ops
    else:  # unrolled
        assert "WHILE" not in ops and not {"UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN"} & set(ops), ops
        assert loader_problems(data) == []
    assert not [c for c in conv.report.composites if c.get("status") != "fused"], conv.report.composites
    mutable = {v["name"] for v in conv.report.mutable_variables}
    assert len(mutable) == (2 if layer == "LSTM" else 1), conv.report.mutable_variables
    rng = np.random.default_rng(3)
    chunks = [(rng.standard_normal((BATCH, STEPS, FEATURES)) * 2).astype(np.float32) for _ in range(5)]
    _check_chunks(model, data, chunks, witness=api == "interpreter")


def test_stateful_lstm_chunks_equal_one_long_sequence():
    """Feeding 4 chunks of 6 steps ends where one 24-step stateless pass ends."""
    k = keras_flavour("keras3")
    model = _model(k, "LSTM", return_sequences=True)
    data = fuselite.Converter.from_keras_model(model).convert()
    rng = np.random.default_rng(5)
    long = rng.standard_normal((BATCH, 4 * STEPS, FEATURES)).astype(np.float32)
    interp = interpreter(data)
    outs = [_invoke(interp, long[:, s:s + STEPS])[0] for s in range(0, 4 * STEPS, STEPS)]
    twin_in = k.Input(shape=(4 * STEPS, FEATURES), batch_size=BATCH)
    lstm = k.layers.LSTM(5, return_sequences=True)
    twin = k.Model(twin_in, model.layers[-1](lstm(twin_in)))
    lstm.set_weights(model.layers[1].get_weights())
    np.testing.assert_allclose(np.concatenate(outs, axis=1), np.asarray(twin(long)), atol=TOL)


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_model_converted_mid_stream_starts_from_zero_state(flavour):
    """Keras' reset state is zeros: a model converted after it ran starts (and resets) there."""
    k = keras_flavour(flavour)
    model = _model(k, "LSTM")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32)
    model(x)  # leaves a non-zero state behind
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    assert any("starts from zero state" in w for w in conv.report.warnings), conv.report.warnings
    interp = interpreter(data)
    _reset_keras(model)
    _assert_same(_invoke(interp, x), _keras(model, x))
    _assert_same(_invoke(interp, x), _keras(model, x))
    reset_variables(interp)
    _reset_keras(model)
    _assert_same(_invoke(interp, x), _keras(model, x))


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "SimpleRNN"])
def test_stateful_rnn_from_saved_model(flavour, layer, tmp_path):
    """Through a SavedModel the recognised loop reads and assigns the state variables;
    the batch comes from the state variables even when the signature's batch is unknown. By default unrolled
    (a file CompiledModel loads too)."""
    from fuselite.runtime.compiled import loader_problems

    k = keras_flavour(flavour)
    model = _model(k, layer)
    if flavour == "keras3":
        model.export(str(tmp_path), verbose=False)
    else:
        import tensorflow as tf

        tf.saved_model.save(model, str(tmp_path))
    conv = fuselite.Converter.from_saved_model(tmp_path)
    data = conv.convert()
    ops = litert_op_names(data)
    assert FUSED[layer] not in ops and "WHILE" not in ops and loader_problems(data) == [], ops
    assert "reset_variables" in conv.report.signatures
    rng = np.random.default_rng(4)
    _check_chunks(model, data, [rng.standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32) for _ in range(4)])


def test_zero_state_marks_do_not_outlive_their_conversion():
    """After converting a stateful Keras model, another program reading its (non-zero) state
    variable starts from the variable's current value, like any mutable variable."""
    import tensorflow as tf

    k = keras_flavour("keras3")
    model = _model(k, "SimpleRNN")
    fuselite.Converter.from_keras_model(model).convert()
    model(np.ones((BATCH, STEPS, FEATURES), np.float32))  # non-zero state now
    state = model.layers[1].states[0]
    current = np.asarray(state.value)
    assert np.abs(current).max() > 1e-3

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def bump(x):
        state.assign(state.value + x)
        return state.value

    data = fuselite.Converter.from_concrete_functions([bump.get_concrete_function()], model).convert()
    got = interpreter(data).get_signature_runner("serving_default")(x=np.float32(1.0))
    np.testing.assert_allclose(next(iter(got.values())), current + 1.0, atol=1e-6)


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_stateful_bidirectional_lstm_is_two_stateful_ops(flavour):
    """Each direction reads and assigns its own state: two LSTMs (not merged; unrolled by default, two fused ops
    for the Interpreter), chunk by chunk."""
    k = keras_flavour(flavour)
    rng = np.random.default_rng(6)
    chunks = [rng.standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32) for _ in range(4)]
    for api, op, count in (("interpreter", "UNIDIRECTIONAL_SEQUENCE_LSTM", 2), ("any", "UNIDIRECTIONAL_SEQUENCE_LSTM", 0)):
        k.utils.set_random_seed(1)  # a model of its own each (one that already ran is another test's)
        i = k.Input(shape=(STEPS, FEATURES), batch_size=BATCH)
        model = k.Model(i, k.layers.Bidirectional(k.layers.LSTM(5, stateful=True))(i))
        conv = fuselite.Converter.from_keras_model(model, litert_api=api)
        data = conv.convert()
        ops = litert_op_names(data)
        assert ops.count(op) == count, ops
        assert any("stateful" in w and "two" in w for w in conv.report.warnings), conv.report.warnings
        _check_chunks(model, data, chunks, witness=api == "interpreter")


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_stateful_bidirectional_converted_mid_stream_starts_from_zero_state(flavour):
    """Keras' own call runs a stateful Bidirectional's two layers (two stateful ops): a model converted after it
    ran starts from zero state in both directions, as a unidirectional one does, and says so."""
    k = keras_flavour(flavour)
    k.utils.set_random_seed(2)
    i = k.Input(shape=(STEPS, FEATURES), batch_size=BATCH)
    model = k.Model(i, k.layers.Bidirectional(k.layers.LSTM(5, stateful=True, return_sequences=True))(i))
    rng = np.random.default_rng(8)
    chunks = [rng.standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32) for _ in range(3)]
    model(chunks[0])  # leaves a non-zero state in both directions
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    assert sum("starts from zero state" in w for w in conv.report.warnings) == 2, conv.report.warnings
    _check_chunks(model, data, chunks)
