"""Recognise Keras LSTM / SimpleRNN / GRU ``while`` loops in graphs that carry no marker (SavedModels).

Keras 3 marks nothing: a SavedModel from ``model.export()`` holds a ``While`` whose
body reads step ``t`` of a TensorList, runs an LSTM cell on constant weights and
writes ``h`` into another TensorList. A loop is fused into one
``UNIDIRECTIONAL_SEQUENCE_LSTM`` only when

* its structure fits (counter from 0 in steps of 1 up to the number of steps, one
  read and one write per step, two recurrent states, every other loop output unused),
* and the body, evaluated by TensorFlow on random inputs, gives the cell's numbers
  for the weights found within 1e-5: an LSTM (gates i, f, c, o; sigmoid gates) into
  ``UNIDIRECTIONAL_SEQUENCE_LSTM``, a SimpleRNN into ``UNIDIRECTIONAL_SEQUENCE_RNN``, a
  GRU (gates z, r, h; ``reset_after`` True or False) into the unrolled builtins of
  ``forms/unrolled.py`` (LiteRT has no GRU op; at most ``MAX_UNROLL`` steps).

A masked layer's loop (Keras 3: ``mask_zero=True`` upstream) reads a second TensorList, the step's
mask, and ends in ``SelectV2``s that keep the states, and the output (another carry, or zeros with
``zero_output_for_mask``), where it is off; it is recognised too, and written in the form a masked
layer gets (the loop form, or unrolled; the fused ops have no mask).

An unknown batch stays dynamic where the form allows it, as for the same layer converted from memory
(``rnn/sources/keras_layers.py``): the loop form always, the fused op and the unrolled LSTM / SimpleRNN from
zero initial states; else :class:`NeedsStaticBatch` (the unrolled GRU, a masked unrolled layer, TFLite Micro
and integer quantization).

Anything else stays a loop. ``go_backwards`` needs no special case: the loop reads
its (already reversed) time-major input, and mask, in order. Constants and shapes are folded before
matching (the pipeline's ``settle`` group), and again after a fusion, for a loop that reads a fused one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.composite import Composite, is_zeros
from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.fold_tf import evaluate_ops
from fuselite.rnn.build import MAX_UNROLL, pack_steps, time_step
from fuselite.rnn.cells import keras_cell
from fuselite.rnn.cells.gru import numpy_gru_cell
from fuselite.rnn.cells.lstm import numpy_lstm_cell
from fuselite.rnn.cells.simple_rnn import numpy_simple_rnn_cell
from fuselite.rnn.forms.fused import read_state, state
from fuselite.rnn.forms.loop import loop_steps
from fuselite.rnn.forms.policy import UNKNOWN_LENGTH_NOTE, at_length, traced_form
from fuselite.rnn.forms.unrolled import unroll
from fuselite.rnn.kit import FUSED_ACTIVATIONS, keras_cell_with_gates, keras_to_litert, lstm_operands, rnn_operands

_WHILE = ("tf.While", "tf.StatelessWhile")
# the activations tried, in this order, when checking a loop body against the cell
_CANDIDATE_ACTIVATIONS = {"LSTM": ("tanh", "relu"), "SimpleRNN": ("tanh", "relu"),
                          "GRU": ("tanh", "relu", "sigmoid", "linear")}


class _NoMatch(Exception):
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
    raise _NoMatch


def _producer(v, kind):
    p = v.producer
    return p if p is not None and p.kind == kind and p.dialect == "tf" else None


def _find(body: Function, pred):
    hits = [op for op in body.ops if pred(op)]
    if len(hits) != 1:
        raise _NoMatch
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
        raise _NoMatch
    saved = {}
    for op in region:
        for v in op.inputs:
            if v.uid in feeds and v.uid not in saved:
                saved[v.uid] = v
                v.const = feeds[v.uid]
    try:
        values = evaluate_ops(region)
    except Exception:  # the matched operands do not fit the body (a wrong guess): not this cell
        raise _NoMatch from None
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


def _match(module: Module, fn: Function, op) -> LoopMatch:
    body, cond = module.functions.get(op.attrs.get("body")), module.functions.get(op.attrs.get("cond"))
    if body is None or cond is None or not (len(body.inputs) == len(body.outputs) == len(op.inputs)):
        raise _NoMatch
    ins = body.inputs
    reads = [o for o in body.ops if o.kind == "TensorListGetItem"]
    mm_x = _find(body, lambda o: o.kind == "MatMul" and o.inputs[1].is_const
                 and any(o.inputs[0] is g.outputs[0] for g in reads))
    get = next(g for g in reads if mm_x.inputs[0] is g.outputs[0])
    flags = [g for g in reads if g is not get]  # a masked loop's step mask: bool [batch, 1]
    if len(flags) > 1 or any(g.outputs[0].dtype != np.bool_ for g in flags):
        raise _NoMatch
    i_in, i_time = _position(ins, get.inputs[0]), _position(ins, get.inputs[1])
    rec_mms = [o for o in body.ops if o.kind == "MatMul" and o is not mm_x and o.inputs[1].is_const]
    mm_h = _find(body, lambda o: o in rec_mms and o.inputs[0] in ins)
    if any(o.attrs.get("transpose_a") or o.attrs.get("transpose_b") for o in (mm_x, *rec_mms)):
        raise _NoMatch
    kernel, rec = mm_x.inputs[1].const, mm_h.inputs[1].const
    if rec.ndim != 2:
        raise _NoMatch
    units = rec.shape[0]
    gates = kernel.shape[1] // units if units and kernel.ndim == 2 else 0
    cell = keras_cell_with_gates(gates)
    if cell is None or kernel.shape[1] != gates * units:
        raise _NoMatch
    i_h = _position(ins, mm_h.inputs[0])
    reset_after, bias_rec = True, None
    if cell == "GRU":
        rec, reset_after = _gru_recurrent_kernel(mm_h, rec_mms, units)
        bias = _bias_of(body, mm_x.outputs[0], 3 * units)
        bias_rec = _bias_of(body, mm_h.outputs[0], 3 * units) if reset_after else None
    else:
        if rec.shape != (units, gates * units):
            raise _NoMatch
        biases = [v.const for o in body.ops for v in o.inputs if o.kind in ("BiasAdd", "AddV2", "Add")
                  and v is not None and v.is_const and v.const.shape == (gates * units,)]
        bias = biases[0] if len(biases) == 1 else np.zeros(gates * units, np.float32)
    put = _find(body, lambda o: o.kind == "TensorListSetItem")
    i_out = _position(ins, put.inputs[0])
    if body.outputs[i_out] is not put.outputs[0]:
        raise _NoMatch
    written, mask, zero_output, i_prev, i_zeros = put.inputs[2], None, False, None, None
    h_new = body.outputs[i_h]
    if flags:  # h_new where the mask is on, else the state kept; the output written: h_new, else the previous
        flag = flags[0].outputs[0]
        kept, out = _selected(h_new, flag), _selected(written, flag)
        if kept is None or out is None or kept[1] is not ins[i_h] or out[0] is not kept[0]:
            raise _NoMatch
        h_new = kept[0]
        other = next((i for i, v in enumerate(ins) if v is out[1]), None)
        # zeros where the mask is off (zero_output_for_mask): a constant, or zeros passed through the loop
        zero_output = is_zeros(out[1]) or other is not None and body.outputs[other] is ins[other] \
            and is_zeros(op.inputs[other])
        if not zero_output and (other is None or body.outputs[other] is not written):
            raise _NoMatch
        # the previous output, carried (Keras carries it also where it writes zeros)
        i_prev = next((i for i, o in enumerate(body.outputs) if o is written and i != i_out), None)
        i_zeros = other if zero_output else None
        i_mask = _position(ins, flags[0].inputs[0])
        if flags[0].inputs[1] is not ins[i_time] or body.outputs[i_mask] is not ins[i_mask]:
            raise _NoMatch
        listed = _producer(op.inputs[i_mask], "TensorListFromTensor")
        mask = listed.inputs[0] if listed is not None else None
        if mask is None or mask.dtype != np.bool_ or mask.rank != 3:
            raise _NoMatch
    elif written is not h_new:
        raise _NoMatch
    floats = [i for i, v in enumerate(ins) if v.dtype == np.float32 and v.rank == 2 and i not in (i_h, i_prev,
                                                                                                  i_zeros)]
    if len(floats) != (1 if cell == "LSTM" else 0):
        raise _NoMatch
    i_c = floats[0] if floats else None
    c_new = body.outputs[i_c] if i_c is not None else None
    if c_new is not None and flags:
        kept_c = _selected(c_new, flags[0].outputs[0])
        if kept_c is None or kept_c[1] is not ins[i_c]:
            raise _NoMatch
        c_new = kept_c[0]
    step = body.outputs[i_time].producer
    if step is None or step.kind != "AddV2" or step.inputs[0] is not ins[i_time] or _const_scalar(step.inputs[1]) != 1:
        raise _NoMatch
    if body.outputs[i_in] is not ins[i_in]:
        raise _NoMatch
    unstack = _producer(op.inputs[i_in], "TensorListFromTensor")
    reserve = _producer(op.inputs[i_out], "TensorListReserve")
    if unstack is None or reserve is None or _const_scalar(op.inputs[i_time]) != 0:
        raise _NoMatch
    xt = unstack.inputs[0]  # [time, batch, features]
    if xt.rank != 3 or xt.shape[2] != kernel.shape[0]:
        raise _NoMatch
    steps = xt.shape[0]  # None: the input's length, read at run time (the loop runs as many steps)
    if mask is not None and mask.shape[0] != steps:
        raise _NoMatch
    less = [o for o in cond.ops if o.kind == "Less" and o.inputs[0] is cond.inputs[i_time]]
    if len(less) != 1 or not _is_length(less[0].inputs[1], steps, xt, cond, op):
        raise _NoMatch
    n_out, index = _const_scalar(reserve.inputs[1]), put.inputs[1]
    if _is_length(reserve.inputs[1], steps, xt) and index is ins[i_time]:
        sequences = True
    elif n_out == 1 and _const_scalar(index) == 0:
        sequences = False
    else:
        raise _NoMatch
    users = fn.users()
    if any(users.get(o.uid) or o in fn.outputs for i, o in enumerate(op.outputs) if i not in (i_out, i_h, i_c)):
        raise _NoMatch
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
        raise _NoMatch
    return np.concatenate([rec, others[0].inputs[1].const], axis=1), False


def _bias_of(body: Function, v, n: int) -> np.ndarray:
    """The constant [n] vector added to ``v`` (zeros when nothing is added)."""
    users = [o for o in body.ops if any(i is v for i in o.inputs)]
    adds = [o for o in users if o.kind in ("BiasAdd", "AddV2", "Add")]
    consts = [i.const for o in adds for i in o.inputs if i is not v and i is not None and i.is_const]
    if len(adds) == 1 and len(consts) == 1 and consts[0].shape == (n,):
        return consts[0]
    if adds:
        raise _NoMatch
    return np.zeros(n, np.float32)


def _verify(m: LoopMatch) -> str:
    """The activation whose cell reproduces the loop body's numbers (else _NoMatch)."""
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
            raise _NoMatch from None
        if close:
            return name
    raise _NoMatch


