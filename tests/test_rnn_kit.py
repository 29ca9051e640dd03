"""The recurrent kit (rnn/kit.py) and the cells' NumPy references (rnn/cells/): gate slicing, weight layouts, references vs Keras."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour

from fuselite.rnn import kit as rnn_kit
from fuselite.rnn.cells.gru import gru_fully_connected_weights, numpy_gru, numpy_gru_cell, split_gru_bias
from fuselite.rnn.cells.lingvo import lingvo_to_litert
from fuselite.rnn.cells.lstm import numpy_lstm, numpy_lstm_cell
from fuselite.rnn.cells.simple_rnn import numpy_simple_rnn, numpy_simple_rnn_cell
from fuselite.rnn.kit import (
    GATE_ORDERS,
    gate_block,
    keras_cell_with_gates,
    keras_to_litert,
    lstm_operands,
    reorder_gates,
    rnn_operands,
    split_gates,
)

TOL = 1e-5
RNG = np.random.default_rng(0)


def _normal(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# -- gate orders and slicing ------------------------------------------------------------------------


def test_gate_block_cuts_views_of_consecutive_gate_blocks():
    kernel = np.arange(24).reshape(2, 12)  # [in = 2, 4 gates * 3 units]
    np.testing.assert_array_equal(gate_block(kernel, 2, 3), [[6, 7, 8], [18, 19, 20]])
    np.testing.assert_array_equal(gate_block(kernel, slice(0, 2), 3), kernel[:, :6])
    np.testing.assert_array_equal(gate_block(kernel, slice(2, None), 3), kernel[:, 6:])
    np.testing.assert_array_equal(gate_block(kernel.T, 1, 6, axis=0), kernel[:, 6:].T)  # another axis
    np.testing.assert_array_equal(gate_block(np.arange(12), 3, 3), [9, 10, 11])  # a bias
    assert np.shares_memory(gate_block(kernel, 1, 3), kernel)
    with pytest.raises(ValueError, match="consecutive"):
        gate_block(kernel, slice(0, 4, 2), 3)


def test_split_gates_divides_the_axis_evenly():
    z = np.arange(12.0).reshape(1, 12)
    i, f, c, o = split_gates(z, 4)
    np.testing.assert_array_equal(np.concatenate([i, f, c, o], axis=1), z)
    assert [b.shape for b in split_gates(z, 3)] == [(1, 4)] * 3
    with pytest.raises(ValueError, match="not 5 equal gate blocks"):
        split_gates(z, 5)


def test_gate_orders_and_reordering():
    assert GATE_ORDERS["keras", "LSTM"] == GATE_ORDERS["litert", "LSTM"] == ("i", "f", "c", "o")
    assert GATE_ORDERS["keras", "GRU"] == ("z", "r", "h")
    assert [keras_cell_with_gates(n) for n in (4, 3, 1, 2)] == ["LSTM", "GRU", "SimpleRNN", None]
    lingvo, litert = GATE_ORDERS["lingvo", "LSTM"], GATE_ORDERS["litert", "LSTM"]
    assert reorder_gates(["C", "I", "F", "O"], lingvo, litert) == ("I", "F", "C", "O")
    assert reorder_gates(["C", "F", "O"], GATE_ORDERS["lingvo", "CIFG_LSTM"], litert) == (None, "F", "C", "O")
    with pytest.raises(ValueError):
        reorder_gates(["C", "F"], lingvo, litert)


# -- weight layouts: the transformed weights compute the same pre-activations -------------------------


@pytest.mark.parametrize("n_gates", [4, 1])
def test_keras_to_litert_gives_each_gate_its_pre_activation(n_gates):
    features, units = 3, 5
    k, rk, b = _normal(features, n_gates * units), _normal(units, n_gates * units), _normal(n_gates * units)
    x, h = _normal(2, features), _normal(2, units)
    w = keras_to_litert(k, rk, b, n_gates)
    z = x @ k + h @ rk + b
    for g in range(n_gates):
        assert w.input[g].shape == (units, features) and w.recurrent[g].shape == (units, units)
        assert all(a.flags.c_contiguous and a.dtype == np.float32 for a in (w.input[g], w.recurrent[g], w.bias[g]))
        np.testing.assert_allclose(x @ w.input[g].T + h @ w.recurrent[g].T + w.bias[g], gate_block(z, g, units),
                                   atol=1e-6)


def test_gru_fully_connected_weights_and_bias_split():
    features, units = 3, 4
    k, rk, bias = _normal(features, 3 * units), _normal(units, 3 * units), _normal(2, 3 * units)
    b_in, b_rec = split_gru_bias(bias)
    np.testing.assert_array_equal(b_in, bias[0])
    np.testing.assert_array_equal(b_rec, bias[1])
    one = bias[0]
    one_in, one_rec = split_gru_bias(one)  # reset_after=False: one bias, the recurrent one is zeros
    assert one_in is one and one_rec.shape == one.shape and not one_rec.any()
    w = gru_fully_connected_weights(k, rk, b_in, b_rec)
    x, h = _normal(2, features), _normal(2, units)
    np.testing.assert_allclose(x @ w.input.T + w.input_bias, x @ k + b_in, atol=1e-6)
    np.testing.assert_allclose(h @ w.recurrent.T + w.recurrent_bias, h @ rk + b_rec, atol=1e-6)
    np.testing.assert_allclose(h @ w.recurrent_zr.T, h @ rk[:, :2 * units], atol=1e-6)
    np.testing.assert_allclose(h @ w.recurrent_h.T, h @ rk[:, 2 * units:], atol=1e-6)
    assert not gru_fully_connected_weights(k, rk, b_in, None).recurrent_bias.any()


@pytest.mark.parametrize("cifg", [False, True])
def test_lingvo_to_litert_matches_the_lingvo_layout(cifg):
    n_in, n_cell, n_out = 5, 4, 3
    order = GATE_ORDERS["lingvo", "CIFG_LSTM" if cifg else "LSTM"]
    weight, bias = _normal(n_in + n_out, len(order) * n_cell), _normal(len(order) * n_cell)
    scale, projection = _normal(len(order) * n_cell), _normal(n_cell, n_out)
    w = lingvo_to_litert(weight, bias, n_in, cifg=cifg, layer_norm_scale=scale, projection=projection)
    x, m = _normal(2, n_in), _normal(2, n_out)
    z = np.concatenate([x, m], axis=1) @ weight + bias  # lingvo: concat([x, m]) @ weight + bias
    for g, name in enumerate(GATE_ORDERS["litert", "LSTM"]):
        if name not in order:
            assert w.input[g] is None and w.recurrent[g] is None and w.bias[g] is None and w.layer_norm[g] is None
            continue
        block = order.index(name)
        np.testing.assert_allclose(x @ w.input[g].T + m @ w.recurrent[g].T + w.bias[g], gate_block(z, block, n_cell),
                                   atol=1e-6)
        np.testing.assert_array_equal(w.layer_norm[g], gate_block(scale, block, n_cell))
    np.testing.assert_array_equal(w.projection, projection.T)
    assert lingvo_to_litert(weight, bias, n_in, cifg=cifg).layer_norm is None


def test_operand_lists_follow_litert_order():
    w = keras_to_litert(_normal(3, 8), _normal(2, 8), _normal(8), 4)
    ops = lstm_operands("x", *w, "h", "c", peepholes=["pi", "pf", "po"], layer_norm=["ni", "nf", "nc", "no"])
    assert len(ops) == 24 and ops[0] == "x" and ops[18:20] == ["h", "c"]
    assert ops[1] is w.input[0] and ops[8] is w.recurrent[3] and ops[12] is w.bias[0]
    assert ops[9:12] == ["pi", "pf", "po"] and ops[16:18] == [None, None] and ops[20:] == ["ni", "nf", "nc", "no"]
    plain = lstm_operands("x", *w, "h", "c")
    assert [i for i, v in enumerate(plain) if v is None] == [9, 10, 11, 16, 17, 20, 21, 22, 23]
    r = keras_to_litert(_normal(3, 2), _normal(2, 2), _normal(2), 1)
    assert rnn_operands("x", *r, "h") == ["x", r.input[0], r.recurrent[0], r.bias[0], "h"]


def test_activation_tables_agree():
    assert list(rnn_kit.FUSED_ACTIVATIONS) == ["tanh", "relu", "relu6", "sigmoid", "linear"]
    assert set(rnn_kit.FUSED_ACTIVATIONS) <= set(rnn_kit.NUMPY_ACTIVATIONS)
    assert set(rnn_kit.ACTIVATION_OPS) <= set(rnn_kit.NUMPY_ACTIVATIONS)
    v = np.array([-7.0, -0.5, 0.0, 0.5, 7.0])
    np.testing.assert_allclose(rnn_kit.NUMPY_ACTIVATIONS["relu6"](v), [0, 0, 0, 0.5, 6])
    np.testing.assert_allclose(rnn_kit.NUMPY_ACTIVATIONS["sigmoid"](v), 1 / (1 + np.exp(-v)))


# -- NumPy reference cells and sequences vs Keras 3 ------------------------------------------------------


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_numpy_lstm_cell_matches_keras(activation):
    k = keras_flavour("keras3")
    x, h, c = _normal(2, 3, scale=1), _normal(2, 5, scale=1), _normal(2, 5, scale=1)
    cell = k.layers.LSTMCell(5, activation=activation, bias_initializer="random_normal")
    _, (want_h, want_c) = cell(x, [h, c])
    kernel, rec, bias = (np.asarray(w) for w in cell.weights)
    got_h, got_c = numpy_lstm_cell(x, h, c, kernel, rec, bias, activation=activation)
    np.testing.assert_allclose(got_h, want_h, atol=TOL)
    np.testing.assert_allclose(got_c, want_c, atol=TOL)


def test_numpy_gru_cell_matches_keras():
    """The reference the loop recognition compares against is Keras' GRU cell (both reset_after)."""
    k = keras_flavour("keras3")
    x, h = _normal(2, 3, scale=1), _normal(2, 5, scale=1)
    for reset_after in (True, False):
        cell = k.layers.GRUCell(5, reset_after=reset_after, bias_initializer="random_normal")
        want = np.asarray(cell(x, [h])[0])
        kernel, rec, bias = (np.asarray(w) for w in cell.weights)
        got = numpy_gru_cell(x, h, kernel, rec, *split_gru_bias(bias), reset_after=reset_after)
        np.testing.assert_allclose(got, want, atol=TOL)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_numpy_simple_rnn_cell_matches_keras(activation):
    k = keras_flavour("keras3")
    x, h = _normal(2, 3, scale=1), _normal(2, 5, scale=1)
    cell = k.layers.SimpleRNNCell(5, activation=activation, bias_initializer="random_normal")
    want = np.asarray(cell(x, [h])[0])
    kernel, rec, bias = (np.asarray(w) for w in cell.weights)
    np.testing.assert_allclose(numpy_simple_rnn_cell(x, h, kernel, rec, bias, activation=activation), want, atol=TOL)


