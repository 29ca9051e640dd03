"""The small IR builders every recurrent form and cell writes with (on a ``Composite`` or a subgraph of one).

One place for the ops a step or a sequence is made of: :func:`fc` (``FULLY_CONNECTED``), :func:`binary`
(``ADD`` / ``SUB`` / ``MUL`` without a fused activation), :func:`activation` (a Keras activation as its
LiteRT op), :func:`split_v`, the per-step masks (:func:`step_masks`), stacking steps (:func:`pack_steps`),
one step of a sequence (:func:`time_step`), batch and time swapped (:func:`swap_batch_and_time`,
:func:`time_major_input`), and shapes, zeros or lengths read at run time (:func:`runtime_dims`,
:func:`zeros`, :func:`runtime_length`).

Example (one SimpleRNN step on builder ``c``)::

    pre = binary(c, "ADD", xt, fc(c, h, recurrent, None, xt.shape), xt.shape)
    h = activation(c, "tanh", pre)
"""

from __future__ import annotations

import numpy as np

from fuselite.rnn.kit import ACTIVATION_OPS

MAX_UNROLL = 512  # the most steps an unrolled form writes (its file grows with them)
NONE = {"fused_activation_function": "NONE"}
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)


def fc(c, x, w, b, shape, keep: bool = False):
    """``FULLY_CONNECTED(x, w [out, in], b)`` of ``shape`` (``keep``: keep the leading dims of a rank-3 x)."""
    opts = dict(NONE, weights_format="DEFAULT", keep_num_dims=keep, asymmetric_quantize_inputs=False)
    return c.op("FULLY_CONNECTED", [x, w, b], opts, dtype=np.float32, shape=shape)


def activation(c, kind: str, x):
    """Keras activation ``kind`` applied to ``x`` (``ACTIVATION_OPS``; linear: ``x`` itself)."""
    if ACTIVATION_OPS[kind] is None:
        return x
    return c.op(ACTIVATION_OPS[kind], [x], dtype=np.float32, shape=x.shape)


def binary(c, kind: str, a, b, shape):
    """An element-wise ``kind`` (ADD, SUB, MUL) of ``a`` and ``b`` without a fused activation."""
    return c.op(kind, [a, b], dict(NONE), dtype=np.float32, shape=shape)


def split_v(c, x, sizes: tuple, axis: int = -1) -> list:
    """``x`` cut along ``axis`` into blocks of ``sizes`` (float32)."""
    shapes = [x.shape[:axis % len(x.shape)] + (n,) + x.shape[axis % len(x.shape) + 1:] for n in sizes]
    return c.op("SPLIT_V", [x, np.array(sizes, np.int32), np.array(axis, np.int32)], {"num_splits": len(sizes)},
                outs=[(F32, s) for s in shapes])


def unpack(c, x, steps: int, axis: int, shape: tuple) -> list:
    """``x``'s ``steps`` slices along ``axis``, each of ``shape`` (a list, also for one step)."""
    parts = c.op("UNPACK", [x], {"num": steps, "axis": axis}, outs=[(F32, shape)] * steps)
    return parts if isinstance(parts, list) else [parts]


def reverse(c, x, axis: int):
    """``x`` reversed along ``axis``."""
    return c.op("REVERSE_V2", [x, np.array([axis], np.int32)], dtype=x.dtype, shape=x.shape)


def step_masks(c, mask, steps: int, batch: int, backwards: bool) -> list:
    """Keras' [batch, time] mask (bool, or float32 1 / 0) as one [batch, 1] bool per step, in processing order.
    Unstacked as float32 (TFLite Micro's UNPACK takes no bool), each step compared back to a bool."""
    flags = mask if mask.dtype == F32 else c.op("CAST", [mask], dtype=F32, shape=(batch, steps))
    per_step = unpack(c, flags, steps, 1, (batch,))
    if backwards:
        per_step = per_step[::-1]
    return [c.op("GREATER", [c.op("RESHAPE", [m, np.array([batch, 1], np.int32)], dtype=F32, shape=(batch, 1)),
                             np.array(0.5, np.float32)], dtype=np.bool_, shape=(batch, 1))
            for m in per_step]


