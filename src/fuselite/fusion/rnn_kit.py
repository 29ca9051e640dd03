"""The recurrent-layer kit: what fuselite knows about LSTM, GRU and SimpleRNN cells, in NumPy.

One place for the knowledge every RNN rule shares (``fusion/rnn.py``, ``gru.py``,
``loops.py``, ``lingvo.py``, ``keras_saved_lstm.py``, ``keras_saved_gru.py``, the
bring-your-own example) and the tests check against:

* **gate orders** per cell and framework (:data:`GATE_ORDERS`): which block of a
  ``[in, gates * units]`` weight is which gate;
* **gate slicing**, one function: :func:`gate_block` (and :func:`split_gates` for all
  gates at once). Everything that cuts a weight, a bias or a pre-activation per gate
  goes through it;
* **weight layout transforms** from the frameworks' layouts to LiteRT's operands:
  :func:`keras_to_litert` (Keras 3, tf-keras composites, SavedModel loops,
  bring-your-own rules; LSTM and SimpleRNN), :func:`gru_fully_connected_weights` (the
  unrolled GRU), :func:`split_gru_bias`, :func:`lingvo_to_litert`, and LiteRT's operand
  lists :func:`lstm_operands` (:func:`lstm_weight_operands`) and :func:`rnn_operands`;
* **NumPy reference cells** (:func:`numpy_lstm_cell`, :func:`numpy_gru_cell` with
  ``reset_after`` True or False, :func:`numpy_simple_rnn_cell`) and sequence runners
  over time (:func:`run_sequence`, :func:`numpy_lstm`, :func:`numpy_gru`,
  :func:`numpy_simple_rnn`; ``time_major``, ``go_backwards``), used to verify fusions;
* **activation tables**: Keras activation name -> LiteRT fused activation
  (:data:`FUSED_ACTIVATIONS`), -> the LiteRT op that applies it (:data:`ACTIVATION_OPS`),
  -> NumPy function (:data:`NUMPY_ACTIVATIONS`).

Pure NumPy: no IR, no TensorFlow. Transforms keep the weights' dtype and return
C-contiguous arrays where they copy; :func:`gate_block` returns views.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

# -- gate orders ---------------------------------------------------------------------------------

GATE_ORDERS: dict[tuple[str, str], tuple[str, ...]] = {
    # Keras 3 and tf-keras layers, tf-keras' standard_lstm / standard_gru, the while loops of
    # Keras SavedModels, and bring-your-own composites behind the Keras interfaces
    ("keras", "LSTM"): ("i", "f", "c", "o"),  # input, forget, cell candidate, output
    ("keras", "GRU"): ("z", "r", "h"),  # update, reset, candidate
    ("keras", "SimpleRNN"): ("h",),
    # lingvo's LSTMCellSimple, and with CoupleInputForgetGates (no input gate: i = 1 - f)
    ("lingvo", "LSTM"): ("c", "i", "f", "o"),
    ("lingvo", "CIFG_LSTM"): ("c", "f", "o"),
    # LiteRT's LSTM operands: input weights 1-4, recurrent weights 5-8, biases 12-15, layer norm 20-23
    ("litert", "LSTM"): ("i", "f", "c", "o"),
    ("litert", "SimpleRNN"): ("h",),
}
"""``(framework, cell) -> gate names`` in the order of the blocks of the weights.

Example::

    >>> GATE_ORDERS["keras", "LSTM"].index("c")  # Keras' cell candidate is the third block
    2
