"""Keras recurrent layers -> fused LiteRT sequence ops.

Composites ``keras.layers.LSTM`` / ``SimpleRNN`` / ``Bidirectional`` are produced by
``fuselite.frontend.keras_rnn`` while a Keras model is traced. Arguments:
``(x, kernel, recurrent_kernel, bias[, backward kernel, recurrent_kernel, bias],
*initial_states[, mask])``; attributes: the layer configuration.

Exact Keras semantics on the stock kernels:

* no cell clipping (``cell_clip = 0``);
* the fused ops keep their state in *variable* tensors that persist between
  ``invoke()`` calls, so every state is first (re)written by an op placed before the
  sequence op — zeros (FILL) for a stateless layer, or the given initial state — and
  the same input gives the same output on every invoke;
* the state tensors need a static batch: an unknown batch makes the converter retry
  with batch 1 (or the user's ``batch_size``), and the report says so.

Keras weights are ``[in, gates * units]`` with gates ``i, f, c, o``; LiteRT wants one
``[units, in]`` matrix and one bias per gate (``rnn_kit.keras_to_litert``).
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.forms import chosen_form
from fuselite.fusion.gru import bidirectional_gru
from fuselite.fusion.masked_rnn import masked_bidirectional, masked_layer
from fuselite.fusion.registry import fusion
from fuselite.fusion.rnn_kit import (
    FUSED_ACTIVATIONS,
    GATE_ORDERS,
    keras_to_litert,
    lstm_operands,
    lstm_weight_operands,
    rnn_operands,
)
from fuselite.fusion.rnn_loop import loop_bidirectional, loop_layer, runtime_dims

ACTIVATIONS = FUSED_ACTIVATIONS  # the name rules written against this module know (docs/byo-rnn.md)


def _check_common(c, what: str):
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


def _weights(c, start: int, gates: int, units: int):
    """Per-gate [units, in] input weights, [units, units] recurrent weights and biases (``GateWeights``)."""
    k, rk, b = (c.args[start + i] for i in range(3))
    if k.const is None or rk.const is None or b.const is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    return keras_to_litert(k.const, rk.const, b.const, gates, units)


def _runtime_batch_dims(c, like, axis: int, units: int):
    """``[batch, units]`` as an int32 tensor, the batch read from ``like``'s shape at run time."""
    return runtime_dims(c, like, axis, (None, units))


def _state(c, batch: int | None, units: int, initial=None, like=None, axis: int = 0):
    """A variable state tensor, (re)written on every invoke before the sequence op runs. With ``batch``
    None, its batch is ``like``'s dimension ``axis`` at run time (a dynamic batch)."""
    if batch is None:
        if like is None:
            raise ValueError("_state: a dynamic batch needs the tensor to read it from (like=)")
        dims = _runtime_batch_dims(c, like, axis, units)
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


def _read_state(c, state, like):
    """The state tensor's value after the sequence op (ordered after it through SHAPE(like))."""
    shape = c.op("SHAPE", [like], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(2,))
    out = c.op("RESHAPE", [state, shape], dtype=np.float32, shape=state.shape)
    out.producer.attrs["_pinned"] = True
    shape.producer.attrs["_pinned"] = True
    return out


def _time_step(c, seq, index: int, time_major: bool):
    """seq[:, index] (or seq[index] when time-major) as a [batch, units] tensor."""
    b, t, u = (seq.shape[1], seq.shape[0], seq.shape[2]) if time_major else seq.shape
    if time_major:
        begin, mask, shrink = [index, 0, 0], 0b110, 0b001
    else:
        begin, mask, shrink = [0, index, 0], 0b101, 0b010
    end = [0, 0, 0] if index == -1 else [x + 1 if i == (0 if time_major else 1) else 0 for i, x in enumerate(begin)]
    opts = {"begin_mask": mask, "end_mask": mask, "ellipsis_mask": 0, "new_axis_mask": 0,
            "shrink_axis_mask": shrink, "offset": False}
    return c.op("STRIDED_SLICE", [seq, np.array(begin, np.int32), np.array(end, np.int32),
                                  np.ones(3, np.int32)], opts, dtype=np.float32, shape=(b, u))


def _initial_states(c, first: int, n: int):
    states = [c.args[first + i] for i in range(int(c.attrs.get("n_initial_states", 0)))]
    if states and len(states) != n:
        c.decline(f"expected {n} initial state(s), got {len(states)}")
    return states or [None] * n


def _seq_shape(x, batch, units, time_major):
    return (x.shape[0], batch, units) if time_major else (batch, x.shape[1], units)


