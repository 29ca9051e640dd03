"""Masked Keras LSTM and SimpleRNN (``Embedding(mask_zero=True)`` -> LSTM, every padded text model) unrolled.

LiteRT's sequence ops have no per-step mask input, so a masked layer takes the loop form
(``fusion/rnn_loop.py``, the default) or this one, written as builtins step by step, as the unrolled GRU
is (``fusion/gru.py``; ``rnn_form="unrolled"``, and where the fused op would be chosen): one ``FULLY_CONNECTED`` projects every
step's input at once; each step adds the recurrent projection, applies the cell, and ends in
``SELECT_V2``s that keep the state (h, and c for an LSTM) and repeat the previous output (zeros
before the first) where the mask is off, as Keras' ``rnn()`` does with
``zero_output_for_mask=False`` (zeros instead with ``zero_output_for_mask=True``, which
``Bidirectional`` sets on its layers when they return sequences). Any mask: right or left padding, holes. At most 512 steps.

Example (what the LSTM rule calls for a layer with a mask)::

    return masked_layer(c, "LSTM")
"""

from __future__ import annotations

import numpy as np

from fuselite.fusion.gru import (
    _act,
    _binary,
    _fc,
    _step_masks,
    _unrollable,
    bidirectional_gru,
    merge_directions,
    pack_steps,
)

_F32 = np.dtype(np.float32)
_GATES = {"LSTM": 4, "SimpleRNN": 1}


def _mask(c, index: int):
    """The composite's mask argument (a bool [batch, time] value), or None without one."""
    if not c.attrs.get("has_mask"):
        return None
    mask = c.args[index]
    if mask.dtype != np.bool_ or mask.shape is None or len(mask.shape) != 2:
        c.decline(f"the mask must be bool [batch, time], got {mask.dtype} {mask.shape}")
    return mask.value


def _constant_weights(c, start: int):
    kernel, recurrent, bias = (c.args[start + i].const for i in range(3))
    if kernel is None or recurrent is None or bias is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    return kernel, recurrent, bias


def masked_layer(c, kind: str) -> list:
    """The results of a Keras ``kind`` ("LSTM" or "SimpleRNN") composite unrolled (or a decline): with its
    mask if it has one (``SELECT_V2``s per step), else the plain unrolled form (``rnn_form="unrolled"``),
    which keeps an unknown batch dynamic."""
    a = c.attrs
    if a.get("stateful"):
        c.decline(f"a stateful {'masked ' if a.get('has_mask') else ''}{kind} is not unrolled")
    n_states = int(a.get("n_initial_states", 0))
    mask = _mask(c, 4 + n_states)
    x, tm, batch, steps = _unrollable(c, kind, dynamic_batch=mask is None and not n_states and c.dynamic_batch)
    kernel, recurrent, bias = _constant_weights(c, 1)
    states = [c.args[4 + i].value for i in range(n_states)] or [None] * (2 if kind == "LSTM" else 1)
    outs, finals = _unroll(c, kind, x, kernel, recurrent, bias, states, mask, a["activation"], tm,
                           bool(a.get("go_backwards")), batch, steps)
    out = pack_steps(c, outs, tm) if a.get("return_sequences") else outs[-1]
    return [out, *finals] if a.get("return_state") else out


def masked_bidirectional(c, merge) -> list:
    """A ``Bidirectional`` of LSTM, SimpleRNN or GRU with both directions unrolled (the backward one over the
    reversed sequence, and mask if there is one), joined by :func:`~fuselite.fusion.gru.merge_directions`."""
    a = c.attrs
    kind = a.get("layer")
    mask = _mask(c, 7)
    if kind == "GRU":
        return bidirectional_gru(c, merge, mask)
    x, tm, batch, steps = _unrollable(c, kind, dynamic_batch=mask is None and c.dynamic_batch)
    dirs = []
    for start, backwards in ((1, False), (4, True)):
        kernel, recurrent, bias = _constant_weights(c, start)
        states = [None] * (2 if kind == "LSTM" else 1)
        dirs.append(_unroll(c, kind, x, kernel, recurrent, bias, states, mask, a["activation"], tm,
                            backwards, batch, steps))
    (fw, fw_final), (bw, bw_final) = dirs
    return merge_directions(c, merge, fw, bw, fw_final, bw_final, tm)


