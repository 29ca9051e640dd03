"""What a recurrent layer adds around any form: its results, and the merge of a Bidirectional's directions.

* :func:`merge`: a Bidirectional's ``merge_mode`` (concat, sum, ave, mul, none) as ops;
* :func:`merge_directions`: a Bidirectional's results from its two directions' per-step outputs (the
  unrolled form);
* :func:`layer_results`: a layer's results (the sequence or its last output, and the final states with
  ``return_state``);
* :func:`sequence`: one direction of any cell (``rnn/cells/``) over a sequence, in the form the conversion
  gives its family (``rnn_form``): what a bring-your-own rule calls (docs/byo-rnn.md, Example 3).

Example (a Bidirectional of two unrolled directions)::

    return merge_directions(c, merge, fw_outs, bw_outs, fw_final, bw_final, tm)
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.rnn.build import MAX_UNROLL, pack_steps, swap_batch_and_time, time_major_input, time_step
from fuselite.rnn.cells.base import Cell
from fuselite.rnn.forms.fused import read_state, state
from fuselite.rnn.forms.loop import loop_steps
from fuselite.rnn.forms.policy import UNKNOWN_LENGTH_NOTE, at_length, forms_of
from fuselite.rnn.forms.unrolled import unroll


def merge(c, mode: str, fw, bw, shape):
    """A Bidirectional's two directions (each of ``shape``) merged as ``mode`` says; ``none``: both."""
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


def merge_directions(c, merge_fn, fw: list, bw: list, fw_final: list, bw_final: list, tm: bool) -> list:
    """A Bidirectional's results from its two unrolled directions (outputs per step in processing order):
    the backward outputs put back in time order, merged by ``merge_fn(c, mode, fw, bw, shape)``; in Keras'
    order (the merged output(s), then the forward and the backward final states with ``return_state``)."""
    a = c.attrs
    mode = a.get("merge_mode", "concat")
    if a.get("return_sequences"):
        fw_seq, bw_seq = pack_steps(c, fw, tm), pack_steps(c, bw[::-1], tm)
        y = merge_fn(c, mode, fw_seq, bw_seq, fw_seq.shape)
    else:
        y = merge_fn(c, mode, fw[-1], bw[-1], fw[-1].shape)
    y = y if isinstance(y, list) else [y]
    return y + list(fw_final) + list(bw_final) if a.get("return_state") else y


def layer_results(c, out, finals: list) -> list:
    """A layer's results: ``out`` (its sequence or last output), and with ``return_state`` the final states."""
    return [out, *finals] if c.attrs.get("return_state") else out


def sequence(c, cell: Cell, x, *, initial_states: list | None = None, time_major: bool = False,
             go_backwards: bool = False, return_sequences: bool = False, form: str | None = None) -> tuple:
    """(the output, the final states) of ``cell`` over ``x`` ([batch, time, features], or [time, batch,
    features] with ``time_major``): the whole sequence (in processing order) with ``return_sequences``, else
    the last output. The form is ``form`` or what the conversion's ``rnn_form`` gives the cell's family
    (``cell.form_key`` or ``cell.kind``; ``c.form`` says which): "loop", "unrolled", or "fused" where the cell
    has a LiteRT sequence op (else unrolled); an unknown number of steps takes the loop form where the form asked
    needs a static one (``policy.at_length``). ``initial_states``: values, or None (zeros).

    Example (in a rule; ``cell`` built from the composite's constant weights)::

        out, (h, c_state) = sequence(c, PeepholeLSTMCell(k, rk, b, peepholes, "tanh"), x, return_sequences=True)
    """
    tm = time_major
    states = list(initial_states or [None] * cell.n_states)
    steps, batch = x.shape[0 if tm else 1], x.shape[1 if tm else 0] or c.batch_size
    form = form or forms_of(c).get(cell.form_key or cell.kind, "fused")
    if form == "fused" and type(cell).fused is Cell.fused:
        form = "unrolled"  # no LiteRT op for this cell
    asked, form = form, at_length(forms_of(c), form, steps, f"a {cell.kind}", fused=type(cell).fused is not Cell.fused)
    c.form = form if form == asked else form + UNKNOWN_LENGTH_NOTE.replace("unrolled", asked)
    if form == "loop":
        seq, finals, last = loop_steps(c, cell, x, states, tm=tm, backwards=go_backwards, batch=batch, steps=steps,
                                       sequence=return_sequences)
        return (seq if return_sequences else last), finals
    if batch is None:
        raise NeedsStaticBatch(f"the {form} {cell.kind} needs a static batch size here")
    if form == "unrolled":
        if steps > MAX_UNROLL:
            c.decline(f"unrolling needs a static number of time steps <= {MAX_UNROLL}, got {steps}")
        outs, finals = unroll(c, cell, x, states, tm=tm, backwards=go_backwards, batch=batch, steps=steps)
        return (pack_steps(c, outs, tm) if return_sequences else outs[-1]), finals
    tensors = [state(c, batch, cell.units, s) for s in states]
    seq = cell.fused(c, time_major_input(c, x, tm, go_backwards), tensors)
    seq = seq if tm else swap_batch_and_time(c, seq)
    last = time_step(c, seq, -1, tm)
    return (seq if return_sequences else last), [last, *(read_state(c, t, last) for t in tensors[1:])]
