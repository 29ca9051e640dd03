"""Sequence RNN ops unrolled into builtins that have integer kernels.

LiteRT's ``UNIDIRECTIONAL_SEQUENCE_RNN`` and ``BIDIRECTIONAL_SEQUENCE_RNN`` run in float
or hybrid only (their input must be float32: ``unidirectional_sequence_rnn.cc``,
``bidirectional_sequence_rnn.cc``), and TFLite Micro has no kernel for either. The same
recurrence, ``h[t] = act(x[t] @ W.T + b + h[t-1] @ R.T)``, as builtins::

    proj  = FULLY_CONNECTED(x, W, b)            # every step's input projection at once
    x_t   = UNPACK(RESHAPE(proj))               # one [batch, units] slice per step
    h_t   = act(ADD(x_t, FULLY_CONNECTED(h_{t-1}, R)))   # (step 0 from a zero state: act(x_0))
    seq   = PACK(h_0 .. h_{T-1})                # the op's output, in time order

Each of these has an int8 kernel in LiteRT and TFLite Micro. A backward direction runs
the steps in reverse and packs them time-aligned, as the bidirectional op's output is.
Only ops with a static number of steps and batch, constant weights, no auxiliary input
and a state that is zeros (a stateless layer) or a value no other op reads are unrolled;
the others are left as they are (and say why when a quantizer meets them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.bidirectional import merged_outputs

MAX_STEPS = 512
ACTIVATIONS = {"TANH": "tfl.TANH", "RELU": "tfl.RELU", "RELU6": "tfl.RELU6", "RELU_N1_TO_1": "tfl.RELU_N1_TO_1",
               "SIGMOID": "tfl.LOGISTIC", "NONE": None}
_F32 = np.dtype(np.float32)
_NONE = {"fused_activation_function": "NONE"}
# operands of one direction: weights, recurrent weights, bias, state
_DIRECTIONS = {"UNIDIRECTIONAL_SEQUENCE_RNN": ((1, 2, 3, 4),),
               "BIDIRECTIONAL_SEQUENCE_RNN": ((1, 2, 3, 4), (5, 6, 7, 8))}


def why_not_unrolled(fn: Function, op: Op) -> str | None:
    """Why this sequence RNN op cannot be unrolled (None: it can)."""
    x = op.inputs[0]
    if x.shape is None or len(x.shape) != 3 or None in x.shape:
        return "its input needs a static [batch, time, features] shape"
    if x.shape[0 if op.attrs.get("time_major") else 1] > MAX_STEPS:
        return f"more than {MAX_STEPS} time steps"
    if op.attrs.get("fused_activation_function", "NONE") not in ACTIVATIONS:
        return f"activation {op.attrs.get('fused_activation_function')} has no builtin here"
    if any(i < len(op.inputs) and op.inputs[i] is not None for i in range(9, 12)):
        return "an auxiliary input"
    for operands in _DIRECTIONS[op.kind]:
        w, r, b, state = (op.inputs[i] for i in operands)
        if not (w.is_const and r.is_const and (b is None or b.is_const)):
            return "its weights and bias must be constants"
        if state is None or fn.uses(state) != [op] or fn.is_output(state):
            return "its state is read by other ops"
    return None


def _zero_state(state: Value) -> bool:
    op = state.producer
    return op is not None and op.kind == "FILL" and op.inputs[1].is_const and not np.any(op.inputs[1].const)


def _direction(fn: Function, op: Op, operands: tuple, backward: bool, new: list[Op]) -> list[Value]:
    """The hidden state after each step of one direction, in time order."""
    x = op.inputs[0]
    tm = bool(op.attrs.get("time_major"))
    w, r, b, state = (op.inputs[i] for i in operands)
    steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
    units = r.const.shape[0]
    tag = f"{op.name}/{'backward' if backward else 'forward'}"

    def add(kind, inputs, shapes, attrs=None, name=""):
        attrs = dict(attrs or {}, _recurrent_cell=True)  # quantizers may give the cell wider steps
        o = fn.make_op(kind, inputs, [(_F32, s) for s in shapes], attrs, name=f"{tag}/{name}", location=op.location)
        new.append(o)
        return o.outputs

    opts = dict(_NONE, weights_format="DEFAULT", keep_num_dims=False, asymmetric_quantize_inputs=False)
    (proj,) = add("tfl.FULLY_CONNECTED", [x, w, b], [(steps * batch, units)], opts, "input_projection")
    seq_shape = (steps, batch, units) if tm else (batch, steps, units)
    (proj,) = add("tfl.RESHAPE", [proj, fn.const(np.array(seq_shape, np.int32), "shape")], [seq_shape],
                  name="input_projection")
    xs = add("tfl.UNPACK", [proj], [(batch, units)] * steps, {"num": steps, "axis": 0 if tm else 1}, "step")
    act = ACTIVATIONS[op.attrs.get("fused_activation_function", "NONE")]
    h = None
    if not _zero_state(state):  # the initial value (copied into the op's state tensor by a CAST: read it)
        h = state.producer.inputs[0] if state.producer is not None and state.producer.kind == "CAST" else state
        state.meta.pop("is_variable", None)  # an ordinary value now: no sequence op keeps it
    fc = dict(opts, keep_num_dims=False)
    hs: list[Value | None] = [None] * steps
    for t in (reversed(range(steps)) if backward else range(steps)):
        pre = xs[t]
        if h is not None:
            (rh,) = add("tfl.FULLY_CONNECTED", [h, r, None], [(batch, units)], fc, f"recurrent_{t}")
            (pre,) = add("tfl.ADD", [pre, rh], [(batch, units)], dict(_NONE), f"pre_{t}")
        h = add(act, [pre], [(batch, units)], name=f"h_{t}")[0] if act is not None else pre
        hs[t] = h
    return hs


def of_unknown_length(module: Module, skip: Callable[[Op], bool] = lambda op: False) -> list[Op]:
    """The sequence RNN ops (not ``skip``ped) whose number of time steps is known only at run time: they cannot be
    unrolled."""
    found = []
    for fn in module.functions.values():
        for op in fn.ops:
            x = op.inputs[0] if op.kind in _DIRECTIONS else None
            if x is not None and x.shape is not None and len(x.shape) == 3 and not skip(op) \
                    and x.shape[0 if op.attrs.get("time_major") else 1] is None:
                found.append(op)
    return found


def unroll_sequence_rnns(module: Module, skip: Callable[[Op], bool] = lambda op: False) -> int:
    """Unroll every ``UNIDIRECTIONAL_SEQUENCE_RNN`` / ``BIDIRECTIONAL_SEQUENCE_RNN`` that can be (and is not
    one ``skip`` names: an op the user keeps in float); how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind in _DIRECTIONS]:
            if skip(op) or why_not_unrolled(fn, op) is not None:
                continue
            tm = bool(op.attrs.get("time_major"))
            new: list[Op] = []
            outs = []
            for d, operands in enumerate(_DIRECTIONS[op.kind]):
                hs = _direction(fn, op, operands, d == 1, new)
                pack = fn.make_op("tfl.PACK", hs, [(_F32, op.outputs[0].shape[:2] + (hs[0].shape[1],))],
                                  {"values_count": len(hs), "axis": 0 if tm else 1, "_recurrent_cell": True},
                                  name=f"{op.name}/sequence",
                                  location=op.location)
                new.append(pack)
                outs.append(pack.outputs[0])
            if op.kind == "BIDIRECTIONAL_SEQUENCE_RNN":
                outs = merged_outputs(fn, op, outs, new)
            fn.replace_op(op, new, outs)
            _shortcut_last_steps(fn, new)
            count += 1
    return count


