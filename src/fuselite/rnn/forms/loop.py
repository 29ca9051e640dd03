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

from fuselite.rnn.build import fc, reverse, runtime_length, zeros
from fuselite.rnn.cells.base import Cell


def loop_over(c, cell: Cell, x, states: list, *, tm: bool, backwards: bool, sequence: bool, mask=None,
              zero_output: bool = False):
    """(sequence or None, final states, last output) of one direction of ``cell`` in the loop form over ``x``,
    its batch and number of steps read from ``x`` (an unknown batch: the conversion's, else dynamic; an unknown
    number of steps: read at run time), for rules
    of other composites (tf-keras' ``standard_lstm``). ``states``: initial values or None (zeros); ``mask``,
    ``zero_output``: as for :func:`loop_steps`."""
    steps = x.shape[0 if tm else 1]
    batch = x.shape[1 if tm else 0] or c.batch_size
    return loop_steps(c, cell, x, states, tm=tm, backwards=backwards, batch=batch, steps=steps, sequence=sequence,
                      mask=mask, zero_output=zero_output)


def loop_steps(c, cell: Cell, x, states: list, *, tm: bool, backwards: bool, batch, steps: int | None,
               sequence: bool, mask=None, zero_output: bool = False):
    """(the outputs as a sequence in processing order, or None without ``sequence``; the final states; the last
    output) of one direction of a layer over ``x``, its steps in a WHILE. ``batch`` / ``steps`` None: read from
    ``x`` at run time (the number of steps is then a read-only carry the condition compares with). ``states``:
    initial values, or None (zeros). ``mask``: Keras' bool [batch, time] mask (in time order; or float32 1 / 0), or None: where it is
    off, the states keep their values and the output repeats the previous one (zeros before the first), or is
    zeros with ``zero_output`` (Keras' ``zero_output_for_mask``), as in the unrolled form (``forms/unrolled.py``)."""
    t_axis, b_axis = (0, 1) if tm else (1, 0)
    if backwards:
        x = reverse(c, x, t_axis)
    width, units = cell.input.shape[0], cell.units
    proj_shape = (steps, batch, width) if tm else (batch, steps, width)
    proj = fc(c, x, cell.input, cell.bias, proj_shape, keep=True)
    carries = [c.const(np.array(0, np.int32), name="step")]
    carries += [s if s is not None else zeros(c, (batch, units), x, b_axis) for s in states]
    carries.append(proj)
    if steps is None:  # the number of steps, read once: a read-only carry of the condition
        carries.append(runtime_length(c, x, t_axis))
    # the output is a carry of its own where it can differ from h: masked steps after non-zero initial states
    # (it starts at zeros), or that output zeros
    tracked = mask is not None and (zero_output or any(s is not None for s in states))
    if mask is not None:  # a read-only carry, as float32 [batch, time, 1] (TFLite Micro gathers no bool)
        flags = mask if mask.dtype == np.float32 else c.op("CAST", [mask], dtype=np.float32, shape=(batch, steps))
        if backwards:
            flags = c.op("REVERSE_V2", [flags, np.array([1], np.int32)], dtype=np.float32, shape=flags.shape)
        carries.append(c.op("EXPAND_DIMS", [flags, np.array(2, np.int32)], dtype=np.float32, shape=(batch, steps, 1))
                       if steps is None else
                       c.op("RESHAPE", [flags, np.array([-1, steps, 1], np.int32)], dtype=np.float32,
                            shape=(batch, steps, 1)))
    if tracked:
        carries.append(zeros(c, (batch, units), x, b_axis))
    if sequence:
        carries.append(zeros(c, (steps, batch, units) if tm else (batch, steps, units), x, b_axis,
                             (t_axis, b_axis, 2) if tm else (b_axis, t_axis, 2)))
    specs = [(v.dtype, v.shape) for v in carries]

    cond = c.subgraph("loop_cond")
    ins = [cond.function.add_input(f"carry{k}", *spec) for k, spec in enumerate(specs)]
    going = cond.op("LESS", [ins[0], np.array(steps, np.int32) if steps is not None else ins[2 + len(states)]],
                    dtype=np.bool_, shape=())
    cond.function.inputs, cond.function.outputs, cond.function.ops = ins, [going], cond.ops

    body = c.subgraph("loop_body")
    ins = [body.function.add_input(f"carry{k}", *spec) for k, spec in enumerate(specs)]
    n = len(states)
    i, old, p = ins[0], ins[1:1 + n], ins[1 + n]
    xt = body.op("GATHER", [p, i], {"axis": t_axis, "batch_dims": 0}, dtype=np.float32, shape=(batch, width))
    new, out = cell.step(body, xt, old)
    outs = [body.op("ADD", [i, np.array(1, np.int32)], {"fused_activation_function": "NONE"}, dtype=np.int32,
                    shape=()), *new, p]  # the projections pass through unchanged: a read-only carry
    extra = 2 + n  # the carries after the projections
    if steps is None:
        outs.append(ins[extra])  # the number of steps: read-only too
        extra += 1
    if mask is not None:
        flags = ins[extra]
        on = body.op("GREATER", [body.op("GATHER", [flags, i], {"axis": 1, "batch_dims": 0}, dtype=np.float32,
                                         shape=(batch, 1)), np.array(0.5, np.float32)], dtype=np.bool_,
                     shape=(batch, 1))
        keep = [body.op("SELECT_V2", [on, v, was], dtype=np.float32, shape=was.shape) for v, was in zip(new, old)]
        outs[1:1 + n] = keep
        outs.append(flags)
        if tracked:
            otherwise = np.zeros((1, units), np.float32) if zero_output else ins[extra + 1]
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
    last = results[len(states) + (4 if steps is None else 3)] if tracked else finals[0]
    return (results[-1] if sequence else None), finals, last
