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

Anything else stays a loop. ``go_backwards`` needs no special case: the loop reads
its (already reversed) time-major input in order. Constants and shapes are folded before
matching (the pipeline's ``settle`` group), and again after a fusion, for a loop that reads a fused one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.composite import Composite
from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.fold_tf import evaluate_ops
from fuselite.rnn.build import MAX_UNROLL, pack_steps, time_step
from fuselite.rnn.cells import GRUCell, keras_cell
from fuselite.rnn.cells.gru import numpy_gru_cell
from fuselite.rnn.cells.lstm import numpy_lstm_cell
from fuselite.rnn.cells.simple_rnn import numpy_simple_rnn_cell
from fuselite.rnn.forms.fused import read_state, state
from fuselite.rnn.forms.loop import loop_steps
from fuselite.rnn.forms.policy import traced_form
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
    state (``None`` otherwise) and the output TensorList. Weights are in Keras' layout.
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
    steps: int
    sequences: bool  # every step's output, or only the last one
    cell: str  # "LSTM", "GRU" or "SimpleRNN"
    reset_after: bool


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
    return int(v.const) if v is not None and v.is_const and v.const.size == 1 else None


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


def _match(module: Module, fn: Function, op) -> LoopMatch:
    body, cond = module.functions.get(op.attrs.get("body")), module.functions.get(op.attrs.get("cond"))
    if body is None or cond is None or not (len(body.inputs) == len(body.outputs) == len(op.inputs)):
        raise _NoMatch
    ins = body.inputs
    get = _find(body, lambda o: o.kind == "TensorListGetItem")
    i_in, i_time = _position(ins, get.inputs[0]), _position(ins, get.inputs[1])
    mm_x = _find(body, lambda o: o.kind == "MatMul" and o.inputs[0] is get.outputs[0] and o.inputs[1].is_const)
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
    floats = [i for i, v in enumerate(ins) if v.dtype == np.float32 and v.rank == 2 and i != i_h]
    if len(floats) != (1 if cell == "LSTM" else 0):
        raise _NoMatch
    i_c = floats[0] if floats else None
    put = _find(body, lambda o: o.kind == "TensorListSetItem")
    i_out = _position(ins, put.inputs[0])
    if put.inputs[2] is not body.outputs[i_h] or body.outputs[i_out] is not put.outputs[0]:
        raise _NoMatch
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
    if xt.rank != 3 or xt.shape[0] is None or xt.shape[2] != kernel.shape[0]:
        raise _NoMatch
    steps = xt.shape[0]
    if cell == "GRU" and steps > MAX_UNROLL:
        raise _NoMatch
    less = [o for o in cond.ops if o.kind == "Less" and o.inputs[0] is cond.inputs[i_time]]
    if len(less) != 1 or _const_scalar(less[0].inputs[1]) != steps:
        raise _NoMatch
    n_out, index = _const_scalar(reserve.inputs[1]), put.inputs[1]
    if n_out == steps and index is ins[i_time]:
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
                     reset_after=reset_after)


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
    wanted = [body.outputs[m.i_h]]
    if m.cell == "LSTM":
        feeds[body.inputs[m.i_c].uid] = c
        wanted.append(body.outputs[m.i_c])
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


def _initial(c, v, batch, units):
    if v.is_const and not v.const.any():
        return state(c, batch, units)
    return state(c, batch, units, v)


def _form(op, m, rnn_forms: dict) -> str:
    """The recognised loop's form (``forms.policy.traced_form``): "loop", "fused" or, for a GRU, "unrolled". A
    stateful layer's state is read from a variable."""
    states = (op.inputs[m.i_h], op.inputs[m.i_c] if m.cell == "LSTM" else None)
    stateful = any(v is not None and v.producer is not None and v.producer.kind == "ReadVariableOp" for v in states)
    form = traced_form(rnn_forms, m.cell, stateful)
    return form if form == "loop" else "unrolled" if m.cell == "GRU" else "fused"


def _replace_with_loop(module: Module, fn: Function, op, m, c, activation: str, batch: int):
    """The loop -> the loop form (``forms/loop.py``) over its time-major input: the input projection
    hoisted, a WHILE without TensorLists for the steps."""
    inits = [op.inputs[m.i_h]] + ([op.inputs[m.i_c]] if m.cell == "LSTM" else [])
    states = [None if v.is_const and not v.const.any() else v for v in inits]
    w = keras_cell(m.cell, m.kernel, m.rec, m.bias, activation, reset_after=m.reset_after, recurrent_bias=m.bias_rec)
    c.taken_names = set(module.functions)
    seq, finals, _ = loop_steps(c, w, m.xt, states, tm=True, backwards=False, batch=batch, steps=m.steps,
                             sequence=m.sequences)
    for sub in c.subgraphs:
        module.add(sub)
    if seq is None:  # the loop kept only the last step, as a list of one
        seq = c.op("RESHAPE", [finals[0], np.array([1, batch, m.units], np.int32)], dtype=np.float32,
                   shape=(1, batch, m.units))
    results = [(m.i_out, seq), (m.i_h, finals[0])]
    if m.cell == "LSTM":
        results.append((m.i_c, finals[1]))
    _splice(fn, op, c.ops, results)


