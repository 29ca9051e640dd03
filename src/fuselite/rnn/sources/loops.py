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

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.composite import Composite, is_zeros
from fuselite.ir import Function, Module
from fuselite.rnn.build import MAX_UNROLL, pack_steps, time_step
from fuselite.rnn.cells import keras_cell
from fuselite.rnn.forms.fused import read_state, state
from fuselite.rnn.forms.loop import loop_steps
from fuselite.rnn.forms.policy import UNKNOWN_LENGTH_NOTE, LayerSize, at_length, traced_form
from fuselite.rnn.forms.unrolled import unroll
from fuselite.rnn.kit import FUSED_ACTIVATIONS, keras_to_litert, lstm_operands, rnn_operands
from fuselite.rnn.sources.loop_match import WHILE_OPS, NoMatch, check_match, match_loop


def _states(op, m) -> list:
    """The loop's initial states (h, and c for an LSTM): None where zeros (a constant, or a FILL of a run-time
    batch), else the value."""
    inits = [op.inputs[m.i_h]] + ([op.inputs[m.i_c]] if m.cell == "LSTM" else [])
    return [None if is_zeros(v) else v for v in inits]


def _form(op, m, rnn_forms: dict, batch_size: int | None) -> tuple[str, str]:
    """The recognised loop's form (``forms.policy.traced_form``): "loop", "unrolled" or "fused" (a GRU, which
    has no LiteRT op, and a masked layer, which the fused ops cannot take, unrolled), and the report's note on
    why (a form chosen by the layer's size). A stateful layer's state is read from a variable."""
    states = (op.inputs[m.i_h], op.inputs[m.i_c] if m.cell == "LSTM" else None)
    stateful = any(v is not None and v.producer is not None and v.producer.kind == "ReadVariableOp" for v in states)
    known = m.steps and m.xt.shape is not None and len(m.xt.shape) == 3
    needs = frozenset(f for f in ("unrolled", "fused") if _static_batch_needed(op, m, f))
    size = LayerSize(m.cell, m.units, m.steps, m.xt.shape[1] or batch_size, needs_batch=needs,
                     sequence=bool(m.sequences), features=m.xt.shape[2]) if known else None
    form, note = traced_form(rnn_forms, m.cell, stateful, masked=m.mask is not None, size=size)
    if form not in ("loop", "unrolled"):
        form = "unrolled" if m.cell == "GRU" or m.mask is not None else "fused"
    return form, note


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
    return [(fn, op) for fn in list(module.functions.values()) for op in fn.ops if op.type in WHILE_OPS]


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
        m = match_loop(module, fn, op)
    except NoMatch:
        return None
    try:
        activation = check_match(m)
    except NoMatch:
        return {"function": fn.name, "interface": f"Keras {m.cell} loop (recognised)", "call_sites": 1,
                "attrs": {"units": m.units}, "status": "not fused",
                "reason": f"the loop has the shape of a Keras {m.cell} but its body does not compute that cell's "
                          "step as matched; it stays a WHILE loop (correct, not fused)"}
    form, note = _form(op, m, rnn_forms, batch_size)
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
            "form": form + (" (masked)" if m.mask is not None else "") + (f" ({why_not})" if why_not else note)}
