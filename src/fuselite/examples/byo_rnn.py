"""Bring your own RNN: the two worked examples of ``docs/byo-rnn.md``.

``tests/test_byo_rnn.py`` runs this code, and the doc quotes it verbatim (a test checks
that every Python block of the doc appears here or in the test file).

1. :class:`GateWiseLSTM` — a user's own LSTM whose weights are stored per gate, in the
   order i, c, f, o. It rearranges them into Keras' layout and runs its sequence through
   a composite that implements ``keras.layers.LSTM``, so fuselite's built-in rule fuses it.
2. :class:`PeepholeLSTM` and :func:`fuse_peephole_lstm` — a cell Keras lacks (an LSTM
   with peephole connections), marked as ``my_org.PeepholeLSTM`` and fused into
   ``UNIDIRECTIONAL_SEQUENCE_LSTM`` by a rule passed to the conversion.
3. :func:`fuse_peephole_lstm_any_form` — the same composite through the public cell API: the
   peephole cell (``fuselite.rnn.cells.peephole_lstm``) handed to ``fuselite.rnn.forms.layer.sequence``,
   which writes the form the conversion asks for LSTMs (``rnn_form``: loop, unrolled or fused).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import fuselite
from fuselite.errors import NeedsStaticBatch
from fuselite.rnn.cells.peephole_lstm import PeepholeLSTMCell
from fuselite.rnn.forms.fused import last_time_step, lstm_sequence, zero_state
from fuselite.rnn.forms.layer import sequence
from fuselite.rnn.kit import ACTIVATION_OPS, FUSED_ACTIVATIONS, GATE_ORDERS, keras_to_litert

# -- Example 1: a custom LSTM behind the Keras LSTM interface --------------------------------


def keras_lstm_interface(units: int, return_sequences: bool) -> str:
    """The implements text of a plain Keras LSTM: every attribute the built-in rule reads."""
    return fuselite.implements(
        "keras.layers.LSTM",
        units=units,
        activation="tanh",              # the cell activation (tanh, relu, relu6, sigmoid, linear)
        recurrent_activation="sigmoid",  # the gates: the fused op always uses sigmoid
        return_sequences=return_sequences,
        return_state=False,             # True: results (output, h, c)
        go_backwards=False,
        time_major=False,               # x is [batch, time, features]
        stateful=False,
        use_bias=True,
        has_mask=False,                 # no mask argument
        n_initial_states=0,             # 2: (h0, c0) follow the bias as arguments
    )


def keras_layout_lstm(x, kernel, recurrent_kernel, bias, return_sequences: bool):
    """An LSTM in Keras' layout: kernel [in, 4u], recurrent_kernel [u, 4u], gates i, f, c, o."""
    batch, units = tf.shape(x)[0], recurrent_kernel.shape[0]
    h = c = tf.zeros([batch, units], x.dtype)
    outputs = []
    for t in range(x.shape[1]):  # a static number of steps
        z = tf.matmul(x[:, t], kernel) + tf.matmul(h, recurrent_kernel) + bias
        zi, zf, zc, zo = tf.split(z, 4, axis=1)
        c = tf.sigmoid(zf) * c + tf.sigmoid(zi) * tf.tanh(zc)
        h = tf.sigmoid(zo) * tf.tanh(c)
        outputs.append(h)
    return tf.stack(outputs, axis=1) if return_sequences else h


class GateWiseLSTM(tf.Module):
    """A user's LSTM with one matrix per gate, stored in its own gate order i, c, f, o."""

    GATES = ("i", "c", "f", "o")

    def __init__(self, features: int, units: int, return_sequences: bool = False, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)

        def var(*shape):
            return tf.Variable((rng.standard_normal(shape) * 0.4).astype(np.float32))

        self.w_x = {g: var(features, units) for g in self.GATES}  # input -> gate
        self.w_h = {g: var(units, units) for g in self.GATES}     # hidden -> gate
        self.b = {g: var(units) for g in self.GATES}

        @tf.function(experimental_implements=keras_lstm_interface(units, return_sequences), autograph=False)
        def sequence(x, kernel, recurrent_kernel, bias):
            return keras_layout_lstm(x, kernel, recurrent_kernel, bias, return_sequences)

        self._sequence = sequence

    def __call__(self, x):
        keras_order = GATE_ORDERS["keras", "LSTM"]  # i, f, c, o; plain TF ops on frozen variables fold to constants
        kernel = tf.concat([self.w_x[g] for g in keras_order], axis=1)
        recurrent_kernel = tf.concat([self.w_h[g] for g in keras_order], axis=1)
        bias = tf.concat([self.b[g] for g in keras_order], axis=0)
        return self._sequence(x, kernel, recurrent_kernel, bias)


# -- Example 2: a new rule for a peephole LSTM ------------------------------------------------

PEEPHOLE_LSTM = "my_org.PeepholeLSTM"