def _shortcut_last_steps(fn: Function, new: list[Op]) -> None:
    """A ``STRIDED_SLICE`` that takes one step of a packed sequence (directly, or through the
    RESHAPE / TRANSPOSE that swaps batch and time) reads that step's state instead: the
    steps nothing else reads, and the PACK, then go (dead code)."""
    for pack in (o for o in new if o.kind == "PACK"):
        for user in list(fn.uses(pack.outputs[0])):
            swapped = user.kind in ("RESHAPE", "TRANSPOSE") and _swaps_batch_and_time(user, pack)
            users = list(fn.uses(user.outputs[0])) if swapped else [user]
            for s in users:
                step = _one_step(s, pack.attrs["axis"] ^ 1 if swapped else pack.attrs["axis"], len(pack.inputs))
                if step is not None:
                    fn.replace_uses(s.outputs[0], pack.inputs[step])
                    fn.ops.remove(s)


def _swaps_batch_and_time(op: Op, pack: Op) -> bool:
    shape = pack.outputs[0].shape
    swapped = (shape[1], shape[0], shape[2])
    if op.kind == "TRANSPOSE":
        return op.inputs[1].is_const and list(op.inputs[1].const.reshape(-1)) == [1, 0, 2]
    return tuple(op.outputs[0].shape) == swapped and 1 in shape[:2]


def _one_step(op: Op, axis: int, steps: int) -> int | None:
    """The step a ``STRIDED_SLICE`` takes along ``axis`` (shrinking it, all of the other axes), or None."""
    if op.kind != "STRIDED_SLICE" or not all(v.is_const for v in op.inputs[1:4]):
        return None
    a = op.attrs
    begin, end, strides = (v.const.reshape(-1) for v in op.inputs[1:4])
    if len(begin) != 3 or a.get("shrink_axis_mask") != 1 << axis or a.get("ellipsis_mask") or \
            a.get("new_axis_mask") or a.get("offset") or np.any(strides != 1):
        return None
    others = sum(1 << i for i in range(3) if i != axis)
    if a.get("begin_mask", 0) & others != others or a.get("end_mask", 0) & others != others:
        return None
    return int(begin[axis]) % steps
