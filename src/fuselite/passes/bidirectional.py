"""Two sequence ops over ``x`` and ``reverse(x)`` -> one bidirectional sequence op.

This is how a Keras ``Bidirectional(LSTM)`` or ``Bidirectional(SimpleRNN)`` looks after
its two ``while`` loops were recognised in a SavedModel (``rnn/sources/loops.py``): two
``UNIDIRECTIONAL_SEQUENCE_LSTM`` (or ``_RNN``) ops with the same options, the backward
one reading ``REVERSE_V2(x)`` along time. They become one
``BIDIRECTIONAL_SEQUENCE_LSTM`` (or ``_RNN``) with ``merge_outputs=False``; the merge
mode (concat, sum, ave, mul) stays as the ops that follow. The backward op's outputs are
in processing order, i.e. the reverse of the bidirectional op's time-aligned backward
output, so its uses get ``REVERSE_V2(bw)``; a following reverse (Keras re-aligns the
backward sequence) cancels against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuselite.ir import Function, Module
from fuselite.ir.core import is_ordered
from fuselite.operands import LSTM_OPERANDS, RNN_OPERANDS, Operands

_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class _Pair:
    """Where the operands of one direction sit in the unidirectional op and its options."""

    uni: str
    bi: str
    operands: Operands  # where the weights and states sit, and the extras the bidirectional op lacks
    options: tuple

    @property
    def weights(self) -> slice:
        return self.operands.weights

    @property
    def states(self) -> tuple:
        return self.operands.states

    def plain(self, op) -> bool:
        return len(op.inputs) == self.operands.n_inputs and all(op.inputs[i] is None for i in self.operands.extras) \
            and all(op.inputs[i] is not None for i in self.states)

    def inputs(self, x, fw, bw) -> list:
        if self.uni == _LSTM.uni:
            return [x, *fw.inputs[self.weights], *bw.inputs[self.weights],
                    *(fw.inputs[i] for i in self.states), *(bw.inputs[i] for i in self.states)] + [None] * 9
        # RNN: x, fw weights, fw state, bw weights, bw state, aux input and aux weights
        return [x, *fw.inputs[self.weights], *(fw.inputs[i] for i in self.states), *bw.inputs[self.weights],
                *(bw.inputs[i] for i in self.states), None, None, None]


_LSTM = _Pair("UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", LSTM_OPERANDS,
              ("fused_activation_function", "cell_clip", "proj_clip", "time_major", "asymmetric_quantize_inputs"))
_RNN = _Pair("UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN", RNN_OPERANDS,
             ("fused_activation_function", "time_major", "asymmetric_quantize_inputs"))
PAIRS = (_LSTM, _RNN)


def _reverse_axis(op) -> int | None:
    if op is None or op.kind != "REVERSE_V2" or not op.inputs[1].is_const or op.inputs[1].const.size != 1:
        return None
    return int(op.inputs[1].const.reshape(-1)[0])


def _from_variable(v, depth: int = 8) -> bool:
    """True if ``v`` is computed from a variable read (a stateful layer's carried state)."""
    op = v.producer if v is not None else None
    if op is None or depth == 0:
        return False
    if is_ordered(op):
        return True
    return any(_from_variable(i, depth - 1) for i in op.inputs)


def merge_bidirectional_pairs(fn: Function) -> bool:
    """Merge one forward/backward pair of sequence LSTMs or RNNs; True if something changed."""
    return any(_merge(fn, pair) for pair in PAIRS)


def _merge(fn: Function, pair: _Pair) -> bool:
    ops = [op for op in fn.ops if op.kind == pair.uni and pair.plain(op)]
    for bw in ops:
        rev = bw.inputs[0].producer
        axis = _reverse_axis(rev)
        tm = bool(bw.attrs.get("time_major"))
        if axis is None or axis != (0 if tm else 1):
            continue
        x = rev.inputs[0]
        for fw in ops:
            if fw is bw or fw.inputs[0] is not x or fw.attrs != bw.attrs:
                continue
            if any(_from_variable(op.inputs[i]) for op in (fw, bw) for i in pair.states):
                # stateful directions: each reads and assigns its own state variables in program
                # order (forward first); one merged op would need both reads before either assign
                continue
            opts = {k: v for k, v in fw.attrs.items() if k in pair.options}
            opts["merge_outputs"] = False
            shape = fw.outputs[0].shape
            bi = fn.make_op("tfl." + pair.bi, pair.inputs(x, fw, bw), [(np.dtype(np.float32), shape)] * 2, opts,
                            name=fw.name, location=fw.location)
            processing = fn.make_op("tfl.REVERSE_V2", [bi.outputs[1], fn.const(np.array([axis], np.int32))],
                                    [(np.dtype(np.float32), bw.outputs[0].shape)], name=bw.name + "/reverse")
            pos = max(fn.ops.index(fw), fn.ops.index(bw))
            fn.ops[pos + 1:pos + 1] = [bi, processing]
            fn.replace_uses(fw.outputs[0], bi.outputs[0])
            fn.replace_uses(bw.outputs[0], processing.outputs[0])
            fn.ops.remove(fw)
            fn.ops.remove(bw)
            fn.topo_sort()  # users of the forward op may sit before the backward one: define before use
            return True
    return False


def cancel_reverse_pairs(fn: Function) -> bool:
    """REVERSE_V2(REVERSE_V2(y, a), a) -> y, also through a TRANSPOSE that moves axis a to b.

    ``REVERSE_V2(TRANSPOSE(REVERSE_V2(y, a), perm), b)`` with ``perm[b] == a`` is
    ``TRANSPOSE(y, perm)``: a time-major backward sequence reversed into processing order,
    swapped to batch-major and re-aligned by Keras.
    """
    users = fn.users()
    for op in fn.ops:
        axis = _reverse_axis(op)
        mid = op.inputs[0].producer if axis is not None else None
        if mid is None or fn.is_output(op.outputs[0]):
            continue
        if _reverse_axis(mid) == axis:
            fn.replace_uses(op.outputs[0], mid.inputs[0])
            fn.ops.remove(op)
            return True
        inner = mid.inputs[0].producer if mid.kind == "TRANSPOSE" and mid.inputs[1].is_const else None
        perm = mid.inputs[1].const.reshape(-1) if inner is not None else None
        if inner is None or not 0 <= axis < perm.size or \
                _reverse_axis(inner) != int(perm[axis]) or len(users.get(mid.outputs[0].uid, [])) != 1 \
                or any(v is mid.outputs[0] for v in fn.outputs):  # rewritten in place: no other reader
            continue
        mid.inputs[0] = inner.inputs[0]  # TRANSPOSE(y, perm), the only use of which was this reverse
        fn.replace_uses(op.outputs[0], mid.outputs[0])
        fn.ops.remove(op)
        return True
    return False


def merged_outputs(fn: Function, op, outs: list, new: list) -> list:
    """The outputs of a bidirectional op rebuilt from its two directions: one CONCATENATION (appended to
    ``new``) of ``outs`` along the features when the op merges them, else ``outs`` as they are."""
    if not op.attrs.get("merge_outputs", False):
        return outs
    cat = fn.make_op("tfl.CONCATENATION", outs, [(_F32, op.outputs[0].shape)],
                     {"axis": 2, "fused_activation_function": "NONE"}, name=f"{op.name}/concat", location=op.location)
    new.append(cat)
    return [cat.outputs[0]]


@dataclass(frozen=True)
class _Split:
    """Where one direction's operands sit in a bidirectional op, and how its unidirectional op takes them."""

    uni: str
    directions: tuple  # per direction: (index of its first weight, how many weights and biases, state indices)
    aux: range  # auxiliary input and weights (an op with any is left as it is)
    options: tuple
    trailing: int  # optional inputs the unidirectional op has after the states (layer norm: none here)


_SPLITS = {
    "BIDIRECTIONAL_SEQUENCE_LSTM": _Split("UNIDIRECTIONAL_SEQUENCE_LSTM", ((1, 17, (35, 36)), (18, 17, (37, 38))),
                                          range(39, 48),
                                          ("fused_activation_function", "cell_clip", "proj_clip", "time_major"), 4),
    "BIDIRECTIONAL_SEQUENCE_RNN": _Split("UNIDIRECTIONAL_SEQUENCE_RNN", ((1, 3, (4,)), (5, 3, (8,))), range(9, 12),
                                         ("fused_activation_function", "time_major"), 0),
}


def split_bidirectional(module: Module, kinds=tuple(_SPLITS)) -> int:
    """Each bidirectional sequence op of ``kinds`` -> two unidirectional ones (the backward one on the
    time-reversed input, its output reversed back) and a ``CONCATENATION`` when merged; how many.

    LiteRT's bidirectional kernels have no integer form (their input must be float32,
    ``bidirectional_sequence_lstm.cc``), TFLite Micro has none, and TensorFlow's flatbuffer
    importer (Model Explorer, every tool built on it) crashes on a ``BIDIRECTIONAL_SEQUENCE_LSTM``
    whose optional operands are absent and has no bidirectional RNN op; the unidirectional ops are
    accepted everywhere. Exact in float, and as fast on LiteRT (docs/rnn.md). Ops with auxiliary
    inputs are left as they are.
    """
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind in kinds]:
            split = _SPLITS[op.kind]
            if any(i < len(op.inputs) and op.inputs[i] is not None for i in split.aux):
                continue
            x = op.inputs[0]
            tm = bool(op.attrs.get("time_major", False))
            axis = fn.const(np.array([0 if tm else 1], np.int32), "time_axis")
            opts = {k: op.attrs[k] for k in split.options if k in op.attrs}
            rx = fn.make_op("tfl.REVERSE_V2", [x, axis], [(_F32, x.shape)], name=f"{op.name}/reversed_input",
                            location=op.location)
            new, outs = [rx], []
            for d, (first, n, states) in enumerate(split.directions):
                seq = x if d == 0 else rx.outputs[0]
                # recurrent_to_forget_weights [n_cell, n_output] (LSTM), recurrent weights [units, units] (RNN)
                recurrent = op.inputs[first + (5 if split.uni == _LSTM.uni else 1)]
                shape = (*seq.shape[:2], recurrent.shape[1])
                ins = [seq, *op.inputs[first:first + n], *(op.inputs[i] for i in states)] + [None] * split.trailing
                uni = fn.make_op(f"tfl.{split.uni}", ins, [(_F32, shape)], dict(opts),
                                 name=f"{op.name}/{'forward' if d == 0 else 'backward'}", location=op.location)
                new.append(uni)
                outs.append(uni.outputs[0])
            back = fn.make_op("tfl.REVERSE_V2", [outs[1], axis], [(_F32, outs[1].shape)],
                              name=f"{op.name}/backward_in_time", location=op.location)
            new.append(back)
            outs[1] = back.outputs[0]
            outs = merged_outputs(fn, op, outs, new)
            fn.replace_op(op, new, outs)
            count += 1
        if count:
            while cancel_reverse_pairs(fn):  # Keras re-aligns the backward sequence: its reverses cancel
                pass
    return count

