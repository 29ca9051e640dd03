"""Keras recurrent layers in memory -> the form ``rnn_form`` asks (``rnn/forms/policy.py``).

Composites ``keras.layers.LSTM`` / ``GRU`` / ``SimpleRNN`` / ``Bidirectional`` / ``ConvLSTM2D`` are produced
by ``fuselite.frontend.keras_rnn`` while a Keras model is traced. Arguments:
``(x, kernel, recurrent_kernel, bias[, backward kernel, recurrent_kernel, bias], *initial_states[, mask])``;
attributes: the layer configuration. Each rule reads them, builds the cell (``rnn/cells/``) and writes
the chosen form: loop (``forms/loop.py``, the float default), unrolled (``forms/unrolled.py``; a masked
layer where the loop form is not asked; a GRU wherever the fused op would be) or fused
(``forms/fused.py``; LSTM and SimpleRNN). ConvLSTM2D is unrolled only (``cells/conv_lstm.py``).

Keras weights are ``[in, gates * units]`` with gates ``i, f, c, o`` for an LSTM; LiteRT wants one
``[units, in]`` matrix and one bias per gate (``kit.keras_to_litert``).
"""

from __future__ import annotations

import numpy as np

from fuselite.fusion.registry import fusion
from fuselite.rnn.build import pack_steps, reverse, swap_batch_and_time, time_major_input, time_step
from fuselite.rnn.cells import Cell, keras_cell, keras_family
from fuselite.rnn.cells.conv_lstm import unrolled_conv_lstm
from fuselite.rnn.cells.gru import split_gru_bias
from fuselite.rnn.forms.fused import check_fusable, layer_weights, lstm_sequence, read_state, rnn_sequence, state
from fuselite.rnn.forms.layer import layer_results, merge, merge_directions
from fuselite.rnn.forms.loop import loop_steps
from fuselite.rnn.forms.policy import at_length, chosen_form, forms_of, layer_label, layer_size, layer_steps
from fuselite.rnn.forms.unrolled import unroll, unrollable
from fuselite.rnn.kit import FUSED_ACTIVATIONS, GATE_ORDERS, lstm_weight_operands

# -- reading a layer's composite -------------------------------------------------------------------


def layer_mask(c, index: int, x, tm: bool):
    """The composite's mask argument: bool [batch, time] (Keras' layout, also for a time-major input)."""
    if index >= len(c.args):
        c.decline(f"the {c.attrs.get('layer', c.interface)} has a mask but the composite carries no mask argument")
    m = c.args[index]
    steps = x.shape[0] if tm else x.shape[1]
    if m.dtype != np.bool_ or m.shape is None or len(m.shape) != 2 or m.shape[1] not in (None, steps):
        c.decline(f"the mask must be bool [batch, time], got {m.dtype} {m.shape}")
    return m.value if m.const is None else c.const(m.const)


def constant_weights(c, start: int) -> tuple:
    """(kernel, recurrent kernel, bias): the constant arguments ``start`` .. ``start + 2``, or a decline."""
    kernel, recurrent, bias = (c.args[start + i].const for i in range(3))
    if kernel is None or recurrent is None or bias is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    return kernel, recurrent, bias


def layer_cell(c, kind: str, start: int, activation: str | None = None) -> Cell:
    """The cell of a Keras ``kind`` composite, its weights the constant arguments ``start`` .. ``start + 2``."""
    a = c.attrs
    kernel, recurrent, bias = constant_weights(c, start)
    if kind != "GRU":
        return keras_cell(kind, kernel, recurrent, bias, activation or a["activation"])
    reset_after = bool(a.get("reset_after", True))
    if not reset_after and bias.ndim != 1:
        c.decline(f"a reset_after=False GRU has one bias of [3 * units], got {bias.shape}")
    bias_in, bias_rec = split_gru_bias(bias)
    return keras_cell(kind, kernel, recurrent, bias_in, activation or a["activation"], reset_after=reset_after,
                      recurrent_bias=bias_rec)


# -- the unrolled form -------------------------------------------------------------------------------