def swap_batch_and_time(c, x):
    """[a, b, n] -> [b, a, n]: a RESHAPE when either leading dim is 1, else a TRANSPOSE."""
    shape = (x.shape[1], x.shape[0], x.shape[2])
    if 1 in x.shape[:2] and None not in shape:
        return c.op("RESHAPE", [x, np.array(shape, np.int32)], dtype=x.dtype, shape=shape)
    return c.op("TRANSPOSE", [x, np.array([1, 0, 2], np.int32)], dtype=x.dtype, shape=shape)


def _time_major_input(c, x, time_major: bool, go_backwards: bool):
    """``x`` as [time, batch, features] (the fused kernels' fast layout), reversed in time if asked."""
    x_tm = x if time_major else swap_batch_and_time(c, x)
    if go_backwards:
        x_tm = c.op("REVERSE_V2", [x_tm, np.array([0], np.int32)], dtype=x_tm.dtype, shape=x_tm.shape)
    return x_tm


def _one_direction(c, layer: str, n_states: int):
    """(x, batch, units, per-gate weights, state tensors) of a Keras LSTM or SimpleRNN composite."""
    x, batch = _check_common(c, layer)
    units = int(c.attrs["units"])
    weights = _weights(c, 1, len(GATE_ORDERS["keras", layer]), units)
    axis = 1 if c.attrs.get("time_major") else 0
    states = [_state(c, batch, units, s, like=x, axis=axis) for s in _initial_states(c, 4, n_states)]
    return x, batch, units, weights, states


def _layer_results(c, seq, time_major: bool, *carried):
    """The layer's results: the sequence or its last step; with return_state also the last step (h)
    and the ``carried`` state tensors (an LSTM's cell state) as they are after the sequence op."""
    last = _time_step(c, seq, -1, time_major)
    out = seq if c.attrs.get("return_sequences") else last
    if c.attrs.get("return_state"):
        return [out, last, *(_read_state(c, s, last) for s in carried)]
    return out


@fusion("keras.layers.LSTM")
def fuse_keras_lstm(c):
    a = c.attrs
    results = chosen_form(c, "LSTM", {"unrolled": lambda c: masked_layer(c, "LSTM"),
                                      "loop": lambda c: loop_layer(c, "LSTM")})
    if results is not None:  # the unrolled form (fusion/masked_rnn.py): a mask, or rnn_form
        return results
    x, _, _, weights, (h, cs) = _one_direction(c, "LSTM", 2)
    tm = bool(a.get("time_major"))
    seq = lstm_sequence(c, x, *weights, h, cs, activation=FUSED_ACTIVATIONS[a["activation"]], time_major=tm,
                        go_backwards=bool(a.get("go_backwards")))
    return _layer_results(c, seq, tm, cs)


@fusion("keras.layers.SimpleRNN")
def fuse_keras_simple_rnn(c):
    a = c.attrs
    results = chosen_form(c, "SimpleRNN", {"unrolled": lambda c: masked_layer(c, "SimpleRNN"),
                                           "loop": lambda c: loop_layer(c, "SimpleRNN")})
    if results is not None:
        return results
    x, batch, units, weights, (h,) = _one_direction(c, "SimpleRNN", 1)
    tm = bool(a.get("time_major"))
    opts = {"fused_activation_function": FUSED_ACTIVATIONS[a["activation"]], "time_major": True,
            "asymmetric_quantize_inputs": False}
    x_tm = _time_major_input(c, x, tm, bool(a.get("go_backwards")))
    seq = c.op("UNIDIRECTIONAL_SEQUENCE_RNN", rnn_operands(x_tm, *weights, h), opts, dtype=np.float32,
               shape=(x_tm.shape[0], batch, units))
    return _layer_results(c, seq if tm else swap_batch_and_time(c, seq), tm)


def _merge(c, mode: str, fw, bw, shape):
    if mode == "concat":
        return c.op("CONCATENATION", [fw, bw], {"axis": -1, "fused_activation_function": "NONE"},
                    dtype=np.float32, shape=shape[:-1] + (shape[-1] * 2,))
    if mode in ("sum", "ave"):
        y = c.op("ADD", [fw, bw], {"fused_activation_function": "NONE"}, dtype=np.float32, shape=shape)
        if mode == "ave":
            y = c.op("MUL", [y, np.array(0.5, np.float32)], {"fused_activation_function": "NONE"},
                     dtype=np.float32, shape=shape)
        return y
    if mode == "mul":
        return c.op("MUL", [fw, bw], {"fused_activation_function": "NONE"}, dtype=np.float32, shape=shape)
    return [fw, bw]