def _reference_step(m, x, h, c, activation: str) -> tuple:
    """The NumPy cell's (h, c) or (h,) for one step; LSTM and SimpleRNN in the loop's float32, GRU in float64."""
    k, rk, b = m.kernel, m.rec, m.bias
    if m.cell == "GRU":
        return (numpy_gru_cell(x, h, k, rk, b, m.bias_rec, activation=activation, reset_after=m.reset_after),)
    if m.cell == "SimpleRNN":
        return (numpy_simple_rnn_cell(x, h, k, rk, b, activation=activation, dtype=None),)
    return numpy_lstm_cell(x, h, c, k, rk, b, activation=activation, dtype=None)


def _states(op, m) -> list:
    """The loop's initial states (h, and c for an LSTM): None where zeros (a constant, or a FILL of a run-time
    batch), else the value."""
    inits = [op.inputs[m.i_h]] + ([op.inputs[m.i_c]] if m.cell == "LSTM" else [])
    return [None if is_zeros(v) else v for v in inits]


def _form(op, m, rnn_forms: dict) -> str:
    """The recognised loop's form (``forms.policy.traced_form``): "loop", "unrolled" or "fused" (a GRU, which
    has no LiteRT op, and a masked layer, which the fused ops cannot take, unrolled). A stateful layer's state
    is read from a variable."""
    states = (op.inputs[m.i_h], op.inputs[m.i_c] if m.cell == "LSTM" else None)
    stateful = any(v is not None and v.producer is not None and v.producer.kind == "ReadVariableOp" for v in states)
    form = traced_form(rnn_forms, m.cell, stateful, masked=m.mask is not None)
    return form if form in ("loop", "unrolled") else "unrolled" if m.cell == "GRU" or m.mask is not None else "fused"


