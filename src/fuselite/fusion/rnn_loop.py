"""The loop form of Keras LSTM, SimpleRNN and GRU layers (``rnn_form="loop"``): a ``WHILE`` without TensorLists.

One ``FULLY_CONNECTED`` projects every step's input at once, outside the loop (as the unrolled form
does); a ``WHILE`` then runs the steps. Its body takes the step's projection (``GATHER`` at the loop
counter), adds the recurrent product, applies the cell and, when the layer returns its sequence,
writes the step's output into it (``DYNAMIC_UPDATE_SLICE``). The states (h, and c for an LSTM) are
loop carries: zeros, or the layer's initial states. The weights are stored once and the ops once, so
the file is about as large as the official converter's (the unrolled form grows with the steps).

The projections are a loop-invariant carry: the body returns its input unchanged and nothing reads the
``WHILE``'s result for it, so LiteRT's ``WHILE`` kernel lends the body that buffer instead of copying
it on every step (``tflite/kernels/while.cc``: a read-only input), and the condition, which reads only
the counter, gets only the counter (``RemoveUnusedInputs``).

A masked layer's mask is another read-only carry (float32 [batch, time, 1]); the body gathers the step's
flag and ends in ``SELECT_V2``s that keep the states where it is off, as Keras does.

Example (the LSTM rule, for ``rnn_form="loop"``)::

    return loop_layer(c, "LSTM")
"""

from __future__ import annotations

import numpy as np

from fuselite.fusion.gru import _act, _binary, _fc, _mask, _unrollable, gru_cell
from fuselite.fusion.masked_rnn import _constant_weights, _ifoc, lstm_cell
from fuselite.fusion.rnn_kit import gru_fully_connected_weights, split_gru_bias

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)


def runtime_dims(c, like, batch_axis: int, shape: tuple):
    """``shape`` as an int32 tensor, its unknown (None) batch read from ``like``'s dimension ``batch_axis`` at run
    time (SHAPE, STRIDED_SLICE, CONCATENATION)."""
    dims = c.op("SHAPE", [like], {"out_type": _I32}, dtype=np.int32, shape=(like.rank,))
    batch = c.op("STRIDED_SLICE", [dims, np.array([batch_axis], np.int32), np.array([batch_axis + 1], np.int32),
                                   np.array([1], np.int32)],
                 {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0,
                  "offset": False}, dtype=np.int32, shape=(1,))
    parts = [batch if d is None else np.array([d], np.int32) for d in shape]
    return c.op("CONCATENATION", parts, {"axis": 0, "fused_activation_function": "NONE"}, dtype=np.int32,
                shape=(len(shape),))


def _zeros(c, shape: tuple, like, batch_axis: int):
    """A float32 zero tensor of ``shape``; an unknown (None) batch read from ``like`` at run time."""
    if None not in shape:
        return c.const(np.zeros(shape, np.float32), name="zeros")
    dims = runtime_dims(c, like, batch_axis, shape)
    return c.op("FILL", [dims, np.array(0.0, np.float32)], dtype=np.float32, shape=shape)


class LoopWeights:
    """A layer's weights as the loop uses them: the input projection ([width, in] and bias, for
    FULLY_CONNECTED) and ``step(b, xt, states) -> (new states, output)``, one step's ops on builder ``b``.
    ``kernel`` [in, gates * units], ``recurrent`` [units, gates * units] and ``bias`` in Keras' layout (a GRU's
    ``bias`` its input bias, ``recurrent_bias`` the other row, zero or None with ``reset_after=False``)."""

    def __init__(self, kind: str, kernel, recurrent, bias, activation: str, *, reset_after: bool = True,
                 recurrent_bias=None):
        self.units = units = recurrent.shape[0]
        if kind == "GRU":
            rec_bias = np.zeros_like(bias) if recurrent_bias is None else recurrent_bias
            w = gru_fully_connected_weights(kernel, recurrent, bias, rec_bias)
            self.input, self.bias, self.n_states = w.input, w.input_bias, 1

            def gru_step(b, xt, states):
                h = gru_cell(b, xt, states[0], w, activation, reset_after)
                return [h], h

            self.step = gru_step
            return
        if kind == "LSTM":  # gates i, f, o, c: one LOGISTIC over the first three
            kernel, recurrent, bias = (_ifoc(w, units) for w in (kernel, recurrent, bias))
        self.input = np.ascontiguousarray(kernel.T, np.float32)
        self.bias = np.asarray(bias, np.float32)
        rec = np.ascontiguousarray(recurrent.T, np.float32)
        self.n_states = 2 if kind == "LSTM" else 1

        def step(b, xt, states):
            pre = _binary(b, "ADD", xt, _fc(b, states[0], rec, None, xt.shape), xt.shape)
            if kind == "LSTM":
                h, cell = lstm_cell(b, pre, states[1], activation)
                return [h, cell], h
            h = _act(b, activation, pre)
            return [h], h

        self.step = step