def _keras_sequence(layer_name, go_backwards, **kw):
    """A Keras 3 layer's (outputs, final states, weights) on a random sequence from zero state."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    layer = getattr(k.layers, layer_name)(4, return_sequences=True, return_state=True, go_backwards=go_backwards,
                                          bias_initializer="random_normal", **kw)
    x = _normal(2, 6, 3, scale=1)
    outputs, *states = layer(x)
    return x, np.asarray(outputs), [np.asarray(s) for s in states], [np.asarray(w) for w in layer.get_weights()]


@pytest.mark.parametrize("go_backwards", [False, True])
def test_numpy_sequences_match_keras_layers(go_backwards):
    """Outputs in processing order, as Keras returns them; the final states; time_major is a transpose."""
    zeros = np.zeros((2, 4), np.float32)
    x, want, (want_h, want_c), weights = _keras_sequence("LSTM", go_backwards)
    seq, h, c = numpy_lstm(x, zeros, zeros, *weights, go_backwards=go_backwards)
    np.testing.assert_allclose(seq.transpose(1, 0, 2), want, atol=TOL)
    np.testing.assert_allclose(h, want_h, atol=TOL)
    np.testing.assert_allclose(c, want_c, atol=TOL)
    seq_tm, _, _ = numpy_lstm(x.transpose(1, 0, 2), zeros, zeros, *weights, time_major=True, go_backwards=go_backwards)
    np.testing.assert_array_equal(seq_tm, seq)

    for reset_after in (True, False):
        x, want, (want_h,), (kernel, rec, bias) = _keras_sequence("GRU", go_backwards, reset_after=reset_after)
        seq, h = numpy_gru(x, zeros, kernel, rec, bias, reset_after=reset_after, go_backwards=go_backwards)
        np.testing.assert_allclose(seq.transpose(1, 0, 2), want, atol=TOL)
        np.testing.assert_allclose(h, want_h, atol=TOL)

    x, want, (want_h,), weights = _keras_sequence("SimpleRNN", go_backwards, activation="relu")
    seq, h = numpy_simple_rnn(x, zeros, *weights, activation="relu", go_backwards=go_backwards)
    np.testing.assert_allclose(seq.transpose(1, 0, 2), want, atol=TOL)
    np.testing.assert_allclose(h, want_h, atol=TOL)


def test_numpy_references_differ_when_the_flags_differ():
    """The comparisons above can fail: go_backwards and the activation change the numbers."""
    zeros = np.zeros((2, 4), np.float32)
    x, _, _, weights = _keras_sequence("LSTM", False)
    forward, _, _ = numpy_lstm(x, zeros, zeros, *weights)
    backward, _, _ = numpy_lstm(x, zeros, zeros, *weights, go_backwards=True)
    relu, _, _ = numpy_lstm(x, zeros, zeros, *weights, activation="relu")
    assert np.abs(forward - backward).max() > 1e-2 and np.abs(forward - relu).max() > 1e-2