@fusion("keras.layers.Bidirectional")
def fuse_keras_bidirectional(c):
    a = c.attrs
    kind = a.get("layer")
    if kind not in ("LSTM", "SimpleRNN", "GRU"):
        c.decline(f"Bidirectional({kind}) has no fused LiteRT op")
    if a.get("go_backwards") or not a.get("backward_go_backwards", True):
        c.decline("Bidirectional expects a forward layer and a go_backwards backward layer")
    if int(a.get("n_initial_states", 0)):
        c.decline("initial states for Bidirectional are not supported by the fused op")
    mode = a.get("merge_mode", "concat")
    if mode not in ("concat", "sum", "mul", "ave", "none"):
        c.decline(f"merge_mode '{mode}' is not supported")
    if not a.get("stateful"):  # a mask (the fused ops have none), or rnn_form
        fallback = "unrolled" if kind == "GRU" else "fused"
        results = chosen_form(c, kind, {"unrolled": lambda c: masked_bidirectional(c, _merge),
                                        "loop": lambda c: loop_bidirectional(c, _merge)}, fallback,
                              key="Bidirectional" if kind != "GRU" else None)
        if results is not None:
            return results
    if kind == "GRU":  # no LiteRT GRU op: both directions unrolled (fusion/gru.py)
        _check_common(c, "Bidirectional(GRU)")
        return bidirectional_gru(c, _merge)
    x, batch = _check_common(c, f"Bidirectional({kind})")
    units, tm = int(a["units"]), bool(a.get("time_major"))
    gates = len(GATE_ORDERS["keras", kind])
    fw, bw = _weights(c, 1, gates, units), _weights(c, 4, gates, units)
    seq_shape = _seq_shape(x, batch, units, tm)
    tm_shape = (x.shape[0 if tm else 1], batch, units)  # the ops run time-major (faster kernels)
    merged = mode == "concat" and a.get("return_sequences") and not a.get("return_state")
    outs = [(np.dtype(np.float32), tm_shape[:-1] + (2 * units,))] if merged else [(np.dtype(np.float32), tm_shape)] * 2
    act = FUSED_ACTIVATIONS[a["activation"]]
    x = _time_major_input(c, x, tm, False)
    if kind == "LSTM":
        states = [_state(c, batch, units, like=x, axis=1) for _ in range(4)]
        inputs = [x, *lstm_weight_operands(*fw), *lstm_weight_operands(*bw), *states] + [None] * 9
        opts = {"fused_activation_function": act, "cell_clip": 0.0, "proj_clip": 0.0, "merge_outputs": bool(merged),
                "time_major": True, "asymmetric_quantize_inputs": False}
        res = c.op("BIDIRECTIONAL_SEQUENCE_LSTM", inputs, opts, outs=outs)
    else:
        states = [_state(c, batch, units, like=x, axis=1) for _ in range(2)]
        inputs = [x, *fw.input, *fw.recurrent, *fw.bias, states[0], *bw.input, *bw.recurrent, *bw.bias, states[1],
                  None, None, None]  # no auxiliary input
        opts = {"fused_activation_function": act, "merge_outputs": bool(merged), "time_major": True,
                "asymmetric_quantize_inputs": False}
        res = c.op("BIDIRECTIONAL_SEQUENCE_RNN", inputs, opts, outs=outs)
    if merged:
        return res if tm else swap_batch_and_time(c, res)
    fw_seq, bw_seq = res if tm else [swap_batch_and_time(c, r) for r in res]
    fw_last, bw_last = _time_step(c, fw_seq, -1, tm), _time_step(c, bw_seq, 0, tm)
    if a.get("return_sequences"):
        y = _merge(c, mode, fw_seq, bw_seq, seq_shape)
    else:
        y = _merge(c, mode, fw_last, bw_last, fw_last.shape)
    y = y if isinstance(y, list) else [y]
    if not a.get("return_state"):
        return y
    if kind == "LSTM":
        return y + [fw_last, _read_state(c, states[1], fw_last), bw_last, _read_state(c, states[3], bw_last)]
    return y + [fw_last, bw_last]


# -- public helpers for user-written RNN rules (docs/byo-rnn.md) ---------------------------------


def zero_state(c, batch: int, units: int):
    """A ``[batch, units]`` state tensor for a fused sequence op, set to zeros on every invoke.

    LiteRT's sequence kernels keep their state in *variable* tensors that persist between
    ``invoke()`` calls. This helper makes such a tensor and the FILL op that rewrites it with
    zeros before the sequence op runs, so the same input always gives the same output::

        h, cell = zero_state(c, batch, units), zero_state(c, batch, units)
        seq = lstm_sequence(c, x, wi, wr, bias, h, cell)
    """
    return _state(c, batch, units)


def initial_state(c, value, batch: int, units: int):
    """Like :func:`zero_state`, but rewritten on every invoke with ``value`` (an Arg or value).

    Use it when the composite takes the initial state as an argument::

        h = initial_state(c, c.args[4], batch, units)
    """
    return _state(c, batch, units, value)


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
    x_tm = _time_major_input(c, x, time_major, go_backwards)
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
    return _time_step(c, seq, -1, time_major)