def _static_batch_needed(op, m, form: str) -> str | None:
    """Why the form needs a static batch (as the same layer converted from memory does), or None."""
    if form == "loop":
        return None
    if form == "unrolled" and (m.cell == "GRU" or m.mask is not None):
        return f"the unrolled {'masked ' if m.mask is not None else ''}{m.cell} needs a static batch size"
    if any(s is not None for s in _states(op, m)):
        return f"a recognised {m.cell} loop given initial states keeps them in tensors that need a static batch size"
    return None


def _step_flags(c, m, batch):
    """A masked loop's mask as the forms take it: [batch, time] (float32 1 / 0, in processing order)."""
    mask = m.mask  # [time, batch, 1], as Keras 3 unstacks it
    flags = c.op("CAST", [mask], dtype=np.float32, shape=(m.steps, batch, 1))
    flags = c.op("TRANSPOSE", [flags, np.array([1, 0, 2], np.int32)], dtype=np.float32, shape=(batch, m.steps, 1))
    if m.steps is None:  # batch and time both read at run time
        return c.op("SQUEEZE", [flags], {"squeeze_dims": [2]}, dtype=np.float32, shape=(batch, m.steps))
    return c.op("RESHAPE", [flags, np.array([-1, m.steps], np.int32)], dtype=np.float32, shape=(batch, m.steps))


