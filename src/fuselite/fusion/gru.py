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

With ``reset_after=False`` the reset gate is applied before the recurrent projection
of the candidate: ``h_h = (r * h) @ recurrent_kernel[:, 2u:]`` (and there is one bias).

:func:`unrolled_gru` builds the steps; it is shared by the ``keras.layers.GRU``
composite rule below and by the recognised GRU ``while`` loops of SavedModels
(``fusion/loops.py``).
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.registry import fusion
from fuselite.fusion.rnn_kit import ACTIVATION_OPS, gate_block, gru_fully_connected_weights, split_gru_bias

MAX_UNROLL = 512
NONE = {"fused_activation_function": "NONE"}
_F32 = np.dtype(np.float32)


def _fc(c, x, w, b, shape, keep=False):
    opts = dict(NONE, weights_format="DEFAULT", keep_num_dims=keep, asymmetric_quantize_inputs=False)
    return c.op("FULLY_CONNECTED", [x, w, b], opts, dtype=np.float32, shape=shape)


def _act(c, kind, x):
    if ACTIVATION_OPS[kind] is None:
        return x
    return c.op(ACTIVATION_OPS[kind], [x], dtype=np.float32, shape=x.shape)


def _binary(c, kind, a, b, shape):
    return c.op(kind, [a, b], dict(NONE), dtype=np.float32, shape=shape)


def _split_v(c, x, units):
    """[batch, 3u] -> ([batch, 2u], [batch, u])."""
    batch = x.shape[0]
    return c.op("SPLIT_V", [x, np.array([2 * units, units], np.int32), np.array(-1, np.int32)],
                {"num_splits": 2}, outs=[(_F32, (batch, 2 * units)), (_F32, (batch, units))])


def unrolled_gru(c, x, kernel, recurrent_kernel, bias_in, bias_rec, h0, *, activation: str = "tanh",
                 reset_after: bool = True, time_major: bool = False, go_backwards: bool = False,
                 batch: int, mask=None, final: list | None = None, zero_output: bool = False) -> list:
    """The hidden state after every step (in processing order) of a Keras GRU over ``x``.

    ``x`` is [batch, time, features] (or [time, batch, features] if ``time_major``), with
    a static number of steps; ``kernel`` [in, 3u], ``recurrent_kernel`` [u, 3u] and the
    biases [3u] are NumPy arrays in Keras' layout (gates z, r, h); ``bias_rec`` is ignored
    (must be zero) when ``reset_after`` is False. ``h0`` is a [batch, u] value or None
    (zeros: the first step's recurrent projection folds to a constant).

    ``mask`` ([batch, time] bool, Keras' masking, any pattern): at a masked step the state
    keeps its value and the output repeats the previous output (zeros before the first),
    as Keras' ``rnn()`` does with ``zero_output_for_mask=False``, or is zeros with
    ``zero_output`` (what ``Bidirectional`` sets for sequences); each step then ends in two
    exact ``SELECT_V2``s. With a mask the outputs are not the states: ``final`` (a list)
    receives the final state.

    Example::

        outs = unrolled_gru(c, x, k, rk, b[0], b[1], None, batch=1)
        last = outs[-1]
    """
    first = len(c.ops)
    units = recurrent_kernel.shape[0]
    steps = x.shape[0 if time_major else 1]
    w = gru_fully_connected_weights(kernel, recurrent_kernel, bias_in, bias_rec)
    seq_in = x
    if go_backwards:
        seq_in = c.op("REVERSE_V2", [x, np.array([0 if time_major else 1], np.int32)], dtype=np.float32,
                      shape=x.shape)
    proj_shape = (steps, batch, 3 * units) if time_major else (batch, steps, 3 * units)
    proj = _fc(c, seq_in, w.input, w.input_bias, proj_shape, keep=True)
    step_in = c.op("UNPACK", [proj], {"num": steps, "axis": 0 if time_major else 1},
                   outs=[(_F32, (batch, 3 * units))] * steps)
    step_in = step_in if isinstance(step_in, list) else [step_in]
    gate1 = (batch, units)
    h = h0
    outs = []
    step_mask = _step_masks(c, mask, steps, batch, time_major, go_backwards) if mask is not None else None
    prev_out = None
    for t, xt in enumerate(step_in):
        h_new = gru_cell(c, xt, h, w, activation, reset_after)
        prev = h if h is not None else np.zeros(gate1, np.float32)
        if step_mask is None:
            h = h_new
            outs.append(h)
            continue
        m = step_mask[t]
        zeros = np.zeros(gate1, np.float32)
        h = c.op("SELECT_V2", [m, h_new, prev], dtype=np.float32, shape=gate1)
        prev_out = c.op("SELECT_V2", [m, h_new, zeros if zero_output or prev_out is None else prev_out],
                        dtype=np.float32, shape=gate1)
        outs.append(prev_out)
    for op in c.ops[first:]:
        op.attrs["_recurrent_cell"] = True  # quantizers may give the cell wider (int16) steps
    if final is not None:
        final.append(h)
    return outs