"""


def keras_cell_with_gates(n_gates: int) -> str | None:
    """The Keras cell whose weights have ``n_gates`` blocks (``"LSTM"``, ``"GRU"``, ``"SimpleRNN"``), or None.

    Example::

        >>> keras_cell_with_gates(kernel.shape[1] // units)
        'GRU'
    """
    cells = [cell for (framework, cell), gates in GATE_ORDERS.items() if framework == "keras" and len(gates) == n_gates]
    return cells[0] if cells else None


def reorder_gates(blocks: Sequence, source: tuple[str, ...], target: tuple[str, ...]) -> tuple:
    """``blocks`` (one per gate, in order ``source``) rearranged into order ``target``.

    A gate of ``target`` that ``source`` lacks is None (an absent optional operand, e.g. the
    input gate of a CIFG LSTM). Example::

        >>> reorder_gates(["C", "F", "O"], GATE_ORDERS["lingvo", "CIFG_LSTM"], GATE_ORDERS["litert", "LSTM"])
        (None, 'F', 'C', 'O')
    """
    if len(blocks) != len(source):
        raise ValueError(f"{len(blocks)} block(s) for the {len(source)} gates {source}")
    by_name = dict(zip(source, blocks))
    return tuple(by_name.get(g) for g in target)


# -- gate slicing ----------------------------------------------------------------------------------


def gate_block(array: np.ndarray, gates: int | slice, units: int, axis: int = -1) -> np.ndarray:
    """Gate ``gates`` of ``array``, whose ``axis`` holds consecutive blocks of ``units``, one per gate.

    ``gates`` is a gate index, or a slice of gate indices (``slice(0, 2)``: the first two
    gates together; ``slice(2, None)``: from the third gate to the end of the axis). The
    result is a view of ``array`` (no copy, the dtype kept). This is the one place where
    weights, biases and pre-activations are cut per gate. Example::

        >>> kernel = np.arange(12).reshape(1, 12)  # [in = 1, 4 gates * 3 units]
        >>> gate_block(kernel, 2, 3)  # Keras LSTM: the cell candidate
        array([[6, 7, 8]])
        >>> gate_block(kernel, slice(0, 2), 3)  # gates i and f
        array([[0, 1, 2, 3, 4, 5]])
    """
    if isinstance(gates, slice):
        if gates.step not in (None, 1):
            raise ValueError(f"gate_block: gates must be consecutive, got {gates}")
        cut = slice((gates.start or 0) * units, None if gates.stop is None else gates.stop * units)
    else:
        cut = slice(gates * units, (gates + 1) * units)
    axis = axis % array.ndim
    return array[(slice(None),) * axis + (cut,)]


def split_gates(array: np.ndarray, n_gates: int, units: int | None = None, axis: int = -1) -> list[np.ndarray]:
    """The ``n_gates`` blocks of ``units`` (default: the axis divided evenly) of ``array``'s ``axis`` (views).

    Example::

        >>> i, f, c, o = split_gates(x @ kernel + h @ recurrent_kernel + bias, 4)
    """
    if units is None:
        if array.shape[axis] % n_gates:
            raise ValueError(f"split_gates: an axis of {array.shape[axis]} is not {n_gates} equal gate blocks")
        units = array.shape[axis] // n_gates
    return [gate_block(array, g, units, axis) for g in range(n_gates)]


# -- weight layouts ---------------------------------------------------------------------------------


class GateWeights(NamedTuple):
    """Per-gate weights in LiteRT's layout: for each gate a ``[units, in]`` input matrix, a
    ``[units, units]`` recurrent matrix and a ``[units]`` bias (None for an absent gate)."""

    input: list
    recurrent: list
    bias: list


def keras_to_litert(kernel: np.ndarray, recurrent_kernel: np.ndarray, bias: np.ndarray, n_gates: int,
                    units: int | None = None) -> GateWeights:
    """Keras' ``kernel [in, gates * units]``, ``recurrent_kernel [units, gates * units]`` and
    ``bias [gates * units]`` -> one transposed matrix pair and bias per gate (:class:`GateWeights`).

    The layout of Keras 3 and tf-keras LSTM (4 gates, i, f, c, o: LiteRT's operand order
    too) and SimpleRNN (1 gate) layers, of tf-keras' ``standard_lstm`` and of the loops of
    Keras SavedModels. ``units`` defaults to the recurrent kernel's rows. The arrays are
    C-contiguous copies in the weights' dtype. Example::

        >>> w = keras_to_litert(kernel, recurrent_kernel, bias, 4)
        >>> w.input[2].shape  # the cell candidate's input weights: [units, in]
        (6, 3)
    """
    units = recurrent_kernel.shape[0] if units is None else units
    gates = range(n_gates)
    return GateWeights([np.ascontiguousarray(gate_block(kernel, g, units).T) for g in gates],
                       [np.ascontiguousarray(gate_block(recurrent_kernel, g, units).T) for g in gates],
                       [np.ascontiguousarray(gate_block(bias, g, units)) for g in gates])


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


class LingvoWeights(NamedTuple):
    """A lingvo LSTM cell's weights as LiteRT ``LSTM`` operands, gates i, f, c, o (None: absent)."""

    input: tuple  # 4 x [n_cell, n_in]
    recurrent: tuple  # 4 x [n_cell, n_out]
    bias: tuple  # 4 x [n_cell]
    layer_norm: tuple | None  # 4 x [n_cell]
    projection: np.ndarray | None  # [n_out, n_cell]


def lingvo_to_litert(weight: np.ndarray, bias: np.ndarray, n_in: int, *, cifg: bool,
                     layer_norm_scale: np.ndarray | None = None,
                     projection: np.ndarray | None = None) -> LingvoWeights:
    """lingvo's ``LSTMCellSimple`` weights -> LiteRT ``LSTM`` operands (:class:`LingvoWeights`).

    ``weight`` is ``[n_in + n_out, gates * n_cell]`` (rows: input, then recurrent), ``bias``
    and ``layer_norm_scale`` are ``[gates * n_cell]``, in lingvo's gate order c, i, f, o
    (``cifg``: c, f, o); ``projection`` is ``[n_cell, n_out]``. Each gate block is split into
    its transposed input and recurrent parts and the gates are put in LiteRT's order
    (a CIFG cell has no input gate: None). Example::

        >>> w = lingvo_to_litert(weight, bias, n_in=5, cifg=True)
        >>> w.input[0] is None
        True
    """
    source = GATE_ORDERS["lingvo", "CIFG_LSTM" if cifg else "LSTM"]
    target = GATE_ORDERS["litert", "LSTM"]
    n_cell = weight.shape[1] // len(source)

    def per_gate(array):
        return [np.ascontiguousarray(b) for b in split_gates(array, len(source), n_cell)]

    blocks = per_gate(weight)  # each [n_in + n_out, n_cell]
    return LingvoWeights(
        input=reorder_gates([np.ascontiguousarray(b[:n_in].T) for b in blocks], source, target),
        recurrent=reorder_gates([np.ascontiguousarray(b[n_in:].T) for b in blocks], source, target),
        bias=reorder_gates(per_gate(bias), source, target),
        layer_norm=None if layer_norm_scale is None else reorder_gates(per_gate(layer_norm_scale), source, target),
        projection=None if projection is None else np.ascontiguousarray(projection.T),
    )


def lstm_weight_operands(input_weights: Sequence, recurrent_weights: Sequence, biases: Sequence, *,
                         peepholes: Sequence | None = None, projection=None, projection_bias=None) -> list:
    """Inputs 1-17 of LiteRT's LSTM ops (one direction's weights), None for an absent optional one.

    1-4 input weights, 5-8 recurrent weights (gates i, f, c, o), 9-11 peepholes
    (cell-to-input, -forget, -output), 12-15 biases, 16 projection, 17 projection bias.
    ``BIDIRECTIONAL_SEQUENCE_LSTM`` takes them once per direction. Example::

        >>> ops = lstm_weight_operands(*keras_to_litert(kernel, recurrent_kernel, bias, 4))
        >>> len(ops), ops[8]
        (17, None)
    """
    peepholes = (None,) * 3 if peepholes is None else peepholes
    return [*input_weights, *recurrent_weights, *peepholes, *biases, projection, projection_bias]


def lstm_operands(x, input_weights: Sequence, recurrent_weights: Sequence, biases: Sequence, output_state,
                  cell_state, *, peepholes: Sequence | None = None, projection=None, projection_bias=None,
                  layer_norm: Sequence | None = None) -> list:
    """The 24 inputs of ``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``LSTM`` in LiteRT's order.

    0 the input, 1-17 :func:`lstm_weight_operands`, 18 output state, 19 cell state,
    20-23 layer-norm coefficients (gates i, f, c, o). Absent optional inputs are None.
    Example::

        >>> w = keras_to_litert(kernel, recurrent_kernel, bias, 4)
        >>> c.op("UNIDIRECTIONAL_SEQUENCE_LSTM", lstm_operands(x, *w, h, cell), options, ...)
    """
    return [x, *lstm_weight_operands(input_weights, recurrent_weights, biases, peepholes=peepholes,
                                     projection=projection, projection_bias=projection_bias),
            output_state, cell_state, *((None,) * 4 if layer_norm is None else layer_norm)]


def rnn_operands(x, input_weights: Sequence, recurrent_weights: Sequence, biases: Sequence, hidden_state) -> list:
    """The 5 inputs of ``UNIDIRECTIONAL_SEQUENCE_RNN``: input, ``[units, in]`` weights, ``[units, units]``
    recurrent weights, ``[units]`` bias, hidden state; the weights as SimpleRNN's one-gate lists. Example::

        >>> c.op("UNIDIRECTIONAL_SEQUENCE_RNN", rnn_operands(x, *keras_to_litert(k, rk, b, 1), h), options, ...)
    """
    (w,), (r,), (b,) = input_weights, recurrent_weights, biases
    return [x, w, r, b, hidden_state]


# -- activations ----------------------------------------------------------------------------------

FUSED_ACTIVATIONS: dict[str, str] = {"tanh": "TANH", "relu": "RELU", "relu6": "RELU6", "sigmoid": "SIGMOID",
                                     "linear": "NONE"}
"""Keras activation name -> the ``fused_activation_function`` of LiteRT's sequence ops (the cell
and output activation of an LSTM, the activation of an RNN). Gates always use sigmoid."""

ACTIVATION_OPS: dict[str, str | None] = {"tanh": "TANH", "sigmoid": "LOGISTIC", "relu": "RELU", "linear": None}
"""Keras activation name -> the LiteRT op that applies it to a tensor (None: nothing to apply).
These are the candidate activations the unrolled GRU supports."""


def sigmoid(v: np.ndarray) -> np.ndarray:
    """The logistic function ``1 / (1 + exp(-v))``, in ``v``'s dtype."""
    return 1 / (1 + np.exp(-v))


NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda v: np.maximum(v, 0),
    "relu6": lambda v: np.minimum(np.maximum(v, 0), 6),
    "sigmoid": sigmoid,
    "linear": lambda v: v,
}
"""Keras activation name -> NumPy function, for the reference cells."""


