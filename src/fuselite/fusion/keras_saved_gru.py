"""tf-keras GRU layers in SavedModels and concrete functions -> the unrolled GRU of ``fusion/gru.py``.

When a tf-keras model is saved with ``tf.saved_model.save`` (or traced into a concrete
function), a ``GRU`` layer that could run on cuDNN (tanh / sigmoid, ``reset_after=True``,
``use_bias``, no recurrent dropout, not unrolled) appears as tf-keras' own composite: the
``standard_gru`` function, tagged ``api_implements = "gru_<uuid>"``. Its tensor arguments
are ``(inputs, init_h, kernel, recurrent_kernel, bias)`` with ``bias`` [2, 3u] (input and
recurrent bias); a masked layer adds ``mask``, a ragged input ``sequence_lengths``. Its
results are ``(last_output, outputs, new_h, runtime)``; ``outputs`` is the whole sequence
or, without ``return_sequences``, the last output with a time axis of 1. Every other GRU
(``reset_after=False``, another activation, no bias) is a plain ``while`` loop, which
``fusion/loops.py`` recognises.

LiteRT has no GRU op, so the composite becomes the form ``rnn_form`` asks (``fusion/forms.py``,
``traced_form``): the loop form (``fusion/rnn_loop.py``, the default for float models; any number of
steps, an unknown batch kept dynamic) or the unrolled builtins of an in-memory GRU (at most
``MAX_UNROLL`` steps; ``rnn_form="unrolled"`` or ``"fused"``, quantized conversions). As for tf-keras' LSTM (``keras_saved_lstm.py``), the
baked-in ``time_major``, ``go_backwards`` and ``return_sequences`` are found by running
the function once with TensorFlow and matching a NumPy GRU (gates z, r, h;
``reset_after=True``) for every hypothesis; the rule fuses only when exactly one
reproduces all three float results within 1e-5. Anything else is declined with a
reason and converted from the body (whose loop may still be recognised). A masked layer's composite
(a sixth argument, ``mask``) takes the loop form only, as tf-keras' masked LSTM does
(``keras_saved_lstm.py``).
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.forms import traced_form
from fuselite.fusion.gru import MAX_UNROLL, _mask, pack_steps, unrolled_gru
from fuselite.fusion.keras_saved_lstm import determine_flags, tf_keras_composite
from fuselite.fusion.registry import fusion
from fuselite.fusion.rnn_kit import numpy_gru, split_gru_bias
from fuselite.fusion.rnn_loop import loop_over

ARG_NAMES = ("inputs", "init_h", "kernel", "recurrent_kernel", "bias")


@fusion("gru_*")
def fuse_tf_keras_saved_gru(c):
    # the loop form takes any batch (and a mask); a stateful layer's state is read from a variable
    loop = len(c.args) > 1 and traced_form(c.rnn_forms, "GRU", c.args[1].variable) == "loop"
    fdef, library, mask = tf_keras_composite(c, "GRU", ARG_NAMES, 4, "the unrolled GRU", loop)
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
    if x.shape[0] is None and x.shape[1] is None:
        # e.g. the second of two stacked GRUs: tf-keras' loop output has no static length, and
        # the composite's signature is not refined from its call site after the first is fused
        c.decline(f"unrolling needs a static number of time steps, the input has shape {x.shape} at the "
                  "composite's boundary")
    if c.batch_size is None and x.shape[1 if hint else 0] is None and not dynamic:
        raise NeedsStaticBatch(need, h0.shape[0] if h0.const is None else None)

    time_major, go_backwards, return_sequences, zero_output, runtime = determine_flags(
        c, fdef, library, n_states=1, what="GRU", cell="a standard GRU (reset_after=True, tanh/sigmoid, gates z, r, h)",
        reference=_reference, mask=mask)
    steps = x.shape[0 if time_major else 1]
    if steps is None or steps > MAX_UNROLL and not loop:
        c.decline(f"unrolling needs a static number of time steps <= {MAX_UNROLL}, got {steps}" if not loop else
                  "the loop form needs a static number of time steps")
    batch = x.shape[1 if time_major else 0] or c.batch_size
    if batch is None and not dynamic:
        raise NeedsStaticBatch(need, h0.shape[0] if h0.const is None else None)
    if h0.shape[0] not in (None, batch):
        c.decline(f"initial state 'init_h' has batch {h0.shape[0]}, the sequence has batch {batch}")

    if h0.const is not None and not np.any(h0.const):
        h = None  # zero state: the first step's recurrent projection folds to a constant
    elif h0.shape == (batch, units):
        h = h0.value
    else:
        h = c.op("RESHAPE", [h0, np.array([-1, units], np.int32)], dtype=np.float32, shape=(batch, units))
    if loop:
        flags = None if mask is None else _mask(c, mask, x, time_major)
        outputs, (new_h,), last = loop_over(c, "GRU", x.value, 2, [h], activation="tanh", tm=time_major,
                                            backwards=go_backwards, sequence=return_sequences, mask=flags,
                                            zero_output=zero_output)
    else:
        outs = unrolled_gru(c, x, k.const, rk.const, *split_gru_bias(b.const), h, time_major=time_major,
                            go_backwards=go_backwards, batch=batch)
        last = new_h = outs[-1]
        outputs = pack_steps(c, outs, time_major) if return_sequences else None
    c.form = ("loop" if loop else "unrolled") + (" (masked)" if mask is not None else "")
    if outputs is None:  # tf-keras returns the last output with a time axis of 1
        shape = (1, batch, units) if time_major else (batch, 1, units)
        outputs = c.op("RESHAPE", [last, np.array([-1 if d is None else d for d in shape], np.int32)],
                       dtype=np.float32, shape=shape)
    return [last, outputs, new_h, c.const(np.asarray(runtime, np.float32), name="runtime")]


def _reference(x, states, weights, time_major, go_backwards, **masking):
    (h0,), (kernel, recurrent_kernel, bias) = states, weights
    seq, h = numpy_gru(x, h0, kernel, recurrent_kernel, bias, time_major=time_major, go_backwards=go_backwards,
                       **masking)
    return seq, [h]
