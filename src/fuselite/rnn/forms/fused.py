"""The fused form: LiteRT's sequence ops (``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN`` and the bidirectional
ones), for the cells that have one (LSTM, SimpleRNN, lingvo's LSTM cells).

Exact Keras semantics on the stock kernels:

* no cell clipping (``cell_clip = 0``);
* the fused ops keep their state in *variable* tensors that persist between
  ``invoke()`` calls, so every state is first (re)written by an op placed before the
  sequence op (:func:`state`) — zeros (FILL) for a stateless layer, or the given initial
  state — and the same input gives the same output on every invoke;
* the state tensors need a static batch: an unknown batch makes the converter retry
  with batch 1 (or the user's ``batch_size``), and the report says so.

The public helpers for user-written rules (docs/byo-rnn.md): :func:`zero_state`, :func:`initial_state`,
:func:`lstm_sequence`, :func:`last_time_step`.
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.rnn.build import runtime_dims, swap_batch_and_time, time_major_input, time_step
from fuselite.rnn.kit import (
    FUSED_ACTIVATIONS,
    keras_to_litert,
    lstm_operands,
    rnn_operands,
)

ACTIVATIONS = FUSED_ACTIVATIONS  # the name rules written against this module know (docs/byo-rnn.md)


def check_fusable(c, what: str):
    a = c.attrs
    if a.get("stateful"):  # the frontend passes a stateful layer's state as arguments (state_variables)
        c.decline(f"{what} has stateful=True but its state is not passed as arguments")
    if a.get("has_mask"):
        c.decline(f"{what} receives a mask (e.g. from Embedding(mask_zero=True)); the fused op has no mask input")
    if a.get("activation") not in FUSED_ACTIVATIONS:
        c.decline(f"{what} activation '{a.get('activation')}' has no fused equivalent "
                  f"(supported: {', '.join(FUSED_ACTIVATIONS)})")
    if a.get("layer", what) == "LSTM" and a.get("recurrent_activation") != "sigmoid":
        c.decline(f"recurrent_activation '{a.get('recurrent_activation')}' is not expressible: "
                  "the fused LSTM's gates always use sigmoid")
    x = c.args[0]
    if x.dtype != np.float32 or x.rank != 3:
        c.decline(f"the sequence input must be float32 of rank 3, got {x.dtype} {x.shape}")
    batch_axis = 1 if a.get("time_major") else 0
    # an unknown batch is the conversion's fixed one, else read at run time (the state's FILL takes it from
    # the input's shape), except for targets whose kernels need constant dims (TFLite Micro's FILL)
    batch = x.shape[batch_axis] or c.batch_size
    if batch is None and not c.dynamic_batch:
        raise NeedsStaticBatch(f"fused {what} keeps its state in tensors that need a static batch size here")
    if x.shape[2] is None:
        c.decline("the number of input features must be static")
    return x, batch


def layer_weights(c, start: int, gates: int, units: int):
    """Per-gate [units, in] input weights, [units, units] recurrent weights and biases (``GateWeights``)."""
    k, rk, b = (c.args[start + i] for i in range(3))
    if k.const is None or rk.const is None or b.const is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    return keras_to_litert(k.const, rk.const, b.const, gates, units)


def state(c, batch: int | None, units: int, initial=None, like=None, axis: int = 0):
    """A variable state tensor, (re)written on every invoke before the sequence op runs. With ``batch``
    None, its batch is ``like``'s dimension ``axis`` at run time (a dynamic batch)."""
    if batch is None:
        if like is None:
            raise ValueError("state: a dynamic batch needs the tensor to read it from (like=)")
        dims = runtime_dims(c, like, axis, (None, units))
    else:
        dims = np.array([batch, units], np.int32)
    if initial is None:
        v = c.op("FILL", [dims, np.array(0.0, np.float32)], dtype=np.float32, shape=(batch, units))
    elif batch is None:
        # an initial state copied into a state tensor of a run-time batch came out wrong beyond the first row
        # on LiteRT 2.3 (with a CAST or a BROADCAST_TO writing it): such a layer gets a fixed batch
        raise NeedsStaticBatch("a fused RNN given an initial state keeps it in tensors that need a static batch "
                               "size")
    else:
        # copied into the variable tensor by a CAST (float32 -> float32): LiteRT's builtin RESHAPE shares
        # its input's buffer, which would leave the variable tensor without data ("Input tensor lacks data"
        # wherever XNNPACK does not take the ops around it)
        v = c.op("RESHAPE", [initial, dims], dtype=np.float32, shape=(batch, units))
        v = c.op("CAST", [v], dtype=np.float32, shape=(batch, units))
    v.meta["is_variable"] = True
    return v


def read_state(c, tensor, like):
    """The state tensor's value after the sequence op (ordered after it through SHAPE(like))."""
    shape = c.op("SHAPE", [like], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(2,))
    out = c.op("RESHAPE", [tensor, shape], dtype=np.float32, shape=tensor.shape)
    out.producer.attrs["_pinned"] = True
    shape.producer.attrs["_pinned"] = True
    return out


# -- public helpers for user-written RNN rules (docs/byo-rnn.md) ---------------------------------