def _replace(module: Module, fn: Function, op, m, activation: str, batch_size, form: str = "fused"):
    xt, units, steps = m.xt, m.units, m.steps
    batch = xt.shape[1] or batch_size
    if batch is None:
        state = op.inputs[m.i_h]  # a stateful layer's state variable fixes the batch
        raise NeedsStaticBatch("the unrolled GRU needs a static batch size" if m.cell == "GRU" else
                               f"a recognised {m.cell} loop keeps its state in tensors that need a static batch size",
                               state.shape[0] if state.rank == 2 and not state.is_const else None)
    c = Composite(fn, f"Keras {m.cell} loop", {}, [], [])
    if form == "loop":
        _replace_with_loop(module, fn, op, m, c, activation, batch)
        return c.ops
    if m.cell == "GRU":
        _replace_gru(fn, op, m, c, activation, batch)
        return c.ops
    h = _initial(c, op.inputs[m.i_h], batch, units)
    lstm = m.cell == "LSTM"
    cs = _initial(c, op.inputs[m.i_c], batch, units) if lstm else None
    wi, wr, bs = keras_to_litert(m.kernel, m.rec, m.bias, 4 if lstm else 1, units)
    bs = [b.astype(np.float32) for b in bs]
    # the loop reads its input time-major, which is also the fused kernels' fast layout
    shape = (steps, batch, units)
    opts = {"fused_activation_function": FUSED_ACTIVATIONS[activation], "time_major": True,
            "asymmetric_quantize_inputs": False}
    if lstm:
        opts.update(cell_clip=0.0, proj_clip=0.0)
        seq = c.op("UNIDIRECTIONAL_SEQUENCE_LSTM", lstm_operands(xt, wi, wr, bs, h, cs), opts, dtype=np.float32,
                   shape=shape)
    else:
        seq = c.op("UNIDIRECTIONAL_SEQUENCE_RNN", rnn_operands(xt, wi, wr, bs, h), opts, dtype=np.float32, shape=shape)
    last = time_step(c, seq, -1, True)
    if m.sequences:
        out_list = seq
    else:  # the loop kept only the last step, as a list of one
        out_list = c.op("RESHAPE", [last, np.array([1, batch, units], np.int32)], dtype=np.float32,
                        shape=(1, batch, units))
    results = [(m.i_out, out_list), (m.i_h, last)]
    if lstm:
        results.append((m.i_c, read_state(c, cs, last)))
    _splice(fn, op, c.ops, results)
    return c.ops


def _replace_gru(fn: Function, op, m, c, activation: str, batch: int):
    """The loop -> the unrolled GRU (``forms/unrolled.py``) over its time-major input."""
    v = op.inputs[m.i_h]
    h0 = None if v.is_const and not v.const.any() else v
    cell = GRUCell(m.kernel, m.rec, m.bias, activation, reset_after=m.reset_after, recurrent_bias=m.bias_rec)
    outs, _ = unroll(c, cell, m.xt, [h0], tm=True, backwards=False, batch=batch, steps=m.steps)
    if m.sequences:
        out_list = pack_steps(c, outs, time_major=True)
    else:  # the loop kept only the last step, as a list of one
        out_list = c.op("RESHAPE", [outs[-1], np.array([1, batch, m.units], np.int32)], dtype=np.float32,
                        shape=(1, batch, m.units))
    _splice(fn, op, c.ops, [(m.i_out, out_list), (m.i_h, outs[-1])])


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
                    rnn_forms: dict | None = None) -> list[dict]:
    """Fuse every recognised Keras LSTM / SimpleRNN / GRU loop; one report record per loop.

    ``settle(module)`` folds constants and shapes and binds loop invariants (the
    pipeline's ``settle`` group) before each round of matching: tf-keras' standard_gru
    loop (its composite just inlined) carries its weights as loop variables, the bias
    rows unstacked from a constant; and a loop that reads the output of a loop fused in
    the round before only gets static shapes (its number of steps) then. ``rnn_forms``: the form of each
    family (``forms.policy.rnn_forms``); a "loop" entry writes the loop form (``forms/loop.py``), else the
    fused op (a GRU unrolled).
    """
    records: list[dict] = []
    declined: dict[str, dict] = {}  # loops that look like a Keras cell but do not compute one: said once each
    while _loops(module):
        settle(module)
        results = [_fuse(module, fn, op, batch_size, rnn_forms or {}) for fn, op in _loops(module)]
        fused = [r for r in results if r is not None and r["status"] == "fused"]
        declined.update((r["function"], r) for r in results if r is not None and r["status"] != "fused")
        if not fused:
            break
        records += fused
    return records + list(declined.values())


def _fuse(module: Module, fn: Function, op, batch_size, rnn_forms: dict) -> dict | None:
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
    ops = _replace(module, fn, op, m, activation, batch_size, form)
    into = {"LSTM": ["UNIDIRECTIONAL_SEQUENCE_LSTM"], "SimpleRNN": ["UNIDIRECTIONAL_SEQUENCE_RNN"]}.get(
        m.cell) if form == "fused" else None
    into = into or list(dict.fromkeys(o.kind for o in ops))
    attrs = {"units": m.units, "return_sequences": m.sequences}
    if m.cell == "GRU":
        attrs.update(reset_after=m.reset_after, activation=activation, steps=m.steps)
    return {"function": fn.name, "interface": f"Keras {m.cell} loop (recognised)", "call_sites": 1,
            "attrs": attrs, "status": "fused", "into": into, "form": form, "reason": ""}
