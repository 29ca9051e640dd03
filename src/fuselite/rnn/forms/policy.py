"""The forms of a recurrent layer (``rnn_form``): which one each family gets, and choosing it in a rule.

* ``fused``: LiteRT's sequence op (``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN``, the bidirectional ones);
  LSTM and SimpleRNN only (LiteRT has no GRU op);
* ``unrolled``: builtins step by step, the input projection hoisted (``rnn/forms/unrolled.py``);
* ``loop``: the input projection hoisted, the steps in a ``WHILE`` without TensorLists
  (``rnn/forms/loop.py``).

Example (in a rule: the unrolled or loop form where asked, else None and the rule writes the fused op)::

    results = chosen_form(c, "LSTM", {"unrolled": build_unrolled, "loop": build_loop})
"""

from __future__ import annotations

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.composite import FusionDeclined

# The form of each family when the conversion does not choose one (rnn_form="default"): the loop form,
# measured faster than the official converter's model for every family at about its file size
# (benchmarks/rnn_forms.py, docs/rnn.md#forms); the unrolled form is faster still for sequences and SimpleRNN
# here, but its file grows with the steps (1.6-1.8x the official one at 50 steps). Quantized conversions and
# TFLite Micro keep the fused ops: LiteRT's hybrid sequence kernels (dynamic range), the integer LSTM kernels
# (int16 cell state; step-by-step int8 ops would not keep it), and the quantizer's own unrolled SimpleRNN
# (passes/unroll_rnn.py), as measured in docs/quantization-benchmarks.md; a GRU (no LiteRT op) unrolled there.
DEFAULT_FORMS = {"LSTM": "loop", "SimpleRNN": "loop", "GRU": "loop"}
QUANTIZED_FORMS = {"LSTM": "fused", "SimpleRNN": "fused", "GRU": "unrolled"}
RNN_FORMS = ("default", "fused", "unrolled", "loop", "auto")


def rnn_forms(rnn_form: str, quantized: bool, bidirectional: str = "split") -> dict[str, str]:
    """The form of each family ({"LSTM": ..., "SimpleRNN": ..., "GRU": ..., "stateful": ...}) for the option
    ``rnn_form`` ("default", "fused", "unrolled" or "loop"; "auto" is resolved by the converter into the
    others) and a quantized (dynamic range, int8, 16x8) or TFLite Micro conversion (``quantized``). With
    ``bidirectional="fused"`` (keep LiteRT's bidirectional ops) and the default forms, a ``"Bidirectional"``
    entry keeps LSTM and SimpleRNN Bidirectional layers fused."""
    if rnn_form in ("fused", "unrolled", "loop"):
        return {**dict.fromkeys((*DEFAULT_FORMS, "stateful"), rnn_form),
                "GRU": "unrolled" if rnn_form == "fused" else rnn_form}  # no fused GRU op
    # a stateful layer by default: the fused op's in-place state (its unrolled form was not measured)
    forms = {**(QUANTIZED_FORMS if quantized else DEFAULT_FORMS), "stateful": "fused"}
    if bidirectional == "fused":
        forms["Bidirectional"] = "fused"
    return forms


def traced_form(rnn_forms: dict, kind: str, stateful: bool) -> str:
    """The form of a layer met in a SavedModel or concrete function (a tf-keras composite, a recognised loop),
    where a Bidirectional is two separate layers: as ``rnn_forms`` says for ``kind`` (a stateful layer's, under
    "stateful"), except that with a "Bidirectional" entry (``bidirectional="fused"``) an LSTM or SimpleRNN keeps
    the fused op, so that a forward / backward pair can become LiteRT's bidirectional op
    (passes/bidirectional.py)."""
    if kind != "GRU" and "Bidirectional" in rnn_forms:
        return "fused"
    return rnn_forms.get("stateful" if stateful else kind, "unrolled" if kind == "GRU" else "fused")


def chosen_form(c, kind: str, forms: dict, fallback: str = "fused", key: str | None = None):
    """The results of the form ``c.rnn_forms`` asks for a ``kind`` layer, built by ``forms[form](c)``
    ("unrolled", "loop"), with the form in ``c.form`` for the report; None where the ``fallback`` form (the
    fused op, built by the caller) is to be written: asked for, or the asked form cannot be written (a dynamic
    number of steps, a stateful layer), with the reason kept. Where the form needs a static batch, the
    conversion is run again at one (``NeedsStaticBatch``), in the same form. A masked
    layer takes the loop form where asked, else the unrolled one (the fused ops have no mask), and falls back to
    the unrolled form. ``key``: the entry of ``c.rnn_forms`` to read where it has one (default: ``kind``)."""
    a = c.attrs
    key = "stateful" if a.get("state_variables") else key if key in c.rnn_forms else kind
    form = c.rnn_forms.get(key, fallback)
    masked = bool(a.get("has_mask"))
    if masked and form != "loop":
        c.form = "unrolled (masked)"
        return forms["unrolled"](c)
    if form not in forms:
        c.form = fallback
        return None
    first, subgraphs = len(c.ops), len(c.subgraphs)
    try:
        results = forms[form](c)
    except NeedsStaticBatch:
        raise  # converted again at a static batch, in the same form
    except FusionDeclined as e:
        del c.ops[first:], c.subgraphs[subgraphs:]
        if masked:
            c.form = f"unrolled (masked; not {form}: {e})"
            return forms["unrolled"](c)
        c.form = f"{fallback} (not {form}: {e})"
        return None
    c.form = f"{form} (masked)" if masked else form
    return results