def _layer_weights(c, kind: str, start: int, activation: str | None = None) -> LoopWeights:
    """The weights of a Keras composite: the constant arguments ``start`` .. ``start + 2``."""
    a = c.attrs
    kernel, recurrent, bias = _constant_weights(c, start)
    if kind != "GRU":
        return LoopWeights(kind, kernel, recurrent, bias, activation or a["activation"])
    reset_after = bool(a.get("reset_after", True))
    if not reset_after and bias.ndim != 1:
        c.decline(f"a reset_after=False GRU has one bias of [3 * units], got {bias.shape}")
    bias_in, bias_rec = split_gru_bias(bias)
    return LoopWeights(kind, kernel, recurrent, bias_in, activation or a["activation"], reset_after=reset_after,
                       recurrent_bias=bias_rec)


def loop_over(c, kind: str, x, start: int, states: list, *, activation: str, tm: bool, backwards: bool,
              sequence: bool, mask=None, zero_output: bool = False):
    """(sequence or None, final states, last output) of one direction of a ``kind`` layer in the loop form, its
    weights the constant arguments ``start`` .. ``start + 2`` (Keras' layout), for rules of other composites
    (tf-keras' ``standard_lstm``). ``states``: initial values or None (zeros); ``mask``, ``zero_output``: as for
    :func:`loop_steps`."""
    steps = x.shape[0 if tm else 1]
    if steps is None:
        c.decline("the loop form needs a static number of time steps")
    batch = x.shape[1 if tm else 0] or c.batch_size
    return loop_steps(c, _layer_weights(c, kind, start, activation), x, states, tm=tm, backwards=backwards,
                      batch=batch, steps=steps, sequence=sequence, mask=mask, zero_output=zero_output)


def loop_steps(c, w: LoopWeights, x, states: list, *, tm: bool, backwards: bool, batch, steps: int, sequence: bool,
               mask=None, zero_output: bool = False):
    """(the outputs as a sequence in processing order, or None without ``sequence``; the final states; the last
    output) of one direction of a layer over ``x``, its steps in a WHILE. ``states``: initial values, or None
    (zeros). ``mask``: Keras' bool [batch, time] mask (in time order), or None: where it is off, the states keep
    their values and the output repeats the previous one (zeros before the first), or is zeros with
    ``zero_output`` (Keras' ``zero_output_for_mask``), as in the unrolled form (``fusion/masked_rnn.py``)."""
    t_axis, b_axis = (0, 1) if tm else (1, 0)
    if backwards:
        x = c.op("REVERSE_V2", [x, np.array([t_axis], np.int32)], dtype=np.float32, shape=x.shape)
    width, units = w.input.shape[0], w.units
    proj_shape = (steps, batch, width) if tm else (batch, steps, width)
    proj = _fc(c, x, w.input, w.bias, proj_shape, keep=True)
    carries = [c.const(np.array(0, np.int32), name="step")]
    carries += [s if s is not None else _zeros(c, (batch, units), x, b_axis) for s in states]
    carries.append(proj)
    # the output is a carry of its own where it can differ from h: masked steps after non-zero initial states
    # (it starts at zeros), or that output zeros
    tracked = mask is not None and (zero_output or any(s is not None for s in states))
    if mask is not None:  # a read-only carry, as float32 [batch, time, 1] (TFLite Micro gathers no bool)
        flags = c.op("CAST", [mask], dtype=np.float32, shape=(batch, steps))
        if backwards:
            flags = c.op("REVERSE_V2", [flags, np.array([1], np.int32)], dtype=np.float32, shape=flags.shape)
        carries.append(c.op("RESHAPE", [flags, np.array([-1, steps, 1], np.int32)], dtype=np.float32,
                            shape=(batch, steps, 1)))
    if tracked:
        carries.append(_zeros(c, (batch, units), x, b_axis))
    if sequence:
        carries.append(_zeros(c, (steps, batch, units) if tm else (batch, steps, units), x, b_axis))
    specs = [(v.dtype, v.shape) for v in carries]

    cond = c.subgraph("loop_cond")
    ins = [cond.function.add_input(f"carry{k}", *spec) for k, spec in enumerate(specs)]
    going = cond.op("LESS", [ins[0], np.array(steps, np.int32)], dtype=np.bool_, shape=())
    cond.function.inputs, cond.function.outputs, cond.function.ops = ins, [going], cond.ops

    body = c.subgraph("loop_body")
    ins = [body.function.add_input(f"carry{k}", *spec) for k, spec in enumerate(specs)]
    n = len(states)
    i, old, p = ins[0], ins[1:1 + n], ins[1 + n]
    xt = body.op("GATHER", [p, i], {"axis": t_axis, "batch_dims": 0}, dtype=np.float32, shape=(batch, width))
    new, out = w.step(body, xt, old)
    outs = [body.op("ADD", [i, np.array(1, np.int32)], {"fused_activation_function": "NONE"}, dtype=np.int32,
                    shape=()), *new, p]  # the projections pass through unchanged: a read-only carry
    if mask is not None:
        flags = ins[2 + n]
        on = body.op("GREATER", [body.op("GATHER", [flags, i], {"axis": 1, "batch_dims": 0}, dtype=np.float32,
                                         shape=(batch, 1)), np.array(0.5, np.float32)], dtype=np.bool_,
                     shape=(batch, 1))
        keep = [body.op("SELECT_V2", [on, v, was], dtype=np.float32, shape=was.shape) for v, was in zip(new, old)]
        outs[1:1 + n] = keep
        outs.append(flags)
        if tracked:
            otherwise = np.zeros((1, units), np.float32) if zero_output else ins[3 + n]
            out = body.op("SELECT_V2", [on, out, otherwise], dtype=np.float32, shape=(batch, units))
            outs.append(out)
        else:
            out = keep[0]
    if sequence:
        seq = ins[-1]
        one_step = (1, batch, units) if tm else (batch, 1, units)
        update = body.op("EXPAND_DIMS", [out, np.array(t_axis, np.int32)], dtype=np.float32, shape=one_step)
        start = body.op("MUL", [i, np.eye(3, dtype=np.int32)[t_axis]], {"fused_activation_function": "NONE"},
                        dtype=np.int32, shape=(3,))
        outs.append(body.op("DYNAMIC_UPDATE_SLICE", [seq, update, start], dtype=np.float32, shape=seq.shape))
    body.function.inputs, body.function.outputs, body.function.ops = ins, outs, body.ops

    results = c.op("WHILE", carries, {"cond_subgraph_index": "@" + cond.function.name,
                                      "body_subgraph_index": "@" + body.function.name}, outs=specs)
    finals = results[1:1 + len(states)]
    last = results[3 + len(states)] if tracked else finals[0]
    return (results[-1] if sequence else None), finals, last