def _cell(m, activation: str):
    return keras_cell(m.cell, m.kernel, m.rec, m.bias, activation, reset_after=m.reset_after, recurrent_bias=m.bias_rec)


def _last_as_list(c, last, batch, units):
    """A loop that kept only its last step, as a list of one: [1, batch, units] (an unknown batch at run time)."""
    return c.op("RESHAPE", [last, np.array([1, -1, units], np.int32)], dtype=np.float32, shape=(1, batch, units))


def _replace(module: Module, fn: Function, op, m, activation: str, batch_size, form: str = "fused",
             dynamic_batch: bool = True):
    """The loop -> its form over the loop's time-major input: the loop form (``forms/loop.py``: the input
    projection hoisted, a WHILE without TensorLists), the unrolled builtins (``forms/unrolled.py``) or LiteRT's
    sequence op. An unknown batch stays dynamic where the form takes one (``_static_batch_needed``) and
    ``dynamic_batch`` allows it (not TFLite Micro, not integer quantization)."""
    xt, units, steps = m.xt, m.units, m.steps
    batch = xt.shape[1] or batch_size
    need = _static_batch_needed(op, m, form) if dynamic_batch else \
        f"a recognised {m.cell} loop needs a static batch size for this target or quantization"
    if batch is None and need:
        state_in = op.inputs[m.i_h]  # a stateful layer's state variable fixes the batch
        raise NeedsStaticBatch(need, state_in.shape[0] if state_in.rank == 2 and not state_in.is_const else None)
    c = Composite(fn, f"Keras {m.cell} loop", {}, [], [])
    c.taken_names = set(module.functions)
    states = _states(op, m)
    flags = _step_flags(c, m, batch) if m.mask is not None else None
    if form == "loop":
        seq, finals, last = loop_steps(c, _cell(m, activation), xt, states, tm=True, backwards=False, batch=batch,
                                       steps=steps, sequence=m.sequences, mask=flags, zero_output=m.zero_output)
        for sub in c.subgraphs:
            module.add(sub)
    elif form == "unrolled":
        outs, finals = unroll(c, _cell(m, activation), xt, states, tm=True, backwards=False, batch=batch,
                              steps=steps, mask=flags, zero_output=m.zero_output)
        last = outs[-1]
        seq = pack_steps(c, outs, time_major=True) if m.sequences else None
    else:
        seq, finals = _fused_sequence(c, m, activation, states, batch)
        last = finals[0]
    results = [(m.i_out, seq if m.sequences else _last_as_list(c, last, batch, units)), (m.i_h, finals[0])]
    if m.cell == "LSTM":
        results.append((m.i_c, finals[1]))
    _splice(fn, op, c.ops, results)
    return c.ops


