"""Masked Keras LSTM and SimpleRNN (``Embedding(mask_zero=True)`` -> LSTM, every padded text model) unrolled.

LiteRT's sequence ops have no per-step mask input, so a masked layer is written as builtins,
step by step, as the unrolled GRU is (``fusion/gru.py``): one ``FULLY_CONNECTED`` projects every
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


def masked_layer(c, kind: str) -> list:
    """The results of a masked Keras ``kind`` ("LSTM" or "SimpleRNN") composite, unrolled (or a decline)."""
    a = c.attrs
    if a.get("stateful"):
        c.decline(f"a stateful masked {kind} is not unrolled")
    x, tm, batch, steps = _unrollable(c, kind)
    kernel, recurrent, bias = (c.args[i].const for i in (1, 2, 3))
    if kernel is None or recurrent is None or bias is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    n_states = int(a.get("n_initial_states", 0))
    states = [c.args[4 + i].value for i in range(n_states)] or [None] * (2 if kind == "LSTM" else 1)
    mask = c.args[4 + n_states]
    if mask.dtype != np.bool_ or mask.shape is None or len(mask.shape) != 2:
        c.decline(f"the mask must be bool [batch, time], got {mask.dtype} {mask.shape}")
    outs, finals = _unroll(c, kind, x, kernel, recurrent, bias, states, mask.value, a["activation"], tm,
                           bool(a.get("go_backwards")), batch, steps)
    out = pack_steps(c, outs, tm) if a.get("return_sequences") else outs[-1]
    return [out, *finals] if a.get("return_state") else out


def masked_bidirectional(c, merge) -> list:
    """A masked ``Bidirectional`` of LSTM, SimpleRNN or GRU: both directions unrolled with the mask (the
    backward one over the reversed sequence and mask), joined by :func:`~fuselite.fusion.gru.merge_directions`."""
    a = c.attrs
    kind = a.get("layer")
    mask = c.args[7]
    if mask.dtype != np.bool_ or mask.shape is None or len(mask.shape) != 2:
        c.decline(f"the mask must be bool [batch, time], got {mask.dtype} {mask.shape}")
    if kind == "GRU":
        return bidirectional_gru(c, merge, mask.value)
    x, tm, batch, steps = _unrollable(c, kind)
    dirs = []
    for start, backwards in ((1, False), (4, True)):
        kernel, recurrent, bias = (c.args[start + i].const for i in range(3))
        if kernel is None or recurrent is None or bias is None:
            c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
        states = [None] * (2 if kind == "LSTM" else 1)
        dirs.append(_unroll(c, kind, x, kernel, recurrent, bias, states, mask.value, a["activation"], tm,
                            backwards, batch, steps))
    (fw, fw_final), (bw, bw_final) = dirs
    return merge_directions(c, merge, fw, bw, fw_final, bw_final, tm)


def _unroll(c, kind, x, kernel, recurrent, bias, states, mask, activation, tm, backwards, batch, steps):
    zero_output = bool(c.attrs.get("zero_output_for_mask"))  # masked steps output zeros, not the previous output
    units = recurrent.shape[0]
    width = _GATES[kind] * units
    if backwards:
        x = c.op("REVERSE_V2", [x, np.array([0 if tm else 1], np.int32)], dtype=np.float32, shape=x.shape)
    proj_shape = (steps, batch, width) if tm else (batch, steps, width)
    proj = _fc(c, x, np.ascontiguousarray(kernel.T, np.float32), np.asarray(bias, np.float32), proj_shape, keep=True)
    step_in = c.op("UNPACK", [proj], {"num": steps, "axis": 0 if tm else 1}, outs=[(_F32, (batch, width))] * steps)
    step_in = step_in if isinstance(step_in, list) else [step_in]
    masks = _step_masks(c, mask, steps, batch, tm, backwards)
    rec_w = np.ascontiguousarray(recurrent.T, np.float32)
    one = (batch, units)
    zeros = np.zeros(one, np.float32)
    h = states[0] if states[0] is not None else zeros
    cell = (states[1] if states[1] is not None else zeros) if kind == "LSTM" else None
    prev_out, outs = zeros, []
    for xt, m in zip(step_in, masks):
        pre = xt if h is zeros else _binary(c, "ADD", xt, _fc(c, h, rec_w, None, (batch, width)), (batch, width))
        if kind == "LSTM":
            i, f, g, o = c.op("SPLIT", [np.array(-1, np.int32), pre], {"num_splits": 4}, outs=[(_F32, one)] * 4)
            i, f, o = (c.op("LOGISTIC", [v], dtype=np.float32, shape=one) for v in (i, f, o))
            c_new = _binary(c, "ADD", _binary(c, "MUL", f, cell, one), _binary(c, "MUL", i, _act(c, activation, g),
                                                                                one), one)
            h_new = _binary(c, "MUL", o, _act(c, activation, c_new), one)
            cell = c.op("SELECT_V2", [m, c_new, cell], dtype=np.float32, shape=one)
        else:
            h_new = _act(c, activation, pre)
        h = c.op("SELECT_V2", [m, h_new, h], dtype=np.float32, shape=one)
        prev_out = c.op("SELECT_V2", [m, h_new, zeros if zero_output else prev_out], dtype=np.float32, shape=one)
        outs.append(prev_out)
    return outs, ([h, cell] if kind == "LSTM" else [h])
