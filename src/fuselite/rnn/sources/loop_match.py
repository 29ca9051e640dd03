"""A Keras LSTM / SimpleRNN / GRU ``while`` loop recognised (``match_loop``) and its body checked against the
cell's numbers (``check_match``); ``loops.py`` writes the fused form (its docstring says which loops fit)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuselite.fusion.composite import is_zeros
from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.fold_tf import evaluate_ops
from fuselite.rnn.cells.gru import numpy_gru_cell
from fuselite.rnn.cells.lstm import numpy_lstm_cell
from fuselite.rnn.cells.simple_rnn import numpy_simple_rnn_cell
from fuselite.rnn.kit import keras_cell_with_gates

WHILE_OPS = ("tf.While", "tf.StatelessWhile")
# the activations tried, in this order, when checking a loop body against the cell
_CANDIDATE_ACTIVATIONS = {"LSTM": ("tanh", "relu"), "SimpleRNN": ("tanh", "relu"),
                          "GRU": ("tanh", "relu", "sigmoid", "linear")}


class NoMatch(Exception):
    """The loop is not one the matcher recognises (it stays a loop)."""


@dataclass(frozen=True)
class LoopMatch:
    """What the matcher found in a recognised Keras RNN ``while`` loop.

    ``i_*`` are positions among the loop's variables: the hidden state, the LSTM cell
    state (``None`` otherwise) and the output TensorList. Weights are in Keras' layout. ``h_new`` and
    ``c_new`` are the body's cell results (before a masked loop's selects).
    """

    body: Function
    get: Op  # the body's TensorListGetItem (reads step t of the input)
    i_h: int
    i_c: int | None
    i_out: int
    kernel: np.ndarray  # [features, gates * units]
    rec: np.ndarray  # [units, gates * units]
    bias: np.ndarray  # [gates * units]
    bias_rec: np.ndarray | None  # GRU with reset_after: the recurrent bias
    units: int
    xt: Value  # the time-major input [time, batch, features]
    steps: int | None  # None: known only at run time (the input's length)
    sequences: bool  # every step's output, or only the last one
    cell: str  # "LSTM", "GRU" or "SimpleRNN"
    reset_after: bool
    h_new: Value
    c_new: Value | None
    mask: Value | None = None  # a masked loop's time-major bool mask [time, batch, 1] (in processing order)
    zero_output: bool = False  # a masked loop writes zeros, not the previous output, where the mask is off


def _position(values: list, v) -> int:
    """The index of ``v`` (by identity) in ``values``; no match when it is not there."""
    for i, x in enumerate(values):
        if x is v:
            return i
    raise NoMatch


def _producer(v, kind):
    p = v.producer
    return p if p is not None and p.kind == kind and p.dialect == "tf" else None


def _find(body: Function, pred):
    hits = [op for op in body.ops if pred(op)]
    if len(hits) != 1:
        raise NoMatch
    return hits[0]


def _const_scalar(v) -> int | None:
    return int(v.const.reshape(-1)[0]) if v is not None and v.is_const and v.const.size == 1 else None


def _cell_values(body: Function, feeds: dict, wanted: list):
    """Evaluate the body ops that depend only on ``feeds`` (and constants) with TensorFlow."""
    known = set(feeds)
    region = []
    for op in body.ops:
        if op.dialect == "tf" and "_node_def" in op.attrs and not op.kind.startswith("TensorList") and all(
                v is not None and (v.is_const or v.uid in known) for v in op.inputs):
            region.append(op)
            known.update(o.uid for o in op.outputs)
    if not all(w.uid in known for w in wanted):
        raise NoMatch
    saved = {}
    for op in region:
        for v in op.inputs:
            if v.uid in feeds and v.uid not in saved:
                saved[v.uid] = v
                v.const = feeds[v.uid]
    try:
        values = evaluate_ops(region)
    except Exception:  # the matched operands do not fit the body (a wrong guess): not this cell
        raise NoMatch from None
    finally:
        for v in saved.values():
            v.const = None
    return [values[w.uid] for w in wanted]


def _selected(v, flag: Value):
    """(then, else) of ``v = SelectV2(flag, then, else)``, ``flag`` possibly tiled (a masked loop's step);
    None for any other ``v``."""
    p = _producer(v, "SelectV2")
    if p is None:
        return None
    cond = p.inputs[0]
    tile = _producer(cond, "Tile")
    if tile is not None and tile.inputs[1].is_const:
        cond = tile.inputs[0]
    return (p.inputs[1], p.inputs[2]) if cond is flag else None


def match_loop(module: Module, fn: Function, op) -> LoopMatch:
    body, cond = module.functions.get(op.attrs.get("body")), module.functions.get(op.attrs.get("cond"))
    if body is None or cond is None or not (len(body.inputs) == len(body.outputs) == len(op.inputs)):
        raise NoMatch
    ins = body.inputs
    reads = [o for o in body.ops if o.kind == "TensorListGetItem"]
    mm_x = _find(body, lambda o: o.kind == "MatMul" and o.inputs[1].is_const
                 and any(o.inputs[0] is g.outputs[0] for g in reads))
    get = next(g for g in reads if mm_x.inputs[0] is g.outputs[0])
    flags = [g for g in reads if g is not get]  # a masked loop's step mask: bool [batch, 1]
    if len(flags) > 1 or any(g.outputs[0].dtype != np.bool_ for g in flags):
        raise NoMatch
    i_in, i_time = _position(ins, get.inputs[0]), _position(ins, get.inputs[1])
    rec_mms = [o for o in body.ops if o.kind == "MatMul" and o is not mm_x and o.inputs[1].is_const]
    mm_h = _find(body, lambda o: o in rec_mms and o.inputs[0] in ins)
    if any(o.attrs.get("transpose_a") or o.attrs.get("transpose_b") for o in (mm_x, *rec_mms)):
        raise NoMatch
    kernel, rec = mm_x.inputs[1].const, mm_h.inputs[1].const
    if rec.ndim != 2:
        raise NoMatch
    units = rec.shape[0]
    gates = kernel.shape[1] // units if units and kernel.ndim == 2 else 0
    cell = keras_cell_with_gates(gates)
    if cell is None or kernel.shape[1] != gates * units:
        raise NoMatch
    i_h = _position(ins, mm_h.inputs[0])
    reset_after, bias_rec = True, None
    if cell == "GRU":
        rec, reset_after = _gru_recurrent_kernel(mm_h, rec_mms, units)
        bias = _bias_of(body, mm_x.outputs[0], 3 * units)
        bias_rec = _bias_of(body, mm_h.outputs[0], 3 * units) if reset_after else None
    else:
        if rec.shape != (units, gates * units):
            raise NoMatch
        biases = [v.const for o in body.ops for v in o.inputs if o.kind in ("BiasAdd", "AddV2", "Add")
                  and v is not None and v.is_const and v.const.shape == (gates * units,)]
        bias = biases[0] if len(biases) == 1 else np.zeros(gates * units, np.float32)
    put = _find(body, lambda o: o.kind == "TensorListSetItem")
    i_out = _position(ins, put.inputs[0])
    if body.outputs[i_out] is not put.outputs[0]:
        raise NoMatch
    written, mask, zero_output, i_prev, i_zeros = put.inputs[2], None, False, None, None
    h_new = body.outputs[i_h]
    if flags:  # h_new where the mask is on, else the state kept; the output written: h_new, else the previous
        flag = flags[0].outputs[0]
        kept, out = _selected(h_new, flag), _selected(written, flag)
        if kept is None or out is None or kept[1] is not ins[i_h] or out[0] is not kept[0]:
            raise NoMatch
        h_new = kept[0]
        other = next((i for i, v in enumerate(ins) if v is out[1]), None)
        # zeros where the mask is off (zero_output_for_mask): a constant, or zeros passed through the loop
        zero_output = is_zeros(out[1]) or other is not None and body.outputs[other] is ins[other] \
            and is_zeros(op.inputs[other])
        if not zero_output and (other is None or body.outputs[other] is not written):
            raise NoMatch
        # the previous output, carried (Keras carries it also where it writes zeros)
        i_prev = next((i for i, o in enumerate(body.outputs) if o is written and i != i_out), None)
        i_zeros = other if zero_output else None
        i_mask = _position(ins, flags[0].inputs[0])
        if flags[0].inputs[1] is not ins[i_time] or body.outputs[i_mask] is not ins[i_mask]:
            raise NoMatch
        listed = _producer(op.inputs[i_mask], "TensorListFromTensor")
        mask = listed.inputs[0] if listed is not None else None
        if mask is None or mask.dtype != np.bool_ or mask.rank != 3:
            raise NoMatch
    elif written is not h_new:
        raise NoMatch
    floats = [i for i, v in enumerate(ins) if v.dtype == np.float32 and v.rank == 2 and i not in (i_h, i_prev,
                                                                                                  i_zeros)]
    if len(floats) != (1 if cell == "LSTM" else 0):
        raise NoMatch
    i_c = floats[0] if floats else None
    c_new = body.outputs[i_c] if i_c is not None else None
    if c_new is not None and flags:
        kept_c = _selected(c_new, flags[0].outputs[0])
        if kept_c is None or kept_c[1] is not ins[i_c]:
            raise NoMatch
        c_new = kept_c[0]
    step = body.outputs[i_time].producer
    if step is None or step.kind != "AddV2" or step.inputs[0] is not ins[i_time] or _const_scalar(step.inputs[1]) != 1:
        raise NoMatch
    if body.outputs[i_in] is not ins[i_in]:
        raise NoMatch
    unstack = _producer(op.inputs[i_in], "TensorListFromTensor")
    reserve = _producer(op.inputs[i_out], "TensorListReserve")
    if unstack is None or reserve is None or _const_scalar(op.inputs[i_time]) != 0:
        raise NoMatch
    xt = unstack.inputs[0]  # [time, batch, features]
    if xt.rank != 3 or xt.shape[2] != kernel.shape[0]:
        raise NoMatch
    steps = xt.shape[0]  # None: the input's length, read at run time (the loop runs as many steps)
    if mask is not None and mask.shape[0] != steps:
        raise NoMatch
    less = [o for o in cond.ops if o.kind == "Less" and o.inputs[0] is cond.inputs[i_time]]
    if len(less) != 1 or not _is_length(less[0].inputs[1], steps, xt, cond, op):
        raise NoMatch
    n_out, index = _const_scalar(reserve.inputs[1]), put.inputs[1]
    if _is_length(reserve.inputs[1], steps, xt) and index is ins[i_time]:
        sequences = True
    elif n_out == 1 and _const_scalar(index) == 0:
        sequences = False
    else:
        raise NoMatch
    users = fn.users()
    if any(users.get(o.uid) or o in fn.outputs for i, o in enumerate(op.outputs) if i not in (i_out, i_h, i_c)):
        raise NoMatch
    return LoopMatch(body=body, get=get, i_h=i_h, i_c=i_c, i_out=i_out, kernel=kernel, rec=rec, bias=bias,
                     bias_rec=bias_rec, units=units, xt=xt, steps=steps, sequences=sequences, cell=cell,
                     reset_after=reset_after, h_new=h_new, c_new=c_new, mask=mask, zero_output=zero_output)


def _is_length(v, steps: int | None, xt, fn: Function | None = None, loop=None) -> bool:
    """``v`` is the number of steps of ``xt`` ([time, batch, features]): the constant ``steps``, or (an unknown
    length) ``xt``'s first dimension read at run time (``StridedSlice(Shape(xt), [0], [1], [1])``, shrunk to a
    scalar); an input of ``fn``, a loop's condition, is the ``loop``'s operand at its position."""
    if steps is not None:
        return _const_scalar(v) == steps
    if fn is not None and loop is not None:
        pos = next((i for i, x in enumerate(fn.inputs) if x is v), None)
        if pos is None or pos >= len(loop.inputs):
            return False
        v = loop.inputs[pos]
    sliced = _producer(v, "StridedSlice")
    shape = _producer(sliced.inputs[0], "Shape") if sliced is not None else None
    return shape is not None and shape.inputs[0] is xt and sliced.attrs.get("shrink_axis_mask") == 1 \
        and [_const_scalar(x) for x in sliced.inputs[1:4]] == [0, 1, 1]


def _gru_recurrent_kernel(mm_h, rec_mms, units):
    """(recurrent kernel [u, 3u], reset_after): one h @ [u, 3u], or h @ [u, 2u] and (r * h) @ [u, u]."""
    rec = mm_h.inputs[1].const
    if rec.shape == (units, 3 * units) and len(rec_mms) == 1:
        return rec, True
    others = [o for o in rec_mms if o is not mm_h]
    if rec.shape != (units, 2 * units) or len(others) != 1 or others[0].inputs[1].const.shape != (units, units):
        raise NoMatch
    return np.concatenate([rec, others[0].inputs[1].const], axis=1), False


def _bias_of(body: Function, v, n: int) -> np.ndarray:
    """The constant [n] vector added to ``v`` (zeros when nothing is added)."""
    users = [o for o in body.ops if any(i is v for i in o.inputs)]
    adds = [o for o in users if o.kind in ("BiasAdd", "AddV2", "Add")]
    consts = [i.const for o in adds for i in o.inputs if i is not v and i is not None and i.is_const]
    if len(adds) == 1 and len(consts) == 1 and consts[0].shape == (n,):
        return consts[0]
    if adds:
        raise NoMatch
    return np.zeros(n, np.float32)


def check_match(m: LoopMatch) -> str:
    """The activation whose cell reproduces the loop body's numbers (else NoMatch)."""
    rng = np.random.default_rng(0)
    body, units = m.body, m.units
    # the loop's own batch where it is static (a body traced at batch 1 may have it in its reshapes), else 2
    batch = m.xt.shape[1] if m.xt.shape is not None and len(m.xt.shape) == 3 and m.xt.shape[1] else 2
    x = rng.standard_normal((batch, m.kernel.shape[0])).astype(np.float32)
    h = rng.standard_normal((batch, units)).astype(np.float32)
    c = rng.standard_normal((batch, units)).astype(np.float32)
    feeds = {m.get.outputs[0].uid: x, body.inputs[m.i_h].uid: h}
    wanted = [m.h_new]
    if m.cell == "LSTM":
        feeds[body.inputs[m.i_c].uid] = c
        wanted.append(m.c_new)
    got = _cell_values(body, feeds, wanted)
    for name in _CANDIDATE_ACTIVATIONS[m.cell]:
        try:
            close = all(np.abs(ref - g).max() < 1e-5 for ref, g in zip(_reference_step(m, x, h, c, name), got))
        except ValueError:  # the body's values do not have the cell's shapes
            raise NoMatch from None
        if close:
            return name
    raise NoMatch


def _reference_step(m, x, h, c, activation: str) -> tuple:
    """The NumPy cell's (h, c) or (h,) for one step; LSTM and SimpleRNN in the loop's float32, GRU in float64."""
    k, rk, b = m.kernel, m.rec, m.bias
    if m.cell == "GRU":
        return (numpy_gru_cell(x, h, k, rk, b, m.bias_rec, activation=activation, reset_after=m.reset_after),)
    if m.cell == "SimpleRNN":
        return (numpy_simple_rnn_cell(x, h, k, rk, b, activation=activation, dtype=None),)
    return numpy_lstm_cell(x, h, c, k, rk, b, activation=activation, dtype=None)
