"""The ConvLSTM2D family (Keras' ``ConvLSTM2D``): unrolled LiteRT builtins only (LiteRT has no convolutional
LSTM op; the rule is ``sources/keras_layers.py``'s).

Keras' cell (Keras 3 ``ConvLSTMCell``, tf-keras the same), gates i, f, c, o along the
last axis of the kernels::

    x_i, x_f, x_c, x_o = conv(x_t, kernel, strides, padding, dilation) + bias   # split in 4
    h_i, h_f, h_c, h_o = conv(h, recurrent_kernel, strides 1, "same")           # no dilation
    i, f, o = rec_act(x_i + h_i), rec_act(x_f + h_f), rec_act(x_o + h_o)
    c = f * c + i * act(x_c + h_c);  h = o * act(c)

The input convolution of every step is one ``CONV_2D`` over the steps folded into the
batch (the weights once, not per step); each step then has one recurrent ``CONV_2D``
(none at the first step from a zero state), an ``ADD``, a ``SPLIT`` into the four gates
and the element-wise ops. Channels-last only (LiteRT's layout), a static number of steps
(at most ``MAX_UNROLL``) and a static batch.
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.rnn.build import F32 as _F32
from fuselite.rnn.build import MAX_UNROLL, NONE, activation, binary
from fuselite.rnn.kit import ACTIVATION_OPS


def _out_size(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    if padding == "same":
        return -(-size // stride)
    return (size - (k - 1) * dilation - 1) // stride + 1


def _conv(c, x, filt, bias, shape, stride, dilation, padding):
    opts = {"padding": padding.upper(), "stride_h": stride[0], "stride_w": stride[1],
            "dilation_h_factor": dilation[0], "dilation_w_factor": dilation[1], "fused_activation_function": "NONE"}
    return c.op("CONV_2D", [x, filt, bias], opts, dtype=np.float32, shape=shape)


def _recurrent_activation(c, name: str, flavour: str | None, x):
    """sigmoid, or hard_sigmoid as each Keras computes it: tf-keras ``clip(0.2 x + 0.5, 0, 1)``, Keras 3
    ``relu6(x + 3) / 6``."""
    if name == "sigmoid":
        return c.op("LOGISTIC", [x], dtype=np.float32, shape=x.shape)
    if flavour == "tf_keras":
        y = c.op("MUL", [x, np.array(0.2, np.float32)], dict(NONE), dtype=np.float32, shape=x.shape)
        y = c.op("ADD", [y, np.array(0.5, np.float32)], {"fused_activation_function": "RELU"}, dtype=np.float32,
                 shape=x.shape)
        return c.op("MINIMUM", [y, np.array(1.0, np.float32)], dtype=np.float32, shape=x.shape)
    y = c.op("ADD", [x, np.array(3.0, np.float32)], {"fused_activation_function": "RELU6"}, dtype=np.float32,
             shape=x.shape)
    return c.op("DIV", [y, np.array(6.0, np.float32)], dict(NONE), dtype=np.float32, shape=x.shape)


def unrolled_conv_lstm(c, a: dict):
    """A Keras ConvLSTM2D composite ``c`` (arguments x, kernel, recurrent kernel, bias, and 0 or 2 initial
    states) unrolled, its layer configuration ``a`` (a stateless, unmasked, channels-last layer); or a decline."""
    if a.get("activation") not in ACTIVATION_OPS or a.get("recurrent_activation") not in ("sigmoid", "hard_sigmoid"):
        c.decline(f"activations ({a.get('activation')}, {a.get('recurrent_activation')}) are not supported by the "
                  "unrolled form (activation: tanh, sigmoid, relu or linear; recurrent_activation: sigmoid or "
                  "hard_sigmoid)")
    padding = a.get("padding")
    if padding not in ("same", "valid"):
        c.decline(f"padding '{padding}' is not supported")
    stride, dilation = tuple(a["strides"]), tuple(a["dilation_rate"])
    x = c.args[0]
    if x.dtype != _F32 or x.rank != 5 or None in x.shape[1:]:
        c.decline(f"the input must be float32 [batch, time, rows, cols, channels] with static time and image "
                  f"dimensions, got {x.dtype} {x.shape}")
    batch, steps, rows, cols, channels = x.shape
    batch = batch or c.batch_size
    if steps > MAX_UNROLL:
        c.decline(f"unrolling needs at most {MAX_UNROLL} time steps, got {steps}")
    if batch is None:
        raise NeedsStaticBatch("the unrolled ConvLSTM2D needs a static batch size")
    k, rk, b = (c.args[i] for i in (1, 2, 3))
    if k.const is None or rk.const is None or b.const is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    filters = int(a["units"])
    kh, kw = a["kernel_size"]
    if k.shape != (kh, kw, channels, 4 * filters) or rk.shape != (kh, kw, filters, 4 * filters) or \
            b.shape != (4 * filters,):
        c.decline(f"weight shapes {k.shape}, {rk.shape}, {b.shape} do not fit a ConvLSTM2D of {filters} filters")
    n_init = int(a.get("n_initial_states", 0))
    if n_init not in (0, 2):
        c.decline(f"expected 0 or 2 initial states, got {n_init}")

    out_rows = _out_size(rows, kh, stride[0], dilation[0], padding)
    out_cols = _out_size(cols, kw, stride[1], dilation[1], padding)
    state = (batch, out_rows, out_cols, filters)
    gates = (batch, out_rows, out_cols, 4 * filters)
    # gates reordered i, f, o, c (the three gates under the recurrent activation side by side: one activation
    # op per step); LiteRT's CONV_2D filter is [out, kh, kw, in] (Keras': [kh, kw, in, out])
    order = np.concatenate([np.arange(g * filters, (g + 1) * filters) for g in (0, 1, 3, 2)])
    filt = np.ascontiguousarray(np.transpose(k.const[..., order], (3, 0, 1, 2)), np.float32)
    rfilt = np.ascontiguousarray(np.transpose(rk.const[..., order], (3, 0, 1, 2)), np.float32)
    bias = np.ascontiguousarray(b.const[order], np.float32)
    seq = x
    if a.get("go_backwards"):
        seq = c.op("REVERSE_V2", [x, np.array([1], np.int32)], dtype=np.float32, shape=x.shape)
    folded = c.op("RESHAPE", [seq, np.array([batch * steps, rows, cols, channels], np.int32)], dtype=np.float32,
                  shape=(batch * steps, rows, cols, channels))
    proj = _conv(c, folded, filt, bias, (batch * steps, *gates[1:]),
                 stride, dilation, padding)
    proj = c.op("RESHAPE", [proj, np.array((batch, steps, *gates[1:]), np.int32)], dtype=np.float32,
                shape=(batch, steps, *gates[1:]))
    step_in = c.op("UNPACK", [proj], {"num": steps, "axis": 1}, outs=[(_F32, gates)] * steps)
    step_in = step_in if isinstance(step_in, list) else [step_in]
    h, cell = (c.args[4], c.args[5]) if n_init else (None, None)
    zero_bias = np.zeros(4 * filters, np.float32)
    act = a["activation"]
    outs = []
    for xt in step_in:
        pre = xt if h is None else binary(c, "ADD", xt, _conv(c, h, rfilt, zero_bias, gates, (1, 1), (1, 1), "same"),
                                           gates)
        three = (*state[:3], 3 * filters)
        p_ifo, pc = c.op("SPLIT_V", [pre, np.array([3 * filters, filters], np.int32), np.array(3, np.int32)],
                         {"num_splits": 2}, outs=[(_F32, three), (_F32, state)])
        ifo = _recurrent_activation(c, a["recurrent_activation"], a.get("flavour"), p_ifo)
        i, f, o = c.op("SPLIT", [np.array(3, np.int32), ifo], {"num_splits": 3}, outs=[(_F32, state)] * 3)
        new = binary(c, "MUL", i, activation(c, act, pc), state)
        cell = new if cell is None else binary(c, "ADD", binary(c, "MUL", f, cell, state), new, state)
        h = binary(c, "MUL", o, activation(c, act, cell), state)
        outs.append(h)
    if a.get("return_sequences"):
        out = c.op("PACK", outs, {"values_count": steps, "axis": 1}, dtype=np.float32, shape=(batch, steps, *state[1:]))
    else:
        out = h
    return [out, h, cell] if a.get("return_state") else out