def unrolled_layer(c, kind: str) -> list:
    """The results of a Keras ``kind`` ("LSTM", "SimpleRNN" or "GRU") composite unrolled (or a decline): with
    its mask if it has one (``SELECT_V2``s per step); an unknown batch stays dynamic where the cell allows."""
    a = c.attrs
    if a.get("stateful"):
        c.decline(f"a stateful {'masked ' if a.get('has_mask') else ''}{kind} is not unrolled")
    n_states = int(a.get("n_initial_states", 0))
    dynamic = not a.get("has_mask") and not n_states and c.dynamic_batch and not keras_family(kind).static_batch_unrolled
    x, tm, batch, steps = unrollable(c, kind, dynamic_batch=dynamic)
    mask = layer_mask(c, 4 + n_states, x, tm) if a.get("has_mask") else None
    cell = layer_cell(c, kind, 1)
    states = [c.args[4 + i].value for i in range(n_states)] or [None] * cell.n_states
    outs, finals = unroll(c, cell, x, states, tm=tm, backwards=bool(a.get("go_backwards")), batch=batch,
                          steps=steps, mask=mask, zero_output=bool(a.get("zero_output_for_mask")))
    return layer_results(c, pack_steps(c, outs, tm) if a.get("return_sequences") else outs[-1], finals)


def unrolled_bidirectional(c, merge_fn) -> list:
    """A ``Bidirectional`` of LSTM, SimpleRNN or GRU with both directions unrolled (the backward one over the
    reversed sequence, and mask if there is one), joined by :func:`~fuselite.rnn.forms.layer.merge_directions`."""
    a = c.attrs
    kind = a.get("layer")
    dynamic = not a.get("has_mask") and c.dynamic_batch and not keras_family(kind).static_batch_unrolled
    x, tm, batch, steps = unrollable(c, kind, dynamic_batch=dynamic)
    mask = layer_mask(c, 7, x, tm) if a.get("has_mask") else None
    dirs = []
    for start, backwards in ((1, False), (4, True)):
        cell = layer_cell(c, kind, start)
        dirs.append(unroll(c, cell, x, [None] * cell.n_states, tm=tm, backwards=backwards, batch=batch, steps=steps,
                           mask=mask, zero_output=bool(a.get("zero_output_for_mask"))))
    (fw, fw_final), (bw, bw_final) = dirs
    return merge_directions(c, merge_fn, fw, bw, fw_final, bw_final, tm)


# -- the loop form ---------------------------------------------------------------------------------------


def loopable(c, kind: str, mask_index: int):
    """The sequence input, whether it is time-major, the batch (None: dynamic), the number of steps and the mask
    (the argument ``mask_index`` of a masked layer, else None) of a layer the loop form can write."""
    a = c.attrs
    if a.get("stateful"):
        c.decline(f"a stateful {kind} keeps the fused op (the loop form was not built for it)")
    x, tm, batch, steps = unrollable(c, kind, dynamic_batch=c.dynamic_batch, max_steps=None, form="loop form of")
    return x, tm, batch, steps, (layer_mask(c, mask_index, x, tm) if a.get("has_mask") else None)


def loop_layer(c, kind: str) -> list:
    """The results of a Keras ``kind`` ("LSTM", "SimpleRNN" or "GRU") composite in the loop form (or a decline)."""
    a = c.attrs
    n_states = int(a.get("n_initial_states", 0))
    x, tm, batch, steps, mask = loopable(c, kind, 4 + n_states)
    cell = layer_cell(c, kind, 1)
    states = [c.args[4 + k].value for k in range(n_states)] or [None] * cell.n_states
    seq, finals, last = loop_steps(c, cell, x, states, tm=tm, backwards=bool(a.get("go_backwards")), batch=batch,
                                   steps=steps, sequence=bool(a.get("return_sequences")), mask=mask,
                                   zero_output=bool(a.get("zero_output_for_mask")))
    return layer_results(c, seq if seq is not None else last, finals)


def loop_bidirectional(c, merge_fn) -> list:
    """A ``Bidirectional`` of LSTM, SimpleRNN or GRU, each direction in the loop form (the backward one over the
    reversed sequence, its outputs put back in time order), merged by ``merge_fn(c, mode, fw, bw, shape)``; in
    Keras' order (the merged output(s), then the forward and the backward final states with ``return_state``)."""
    a = c.attrs
    kind = a.get("layer")
    x, tm, batch, steps, mask = loopable(c, kind, 7)
    sequence = bool(a.get("return_sequences"))
    dirs = []
    for start, backwards in ((1, False), (4, True)):
        cell = layer_cell(c, kind, start)
        dirs.append(loop_steps(c, cell, x, [None] * cell.n_states, tm=tm, backwards=backwards, batch=batch,
                               steps=steps, sequence=sequence, mask=mask,
                               zero_output=bool(a.get("zero_output_for_mask"))))
    (fw_seq, fw_final, fw_last), (bw_seq, bw_final, bw_last) = dirs
    mode = a.get("merge_mode", "concat")
    if sequence:
        bw_seq = reverse(c, bw_seq, 0 if tm else 1)
        y = merge_fn(c, mode, fw_seq, bw_seq, fw_seq.shape)
    else:
        y = merge_fn(c, mode, fw_last, bw_last, fw_last.shape)
    y = y if isinstance(y, list) else [y]
    return y + list(fw_final) + list(bw_final) if a.get("return_state") else y


