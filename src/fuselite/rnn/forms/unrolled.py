"""The unrolled form: any cell of ``rnn/cells/`` written as builtins step by step (``rnn_form="unrolled"``;
a masked layer where the loop form is not asked; a GRU wherever the fused op would be).

One ``FULLY_CONNECTED`` projects every step's input at once (the cell's ``input`` and ``bias``); each step
is the cell's :meth:`~fuselite.rnn.cells.Cell.step` on that step's projection. The first step from a zero
state passes ``None`` states, so that the cell folds them (no recurrent product). With a mask, each step
ends in ``SELECT_V2``s that keep the states and repeat the previous output (zeros before the first) where
the mask is off, as Keras' ``rnn()`` does with ``zero_output_for_mask=False`` (zeros instead with
``zero_output``, which ``Bidirectional`` sets on its layers when they return sequences). Any mask: right
or left padding, holes. No loop and no state between invokes: stateless by construction, and fast (no
subgraph calls); the file grows with the steps (at most ``MAX_UNROLL``).

Example (a Keras LSTM's weights, 20 steps, batch-major)::

    outs, (h, cell) = unroll(c, LSTMCell(k, rk, b, "tanh"), x, [None, None], tm=False, backwards=False,
                             batch=1, steps=20)
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.rnn.build import MAX_UNROLL, fc, reverse, step_masks, unpack
from fuselite.rnn.cells.base import Cell
from fuselite.rnn.kit import ACTIVATION_OPS


def unroll(c, cell: Cell, x, states: list, *, tm: bool, backwards: bool, batch, steps: int, mask=None,
           zero_output: bool = False) -> tuple[list, list]:
    """(outputs per step in processing order, final states) of ``cell`` unrolled over ``x`` ([batch, time,
    features], or [time, batch, features] with ``tm``). ``states``: initial values, None for zeros. ``mask``:
    Keras' bool [batch, time] mask (in time order; or float32 1 / 0) or None (no SELECT_V2s)."""
    first = len(c.ops)
    width, units = cell.input.shape[0], cell.units
    if backwards:
        x = reverse(c, x, 0 if tm else 1)
    proj = fc(c, x, cell.input, cell.bias, (steps, batch, width) if tm else (batch, steps, width), keep=True)
    step_in = unpack(c, proj, steps, 0 if tm else 1, (batch, width))
    masks = step_masks(c, mask, steps, batch, backwards) if mask is not None else [None] * steps
    one = (batch, units)
    zeros = np.zeros((batch or 1, units), np.float32)  # a zero state where a SELECT_V2 keeps one (static batch)
    states, out, outs = list(states), None, []
    for xt, m in zip(step_in, masks):
        new, new_out = cell.step(c, xt, states)
        if m is None:
            states, out = new, new_out
        else:  # the states kept where the mask is off (the last state first, as the LSTM always had them)
            kept = [c.op("SELECT_V2", [m, n, zeros if s is None else s], dtype=np.float32, shape=one)
                    for n, s in reversed(list(zip(new, states)))]
            states = kept[::-1]
            out = c.op("SELECT_V2", [m, new_out, zeros if zero_output or out is None else out], dtype=np.float32,
                       shape=one)
        outs.append(out)
    if cell.marks_steps:
        for op in c.ops[first:]:
            op.attrs["_recurrent_cell"] = True  # quantizers may give the cell wider (int16) steps
    return outs, states


def unrollable(c, kind: str, dynamic_batch: bool = False, max_steps: int | None = MAX_UNROLL,
               form: str = "unrolled"):
    """The sequence input, whether it is time-major, the static batch and number of steps of a Keras ``kind``
    layer (GRU, LSTM or SimpleRNN) that the unrolled (and loop) forms can write, or a decline saying why not.
    With ``dynamic_batch`` (a form whose ops take any batch), an unknown batch stays None; ``max_steps``: the
    most steps the form writes (None: any number, also one known only at run time: the loop form)."""
    a = c.attrs
    what = f"masked {kind}" if a.get("has_mask") else kind
    gated = kind in ("GRU", "LSTM")
    if a.get("activation") not in ACTIVATION_OPS or (gated and a.get("recurrent_activation") != "sigmoid"):
        c.decline(f"{kind} activations ({a.get('activation')}, {a.get('recurrent_activation')}) are not supported "
                  "by the unrolled form")
    x = c.args[0]
    tm = bool(a.get("time_major"))
    if x.dtype != np.float32 or x.rank != 3 or x.shape[2] is None:
        c.decline(f"the sequence input must be float32 [batch, time, features], got {x.dtype} {x.shape}")
    steps = x.shape[0 if tm else 1]
    batch = x.shape[1 if tm else 0] or c.batch_size
    if max_steps is not None and (steps is None or steps > max_steps):
        c.decline(f"unrolling needs a static number of time steps <= {max_steps}, got {steps}")
    if batch is None and not dynamic_batch:
        raise NeedsStaticBatch(f"the {form} {what} needs a static batch size here")
    return x, tm, batch, steps
