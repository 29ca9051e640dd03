"""The peephole LSTM family: Keras' LSTM with diagonal cell-to-gate weights (Gers & Schmidhuber), a cell Keras
lacks. The worked example of docs/architecture.md ("Adding a cell"): this file alone makes it run in all three
forms (``rnn/forms/``), through a bring-your-own rule that calls ``forms.layer.sequence``
(``examples/byo_rnn.py``, Example 3).

Gates i, f, c, o along the last axis of ``kernel [in, 4u]``, ``recurrent_kernel [u, 4u]``, ``bias [4u]``,
and three ``[u]`` peephole vectors::

    zi, zf, zc, zo = split(x @ kernel + h @ recurrent_kernel + bias, 4)
    i, f = sigmoid(zi + w_ci * c), sigmoid(zf + w_cf * c)      # the previous cell state
    c = f * c + i * act(zc)
    o = sigmoid(zo + w_co * c)                                  # the new cell state
    h = o * act(c)

The fused form is LiteRT's ``UNIDIRECTIONAL_SEQUENCE_LSTM`` with its peephole inputs 9-11 (the same math,
``lstm_eval.cc``).

Example::

    cell = PeepholeLSTMCell(kernel, recurrent_kernel, bias, (w_ci, w_cf, w_co), "tanh")
    out, states = sequence(c, cell, x)
"""

from __future__ import annotations

import numpy as np

from fuselite.rnn.build import F32, binary, fc
from fuselite.rnn.build import activation as apply
from fuselite.rnn.cells.base import Cell
from fuselite.rnn.forms.fused import lstm_sequence
from fuselite.rnn.kit import FUSED_ACTIVATIONS, NUMPY_ACTIVATIONS, keras_to_litert, run_sequence, sigmoid, split_gates


class PeepholeLSTMCell(Cell):
    """A peephole LSTM's weights (Keras' layout, gates i, f, c, o; ``peepholes`` = (w_ci, w_cf, w_co), each [units])
    and ``activation`` (tanh, sigmoid, relu or linear) as a cell: states (h, c); the LSTM family's form."""

    kind = "PeepholeLSTM"
    form_key = "LSTM"
    n_states = 2

    def __init__(self, kernel, recurrent, bias, peepholes, activation: str):
        self.units = recurrent.shape[0]
        self.activation = activation
        self.keras = (kernel, recurrent, bias)
        self.peepholes = tuple(np.asarray(p, np.float32) for p in peepholes)
        self.input = np.ascontiguousarray(np.asarray(kernel, np.float32).T)
        self.bias = np.asarray(bias, np.float32)
        self.recurrent = np.ascontiguousarray(np.asarray(recurrent, np.float32).T)

    def step(self, b, xt, states):
        h, cell = states
        one = (xt.shape[0], self.units)
        w_ci, w_cf, w_co = self.peepholes
        pre = xt if h is None else binary(b, "ADD", xt, fc(b, h, self.recurrent, None, xt.shape), xt.shape)
        zi, zf, zc, zo = b.op("SPLIT", [np.array(-1, np.int32), pre], {"num_splits": 4}, outs=[(F32, one)] * 4)
        if cell is not None:  # a zero cell state adds nothing to the gates
            zi = binary(b, "ADD", zi, binary(b, "MUL", cell, w_ci, one), one)
            zf = binary(b, "ADD", zf, binary(b, "MUL", cell, w_cf, one), one)
        i = b.op("LOGISTIC", [zi], dtype=np.float32, shape=one)
        new = binary(b, "MUL", i, apply(b, self.activation, zc), one)
        if cell is not None:
            f = b.op("LOGISTIC", [zf], dtype=np.float32, shape=one)
            new = binary(b, "ADD", binary(b, "MUL", f, cell, one), new, one)
        o = b.op("LOGISTIC", [binary(b, "ADD", zo, binary(b, "MUL", new, w_co, one), one)], dtype=np.float32,
                 shape=one)
        h = binary(b, "MUL", o, apply(b, self.activation, new), one)
        return [h, new], h

    def fused(self, c, x_tm, states):
        return lstm_sequence(c, x_tm, *keras_to_litert(*self.keras, 4, self.units), *states,
                             activation=FUSED_ACTIVATIONS[self.activation], peepholes=self.peepholes, time_major=True)


def numpy_peephole_lstm_cell(x, h, c, kernel, recurrent_kernel, bias, peepholes, *, activation: str = "tanh"):
    """One step of the peephole LSTM in float64: ``(h, c)``."""
    act = NUMPY_ACTIVATIONS[activation]
    w_ci, w_cf, w_co = (np.asarray(p, np.float64) for p in peepholes)
    zi, zf, zc, zo = split_gates(np.asarray(x, np.float64) @ kernel + h @ recurrent_kernel + bias, 4)
    c = sigmoid(zf + w_cf * c) * c + sigmoid(zi + w_ci * c) * act(zc)
    return sigmoid(zo + w_co * c) * act(c), c


def numpy_peephole_lstm(x, kernel, recurrent_kernel, bias, peepholes, *, activation: str = "tanh"):
    """The peephole LSTM over ``x`` [batch, time, features] from zero states, in float64: ``(outputs [time, batch,
    units], h, c)``."""
    k, rk, b = (np.asarray(w, np.float64) for w in (kernel, recurrent_kernel, bias))
    zeros = np.zeros((np.shape(x)[0], rk.shape[0]))
    seq, (h, c) = run_sequence(lambda xt, h, c: numpy_peephole_lstm_cell(xt, h, c, k, rk, b, peepholes,
                                                                         activation=activation), x, [zeros, zeros])
    return seq, h, c