def peephole_lstm(x, kernel, recurrent_kernel, bias, w_ci, w_cf, w_co, activation, return_sequences):
    """An LSTM with peephole connections (diagonal cell-to-gate weights), gates i, f, c, o."""
    batch, units = tf.shape(x)[0], recurrent_kernel.shape[0]
    h = c = tf.zeros([batch, units], x.dtype)
    outputs = []
    for t in range(x.shape[1]):
        z = tf.matmul(x[:, t], kernel) + tf.matmul(h, recurrent_kernel) + bias
        zi, zf, zc, zo = tf.split(z, 4, axis=1)
        i = tf.sigmoid(zi + w_ci * c)   # the input and forget gates see the previous cell state
        f = tf.sigmoid(zf + w_cf * c)
        c = f * c + i * activation(zc)
        o = tf.sigmoid(zo + w_co * c)   # the output gate sees the new one
        h = o * activation(c)
        outputs.append(h)
    return tf.stack(outputs, axis=1) if return_sequences else h


class PeepholeLSTM(tf.Module):
    """Keras-layout LSTM weights plus three peephole vectors; ``activation`` names a ``tf.nn`` function."""

    def __init__(self, features: int, units: int, return_sequences: bool = False,
                 activation: str = "tanh", seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)

        def var(*shape):
            return tf.Variable((rng.standard_normal(shape) * 0.4).astype(np.float32))

        self.kernel, self.recurrent_kernel, self.bias = var(features, 4 * units), var(units, 4 * units), var(4 * units)
        self.w_ci, self.w_cf, self.w_co = var(units), var(units), var(units)
        act = getattr(tf.nn, activation)

        @tf.function(experimental_implements=fuselite.implements(
            PEEPHOLE_LSTM, units=units, activation=activation, return_sequences=return_sequences), autograph=False)
        def sequence(x, kernel, recurrent_kernel, bias, w_ci, w_cf, w_co):
            return peephole_lstm(x, kernel, recurrent_kernel, bias, w_ci, w_cf, w_co, act, return_sequences)

        self._sequence = sequence

    def __call__(self, x):
        return self._sequence(x, self.kernel, self.recurrent_kernel, self.bias, self.w_ci, self.w_cf, self.w_co)


@fuselite.fusion(PEEPHOLE_LSTM, register=False)
def fuse_peephole_lstm(c):
    """my_org.PeepholeLSTM -> one UNIDIRECTIONAL_SEQUENCE_LSTM with peephole inputs 9-11."""
    c.expect_args(7)
    c.expect_results(1)
    x, kernel, recurrent_kernel, bias, *peepholes = c.args
    units, activation = int(c.attrs["units"]), c.attrs.get("activation", "tanh")
    if activation not in FUSED_ACTIVATIONS:
        c.decline(f"activation '{activation}' has no fused equivalent (supported: {', '.join(FUSED_ACTIVATIONS)})")
    if x.dtype != np.float32 or x.rank != 3 or x.shape[2] is None:
        c.decline(f"x must be float32 [batch, time, features] with static features, got {x.dtype} {x.shape}")
    weights = c.args[1:]
    if any(w.const is None for w in weights):
        c.decline("the weights must be constant (frozen variables)")
    expected = [(x.shape[2], 4 * units), (units, 4 * units), (4 * units,), (units,), (units,), (units,)]
    if [w.const.shape for w in weights] != expected:
        c.decline(f"weight shapes {[w.const.shape for w in weights]} do not fit units={units} (expected {expected})")
    batch = x.shape[0] or c.batch_size
    if batch is None:  # the converter retries with batch 1 (or the user's batch_size) and says so
        raise NeedsStaticBatch("the fused peephole LSTM keeps its state in tensors that need a static batch size")

    per_gate = keras_to_litert(kernel.const, recurrent_kernel.const, bias.const, 4)  # i, f, c, o: [units, in] each
    seq = lstm_sequence(
        c, x,
        input_weights=per_gate.input,
        recurrent_weights=per_gate.recurrent,
        biases=per_gate.bias,
        output_state=zero_state(c, batch, units),  # stateless: both states are zeroed on every invoke
        cell_state=zero_state(c, batch, units),
        activation=FUSED_ACTIVATIONS[activation],
        peepholes=[p.const for p in peepholes],
    )
    return seq if c.attrs.get("return_sequences") else last_time_step(c, seq)


# -- Example 3: the same peephole LSTM as a cell, in every form --------------------------------


@fuselite.fusion(PEEPHOLE_LSTM, register=False)
def fuse_peephole_lstm_any_form(c):
    """my_org.PeepholeLSTM -> the form the conversion gives LSTMs (rnn_form: loop by default, unrolled, fused),
    through the peephole cell of fuselite/rnn/cells/peephole_lstm.py."""
    c.expect_args(7)
    c.expect_results(1)
    x, *weights = c.args
    activation = c.attrs.get("activation", "tanh")
    if activation not in ACTIVATION_OPS or activation not in FUSED_ACTIVATIONS:
        c.decline(f"activation '{activation}' is not one every form writes (tanh, sigmoid, relu, linear)")
    if x.dtype != np.float32 or x.rank != 3 or x.shape[2] is None:
        c.decline(f"x must be float32 [batch, time, features] with static features, got {x.dtype} {x.shape}")
    if any(w.const is None for w in weights):
        c.decline("the weights must be constant (frozen variables)")
    kernel, recurrent_kernel, bias, *peepholes = (w.const for w in weights)
    cell = PeepholeLSTMCell(kernel, recurrent_kernel, bias, peepholes, activation)
    out, _ = sequence(c, cell, x.value, return_sequences=bool(c.attrs.get("return_sequences")))
    return out