def gru_cell(c, xt, h, w, activation: str, reset_after: bool):
    """h after one GRU step from the step's input projection ``xt`` ([batch, 3u], gates z, r, h, with the
    input bias), the state ``h`` (None: zeros; the recurrent projection folds to its bias) and the
    :func:`~fuselite.fusion.rnn_kit.gru_fully_connected_weights` ``w``."""
    batch, width = xt.shape
    units = width // 3
    gate2, gate1 = (batch, 2 * units), (batch, units)
    x_zr, x_h = _split_v(c, xt, units)
    if reset_after:
        if h is None:  # zero state: the recurrent projection is just its bias
            hp = np.broadcast_to(w.recurrent_bias, (batch, 3 * units)).copy()
            h_zr, h_h = gate_block(hp, slice(0, 2), units), gate_block(hp, slice(2, None), units)
        else:
            h_zr, h_h = _split_v(c, _fc(c, h, w.recurrent, w.recurrent_bias, (batch, 3 * units)), units)
        zr = c.op("LOGISTIC", [_binary(c, "ADD", x_zr, h_zr, gate2)], dtype=np.float32, shape=gate2)
        z, r = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2}, outs=[(_F32, gate1)] * 2)
        pre = _binary(c, "ADD", x_h, _binary(c, "MUL", r, h_h, gate1), gate1)
    elif h is None:  # zero state: no recurrent contribution at all
        zr = c.op("LOGISTIC", [x_zr], dtype=np.float32, shape=gate2)
        z, _ = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2}, outs=[(_F32, gate1)] * 2)
        pre = x_h
    else:
        zr = c.op("LOGISTIC", [_binary(c, "ADD", x_zr, _fc(c, h, w.recurrent_zr, None, gate2), gate2)],
                  dtype=np.float32, shape=gate2)
        z, r = c.op("SPLIT", [np.array(-1, np.int32), zr], {"num_splits": 2}, outs=[(_F32, gate1)] * 2)
        pre = _binary(c, "ADD", x_h, _fc(c, _binary(c, "MUL", r, h, gate1), w.recurrent_h, None, gate1), gate1)
    cand = _act(c, activation, pre)
    prev = h if h is not None else np.zeros(gate1, np.float32)
    return _binary(c, "ADD", cand, _binary(c, "MUL", z, _binary(c, "SUB", prev, cand, gate1), gate1), gate1)


def _step_masks(c, mask, steps: int, batch: int, time_major: bool, go_backwards: bool) -> list:
    """Keras' [batch, time] mask as one [batch, 1] bool per step, in processing order. Unstacked as float32
    (TFLite Micro's UNPACK takes no bool), each step compared back to a bool."""
    f32 = np.dtype(np.float32)
    flags = c.op("CAST", [mask], dtype=f32, shape=(batch, steps))
    per_step = c.op("UNPACK", [flags], {"num": steps, "axis": 1}, outs=[(f32, (batch,))] * steps)
    per_step = per_step if isinstance(per_step, list) else [per_step]
    if go_backwards:
        per_step = per_step[::-1]
    return [c.op("GREATER", [c.op("RESHAPE", [m, np.array([batch, 1], np.int32)], dtype=f32, shape=(batch, 1)),
                             np.array(0.5, np.float32)], dtype=np.bool_, shape=(batch, 1))
            for m in per_step]


def pack_steps(c, outs: list, time_major: bool):
    """The per-step states as one [batch, time, units] (or [time, batch, units]) sequence."""
    batch, units = outs[0].shape
    steps = len(outs)
    return c.op("PACK", outs, {"values_count": steps, "axis": 0 if time_major else 1}, dtype=np.float32,
                shape=(steps, batch, units) if time_major else (batch, steps, units))


@fusion("keras.layers.GRU")
def fuse_keras_gru(c):
    from fuselite.fusion.forms import chosen_form
    from fuselite.fusion.rnn_loop import loop_layer

    a = c.attrs
    if a.get("stateful"):
        c.decline("GRU has stateful=True but its state is not passed as arguments")
    results = chosen_form(c, "GRU", {"unrolled": _unrolled_layer, "loop": lambda c: loop_layer(c, "GRU")},
                          fallback="unrolled")
    return _unrolled_layer(c) if results is None else results


