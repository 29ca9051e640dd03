"""Keras GRU -> an unrolled sequence of LiteRT builtins (LiteRT has no GRU op).

With a static number of time steps the recurrence is unrolled: one FULLY_CONNECTED
computes the input projections of every step at once, then each step is a handful
of small builtins. This beats the ``WHILE`` loop the official converter produces
(no subgraph calls, no tensor-list copies; see docs/benchmarks.md) and, holding no
state between invokes, is stateless by construction.

Keras semantics (``reset_after=True``, the default; gates z, r, h)::

    x_z, x_r, x_h = split(x @ kernel + b_in)
    h_z, h_r, h_h = split(h @ recurrent_kernel + b_rec)
    z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
    h = z * h + (1 - z) * tanh(x_h + r * h_h)       # = cand + z * (h - cand)
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.registry import fusion

MAX_UNROLL = 512
_ACT = {"tanh": "TANH", "sigmoid": "LOGISTIC", "relu": "RELU"}
NONE = {"fused_activation_function": "NONE"}


def _fc(c, x, w, b, shape, keep=False):
    opts = dict(NONE, weights_format="DEFAULT", keep_num_dims=keep, asymmetric_quantize_inputs=False)
    return c.op("FULLY_CONNECTED", [x, w, b], opts, dtype=np.float32, shape=shape)


def _act(c, kind, x):
    if kind == "linear":
        return x
    return c.op(_ACT[kind], [x], dtype=np.float32, shape=x.shape)


def _binary(c, kind, a, b, shape):
    return c.op(kind, [a, b], dict(NONE), dtype=np.float32, shape=shape)


@fusion("keras.layers.GRU")
def fuse_keras_gru(c):
    a = c.attrs
    if a.get("stateful"):
        c.decline("GRU has stateful=True: state carried across invokes is not supported yet")
    if a.get("has_mask"):
        c.decline("GRU receives a mask; the unrolled form does not implement masking")
    if not a.get("reset_after", False):
        c.decline("GRU with reset_after=False is converted from its loop")
    if a.get("recurrent_activation") != "sigmoid" or a.get("activation") not in (*_ACT, "linear"):
        c.decline(f"GRU activations ({a.get('activation')}, {a.get('recurrent_activation')}) are not supported "
                  "by the unrolled form")
    x = c.args[0]
    tm = bool(a.get("time_major"))
    if x.dtype != np.float32 or x.rank != 3 or x.shape[2] is None:
        c.decline(f"the sequence input must be float32 [batch, time, features], got {x.dtype} {x.shape}")
    steps = x.shape[0 if tm else 1]
    batch = x.shape[1 if tm else 0] or c.batch_size
    if steps is None or steps > MAX_UNROLL:
        c.decline(f"unrolling needs a static number of time steps <= {MAX_UNROLL}, got {steps}")
    if batch is None:
        raise NeedsStaticBatch("the unrolled GRU needs a static batch size")
    units = int(a["units"])
    k, rk, b = c.args[1].const, c.args[2].const, c.args[3].const
    if k is None or rk is None or b is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    b_in, b_rec = (b[0], b[1]) if b.ndim == 2 else (b, np.zeros_like(b))
    n_init = int(a.get("n_initial_states", 0))

    seq_in = x
    if a.get("go_backwards"):
        seq_in = c.op("REVERSE_V2", [x, np.array([0 if tm else 1], np.int32)], dtype=np.float32, shape=x.shape)
    proj_shape = (steps, batch, 3 * units) if tm else (batch, steps, 3 * units)
    proj = _fc(c, seq_in, np.ascontiguousarray(k.T), b_in.astype(np.float32), proj_shape, keep=True)
    step_in = c.op("UNPACK", [proj], {"num": steps, "axis": 0 if tm else 1},
                   outs=[(np.dtype(np.float32), (batch, 3 * units))] * steps)
    step_in = step_in if isinstance(step_in, list) else [step_in]
    w_rec = np.ascontiguousarray(rk.T)
    gate2, gate1 = (batch, 2 * units), (batch, units)
    sizes = np.array([2 * units, units], np.int32)
    axis = np.array(-1, np.int32)
    h = c.args[4].value if n_init else None
    outs = []
    for xt in step_in:
        if h is None:  # zero state: the recurrent projection is just its bias
            hp = np.broadcast_to(b_rec.astype(np.float32), (batch, 3 * units)).copy()
        else:
            hp = _fc(c, h, w_rec, b_rec.astype(np.float32), (batch, 3 * units))
        x_zr, x_h = c.op("SPLIT_V", [xt, sizes, axis], {"num_splits": 2}, outs=[(np.dtype(np.float32), gate2),
                                                                                (np.dtype(np.float32), gate1)])
        if isinstance(hp, np.ndarray):
            h_zr, h_h = hp[:, : 2 * units], hp[:, 2 * units:]
        else:
            h_zr, h_h = c.op("SPLIT_V", [hp, sizes, axis], {"num_splits": 2},
                             outs=[(np.dtype(np.float32), gate2), (np.dtype(np.float32), gate1)])
        zr = c.op("LOGISTIC", [_binary(c, "ADD", x_zr, h_zr, gate2)], dtype=np.float32, shape=gate2)
        z, r = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2},
                    outs=[(np.dtype(np.float32), gate1)] * 2)
        cand = _act(c, a["activation"], _binary(c, "ADD", x_h, _binary(c, "MUL", r, h_h, gate1), gate1))
        prev = h if h is not None else np.zeros(gate1, np.float32)
        h = _binary(c, "ADD", cand, _binary(c, "MUL", z, _binary(c, "SUB", prev, cand, gate1), gate1), gate1)
        outs.append(h)
    if a.get("return_sequences"):
        out = c.op("PACK", outs, {"values_count": steps, "axis": 0 if tm else 1}, dtype=np.float32,
                   shape=(steps, batch, units) if tm else (batch, steps, units))
    else:
        out = outs[-1]
    return [out, outs[-1]] if a.get("return_state") else out
