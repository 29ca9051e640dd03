"""tf-keras LSTM and GRU layers in SavedModels and concrete functions: tf-keras' own composites.

**LSTM** -> the fused form (``UNIDIRECTIONAL_SEQUENCE_LSTM``) or the loop form. When a tf-keras model is
saved with ``tf.saved_model.save`` (or traced into a concrete function), the only trace of an ``LSTM`` layer
is tf-keras' own composite: the ``standard_lstm`` function, tagged ``api_implements = "lstm_<uuid>"``. Its
tensor arguments are ``(inputs, init_h, init_c, kernel, recurrent_kernel, bias)`` (a masked layer adds
``mask``, a ragged input ``sequence_lengths``) and its results ``(last_output, outputs, new_h, new_c,
runtime)``. The layer's ``time_major``, ``go_backwards`` and ``return_sequences`` are Python values baked
into the body.

The rule does not trust any attribute for them. It runs the original function once
with TensorFlow on random inputs (and the real, frozen weights), computes the LSTM in
NumPy for every hypothesis (``time_major`` x ``go_backwards``; ``return_sequences``
follows from the shape of ``outputs``) with tanh / sigmoid and Keras' gate order
``i, f, c, o``, and fuses only when exactly one hypothesis reproduces all four float
results within 1e-5. Anything else (another activation, ragged lengths, a changed tf-keras
implementation) is declined with a reason and converted from the body.

A masked layer's composite has a seventh argument, ``mask`` (bool ``[batch, time]``), and one more flag
baked in, ``zero_output_for_mask`` (what ``Bidirectional`` sets when it returns sequences); it is found
the same way, with a mask that is off at the first and the last step. Only the loop form takes a mask
(``forms/loop.py``): in the fused form (``rnn_form="fused"``, quantized conversions) the composite is
declined and converted from its body.

**GRU** ->When a tf-keras model is saved with ``tf.saved_model.save`` (or traced into a concrete
function), a ``GRU`` layer that could run on cuDNN (tanh / sigmoid, ``reset_after=True``,
``use_bias``, no recurrent dropout, not unrolled) appears as tf-keras' own composite: the
``standard_gru`` function, tagged ``api_implements = "gru_<uuid>"``. Its tensor arguments
are ``(inputs, init_h, kernel, recurrent_kernel, bias)`` with ``bias`` [2, 3u] (input and
recurrent bias); a masked layer adds ``mask``, a ragged input ``sequence_lengths``. Its
results are ``(last_output, outputs, new_h, runtime)``; ``outputs`` is the whole sequence
or, without ``return_sequences``, the last output with a time axis of 1. Every other GRU
(``reset_after=False``, another activation, no bias) is a plain ``while`` loop, which
``sources/loops.py`` recognises.

LiteRT has no GRU op, so the composite becomes the form ``rnn_form`` asks (``forms/policy.py``,
``traced_form``): the loop form (``forms/loop.py``, the default for float models; any number of
steps, an unknown batch kept dynamic) or the unrolled builtins of an in-memory GRU (at most
``MAX_UNROLL`` steps; ``rnn_form="unrolled"`` or ``"fused"``, quantized conversions). As for tf-keras' LSTM (above), the
baked-in ``time_major``, ``go_backwards`` and ``return_sequences`` are found by running
the function once with TensorFlow and matching a NumPy GRU (gates z, r, h;
``reset_after=True``) for every hypothesis; the rule fuses only when exactly one
reproduces all three float results within 1e-5. Anything else is declined with a
reason and converted from the body (whose loop may still be recognised). A masked layer's composite
(a sixth argument, ``mask``) takes the loop form only, as tf-keras' masked LSTM does
(above).
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.evaluate import evaluate_function
from fuselite.fusion.registry import fusion
from fuselite.rnn.build import MAX_UNROLL, pack_steps, time_step
from fuselite.rnn.cells.gru import GRUCell, numpy_gru, split_gru_bias
from fuselite.rnn.cells.lstm import LSTMCell, numpy_lstm
from fuselite.rnn.forms.fused import layer_weights, lstm_sequence, read_state, state
from fuselite.rnn.forms.loop import loop_over
from fuselite.rnn.forms.policy import UNKNOWN_LENGTH_NOTE, LayerSize, at_length, forms_of, traced_form
from fuselite.rnn.forms.unrolled import unroll
from fuselite.rnn.kit import keras_to_litert
from fuselite.rnn.sources.keras_layers import layer_mask

ARG_NAMES = ("inputs", "init_h", "init_c", "kernel", "recurrent_kernel", "bias")
TOL = 1e-5
_FILL = 3  # evaluation size of an unknown dimension (> 1, so go_backwards is observable)


def _masked(c) -> bool:
    """Whether a tf-keras composite receives a mask (its last argument; checked by ``tf_keras_composite``)."""
    return bool(c.args) and c.args[-1].name == "mask"


def tf_keras_composite(c, what: str, arg_names: tuple, n_results: int, fused_form: str, loop: bool):
    """``(function_def, library, mask)`` of a tf-keras ``standard_<what>`` composite whose signature fits:
    ``mask`` the index of its mask argument, or None.

    Declines (with the reason) ragged lengths among the arguments, a mask unless the layer takes the ``loop``
    form, other argument names, another number of results and anything but float32 (a bool mask).
    """
    fdef = c.function.attrs.get("_function_def")
    library = c.function.attrs.get("_library") or {}
    if fdef is None:
        c.decline(f"the original TensorFlow function is not available to check the {what}'s flags")
    names, n = tuple(a.name for a in c.args), len(arg_names)
    mask = n if names == (*arg_names, "mask") else None
    if mask is not None and not loop:
        c.decline(f"the tf-keras {what} receives a mask (e.g. from Embedding(mask_zero=True)); only the loop form "
                  f"takes it here (rnn_form='loop'), not {fused_form}")
    if mask is None and len(c.args) > n and names[:n] == arg_names:
        c.decline(f"the tf-keras {what} receives {', '.join(names[n:])} (ragged sequence lengths, or a mask "
                  f"beside them); no form of the {what} takes them")
    if names[:n] != arg_names or len(names) > n + (mask is not None):
        c.decline(f"not tf-keras' standard_{what.lower()}: arguments ({', '.join(names)}), "
                  f"expected ({', '.join(arg_names)})")
    c.expect_results(n_results)
    floats = c.args[:n]
    if any(a.dtype != np.float32 for a in floats) or any(r.dtype != np.float32 for r in c.results):
        c.decline(f"only float32 {what}s are fused (arguments: {', '.join(str(a.dtype) for a in c.args)})")
    if mask is not None and (c.args[mask].dtype != np.bool_ or c.args[mask].rank != 2):
        c.decline(f"the mask must be bool [batch, time], got {c.args[mask].dtype} {c.args[mask].shape}")
    return fdef, library, mask


def _size(c, kind: str, recurrent_kernel: int, needs_batch: frozenset[str]) -> LayerSize | None:
    """A tf-keras composite's size as the default form's rule reads it (``policy.sized_form``), its time axis
    where tf-keras' ``time_major`` attribute says (``needs_batch``: as ``LayerSize`` says); None where the steps
    or the weights' shapes are not known. The layer returns its sequence where a call site reads the composite's
    ``outputs`` (tf-keras' layer returns ``last_output`` otherwise). A tf-keras Bidirectional is a composite per
    direction here: read as one direction each."""
    x, rk = c.args[0], c.args[recurrent_kernel] if len(c.args) > recurrent_kernel else None
    fdef = c.function.attrs.get("_function_def")
    tm = bool(fdef is not None and "time_major" in fdef.attr and fdef.attr["time_major"].b)
    if rk is None or x.rank != 3 or rk.rank != 2 or not x.shape[0 if tm else 1] or not rk.shape[0]:
        return None
    return LayerSize(kind, rk.shape[0], x.shape[0 if tm else 1], x.shape[1 if tm else 0] or c.batch_size,
                     needs_batch=needs_batch, sequence=len(c.results) > 1 and c.results[1].used, features=x.shape[2])


@fusion("lstm_*")
def fuse_tf_keras_saved_lstm(c):
    # the loop form or the fused op (a stateful layer's states are read from variables)
    h0, c0 = c.args[1:3] if len(c.args) >= 3 else (None, None)
    given = h0 is not None and not (_zeros(h0) and _zeros(c0))  # initial states: a static batch but in the loop
    form, note = ("fused", "") if h0 is None else traced_form(
        forms_of(c), "LSTM", h0.variable or c0.variable, _masked(c), "tf_keras",
        _size(c, "LSTM", 4, frozenset({"unrolled", "fused"} if given else ())))
    fdef, library, mask = tf_keras_composite(c, "LSTM", ARG_NAMES, 5, f"the {form} form", form == "loop")
    return _fuse_keras_lstm(c, fdef, library, indy=False, mask=mask, form=form, note=note)


@fusion("indy_lstm_*")
def fuse_indy_lstm(c):
    """An IndyLSTM: Keras' LSTM with a diagonal recurrence (each unit sees only its own previous output),
    its recurrent kernel ``[units, 4]`` (one column per gate, i, f, c, o), tagged ``indy_lstm_<uuid>``
    -> ``UNIDIRECTIONAL_SEQUENCE_LSTM`` with ``diagonal_recurrent_tensors`` and ``[units]`` recurrent
    weights, as the official converter's prepare-composites stage does (``ConvertKerasLSTMLayer`` with
    ``indy``). The flags are checked against the body as for tf-keras' LSTM (see the module's doc)."""
    fdef = c.function.attrs.get("_function_def")
    if fdef is None:
        c.decline("the original TensorFlow function is not available to check the IndyLSTM's flags")
    if len(c.args) != 6:
        c.decline(f"an IndyLSTM takes 6 arguments (inputs, init_h, init_c, kernel, recurrent_kernel, bias), "
                  f"got {len(c.args)}")
    c.expect_results(5)
    if any(a.dtype != np.float32 for a in c.args) or any(r.dtype != np.float32 for r in c.results):
        c.decline(f"only float32 IndyLSTMs are fused (arguments: {', '.join(str(a.dtype) for a in c.args)})")
    return _fuse_keras_lstm(c, fdef, c.function.attrs.get("_library") or {}, indy=True, mask=None, form="fused")


def _diagonal_kernel(rk: np.ndarray) -> np.ndarray:
    """An IndyLSTM's ``[units, 4]`` recurrent kernel as Keras' full ``[units, 4 units]`` one."""
    units = rk.shape[0]
    return np.concatenate([np.diag(rk[:, g]) for g in range(4)], axis=1).reshape(units, 4 * units)


def _zeros(arg) -> bool:
    """An initial state that is zeros at every call site (a constant, or a FILL of a run-time batch)."""
    return arg.zeros or arg.const is not None and not np.any(arg.const)


def _fuse_keras_lstm(c, fdef, library, *, indy: bool, mask: int | None, form: str, note: str = ""):
    """A tf-keras LSTM (or IndyLSTM) composite in ``form``: "loop", "unrolled" (an unmasked LSTM) or "fused"
    (``note``: why, for the report). An unknown batch stays dynamic in the loop form, and in the others from
    zero initial states (as the same layer converted from memory)."""
    loop = form == "loop"
    form = form if loop or form == "unrolled" and not indy else "fused"
    x, h0, c0, k, rk, b = c.args[:6]
    if x.rank != 3 or x.shape[2] is None:
        c.decline(f"the sequence input must have rank 3 and static features, got shape {x.shape}")
    if rk.const is None or rk.rank != 2 or k.const is None or b.const is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    units = rk.shape[0]
    recurrent = (units, 4) if indy else (units, 4 * units)
    if k.shape != (x.shape[2], 4 * units) or rk.shape != recurrent or b.shape != (4 * units,):
        c.decline(f"weight shapes {k.shape}, {rk.shape}, {b.shape} do not fit an {'Indy' if indy else ''}LSTM "
                  f"of {units} units over {x.shape[2]} features")
    if indy:
        full = _diagonal_kernel(rk.const)
        wi, _, bias = keras_to_litert(k.const, full, b.const, 4, units)
        wr = [np.ascontiguousarray(rk.const[:, g]) for g in range(4)]  # the diagonals, [units] each
    else:
        full = rk.const
        wi, wr, bias = layer_weights(c, 3, 4, units)  # declines unless all three are constant
    for s in (h0, c0):
        if s.rank != 2 or s.shape[1] not in (None, units):
            c.decline(f"initial state '{s.name}' has shape {s.shape}, expected [batch, {units}]")

    # Avoid evaluating twice when the batch is unknown: tf-keras records its (unchecked)
    # time_major flag as an attribute; the evaluation below has the last word.
    hint = fdef.attr["time_major"].b if "time_major" in fdef.attr else False
    what = "IndyLSTM" if indy else "tf-keras LSTM"
    # the loop form (forms/loop.py) takes any batch, the others one read at run time from zero initial states
    zero_states = all(_zeros(s) for s in (h0, c0))
    dynamic = c.dynamic_batch and (loop or zero_states)
    need = f"the {form} {what} {'keeps its state in tensors that need' if form == 'fused' else 'needs'} a static " \
           "batch size" + ("" if zero_states else " (it is given initial states)")
    if c.batch_size is None and x.shape[1 if hint else 0] is None and not dynamic:
        raise NeedsStaticBatch(need)

    time_major, go_backwards, return_sequences, zero_output, runtime = _determine_flags(c, fdef, library, indy=indy,
                                                                                         mask=mask)
    batch = x.shape[1 if time_major else 0] or c.batch_size
    if batch is None and not dynamic:
        raise NeedsStaticBatch(need)
    initial = []
    for s in (h0, c0):
        if s.shape[0] not in (None, batch):
            c.decline(f"initial state '{s.name}' has batch {s.shape[0]}, the sequence has batch {batch}")
        initial.append(None if _zeros(s) else s)  # zeros: FILL

    if loop:
        states = [None if s is None else s.value for s in initial]
        flags = None if mask is None else layer_mask(c, mask, x, time_major)
        seq, (h, cs), last = loop_over(c, LSTMCell(k.const, full, b.const, "tanh"), x.value, states, tm=time_major,
                                       backwards=go_backwards, sequence=return_sequences, mask=flags,
                                       zero_output=zero_output)
        c.form = ("loop" if mask is None else "loop (masked)") + note
        return _results(c, last, seq, h, cs, runtime, batch, units, time_major)
    c.form = form + note
    steps = x.shape[0 if time_major else 1]
    if form == "unrolled" and (steps is None or steps > MAX_UNROLL):  # as from memory: the fused op, and why
        c.form = f"fused (not unrolled: {steps or 'an unknown number of'} steps, at most {MAX_UNROLL} are unrolled)"
        form = "fused"
    if form == "unrolled":
        outs, (h, cs) = unroll(c, LSTMCell(k.const, full, b.const, "tanh"), x, [None if s is None else s.value
                                                                               for s in initial],
                               tm=time_major, backwards=go_backwards, batch=batch, steps=steps)
        return _results(c, outs[-1], pack_steps(c, outs, time_major) if return_sequences else None, h, cs, runtime,
                        batch, units, time_major)
    h, cs = (state(c, batch, units, s, like=x, axis=1 if time_major else 0) for s in initial)
    seq = lstm_sequence(c, x, wi, wr, bias, h, cs, time_major=time_major, go_backwards=go_backwards,
                        diagonal_recurrence=indy)
    last = time_step(c, seq, -1, time_major)
    return _results(c, last, seq if return_sequences else None, last, read_state(c, cs, last), runtime, batch,
                    units, time_major)


def _results(c, last, seq, h, cell, runtime, batch, units, time_major) -> list:
    """standard_lstm's results: (last_output, outputs, new_h, new_c, runtime); ``seq`` None for the last output
    only, which tf-keras returns with a time axis of 1."""
    if seq is None:
        shape = (1, batch, units) if time_major else (batch, 1, units)
        seq = c.op("RESHAPE", [last, np.array([-1 if d is None else d for d in shape], np.int32)],
                   dtype=np.float32, shape=shape)  # an unknown batch (the loop form) read at run time
    return [last, seq, h, cell, c.const(np.asarray(runtime, np.float32), name="runtime")]


# -- determining the baked-in flags ----------------------------------------------------------


def _determine_flags(c, fdef, library, indy: bool = False, mask: int | None = None):
    """(time_major, go_backwards, return_sequences, zero_output_for_mask, runtime) of the body, or decline."""

    def reference(x, states, weights, time_major, go_backwards, **masking):
        k, rk, b = weights
        seq, h, cell = numpy_lstm(x, *states, k, _diagonal_kernel(rk) if indy else rk, b, time_major=time_major,
                                  go_backwards=go_backwards, **masking)
        return seq, [h, cell]

    cell = "a standard LSTM (tanh/sigmoid, gates i, f, c, o)"
    return determine_flags(c, fdef, library, n_states=2, what="IndyLSTM" if indy else "LSTM",
                           cell=cell.replace("standard", "diagonal-recurrence") if indy else cell, reference=reference,
                           mask=mask)


def determine_flags(c, fdef, library, *, n_states: int, what: str, cell: str, reference, mask: int | None = None):
    """(time_major, go_backwards, return_sequences, zero_output_for_mask, runtime) baked into a tf-keras RNN
    composite, or decline.

    For tf-keras' ``standard_lstm`` / ``standard_gru``: the arguments of ``c`` are the input
    sequence, ``n_states`` initial states, then the constant weights; the results are
    ``(last_output, outputs, *final states, runtime)``. The function is run once with
    TensorFlow on random inputs and compared with ``reference(x, states, weights,
    time_major, go_backwards, mask=..., zero_output=...) -> (outputs [time, batch, units] in processing
    order, [final states])`` for every hypothesis; exactly one must reproduce every float result within
    1e-5. ``what`` ("LSTM") and ``cell`` (what the reference computes) go into the reasons. ``mask``: the
    index of the composite's mask argument (bool [batch, time]; a batch-major layer's), or None; it is fed
    off at the first and the last step and at random between, so that ``zero_output_for_mask`` shows.
    """
    x = c.args[0]
    states = c.args[1:1 + n_states]
    rng = np.random.default_rng(0)
    xs = tuple(_FILL if d is None else d for d in x.shape)
    feeds = [rng.standard_normal(xs).astype(np.float32)]
    for s in states:
        if s.const is not None:
            feeds.append(s.const.astype(np.float32))
        else:
            feeds.append((0.5 * rng.standard_normal(tuple(_FILL if d is None else d for d in s.shape)))
                         .astype(np.float32))
    weights = [a.const for a in c.args[1 + n_states:mask]]
    flags = None
    if mask is not None:
        flags = rng.random(tuple(_FILL if d is None else d for d in c.args[mask].shape)) < 0.6
        flags[:, 0] = flags[:, -1] = False
        flags[:, flags.shape[1] // 2] = True
    check = (c, fdef, library, feeds, flags, what, reference)
    matches, got = _matching_hypotheses(*check, weights)
    if len(matches) > 1:
        # Weights that hide the order of the steps (e.g. zero kernels): the flags are part of
        # the body, not of the data, so ask again with random weights.
        weights = [(0.5 * rng.standard_normal(w.shape)).astype(np.float32) for w in weights]
        matches, got = _matching_hypotheses(*check, weights)
    if not matches:
        c.decline(f"evaluating the tf-keras {what} function did not reproduce {cell} "
                  "for any of time_major x go_backwards within 1e-5")
    if len(matches) > 1:
        c.decline(f"evaluating the tf-keras {what} function is ambiguous: {len(matches)} flag combinations "
                  f"reproduce it ({matches})")
    (tm, gb, rs, zo), = matches
    for flag, value in (("time_major", tm), ("go_backwards", gb)):
        if flag in fdef.attr and fdef.attr[flag].b != value:
            c.decline(f"the function's attribute {flag}={fdef.attr[flag].b} contradicts its body ({value})")
    runtime = got[-1]
    if runtime.shape != () or not np.isfinite(runtime):
        c.decline(f"unexpected runtime result {runtime!r}")
    return tm, gb, rs, zo, float(runtime)


def _matching_hypotheses(c, fdef, library, feeds, flags, what, reference, weights):
    """The (time_major, go_backwards, return_sequences, zero_output_for_mask) hypotheses that reproduce the
    function on ``feeds`` (the input, the states), ``weights`` and ``flags`` (its mask, or None), and its results."""
    masked = flags is not None
    n_results = len(feeds) + 2  # last_output, outputs, the final states, runtime
    try:
        got = evaluate_function(fdef, library, feeds + weights + ([flags] if masked else []))
    except Exception as e:  # noqa: BLE001 - a body TensorFlow cannot run is not fused
        c.decline(f"could not evaluate the tf-keras {what} function with TensorFlow: {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}")
    if len(got) != n_results:
        c.decline(f"the tf-keras {what} function returned {len(got)} result(s), expected {n_results}")
    x, states = feeds[0], feeds[1:]
    matches = []
    for tm in (False, True):
        steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
        real_steps = c.args[0].shape[0 if tm else 1]
        for gb in (False, True):
            if gb and real_steps == 1:
                continue  # one step: reversing changes nothing
            if any(s.shape[0] != batch for s in states) or masked and (tm or flags.shape != (batch, steps)):
                continue  # a time-major layer's mask is not batch-major
            for zo in (False, True) if masked else (False,):
                masking = {"mask": flags, "zero_output": zo} if masked else {}
                seq, finals = reference(x, states, weights, tm, gb, **masking)
                last = seq[-1]
                full = seq if tm else seq.transpose(1, 0, 2)
                one = last[None] if tm else last[:, None]
                for rs, outputs in ((True, full), (False, one)):
                    if not rs and real_steps == 1:
                        continue  # one step: all outputs are the last output
                    if all(_close(g, w) for g, w in zip(got[:-1], (last, outputs, *finals))):
                        matches.append((tm, gb, rs, zo))
    # time_major with both leading dimensions 1 is the same computation as batch-major
    if c.args[0].shape[0] == 1 and c.args[0].shape[1] == 1:
        matches = [m for m in matches if not m[0]] or matches
    return matches, got


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.all(np.abs(got.astype(np.float64) - want) <= TOL))


# -- tf-keras' standard_gru ----------------------------------------------------------------------------

GRU_ARG_NAMES = ("inputs", "init_h", "kernel", "recurrent_kernel", "bias")


@fusion("gru_*")
def fuse_tf_keras_saved_gru(c):
    # the loop form takes any batch (and a mask); a stateful layer's state is read from a variable
    form, note = traced_form(forms_of(c), "GRU", c.args[1].variable, _masked(c),
                             size=_size(c, "GRU", 3, frozenset({"unrolled"}))) if len(c.args) > 1 else ("unrolled", "")
    loop = form == "loop"
    fdef, library, mask = tf_keras_composite(c, "GRU", GRU_ARG_NAMES, 4, "the unrolled GRU", loop)
    x, h0, k, rk, b = c.args[:5]
    if x.rank != 3 or x.shape[2] is None:
        c.decline(f"the sequence input must have rank 3 and static features, got shape {x.shape}")
    if k.const is None or rk.const is None or b.const is None:
        c.decline("kernel, recurrent kernel and bias must be constant (frozen variables)")
    units = rk.shape[0] if rk.rank == 2 else 0
    if not units or k.shape != (x.shape[2], 3 * units) or rk.shape != (units, 3 * units) or b.shape != (2, 3 * units):
        c.decline(f"weight shapes {k.shape}, {rk.shape}, {b.shape} do not fit a GRU (reset_after=True) of "
                  f"{units} units over {x.shape[2]} features")
    if h0.rank != 2 or h0.shape[1] not in (None, units):
        c.decline(f"initial state 'init_h' has shape {h0.shape}, expected [batch, {units}]")

    # tf-keras records its (unchecked) time_major flag as an attribute; the evaluation below
    # has the last word. Checked first, so that an unknown batch is not evaluated twice.
    hint = fdef.attr["time_major"].b if "time_major" in fdef.attr else False
    dynamic = loop and c.dynamic_batch
    need = f"the {'loop form of the' if loop else 'unrolled'} GRU needs a static batch size"
    unknown_length = ""  # why the loop form replaces the unrolled one
    if x.shape[0] is None and x.shape[1] is None and not loop:
        # e.g. the second of two stacked GRUs: tf-keras' loop output has no static length, and
        # the composite's signature is not refined from its call site after the first is fused
        loop = at_length(forms_of(c), "unrolled", None, "a tf-keras GRU", fused=False) == "loop"
        dynamic, unknown_length = loop and c.dynamic_batch, UNKNOWN_LENGTH_NOTE
    if c.batch_size is None and x.shape[1 if hint else 0] is None and not dynamic:
        raise NeedsStaticBatch(need, h0.shape[0] if h0.const is None else None)

    time_major, go_backwards, return_sequences, zero_output, runtime = determine_flags(
        c, fdef, library, n_states=1, what="GRU", cell="a standard GRU (reset_after=True, tanh/sigmoid, gates z, r, h)",
        reference=_gru_reference, mask=mask)
    steps = x.shape[0 if time_major else 1]
    if not loop and steps is None:  # the loop form, or NeedsStaticLength (TFLite Micro, integer-only)
        loop = at_length(forms_of(c), "unrolled", steps, "a tf-keras GRU", fused=False) == "loop"
        dynamic, unknown_length = loop and c.dynamic_batch, UNKNOWN_LENGTH_NOTE
    if not loop and steps > MAX_UNROLL:
        c.decline(f"unrolling needs a static number of time steps <= {MAX_UNROLL}, got {steps}")
    batch = x.shape[1 if time_major else 0] or c.batch_size
    if batch is None and not dynamic:
        raise NeedsStaticBatch(need, h0.shape[0] if h0.const is None else None)
    if h0.shape[0] not in (None, batch):
        c.decline(f"initial state 'init_h' has batch {h0.shape[0]}, the sequence has batch {batch}")

    if _zeros(h0):
        h = None  # zero state: the first step's recurrent projection folds to a constant
    elif h0.shape == (batch, units):
        h = h0.value
    else:
        h = c.op("RESHAPE", [h0, np.array([-1, units], np.int32)], dtype=np.float32, shape=(batch, units))
    if loop:
        flags = None if mask is None else layer_mask(c, mask, x, time_major)
        outputs, (new_h,), last = loop_over(c, _gru_cell(k, rk, b), x.value, [h], tm=time_major,
                                            backwards=go_backwards, sequence=return_sequences, mask=flags,
                                            zero_output=zero_output)
    else:
        outs, _ = unroll(c, _gru_cell(k, rk, b), x, [h], tm=time_major, backwards=go_backwards, batch=batch,
                         steps=steps)
        last = new_h = outs[-1]
        outputs = pack_steps(c, outs, time_major) if return_sequences else None
    c.form = ("loop" if loop else "unrolled") + (" (masked)" if mask is not None else "") + (unknown_length or note)
    if outputs is None:  # tf-keras returns the last output with a time axis of 1
        shape = (1, batch, units) if time_major else (batch, 1, units)
        outputs = c.op("RESHAPE", [last, np.array([-1 if d is None else d for d in shape], np.int32)],
                       dtype=np.float32, shape=shape)
    return [last, outputs, new_h, c.const(np.asarray(runtime, np.float32), name="runtime")]


def _gru_cell(k, rk, b) -> GRUCell:
    """standard_gru's cell: tanh, reset_after, its [2, 3u] bias split into the input and the recurrent row."""
    bias_in, bias_rec = split_gru_bias(b.const)
    return GRUCell(k.const, rk.const, bias_in, "tanh", recurrent_bias=bias_rec)


def _gru_reference(x, states, weights, time_major, go_backwards, **masking):
    (h0,), (kernel, recurrent_kernel, bias) = states, weights
    seq, h = numpy_gru(x, h0, kernel, recurrent_kernel, bias, time_major=time_major, go_backwards=go_backwards,
                       **masking)
    return seq, [h]