def _fused_sequence(c, m, activation: str, states: list, batch):
    """(the sequence, [h, c]) of LiteRT's sequence op (LSTM or SimpleRNN) over the loop's time-major input, its
    state tensors rewritten on every invoke (zeros of a run-time batch where ``batch`` is None)."""
    xt, units, lstm = m.xt, m.units, m.cell == "LSTM"
    tensors = [state(c, batch, units, s, like=xt, axis=1) for s in states]
    wi, wr, bs = keras_to_litert(m.kernel, m.rec, m.bias, 4 if lstm else 1, units)
    bs = [b.astype(np.float32) for b in bs]
    # the loop reads its input time-major, which is also the fused kernels' fast layout
    opts = {"fused_activation_function": FUSED_ACTIVATIONS[activation], "time_major": True,
            "asymmetric_quantize_inputs": False}
    shape = (m.steps, batch, units)
    if lstm:
        opts.update(cell_clip=0.0, proj_clip=0.0)
        seq = c.op("UNIDIRECTIONAL_SEQUENCE_LSTM", lstm_operands(xt, wi, wr, bs, *tensors), opts, dtype=np.float32,
                   shape=shape)
    else:
        seq = c.op("UNIDIRECTIONAL_SEQUENCE_RNN", rnn_operands(xt, wi, wr, bs, *tensors), opts, dtype=np.float32,
                   shape=shape)
    last = time_step(c, seq, -1, True)
    return seq, [last] + ([read_state(c, tensors[1], last)] if lstm else [])


def _splice(fn: Function, op, ops, results):
    pos = fn.ops.index(op)
    fn.ops[pos:pos + 1] = ops
    for i, new in results:
        fn.replace_uses(op.outputs[i], new)
    dense = results[0][1]  # the output list, now a dense [time, batch, units] tensor
    for o in [o for o in fn.ops if o.kind == "TensorListStack" and o.inputs[0] is dense]:
        if o.outputs[0].rank == dense.rank:  # stacking it is the tensor itself (with static shapes to refine)
            fn.replace_uses(o.outputs[0], dense)
            fn.ops.remove(o)


def _loops(module: Module) -> list:
    return [(fn, op) for fn in list(module.functions.values()) for op in fn.ops if op.type in _WHILE]