FORMS = {"unrolled": unrolled_layer, "loop": loop_layer}  # the forms besides the fused one, per layer


def _size(c, kind: str, directions: int = 1):
    """The layer's size for the default form's rule (``policy.layer_size``), with the forms that would need a
    static batch for it: the unrolled form of a family that needs one (a GRU), the unrolled and fused forms of a
    layer given initial states."""
    needs = {"unrolled"} if keras_family(kind).static_batch_unrolled else set()
    if int(c.attrs.get("n_initial_states", 0)):
        needs |= {"unrolled", "fused"}
    return layer_size(c, kind, directions, frozenset(needs))


def _forms(kind: str) -> dict:
    return {form: (lambda c, build=build: build(c, kind)) for form, build in FORMS.items()}


# -- the fused form ----------------------------------------------------------------------------------------


def _initial_states(c, first: int, n: int):
    states = [c.args[first + i] for i in range(int(c.attrs.get("n_initial_states", 0)))]
    if states and len(states) != n:
        c.decline(f"expected {n} initial state(s), got {len(states)}")
    return states or [None] * n


def _one_direction(c, layer: str, n_states: int):
    """(x, batch, units, per-gate weights, state tensors) of a Keras LSTM or SimpleRNN composite."""
    x, batch = check_fusable(c, layer)
    units = int(c.attrs["units"])
    weights = layer_weights(c, 1, len(GATE_ORDERS["keras", layer]), units)
    axis = 1 if c.attrs.get("time_major") else 0
    states = [state(c, batch, units, s, like=x, axis=axis) for s in _initial_states(c, 4, n_states)]
    return x, batch, units, weights, states


def _fused_results(c, seq, time_major: bool, *carried):
    """The layer's results: the sequence or its last step; with return_state also the last step (h)
    and the ``carried`` state tensors (an LSTM's cell state) as they are after the sequence op."""
    last = time_step(c, seq, -1, time_major)
    out = seq if c.attrs.get("return_sequences") else last
    if c.attrs.get("return_state"):
        return [out, last, *(read_state(c, s, last) for s in carried)]
    return out


@fusion("keras.layers.LSTM")
def fuse_keras_lstm(c):
    a = c.attrs
    results = chosen_form(c, "LSTM", _forms("LSTM"), size=_size(c, "LSTM"))
    if results is not None:  # the unrolled or loop form: a mask, or rnn_form
        return results
    x, _, _, weights, (h, cs) = _one_direction(c, "LSTM", 2)
    tm = bool(a.get("time_major"))
    seq = lstm_sequence(c, x, *weights, h, cs, activation=FUSED_ACTIVATIONS[a["activation"]], time_major=tm,
                        go_backwards=bool(a.get("go_backwards")))
    return _fused_results(c, seq, tm, cs)


@fusion("keras.layers.SimpleRNN")
def fuse_keras_simple_rnn(c):
    a = c.attrs
    results = chosen_form(c, "SimpleRNN", _forms("SimpleRNN"), size=_size(c, "SimpleRNN"))
    if results is not None:
        return results
    x, batch, units, weights, (h,) = _one_direction(c, "SimpleRNN", 1)
    tm = bool(a.get("time_major"))
    x_tm = time_major_input(c, x, tm, bool(a.get("go_backwards")))
    seq = rnn_sequence(c, x_tm, weights, h, FUSED_ACTIVATIONS[a["activation"]])
    return _fused_results(c, seq if tm else swap_batch_and_time(c, seq), tm)


@fusion("keras.layers.GRU")
def fuse_keras_gru(c):
    a = c.attrs
    if a.get("stateful"):
        c.decline("GRU has stateful=True but its state is not passed as arguments")
    results = chosen_form(c, "GRU", _forms("GRU"), fallback="unrolled", size=_size(c, "GRU"))
    return unrolled_layer(c, "GRU") if results is None else results