def _unrolled_layer(c):
    a = c.attrs
    x, tm, batch, _ = _unrollable(c)
    n_states = int(a.get("n_initial_states", 0))
    h0 = c.args[4].value if n_states else None
    mask = _mask(c, 4 + n_states, x, tm) if a.get("has_mask") else None
    final: list = []
    outs = _direction(c, x, 1, h0, tm, bool(a.get("go_backwards")), batch, mask, final)
    out = pack_steps(c, outs, tm) if a.get("return_sequences") else outs[-1]
    return [out, final[0]] if a.get("return_state") else out


def _mask(c, index: int, x, tm: bool):
    """The composite's mask argument: bool [batch, time] (Keras' layout, also for a time-major input)."""
    if index >= len(c.args):
        c.decline("the GRU has a mask but the composite carries no mask argument")
    m = c.args[index]
    steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
    if m.dtype != np.bool_ or m.shape is None or len(m.shape) != 2 or m.shape[1] not in (None, steps):
        c.decline(f"the mask must be bool [batch, time], got {m.dtype} {m.shape}")
    return m.value if m.const is None else c.const(m.const)


def _unrollable(c, kind: str = "GRU", dynamic_batch: bool = False, max_steps: int | None = MAX_UNROLL,
                form: str = "unrolled"):
    """The sequence input, whether it is time-major, the static batch and number of steps of an RNN the
    unrolled forms can write (``kind``: GRU, LSTM or SimpleRNN), or a decline saying why not. With
    ``dynamic_batch`` (a form whose ops take any batch), an unknown batch stays None; ``max_steps``: the most
    steps the form writes (None: any static number, the loop form)."""
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
    if steps is None or max_steps is not None and steps > max_steps:
        c.decline(f"unrolling needs a static number of time steps <= {max_steps}, got {steps}" if max_steps else
                  "the loop form needs a static number of time steps")
    if batch is None and not dynamic_batch:
        raise NeedsStaticBatch(f"the {form} {what} needs a static batch size here")
    return x, tm, batch, steps


def _direction(c, x, start: int, h0, tm: bool, backwards: bool, batch: int, mask=None,
               final: list | None = None) -> list:
    """One GRU over ``x`` with the weights at arguments ``start`` .. ``start + 2``: its states per step."""
    a = c.attrs
    k, rk, b = c.args[start].const, c.args[start + 1].const, c.args[start + 2].const
    if k is None or rk is None or b is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    reset_after = bool(a.get("reset_after", True))
    if not reset_after and b.ndim != 1:
        c.decline(f"a reset_after=False GRU has one bias of [3 * units], got {b.shape}")
    b_in, b_rec = split_gru_bias(b)
    return unrolled_gru(c, x, k, rk, b_in, b_rec, h0, activation=a["activation"], reset_after=reset_after,
                        time_major=tm, go_backwards=backwards, batch=batch, mask=mask, final=final,
                        zero_output=bool(a.get("zero_output_for_mask")))


def bidirectional_gru(c, merge, mask=None) -> list:
    """``Bidirectional(GRU)`` (no LiteRT op): two unrolled GRUs, the backward one over the reversed sequence
    (and ``mask``), joined by :func:`merge_directions`."""
    x, tm, batch, _ = _unrollable(c)
    finals: tuple[list, list] = ([], [])
    fw = _direction(c, x, 1, None, tm, False, batch, mask, finals[0])
    bw = _direction(c, x, 4, None, tm, True, batch, mask, finals[1])
    return merge_directions(c, merge, fw, bw, *finals, tm)


def merge_directions(c, merge, fw: list, bw: list, fw_final: list, bw_final: list, tm: bool) -> list:
    """A Bidirectional's results from its two unrolled directions (outputs per step in processing order):
    the backward outputs put back in time order, merged by ``merge(c, mode, fw, bw, shape)``; in Keras' order
    (the merged output(s), then the forward and the backward final states with ``return_state``)."""
    a = c.attrs
    mode = a.get("merge_mode", "concat")
    if a.get("return_sequences"):
        fw_seq, bw_seq = pack_steps(c, fw, tm), pack_steps(c, bw[::-1], tm)
        y = merge(c, mode, fw_seq, bw_seq, fw_seq.shape)
    else:
        y = merge(c, mode, fw[-1], bw[-1], fw[-1].shape)
    y = y if isinstance(y, list) else [y]
    return y + list(fw_final) + list(bw_final) if a.get("return_state") else y