def _ifoc(w: np.ndarray, units: int) -> np.ndarray:
    """An LSTM's gate columns i, f, c, o (Keras) reordered i, f, o, c: the three sigmoid gates side by side, so
    that one LOGISTIC covers them."""
    return np.concatenate([w[..., g * units:(g + 1) * units] for g in (0, 1, 3, 2)], axis=-1)


def lstm_cell(c, pre, cell, activation: str):
    """(h, c) after one LSTM step from the gates' pre-activations ``pre`` ([batch, 4u], gates i, f, o, c as
    :func:`_ifoc` orders them) and the cell state ``cell`` (None: zeros)."""
    batch, width = pre.shape
    units = width // 4
    one, three = (batch, units), (batch, 3 * units)
    ifo, g = c.op("SPLIT_V", [pre, np.array([3 * units, units], np.int32), np.array(-1, np.int32)],
                  {"num_splits": 2}, outs=[(_F32, three), (_F32, one)])
    ifo = c.op("LOGISTIC", [ifo], dtype=np.float32, shape=three)
    i, f, o = c.op("SPLIT", [np.array(-1, np.int32), ifo], {"num_splits": 3}, outs=[(_F32, one)] * 3)
    new = _binary(c, "MUL", i, _act(c, activation, g), one)
    c_new = new if cell is None else _binary(c, "ADD", _binary(c, "MUL", f, cell, one), new, one)
    return _binary(c, "MUL", o, _act(c, activation, c_new), one), c_new


def _unroll(c, kind, x, kernel, recurrent, bias, states, mask, activation, tm, backwards, batch, steps):
    """(outputs per step in processing order, final states) of an LSTM or SimpleRNN unrolled: one
    FULLY_CONNECTED for every step's input projection, then per step the recurrent product and the cell.
    ``mask`` ([batch, time] bool value) or None (no SELECT_V2s); ``states`` initial values or None (zeros)."""
    zero_output = bool(c.attrs.get("zero_output_for_mask"))  # masked steps output zeros, not the previous output
    units = recurrent.shape[0]
    width = _GATES[kind] * units
    if kind == "LSTM":
        kernel, recurrent, bias = (_ifoc(w, units) for w in (kernel, recurrent, bias))
    if backwards:
        x = c.op("REVERSE_V2", [x, np.array([0 if tm else 1], np.int32)], dtype=np.float32, shape=x.shape)
    proj_shape = (steps, batch, width) if tm else (batch, steps, width)
    proj = _fc(c, x, np.ascontiguousarray(kernel.T, np.float32), np.asarray(bias, np.float32), proj_shape, keep=True)
    step_in = c.op("UNPACK", [proj], {"num": steps, "axis": 0 if tm else 1}, outs=[(_F32, (batch, width))] * steps)
    step_in = step_in if isinstance(step_in, list) else [step_in]
    masks = _step_masks(c, mask, steps, batch, tm, backwards) if mask is not None else [None] * steps
    rec_w = np.ascontiguousarray(recurrent.T, np.float32)
    one = (batch, units)
    zeros = np.zeros((batch or 1, units), np.float32)  # the zero state (a marker only, unmasked: batch may be None)
    h = states[0] if states[0] is not None else zeros
    cell = (states[1] if states[1] is not None else zeros) if kind == "LSTM" else None
    prev_out, outs = zeros, []
    for xt, m in zip(step_in, masks):
        pre = xt if h is zeros else _binary(c, "ADD", xt, _fc(c, h, rec_w, None, (batch, width)), (batch, width))
        if kind == "LSTM":
            h_new, c_new = lstm_cell(c, pre, None if cell is zeros else cell, activation)
            cell = c_new if m is None else c.op("SELECT_V2", [m, c_new, cell], dtype=np.float32, shape=one)
        else:
            h_new = _act(c, activation, pre)
        if m is None:
            h = prev_out = h_new
        else:
            h = c.op("SELECT_V2", [m, h_new, h], dtype=np.float32, shape=one)
            prev_out = c.op("SELECT_V2", [m, h_new, zeros if zero_output else prev_out], dtype=np.float32,
                            shape=one)
        outs.append(prev_out)
    return outs, ([h, cell] if kind == "LSTM" else [h])
