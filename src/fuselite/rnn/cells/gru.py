"""The GRU family (Keras' GRU; tf-keras' ``standard_gru``). LiteRT has no GRU op: no fused form.

Keras semantics (``reset_after=True``, the default; gates z, r, h)::

    x_z, x_r, x_h = split(x @ kernel + b_in)
    h_z, h_r, h_h = split(h @ recurrent_kernel + b_rec)
    z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
    h = z * h + (1 - z) * tanh(x_h + r * h_h)       # = cand + z * (h - cand)

With ``reset_after=False`` the reset gate is applied before the recurrent projection
of the candidate: ``h_h = (r * h) @ recurrent_kernel[:, 2u:]`` (and there is one bias).

Example::

    cell = GRUCell(kernel, recurrent_kernel, *split_gru_bias(bias), "tanh")
    (h,), out = cell.step(c, xt, [None])  # the first step from a zero state
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fuselite.rnn.build import F32, binary, fc, split_v
from fuselite.rnn.build import activation as apply
from fuselite.rnn.cells.base import Cell
from fuselite.rnn.kit import NUMPY_ACTIVATIONS, as_dtype, gate_block, run_sequence, sigmoid, split_gates


def split_gru_bias(bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keras' GRU bias -> ``(input bias, recurrent bias)``, each ``[3 * units]``.

    ``reset_after=True`` (the default) has a ``[2, 3 * units]`` bias, input row first; a
    ``reset_after=False`` GRU has one ``[3 * units]`` bias, and its recurrent bias is zeros.
    Example::

        >>> b_in, b_rec = split_gru_bias(np.zeros((2, 15), np.float32))
    """
    return (bias[0], bias[1]) if bias.ndim == 2 else (bias, np.zeros_like(bias))


class GruWeights(NamedTuple):
    """A Keras GRU's weights as ``FULLY_CONNECTED`` operands (``[out, in]`` matrices, float32)."""

    input: np.ndarray  # [3u, in]: the input projections of all gates z, r, h
    input_bias: np.ndarray  # [3u]
    recurrent: np.ndarray  # [3u, u]: h @ recurrent_kernel (reset_after=True)
    recurrent_bias: np.ndarray  # [3u]
    recurrent_zr: np.ndarray  # [2u, u]: gates z and r of h (reset_after=False)
    recurrent_h: np.ndarray  # [u, u]: the candidate, applied to r * h (reset_after=False)


def gru_fully_connected_weights(kernel: np.ndarray, recurrent_kernel: np.ndarray, bias_in: np.ndarray,
                                bias_rec: np.ndarray | None) -> GruWeights:
    """Keras' GRU layout (``kernel [in, 3u]``, ``recurrent_kernel [u, 3u]``, biases ``[3u]``; gates
    z, r, h) -> the float32 ``FULLY_CONNECTED`` weights of the unrolled GRU (:class:`GruWeights`).

    ``bias_rec`` None means zeros. Example::

        >>> w = gru_fully_connected_weights(kernel, recurrent_kernel, *split_gru_bias(bias))
        >>> w.recurrent_zr.shape
        (10, 5)
    """
    units = recurrent_kernel.shape[0]
    rk = np.asarray(recurrent_kernel, np.float32)
    return GruWeights(
        input=np.ascontiguousarray(np.asarray(kernel, np.float32).T),
        input_bias=np.asarray(bias_in, np.float32),
        recurrent=np.ascontiguousarray(rk.T),
        recurrent_bias=np.zeros(3 * units, np.float32) if bias_rec is None else np.asarray(bias_rec, np.float32),
        recurrent_zr=np.ascontiguousarray(gate_block(rk, slice(0, 2), units).T),
        recurrent_h=np.ascontiguousarray(gate_block(rk, slice(2, None), units).T),
    )


def gru_step(c, xt, h, w: GruWeights, activation: str, reset_after: bool):
    """h after one GRU step from the step's input projection ``xt`` ([batch, 3u], gates z, r, h, with the
    input bias), the state ``h`` (None: zeros; the recurrent projection folds to its bias) and the
    :func:`gru_fully_connected_weights` ``w``."""
    batch, width = xt.shape
    units = width // 3
    gate2, gate1 = (batch, 2 * units), (batch, units)
    x_zr, x_h = split_v(c, xt, (2 * units, units))
    if reset_after:
        if h is None:  # zero state: the recurrent projection is just its bias
            hp = np.broadcast_to(w.recurrent_bias, (batch, 3 * units)).copy()
            h_zr, h_h = gate_block(hp, slice(0, 2), units), gate_block(hp, slice(2, None), units)
        else:
            h_zr, h_h = split_v(c, fc(c, h, w.recurrent, w.recurrent_bias, (batch, 3 * units)), (2 * units, units))
        zr = c.op("LOGISTIC", [binary(c, "ADD", x_zr, h_zr, gate2)], dtype=np.float32, shape=gate2)
        z, r = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2}, outs=[(F32, gate1)] * 2)
        pre = binary(c, "ADD", x_h, binary(c, "MUL", r, h_h, gate1), gate1)
    elif h is None:  # zero state: no recurrent contribution at all
        zr = c.op("LOGISTIC", [x_zr], dtype=np.float32, shape=gate2)
        z, _ = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2}, outs=[(F32, gate1)] * 2)
        pre = x_h
    else:
        zr = c.op("LOGISTIC", [binary(c, "ADD", x_zr, fc(c, h, w.recurrent_zr, None, gate2), gate2)],
                  dtype=np.float32, shape=gate2)
        z, r = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2}, outs=[(F32, gate1)] * 2)
        pre = binary(c, "ADD", x_h, fc(c, binary(c, "MUL", r, h, gate1), w.recurrent_h, None, gate1), gate1)
    cand = apply(c, activation, pre)
    prev = h if h is not None else np.zeros(gate1, np.float32)
    return binary(c, "ADD", cand, binary(c, "MUL", z, binary(c, "SUB", prev, cand, gate1), gate1), gate1)