def fuse_lstm_loops(module: Module, batch_size: int | None = None, *, settle: Callable[[Module], object],
                    rnn_forms: dict | None = None, dynamic_batch: bool = True) -> list[dict]:
    """Fuse every recognised Keras LSTM / SimpleRNN / GRU loop; one report record per loop.

    ``settle(module)`` folds constants and shapes and binds loop invariants (the
    pipeline's ``settle`` group) before each round of matching: tf-keras' standard_gru
    loop (its composite just inlined) carries its weights as loop variables, the bias
    rows unstacked from a constant; and a loop that reads the output of a loop fused in
    the round before only gets static shapes (its number of steps) then. ``rnn_forms``: the form of each
    family (``forms.policy.rnn_forms``); a "loop" entry writes the loop form (``forms/loop.py``), "unrolled" the
    unrolled one, else the fused op (a GRU, and a masked layer, unrolled). ``dynamic_batch``: whether an unknown
    batch may stay dynamic (not for TFLite Micro nor integer quantization).
    """
    records: list[dict] = []
    declined: dict[str, dict] = {}  # loops that look like a Keras cell but do not compute one: said once each
    while _loops(module):
        settle(module)
        results = [_fuse(module, fn, op, batch_size, rnn_forms or {}, dynamic_batch) for fn, op in _loops(module)]
        fused = [r for r in results if r is not None and r["status"] == "fused"]
        declined.update((r["function"], r) for r in results if r is not None and r["status"] != "fused")
        if not fused:
            break
        records += fused
    return records + list(declined.values())


def _fuse(module: Module, fn: Function, op, batch_size, rnn_forms: dict, dynamic_batch: bool = True) -> dict | None:
    try:
        m = _match(module, fn, op)
    except _NoMatch:
        return None
    try:
        activation = _verify(m)
    except _NoMatch:
        return {"function": fn.name, "interface": f"Keras {m.cell} loop (recognised)", "call_sites": 1,
                "attrs": {"units": m.units}, "status": "not fused",
                "reason": f"the loop has the shape of a Keras {m.cell} but its body does not compute that cell's "
                          "step as matched; it stays a WHILE loop (correct, not fused)"}
    form = _form(op, m, rnn_forms)
    why_not = None
    if form == "unrolled" and m.steps is None:  # an unknown length: the loop form, or NeedsStaticLength
        form = at_length(rnn_forms, form, None, f"a Keras {m.cell} loop", fused=False)
        why_not = UNKNOWN_LENGTH_NOTE.strip(" ()")
    if form == "unrolled" and m.steps > MAX_UNROLL:  # too many steps to unroll: the fused op, else a loop stays
        why_not = f"not unrolled: {m.steps} steps, at most {MAX_UNROLL} are unrolled"
        if m.cell == "GRU" or m.mask is not None:
            return {"function": fn.name, "interface": f"Keras {m.cell} loop (recognised)", "call_sites": 1,
                    "attrs": {"units": m.units}, "status": "not fused",
                    "reason": f"{why_not}, and a {'masked layer' if m.mask is not None else 'GRU'} has no fused "
                              "LiteRT op; it stays a WHILE loop (correct, not fused)"}
        form = "fused"
    ops = _replace(module, fn, op, m, activation, batch_size, form, dynamic_batch)
    into = {"LSTM": ["UNIDIRECTIONAL_SEQUENCE_LSTM"], "SimpleRNN": ["UNIDIRECTIONAL_SEQUENCE_RNN"]}.get(
        m.cell) if form == "fused" else None
    into = into or list(dict.fromkeys(o.kind for o in ops))
    attrs = {"units": m.units, "return_sequences": m.sequences}
    if m.cell == "GRU":
        attrs.update(reset_after=m.reset_after, activation=activation, steps=m.steps)
    return {"function": fn.name, "interface": f"Keras {m.cell} loop (recognised)", "call_sites": 1,
            "attrs": attrs, "status": "fused", "into": into, "reason": "",
            "form": form + (" (masked)" if m.mask is not None else "") + (f" ({why_not})" if why_not else "")}