# -- NumPy reference cells ----------------------------------------------------------------------------


def _as(dtype, *arrays):
    return arrays if dtype is None else tuple(np.asarray(a, dtype) for a in arrays)


def numpy_lstm_cell(x, h, c, kernel, recurrent_kernel, bias, *, activation: str = "tanh",
                    dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """One step of Keras' LSTM (gates i, f, c, o; sigmoid gates; no clipping): ``(h, c)``.

    Computed in ``dtype`` (None: the inputs' own, as NumPy promotes them). Example::

        >>> h, c = numpy_lstm_cell(x, h, c, kernel, recurrent_kernel, bias, activation="relu")
    """
    x, h, c, kernel, recurrent_kernel, bias = _as(dtype, x, h, c, kernel, recurrent_kernel, bias)
    act = NUMPY_ACTIVATIONS[activation]
    i, f, g, o = split_gates(x @ kernel + h @ recurrent_kernel + bias, 4)
    c = sigmoid(f) * c + sigmoid(i) * act(g)
    return sigmoid(o) * act(c), c


def numpy_gru_cell(x, h, kernel, recurrent_kernel, bias, recurrent_bias=None, *, activation: str = "tanh",
                   reset_after: bool = True, dtype=np.float64) -> np.ndarray:
    """One step of Keras' GRU (gates z, r, h; sigmoid gates): the new ``h``.

    ``reset_after=True`` (Keras' default) applies the reset gate after the recurrent
    projection, ``cand = act(x_h + r * (h @ rk_h + b_rec_h))``; ``reset_after=False``
    before it, ``cand = act(x_h + (r * h) @ rk_h)``, and ``recurrent_bias`` is ignored
    (None: zeros). Computed in ``dtype`` (None: the inputs' own). Example::

        >>> h = numpy_gru_cell(x, h, kernel, recurrent_kernel, *split_gru_bias(bias))
    """
    x, h, kernel, recurrent_kernel, bias = _as(dtype, x, h, kernel, recurrent_kernel, bias)
    if recurrent_bias is not None:
        (recurrent_bias,) = _as(dtype, recurrent_bias)
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


def numpy_simple_rnn_cell(x, h, kernel, recurrent_kernel, bias, *, activation: str = "tanh",
                          dtype=np.float64) -> np.ndarray:
    """One step of Keras' SimpleRNN: ``act(x @ kernel + h @ recurrent_kernel + bias)``.

    Computed in ``dtype`` (None: the inputs' own). Example::

        >>> h = numpy_simple_rnn_cell(x, h, kernel, recurrent_kernel, bias, activation="relu")
    """
    x, h, kernel, recurrent_kernel, bias = _as(dtype, x, h, kernel, recurrent_kernel, bias)
    return NUMPY_ACTIVATIONS[activation](x @ kernel + h @ recurrent_kernel + bias)


# -- sequences -------------------------------------------------------------------------------------------


def run_sequence(step: Callable, x, initial_states: Sequence, *, time_major: bool = False,
                 go_backwards: bool = False, dtype=np.float64, mask=None,
                 zero_output: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
    """Run a cell over a sequence: ``(outputs [time, batch, units] in processing order, final states)``.

    ``step(x_t, *states)`` returns the new states, the output first. ``x`` is ``[batch,
    time, features]`` (``[time, batch, features]`` if ``time_major``); with
    ``go_backwards`` the steps run from the last to the first, and the outputs stay in
    processing order (``outputs[0]`` is the last time step's). ``x`` and the states are
    cast to ``dtype``. ``mask`` (bool ``[batch, time]``, in time order, or None): where it is off, the states
    keep their values and the output repeats the previous one (zeros before the first), or is zeros with
    ``zero_output``, as Keras' ``rnn()`` does. Example::

        >>> step = lambda xt, h: (numpy_simple_rnn_cell(xt, h, kernel, recurrent_kernel, bias),)
        >>> seq, (h,) = run_sequence(step, x, [np.zeros((batch, units))], go_backwards=True)
    """
    steps = np.asarray(x, dtype)
    steps = steps if time_major else steps.transpose(1, 0, 2)
    if go_backwards:
        steps = steps[::-1]
    states = [np.asarray(s, dtype) for s in initial_states]
    flags = [None] * len(steps) if mask is None else list(np.asarray(mask, bool).T[:, :, None])
    if go_backwards:
        flags = flags[::-1]
    outs, out = [], np.zeros_like(states[0])
    for xt, on in zip(steps, flags):
        new = list(step(xt, *states))
        if on is None:
            states, out = new, new[0]
        else:
            states = [np.where(on, n, s) for n, s in zip(new, states)]
            out = np.where(on, new[0], 0.0 if zero_output else out)
        outs.append(out)
    seq = np.stack(outs) if outs else np.zeros((0,) + states[0].shape)
    return seq, states


def numpy_lstm(x, h0, c0, kernel, recurrent_kernel, bias, *, activation: str = "tanh", time_major: bool = False,
               go_backwards: bool = False, **masking):
    """Keras' LSTM (tf-keras' ``standard_lstm``) in float64: ``(outputs [time, batch, units] in
    processing order, h, c)``. See :func:`run_sequence` (and its ``mask``, ``zero_output``) and
    :func:`numpy_lstm_cell`."""
    k, rk, b = (np.asarray(w, np.float64) for w in (kernel, recurrent_kernel, bias))
    seq, (h, c) = run_sequence(lambda xt, h, c: numpy_lstm_cell(xt, h, c, k, rk, b, activation=activation),
                               x, [h0, c0], time_major=time_major, go_backwards=go_backwards, **masking)
    return seq, h, c


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


def numpy_simple_rnn(x, h0, kernel, recurrent_kernel, bias, *, activation: str = "tanh", time_major: bool = False,
                     go_backwards: bool = False):
    """Keras' SimpleRNN in float64: ``(outputs [time, batch, units] in processing order, h)``.
    See :func:`run_sequence` and :func:`numpy_simple_rnn_cell`."""
    seq, (h,) = run_sequence(
        lambda xt, h: (numpy_simple_rnn_cell(xt, h, kernel, recurrent_kernel, bias, activation=activation),),
        x, [h0], time_major=time_major, go_backwards=go_backwards)
    return seq, h