class GRUCell(Cell):
    """A Keras GRU's weights (Keras' layout: ``bias`` the input bias, ``recurrent_bias`` the other row, None or
    zeros with ``reset_after=False``) and ``activation`` as a :class:`~fuselite.rnn.cells.Cell`: state (h,).
    Its unrolled steps are marked for 16x8 in integer conversions (no integer GRU kernel keeps a wide state),
    and need a static batch (a zero first state folds into the recurrent bias, broadcast to the batch)."""

    kind = "GRU"
    marks_steps = True
    static_batch_unrolled = True

    def __init__(self, kernel, recurrent, bias, activation: str, *, reset_after: bool = True, recurrent_bias=None):
        self.units = recurrent.shape[0]
        self.activation, self.reset_after = activation, reset_after
        rec_bias = np.zeros_like(bias) if recurrent_bias is None else recurrent_bias
        self.weights = w = gru_fully_connected_weights(kernel, recurrent, bias, rec_bias)
        self.input, self.bias = w.input, w.input_bias

    def step(self, b, xt, states):
        h = gru_step(b, xt, states[0], self.weights, self.activation, self.reset_after)
        return [h], h


def numpy_gru_cell(x, h, kernel, recurrent_kernel, bias, recurrent_bias=None, *, activation: str = "tanh",
                   reset_after: bool = True, dtype=np.float64) -> np.ndarray:
    """One step of Keras' GRU (gates z, r, h; sigmoid gates): the new ``h``.

    ``reset_after=True`` (Keras' default) applies the reset gate after the recurrent
    projection, ``cand = act(x_h + r * (h @ rk_h + b_rec_h))``; ``reset_after=False``
    before it, ``cand = act(x_h + (r * h) @ rk_h)``, and ``recurrent_bias`` is ignored
    (None: zeros). Computed in ``dtype`` (None: the inputs' own). Example::

        >>> h = numpy_gru_cell(x, h, kernel, recurrent_kernel, *split_gru_bias(bias))
    """
    x, h, kernel, recurrent_kernel, bias = as_dtype(dtype, x, h, kernel, recurrent_kernel, bias)
    if recurrent_bias is not None:
        (recurrent_bias,) = as_dtype(dtype, recurrent_bias)
    act = NUMPY_ACTIVATIONS[activation]
    units = h.shape[-1]
    x_z, x_r, x_h = split_gates(x @ kernel + bias, 3)
    if reset_after:
        h_z, h_r, h_h = split_gates(h @ recurrent_kernel + (0 if recurrent_bias is None else recurrent_bias), 3)
        z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
        cand = act(x_h + r * h_h)
    else:
        h_z, h_r = split_gates(h @ gate_block(recurrent_kernel, slice(0, 2), units), 2)
        z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
        cand = act(x_h + (r * h) @ gate_block(recurrent_kernel, slice(2, None), units))
    return z * h + (1 - z) * cand


def numpy_gru(x, h0, kernel, recurrent_kernel, bias, *, activation: str = "tanh", reset_after: bool = True,
              time_major: bool = False, go_backwards: bool = False, **masking):
    """Keras' GRU (tf-keras' ``standard_gru``) in float64: ``(outputs [time, batch, units] in processing
    order, h)``. ``bias`` is Keras' (``[2, 3u]``, or ``[3u]`` without ``reset_after``); see
    :func:`split_gru_bias`, :func:`run_sequence` and :func:`numpy_gru_cell`."""
    b_in, b_rec = split_gru_bias(np.asarray(bias, np.float64))
    seq, (h,) = run_sequence(
        lambda xt, h: (numpy_gru_cell(xt, h, kernel, recurrent_kernel, b_in, b_rec, activation=activation,
                                      reset_after=reset_after),),
        x, [h0], time_major=time_major, go_backwards=go_backwards, **masking)
    return seq, h