def pack_steps(c, outs: list, time_major: bool):
    """The per-step states as one [batch, time, units] (or [time, batch, units]) sequence."""
    batch, units = outs[0].shape
    steps = len(outs)
    return c.op("PACK", outs, {"values_count": steps, "axis": 0 if time_major else 1}, dtype=np.float32,
                shape=(steps, batch, units) if time_major else (batch, steps, units))


def time_step(c, seq, index: int, time_major: bool):
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


def swap_batch_and_time(c, x):
    """[a, b, n] -> [b, a, n]: a RESHAPE when either leading dim is 1, else a TRANSPOSE."""
    shape = (x.shape[1], x.shape[0], x.shape[2])
    if 1 in x.shape[:2] and None not in shape:
        return c.op("RESHAPE", [x, np.array(shape, np.int32)], dtype=x.dtype, shape=shape)
    return c.op("TRANSPOSE", [x, np.array([1, 0, 2], np.int32)], dtype=x.dtype, shape=shape)


def time_major_input(c, x, time_major: bool, go_backwards: bool):
    """``x`` as [time, batch, features] (the fused kernels' fast layout), reversed in time if asked."""
    x_tm = x if time_major else swap_batch_and_time(c, x)
    if go_backwards:
        x_tm = reverse(c, x_tm, 0)
    return x_tm


def runtime_dims(c, like, batch_axis: int, shape: tuple, axes: tuple | None = None):
    """``shape`` as an int32 tensor, its unknown (None) dims read from ``like`` at run time (SHAPE, STRIDED_SLICE,
    CONCATENATION): each from ``like``'s dimension ``axes[i]`` (default: every unknown dim is the batch,
    ``batch_axis``)."""
    dims = c.op("SHAPE", [like], {"out_type": I32}, dtype=np.int32, shape=(like.rank,))
    read = {}

    def dim(axis):
        if axis not in read:
            read[axis] = c.op("STRIDED_SLICE", [dims, np.array([axis], np.int32), np.array([axis + 1], np.int32),
                                                np.array([1], np.int32)],
                              {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0,
                               "shrink_axis_mask": 0, "offset": False}, dtype=np.int32, shape=(1,))
        return read[axis]

    axes = axes or (batch_axis,) * len(shape)
    parts = [dim(axes[i]) if d is None else np.array([d], np.int32) for i, d in enumerate(shape)]
    return c.op("CONCATENATION", parts, {"axis": 0, "fused_activation_function": "NONE"}, dtype=np.int32,
                shape=(len(shape),))


def zeros(c, shape: tuple, like, batch_axis: int, axes: tuple | None = None):
    """A float32 zero tensor of ``shape``; an unknown (None) dim read from ``like`` at run time: the batch, from
    ``like``'s dimension ``batch_axis``, or each from ``like``'s dimension ``axes[i]``."""
    if None not in shape:
        return c.const(np.zeros(shape, np.float32), name="zeros")
    dims = runtime_dims(c, like, batch_axis, shape, axes)
    return c.op("FILL", [dims, np.array(0.0, np.float32)], dtype=np.float32, shape=shape)


def runtime_length(c, like, axis: int):
    """``like``'s dimension ``axis`` as an int32 scalar read at run time (SHAPE, STRIDED_SLICE): an unknown
    number of steps."""
    dims = c.op("SHAPE", [like], {"out_type": I32}, dtype=np.int32, shape=(like.rank,))
    return c.op("STRIDED_SLICE", [dims, np.array([axis], np.int32), np.array([axis + 1], np.int32),
                                  np.array([1], np.int32)],
                {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 1,
                 "offset": False}, dtype=np.int32, shape=())
