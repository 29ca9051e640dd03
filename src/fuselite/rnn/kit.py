"""The recurrent kit: what every cell, form and source of the recurrent package shares, in NumPy.

* **gate orders** per cell and framework (:data:`GATE_ORDERS`): which block of a
  ``[in, gates * units]`` weight is which gate;
* **gate slicing**, one function: :func:`gate_block` (and :func:`split_gates` for all
  gates at once). Everything that cuts a weight, a bias or a pre-activation per gate
  goes through it;
* **Keras' layout -> LiteRT's per-gate operands**: :func:`keras_to_litert` (LSTM and SimpleRNN
  from Keras 3, tf-keras composites, SavedModel loops, bring-your-own rules), and LiteRT's operand
  lists :func:`lstm_operands` (:func:`lstm_weight_operands`) and :func:`rnn_operands`, with the
  positions of their operands (:data:`LSTM_OPERANDS`, :data:`RNN_OPERANDS`, from ``fuselite/operands.py``);
* **activation tables**: Keras activation name -> LiteRT fused activation
  (:data:`FUSED_ACTIVATIONS`), -> the LiteRT op that applies it (:data:`ACTIVATION_OPS`),
  -> NumPy function (:data:`NUMPY_ACTIVATIONS`);
* **the reference sequence runner** :func:`run_sequence` (``time_major``, ``go_backwards``, a mask),
  which each cell's NumPy reference (``rnn/cells/``: ``numpy_lstm``, ``numpy_gru``,
  ``numpy_simple_rnn``) drives over time.

Pure NumPy: no IR, no TensorFlow. Transforms keep the weights' dtype and return
C-contiguous arrays where they copy; :func:`gate_block` returns views.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from fuselite.operands import LSTM_OPERANDS, RNN_OPERANDS, Operands  # noqa: F401  (the operand positions, here too)

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


def as_dtype(dtype, *arrays) -> tuple:
    """``arrays`` as ``dtype`` (None: as they are), for the reference cells of ``rnn/cells/``."""
    return arrays if dtype is None else tuple(np.asarray(a, dtype) for a in arrays)


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