def _loopable(c, kind: str, mask_index: int):
    """The sequence input, whether it is time-major, the batch (None: dynamic), the number of steps and the mask
    (the argument ``mask_index`` of a masked layer, else None) of a layer the loop form can write."""
    a = c.attrs
    if a.get("stateful"):
        c.decline(f"a stateful {kind} keeps the fused op (the loop form was not built for it)")
    x, tm, batch, steps = _unrollable(c, kind, dynamic_batch=c.dynamic_batch, max_steps=None, form="loop form of")
    return x, tm, batch, steps, (_mask(c, mask_index, x, tm) if a.get("has_mask") else None)


def loop_layer(c, kind: str) -> list:
    """The results of a Keras ``kind`` ("LSTM", "SimpleRNN" or "GRU") composite in the loop form (or a decline)."""
    a = c.attrs
    n_states = int(a.get("n_initial_states", 0))
    x, tm, batch, steps, mask = _loopable(c, kind, 4 + n_states)
    w = _layer_weights(c, kind, 1)
    states = [c.args[4 + k].value for k in range(n_states)] or [None] * w.n_states
    seq, finals, last = loop_steps(c, w, x, states, tm=tm, backwards=bool(a.get("go_backwards")), batch=batch,
                                   steps=steps, sequence=bool(a.get("return_sequences")), mask=mask,
                                   zero_output=bool(a.get("zero_output_for_mask")))
    out = seq if seq is not None else last
    return [out, *finals] if a.get("return_state") else out


def loop_bidirectional(c, merge) -> list:
    """A ``Bidirectional`` of LSTM, SimpleRNN or GRU, each direction in the loop form (the backward one over the
    reversed sequence, its outputs put back in time order), merged by ``merge(c, mode, fw, bw, shape)``; in
    Keras' order (the merged output(s), then the forward and the backward final states with ``return_state``)."""
    a = c.attrs
    kind = a.get("layer")
    x, tm, batch, steps, mask = _loopable(c, kind, 7)
    sequence = bool(a.get("return_sequences"))
    dirs = []
    for start, backwards in ((1, False), (4, True)):
        w = _layer_weights(c, kind, start)
        dirs.append(loop_steps(c, w, x, [None] * w.n_states, tm=tm, backwards=backwards, batch=batch,
                               steps=steps, sequence=sequence, mask=mask,
                               zero_output=bool(a.get("zero_output_for_mask"))))
    (fw_seq, fw_final, fw_last), (bw_seq, bw_final, bw_last) = dirs
    mode = a.get("merge_mode", "concat")
    if sequence:
        bw_seq = c.op("REVERSE_V2", [bw_seq, np.array([0 if tm else 1], np.int32)], dtype=np.float32,
                      shape=bw_seq.shape)
        y = merge(c, mode, fw_seq, bw_seq, fw_seq.shape)
    else:
        y = merge(c, mode, fw_last, bw_last, fw_last.shape)
    y = y if isinstance(y, list) else [y]
    return y + list(fw_final) + list(bw_final) if a.get("return_state") else y