@fusion("keras.layers.Bidirectional")
def fuse_keras_bidirectional(c):
    a = c.attrs
    kind = a.get("layer")
    if kind not in ("LSTM", "SimpleRNN", "GRU"):
        c.decline(f"Bidirectional({kind}) has no fused LiteRT op")
    if a.get("go_backwards") or not a.get("backward_go_backwards", True):
        c.decline("Bidirectional expects a forward layer and a go_backwards backward layer")
    if int(a.get("n_initial_states", 0)):
        c.decline("initial states for Bidirectional are not supported by the fused op")
    mode = a.get("merge_mode", "concat")
    if mode not in ("concat", "sum", "mul", "ave", "none"):
        c.decline(f"merge_mode '{mode}' is not supported")
    if not a.get("stateful"):  # a mask (the fused ops have none), or rnn_form
        fallback = "unrolled" if kind == "GRU" else "fused"
        results = chosen_form(c, kind, {"unrolled": lambda c: unrolled_bidirectional(c, merge),
                                        "loop": lambda c: loop_bidirectional(c, merge)}, fallback,
                              key="Bidirectional" if kind != "GRU" else None, size=_size(c, kind, 2))
        if results is not None:
            return results
    if kind == "GRU":  # no LiteRT GRU op: both directions unrolled
        check_fusable(c, "Bidirectional(GRU)")
        return unrolled_bidirectional(c, merge)
    return _fused_bidirectional(c, kind, mode)


def _fused_bidirectional(c, kind: str, mode: str):
    """LiteRT's ``BIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN`` for a Keras Bidirectional of LSTM or SimpleRNN."""
    a = c.attrs
    x, batch = check_fusable(c, f"Bidirectional({kind})")
    units, tm = int(a["units"]), bool(a.get("time_major"))
    gates = len(GATE_ORDERS["keras", kind])
    fw, bw = layer_weights(c, 1, gates, units), layer_weights(c, 4, gates, units)
    seq_shape = (x.shape[0], batch, units) if tm else (batch, x.shape[1], units)
    tm_shape = (x.shape[0 if tm else 1], batch, units)  # the ops run time-major (faster kernels)
    merged = mode == "concat" and a.get("return_sequences") and not a.get("return_state")
    outs = [(np.dtype(np.float32), tm_shape[:-1] + (2 * units,))] if merged else [(np.dtype(np.float32), tm_shape)] * 2
    act = FUSED_ACTIVATIONS[a["activation"]]
    x = time_major_input(c, x, tm, False)
    if kind == "LSTM":
        states = [state(c, batch, units, like=x, axis=1) for _ in range(4)]
        inputs = [x, *lstm_weight_operands(*fw), *lstm_weight_operands(*bw), *states] + [None] * 9
        opts = {"fused_activation_function": act, "cell_clip": 0.0, "proj_clip": 0.0, "merge_outputs": bool(merged),
                "time_major": True, "asymmetric_quantize_inputs": False}
        res = c.op("BIDIRECTIONAL_SEQUENCE_LSTM", inputs, opts, outs=outs)
    else:
        states = [state(c, batch, units, like=x, axis=1) for _ in range(2)]
        inputs = [x, *fw.input, *fw.recurrent, *fw.bias, states[0], *bw.input, *bw.recurrent, *bw.bias, states[1],
                  None, None, None]  # no auxiliary input
        opts = {"fused_activation_function": act, "merge_outputs": bool(merged), "time_major": True,
                "asymmetric_quantize_inputs": False}
        res = c.op("BIDIRECTIONAL_SEQUENCE_RNN", inputs, opts, outs=outs)
    if merged:
        return res if tm else swap_batch_and_time(c, res)
    fw_seq, bw_seq = res if tm else [swap_batch_and_time(c, r) for r in res]
    fw_last, bw_last = time_step(c, fw_seq, -1, tm), time_step(c, bw_seq, 0, tm)
    if a.get("return_sequences"):
        y = merge(c, mode, fw_seq, bw_seq, seq_shape)
    else:
        y = merge(c, mode, fw_last, bw_last, fw_last.shape)
    y = y if isinstance(y, list) else [y]
    if not a.get("return_state"):
        return y
    if kind == "LSTM":
        return y + [fw_last, read_state(c, states[1], fw_last), bw_last, read_state(c, states[3], bw_last)]
    return y + [fw_last, bw_last]


# -- ConvLSTM2D (unrolled only) ---------------------------------------------------------------------------


@fusion("keras.layers.ConvLSTM2D")
def fuse_keras_conv_lstm2d(c):
    a = c.attrs
    if a.get("stateful"):
        c.decline("a stateful ConvLSTM2D is not unrolled (its state lives in variables)")
    if a.get("has_mask"):
        c.decline("a masked ConvLSTM2D is not unrolled")
    if a.get("data_format") != "channels_last":
        c.decline(f"data_format {a.get('data_format')} (LiteRT's convolutions are channels-last)")
    if at_length(forms_of(c), "unrolled", layer_steps(c), layer_label(c, "ConvLSTM2D"), fused=False) != "unrolled":
        c.decline("an unknown number of time steps: converted from Keras' own loop (a WHILE over the steps)")
    return unrolled_conv_lstm(c, a)
