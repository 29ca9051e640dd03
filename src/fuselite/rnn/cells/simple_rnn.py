"""The SimpleRNN family (Keras' SimpleRNN; LiteRT's ``UNIDIRECTIONAL_SEQUENCE_RNN``): one gate,
``h = act(x @ kernel + h @ recurrent_kernel + bias)``.

Example::

    cell = SimpleRNNCell(kernel, recurrent_kernel, bias, "relu")
    (h,), out = cell.step(c, xt, [h])
"""

from __future__ import annotations

import numpy as np

from fuselite.rnn.build import activation as apply
from fuselite.rnn.build import binary, fc
from fuselite.rnn.cells.base import Cell
from fuselite.rnn.forms.fused import rnn_sequence
from fuselite.rnn.kit import FUSED_ACTIVATIONS, NUMPY_ACTIVATIONS, as_dtype, keras_to_litert, run_sequence


class SimpleRNNCell(Cell):
    """A Keras SimpleRNN's weights (Keras' layout) and ``activation`` as a :class:`~fuselite.rnn.cells.Cell`."""

    kind = "SimpleRNN"

    def __init__(self, kernel, recurrent, bias, activation: str):
        self.units = recurrent.shape[0]
        self.activation = activation
        self.keras = (kernel, recurrent, bias)
        self.input = np.ascontiguousarray(kernel.T, np.float32)
        self.bias = np.asarray(bias, np.float32)
        self.recurrent = np.ascontiguousarray(recurrent.T, np.float32)

    def step(self, b, xt, states):
        h = states[0]
        pre = xt if h is None else binary(b, "ADD", xt, fc(b, h, self.recurrent, None, xt.shape), xt.shape)
        h = apply(b, self.activation, pre)
        return [h], h

    def fused(self, c, x_tm, states):
        return rnn_sequence(c, x_tm, keras_to_litert(*self.keras, 1, self.units), states[0],
                            FUSED_ACTIVATIONS[self.activation])


def numpy_simple_rnn_cell(x, h, kernel, recurrent_kernel, bias, *, activation: str = "tanh",
                          dtype=np.float64) -> np.ndarray:
    """One step of Keras' SimpleRNN: ``act(x @ kernel + h @ recurrent_kernel + bias)``.

    Computed in ``dtype`` (None: the inputs' own). Example::

        >>> h = numpy_simple_rnn_cell(x, h, kernel, recurrent_kernel, bias, activation="relu")
    """
    x, h, kernel, recurrent_kernel, bias = as_dtype(dtype, x, h, kernel, recurrent_kernel, bias)
    return NUMPY_ACTIVATIONS[activation](x @ kernel + h @ recurrent_kernel + bias)


def numpy_simple_rnn(x, h0, kernel, recurrent_kernel, bias, *, activation: str = "tanh", time_major: bool = False,
                     go_backwards: bool = False):
    """Keras' SimpleRNN in float64: ``(outputs [time, batch, units] in processing order, h)``.
    See :func:`run_sequence` and :func:`numpy_simple_rnn_cell`."""
    seq, (h,) = run_sequence(
        lambda xt, h: (numpy_simple_rnn_cell(xt, h, kernel, recurrent_kernel, bias, activation=activation),),
        x, [h0], time_major=time_major, go_backwards=go_backwards)
    return seq, h
