"""The LSTM family (Keras' LSTM; tf-keras' ``standard_lstm``; LiteRT's ``UNIDIRECTIONAL_SEQUENCE_LSTM``).

Keras' cell, gates i, f, c, o along the last axis of ``kernel [in, 4u]``, ``recurrent_kernel [u, 4u]``,
``bias [4u]``::

    i, f, g, o = split(x @ kernel + h @ recurrent_kernel + bias, 4)
    c = sigmoid(f) * c + sigmoid(i) * act(g);  h = sigmoid(o) * act(c)

Written step by step (the unrolled and loop forms) with the gates reordered i, f, o, c (:func:`ifoc`), so
that one ``LOGISTIC`` covers the three sigmoid gates; as LiteRT's fused op with the per-gate weights of
:func:`~fuselite.rnn.kit.keras_to_litert`.

Example::

    cell = LSTMCell(kernel, recurrent_kernel, bias, "tanh")
    (h, c_state), out = cell.step(c, xt, [h, c_state])
"""

from __future__ import annotations

import numpy as np

from fuselite.rnn.build import F32, binary, fc, split_v
from fuselite.rnn.build import activation as apply
from fuselite.rnn.cells.base import Cell
from fuselite.rnn.forms.fused import lstm_sequence
from fuselite.rnn.kit import (
    FUSED_ACTIVATIONS,
    NUMPY_ACTIVATIONS,
    as_dtype,
    keras_to_litert,
    run_sequence,
    sigmoid,
    split_gates,
)


def ifoc(w: np.ndarray, units: int) -> np.ndarray:
    """An LSTM's gate columns i, f, c, o (Keras) reordered i, f, o, c: the three sigmoid gates side by side, so
    that one LOGISTIC covers them."""
    return np.concatenate([w[..., g * units:(g + 1) * units] for g in (0, 1, 3, 2)], axis=-1)


def lstm_step(c, pre, cell, activation: str):
    """(h, c) after one LSTM step from the gates' pre-activations ``pre`` ([batch, 4u], gates i, f, o, c as
    :func:`ifoc` orders them) and the cell state ``cell`` (None: zeros)."""
    batch, width = pre.shape
    units = width // 4
    one, three = (batch, units), (batch, 3 * units)
    ifo, g = split_v(c, pre, (3 * units, units))
    ifo = c.op("LOGISTIC", [ifo], dtype=np.float32, shape=three)
    i, f, o = c.op("SPLIT", [np.array(-1, np.int32), ifo], {"num_splits": 3}, outs=[(F32, one)] * 3)
    new = binary(c, "MUL", i, apply(c, activation, g), one)
    c_new = new if cell is None else binary(c, "ADD", binary(c, "MUL", f, cell, one), new, one)
    return binary(c, "MUL", o, apply(c, activation, c_new), one), c_new


class LSTMCell(Cell):
    """A Keras LSTM's weights (Keras' layout) and ``activation`` as a :class:`~fuselite.rnn.cells.Cell`: states
    (h, c). Its unrolled steps are marked for 16x8 in integer conversions, as LiteRT's integer LSTM kernel keeps
    its gates and cell state int16: an LSTM the kernel cannot take (a masked one) carried its cell state in int8,
    24.6% off over 20 steps of a masked text LSTM (16x8 steps: see docs/integer-coverage.md)."""

    kind = "LSTM"
    n_states = 2
    marks_steps = True

    def __init__(self, kernel, recurrent, bias, activation: str):
        self.units = units = recurrent.shape[0]
        self.activation = activation
        self.keras = (kernel, recurrent, bias)
        kernel, recurrent, bias = (ifoc(w, units) for w in (kernel, recurrent, bias))
        self.input = np.ascontiguousarray(kernel.T, np.float32)
        self.bias = np.asarray(bias, np.float32)
        self.recurrent = np.ascontiguousarray(recurrent.T, np.float32)

    def step(self, b, xt, states):
        h, cell = states
        pre = xt if h is None else binary(b, "ADD", xt, fc(b, h, self.recurrent, None, xt.shape), xt.shape)
        h, cell = lstm_step(b, pre, cell, self.activation)
        return [h, cell], h

    def fused(self, c, x_tm, states):
        return lstm_sequence(c, x_tm, *keras_to_litert(*self.keras, 4, self.units), *states,
                             activation=FUSED_ACTIVATIONS[self.activation], time_major=True)


def numpy_lstm_cell(x, h, c, kernel, recurrent_kernel, bias, *, activation: str = "tanh",
                    dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """One step of Keras' LSTM (gates i, f, c, o; sigmoid gates; no clipping): ``(h, c)``.

    Computed in ``dtype`` (None: the inputs' own, as NumPy promotes them). Example::

        >>> h, c = numpy_lstm_cell(x, h, c, kernel, recurrent_kernel, bias, activation="relu")
    """
    x, h, c, kernel, recurrent_kernel, bias = as_dtype(dtype, x, h, c, kernel, recurrent_kernel, bias)
    act = NUMPY_ACTIVATIONS[activation]
    i, f, g, o = split_gates(x @ kernel + h @ recurrent_kernel + bias, 4)
    c = sigmoid(f) * c + sigmoid(i) * act(g)
    return sigmoid(o) * act(c), c


def numpy_lstm(x, h0, c0, kernel, recurrent_kernel, bias, *, activation: str = "tanh", time_major: bool = False,
               go_backwards: bool = False, **masking):
    """Keras' LSTM (tf-keras' ``standard_lstm``) in float64: ``(outputs [time, batch, units] in
    processing order, h, c)``. See :func:`run_sequence` (and its ``mask``, ``zero_output``) and
    :func:`numpy_lstm_cell`."""
    k, rk, b = (np.asarray(w, np.float64) for w in (kernel, recurrent_kernel, bias))
    seq, (h, c) = run_sequence(lambda xt, h, c: numpy_lstm_cell(xt, h, c, k, rk, b, activation=activation),
                               x, [h0, c0], time_major=time_major, go_backwards=go_backwards, **masking)
    return seq, h, c