def zero_state(c, batch: int, units: int):
    """A ``[batch, units]`` state tensor for a fused sequence op, set to zeros on every invoke.

    LiteRT's sequence kernels keep their state in *variable* tensors that persist between
    ``invoke()`` calls. This helper makes such a tensor and the FILL op that rewrites it with
    zeros before the sequence op runs, so the same input always gives the same output::

        h, cell = zero_state(c, batch, units), zero_state(c, batch, units)
        seq = lstm_sequence(c, x, wi, wr, bias, h, cell)
    """
    return state(c, batch, units)


def initial_state(c, value, batch: int, units: int):
    """Like :func:`zero_state`, but rewritten on every invoke with ``value`` (an Arg or value).

    Use it when the composite takes the initial state as an argument::

        h = initial_state(c, c.args[4], batch, units)
    """
    return state(c, batch, units, value)


def lstm_sequence(c, x, input_weights, recurrent_weights, biases, output_state, cell_state, *,
                  activation: str = "TANH", peepholes=None, layer_norm=None, time_major: bool = False,
                  go_backwards: bool = False, diagonal_recurrence: bool = False):
    """One ``UNIDIRECTIONAL_SEQUENCE_LSTM`` over ``x`` (no clipping, no projection).

    ``input_weights`` and ``recurrent_weights`` are four ``[units, in]`` / ``[units, units]``
    NumPy arrays and ``biases`` four ``[units]`` arrays, in the gate order i, f, c, o (the
    op's inputs 1-4, 5-8 and 12-15). ``output_state`` and ``cell_state`` must come from
    :func:`zero_state` or :func:`initial_state` (the op's inputs 18 and 19).
    ``activation`` is the op's ``fused_activation_function`` (see ``rnn_kit.FUSED_ACTIVATIONS``).

    Optional extras of the op:

    * ``peepholes``: three ``[units]`` arrays ``(w_ci, w_cf, w_co)`` (inputs 9-11). The input
      and forget gates add ``w_ci * c_prev`` and ``w_cf * c_prev``; the output gate adds
      ``w_co * c_new``.
    * ``diagonal_recurrence``: ``recurrent_weights`` are four ``[units]`` diagonals (an IndyLSTM: each
      unit sees only its own previous output), the op's ``diagonal_recurrent_tensors``.
    * ``layer_norm``: four ``[units]`` coefficient arrays, gates i, f, c, o (inputs 20-23).
      Each gate pre-activation ``W x + R h (+ peephole)`` is normalised over the units
      (mean 0, variance 1, epsilon 1e-8), multiplied by its coefficients, and then the bias
      is added.

    ``x`` is ``[batch, time, in]`` (or ``[time, batch, in]`` with ``time_major=True``); the
    result has the same layout with ``units`` features. The op itself always runs
    time-major: LiteRT's float kernel is much faster that way (LSTM(64) over 50x32 steps,
    batch 1: 130 us instead of 200 us on the benchmark machine), so a batch-major sequence
    is swapped in and out (a free RESHAPE at batch 1). ``go_backwards`` reverses the
    time-major input (the result is in processing order), so that a forward and a backward
    op over one sequence share its swap and can be merged into a bidirectional op.
    """
    for s in (output_state, cell_state):
        if not s.meta.get("is_variable"):
            raise ValueError("lstm_sequence: states must come from zero_state() or initial_state(), "
                             "so that they are rewritten before the op on every invoke")

    def weights(arrays, n, what):
        if arrays is None:
            return [None] * n
        if len(arrays) != n:
            raise ValueError(f"lstm_sequence: {what} needs {n} arrays, got {len(arrays)}")
        return [np.ascontiguousarray(a, np.float32) for a in arrays]

    wi, wr, bias = (weights(a, 4, w) for a, w in ((input_weights, "input_weights"),
                                                  (recurrent_weights, "recurrent_weights"), (biases, "biases")))
    batch, units = output_state.shape
    x_tm = time_major_input(c, x, time_major, go_backwards)
    opts = {"fused_activation_function": activation, "cell_clip": 0.0, "proj_clip": 0.0,
            "time_major": True, "asymmetric_quantize_inputs": False}
    if diagonal_recurrence:
        opts["diagonal_recurrent_tensors"] = True
    operands = lstm_operands(x_tm, wi, wr, bias, output_state, cell_state, peepholes=weights(peepholes, 3, "peepholes"),
                             layer_norm=weights(layer_norm, 4, "layer_norm"))
    seq = c.op("UNIDIRECTIONAL_SEQUENCE_LSTM", operands, opts, dtype=np.float32, shape=(x_tm.shape[0], batch, units))
    return seq if time_major else swap_batch_and_time(c, seq)


def last_time_step(c, seq, time_major: bool = False):
    """The last step of a ``[batch, time, units]`` sequence (``[time, batch, units]`` if time-major)."""
    return time_step(c, seq, -1, time_major)


def rnn_sequence(c, x_tm, weights, hidden_state, activation: str):
    """One time-major ``UNIDIRECTIONAL_SEQUENCE_RNN`` over ``x_tm`` ([time, batch, in]) with SimpleRNN's one-gate
    ``weights`` (:func:`~fuselite.rnn.kit.keras_to_litert`), the state tensor ``hidden_state`` (:func:`state`) and
    the op's ``activation`` (a ``fused_activation_function``): [time, batch, units]."""
    opts = {"fused_activation_function": activation, "time_major": True, "asymmetric_quantize_inputs": False}
    return c.op("UNIDIRECTIONAL_SEQUENCE_RNN", rnn_operands(x_tm, *weights, hidden_state), opts, dtype=np.float32,
                shape=(x_tm.shape[0], *hidden_state.shape))
