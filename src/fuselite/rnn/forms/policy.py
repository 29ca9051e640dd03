"""The forms of a recurrent layer (``rnn_form``): which one each layer gets (by default, for a float model at one
or two threads, by its size: ``SIZE_RULES``; else by its family), and choosing it in a rule.

* ``fused``: LiteRT's sequence op (``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN``, the bidirectional ones);
  LSTM and SimpleRNN only (LiteRT has no GRU op);
* ``unrolled``: builtins step by step, the input projection hoisted (``rnn/forms/unrolled.py``);
* ``loop``: the input projection hoisted, the steps in a ``WHILE`` without TensorLists
  (``rnn/forms/loop.py``).

Example (in a rule: the unrolled or loop form where asked, else None and the rule writes the fused op)::

    results = chosen_form(c, "LSTM", {"unrolled": build_unrolled, "loop": build_loop}, size=layer_size(c, "LSTM"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fuselite.errors import NeedsStaticBatch, NeedsStaticLength
from fuselite.fusion.composite import FusionDeclined
from fuselite.rnn.kit import GATE_ORDERS

# The thread count a model is converted for when the conversion does not say (``threads``): what LiteRT runs with
# when an app leaves ``num_threads`` unset. Measured (LiteRT 2.3): the Python Interpreter passes
# ``int(num_threads or 1)``, and an unset interpreter runs a large FULLY_CONNECTED at the same speed as
# ``num_threads=1`` with no thread started (2 threads start one and take half the time); the C++ builder's -1 is
# one thread for XNNPACK (a thread pool only above 1) and for the CPU backend (cpu_backend_context.cc,
# kDefaultNumThreadpoolThreads = 1). docs/rnn.md#thread-count.
DEFAULT_THREADS = 1

# The form of each family when the conversion does not choose one (rnn_form="default"), by the thread count the
# model will run with: the fastest form measured that is never slower than what the official converter writes for
# the same layer at that count (benchmarks/rnn_forms.py, benchmarks/loop_threads.py, docs/rnn.md#thread-count).
# * One thread: the loop form, faster than the official converter's model for every family (its WHILE loops and,
#   for tf-keras LSTMs, its fused ops) at about its file size. The unrolled form is often faster still, but its
#   file grows with the steps (1.6-1.9x the official one at 50 steps).
# * Two threads: the loop, except for the layers the official converter writes as LiteRT's fused LSTM op (tf-keras
#   LSTMs: "tf_keras.LSTM"), which keep that op. The loop and unrolled forms run a tiny FULLY_CONNECTED per step,
#   and XNNPACK splits each over its thread pool: the dispatch costs more than the product does (the same FCs
#   without a loop slow down 1.3-1.5x at 2 threads here; the WHILE kernel's own per-step work, 0.3 us, does not
#   move), while the fused ops' kernels run on one thread at any count. Against the official converter's WHILE
#   (which pays the same dispatches) the loop stays ahead (0.73-0.80x here, 0.77x on a 16-core Xeon); against its
#   fused op it does not everywhere (up to 1.9x on the Xeon), and the fused op is not always ahead of a WHILE here
#   (1.00-1.05x for a Keras 3 last-step LSTM).
# * Three threads or more: the fused ops for LSTM and SimpleRNN (fastest of all forms at 4 threads on the Xeon,
#   0.28-0.56x the official model), a GRU (no LiteRT op) in the loop, still ahead of the official WHILE (0.70x).
# Quantized conversions and TFLite Micro keep the fused ops at any thread count: LiteRT's hybrid sequence kernels
# (dynamic range), the integer LSTM kernels (int16 cell state; step-by-step int8 ops would not keep it), and the
# quantizer's own unrolled SimpleRNN (passes/unroll_rnn.py), as measured in docs/quantization-benchmarks.md; a GRU
# (no LiteRT op) unrolled there. 16x8 on LiteRT is the exception for LSTMs: LiteRT has no 16x8 LSTM kernel (its
# integer LSTM keeps int8 activations, 8x8->16), so an LSTM is unrolled into 16x8 builtins there (int16
# activations; measured 2.4-3.4x closer to the float model and 0.50-0.60x the time at one thread of the 8x8->16
# op, the file 4.3-5.0x larger: benchmarks/lstm_16x8.py), and keeps the integer LSTM op where it cannot be
# unrolled (an unknown or a too long length).
DEFAULT_FORMS = {"LSTM": "loop", "SimpleRNN": "loop", "GRU": "loop"}
TWO_THREAD_FORMS = {**DEFAULT_FORMS, "tf_keras.LSTM": "fused"}
THREADED_FORMS = {"LSTM": "fused", "SimpleRNN": "fused", "GRU": "loop"}
QUANTIZED_FORMS = {"LSTM": "fused", "SimpleRNN": "fused", "GRU": "unrolled"}
SIXTEEN_BY_EIGHT_FORMS = {**QUANTIZED_FORMS, "LSTM": "unrolled", "LSTM.unknown_length": "fused"}  # LiteRT, 16x8
RNN_FORMS = ("default", "fused", "unrolled", "loop", "auto")
# the rnn_forms entries for layers whose number of time steps is known only at run time: the form they take where
# theirs needs a static number (the loop form), or, where none may be written, why the length must be static
UNKNOWN_LENGTH, STATIC_LENGTH = "unknown_length", "static_length"
UNKNOWN_LENGTH_NOTE = " (not unrolled: the number of time steps is known only at run time)"  # for c.form
HOW_TO_FIX_LENGTH = ("give the model's input a static length (keras.Input(shape=(T, features)), or convert with "
                     "input_shapes={'input name': [None, T, features]}; CLI: --input-shape name:?,T,features)")


# -- the default form by a layer's size (float models run at 1 or 2 threads; issue 48) ------------------------

BY_SIZE = "by_size"  # the rnn_forms entry of a conversion whose default forms are chosen per layer by its size
# the rnn_forms entry of a conversion whose file must load in LiteRT's CompiledModel API (litert_api="any"): its
# loader refuses variable tensors, in which LiteRT's fused sequence ops (float, hybrid and integer) keep their
# state, so the default forms are never the fused ones there (sized_form skips the rules' fused rows)
COMPILED = "compiled_model"


@dataclass(frozen=True)
class LayerSize:
    """What a recurrent layer's default form is chosen from (:func:`sized_form`): its family ("LSTM", "GRU",
    "SimpleRNN"), units, time steps, batch (None: known only at run time) and directions (2: a Keras
    Bidirectional converted as one layer), whether it returns its whole sequence (``sequence``; None: not
    known where the form is chosen, read as the last step only) and its input's features (None: not known).
    ``needs_batch``: the forms that would need a static batch for this layer (an unrolled GRU; the unrolled and
    fused forms of a layer given initial states), which a layer whose batch is known only at run time does not
    take (the loop keeps the batch dynamic)."""

    family: str
    units: int
    steps: int
    batch: int | None = None
    directions: int = 1
    needs_batch: frozenset[str] = frozenset()
    sequence: bool | None = None
    features: int | None = None

    @property
    def step_weights(self) -> float:
        """The recurrent weights the unrolled form's steps read, MiB: a [gates x units, units] float32 matrix per
        step and direction (a gate per Keras gate block), each step its own op."""
        gates = len(GATE_ORDERS["keras", self.family])
        return self.steps * self.directions * gates * self.units ** 2 * 4 / 2 ** 20

    def __str__(self) -> str:
        return (f"{self.units} units x {self.steps} steps" +
                (f" of {self.features} features" if self.features else "") +
                (" x 2 directions" if self.directions == 2 else "") +
                (f", batch {self.batch}" if self.batch else ", a run-time batch") +
                f"{', the sequence out' if self.sequence else ''}: {self.step_weights:.2g} MiB of step weights")


@dataclass(frozen=True)
class SizeRule:
    """One row of a thread count's rule: ``form`` for the layers ``test`` holds for (``when`` says which)."""

    form: str
    when: str
    test: Callable[[LayerSize], bool]


# The default form of a float model's recurrent layer run at 1 or 2 threads, by its size: the first row that holds.
# Fitted on benchmarks/rnn_sizes.py's grid (docs/rnn-sizes.md: LSTM, GRU, SimpleRNN x plain / Bidirectional x Keras 3
# / tf-keras x units 16, 64, 256 x steps 8, 50, 200 x features 8, 64 x batch 1, 4 x sequence / last output, every
# form and the official converter's model timed side by side; fitted on 192 sampled points and checked on 48 more,
# then on 96 more, which gave the two LSTM rows, then on 96 more (432 in all), which with the others gave the
# SimpleRNN rows by features and three more at two threads: docs/rnn.md#by-layer-size) from what the policy can
# read of a layer. What the rows read:
# * step weights: the unrolled form runs a small FULLY_CONNECTED per step and direction, each with its own copy of
#   the recurrent weights once XNNPACK has packed them (the process grows by about that on the first invoke,
#   docs/rnn.md#thread-count): fastest of all while they stay small, 2-6x the loop's time once they do not; the
#   loop reads one copy each step, but writes a returned sequence step by step (DYNAMIC_UPDATE_SLICE), which the
#   unrolled form packs once. MAX_STEP_WEIGHTS bounds that memory: past it the unrolled form is often faster
#   still with the sequence out at batch 4 (at 7 of the grid's 9 such points: 0.14-0.63x the official model where
#   the loop takes 0.44-0.75x), but it would hold that many MiB of packed weights (up to 400 on the grid): the
#   default does not spend it, rnn_form="unrolled" does.
# * the last step out: the loop past 8 MiB of step weights at both thread counts (at one thread a Bidirectional
#   layer's past 1 MiB), at two threads from 200 steps (beyond the small layers at batch 1), and for an LSTM or GRU
#   of two directions at a batch over 1 from 50 steps (the fastest form at 6 of the grid's 7 such points, 0.46-0.85x
#   the official model, where the unrolled form takes up to 2.15x the loop's time; at 8 steps the unrolled form
#   is the fastest at 6 of 8 such points).
# * a GRU with the last step out, at one thread: the loop from 50 steps and 0.5 MiB (measured, not explained: at the
#   grid's five such points of one direction up to 16 MiB the loop 0.80-0.98x the official model, unrolled
#   0.77-1.15x: 1.14x and 1.15x where the loop takes 0.82x and 0.98x, within 4% of the loop at the other three;
#   an LSTM's unrolled step is as many ops, 11 to the GRU's 12, and keeps up there).
# * an LSTM with the sequence out and 200 steps, at both thread counts: its fused op at up to 64 units at batch 1
#   and at 16 units in two directions (the fastest form at all 11 such grid points at both counts, 0.11-1.03x the
#   official model, 1.03x only where it is the official model's own op; the loop writes each step of each
#   direction: 1.54x and 1.85x the official fused ops of a tf-keras Bidirectional LSTM of 64 units, the unrolled
#   form 1.71x at 16 units and batch 4).
# * an LSTM of two directions over 8 MiB of step weights (256 units over 8 steps): the loop (0.28-0.94x the official
#   model, the fastest form at 8 of the 12 timings of the grid's 6 such points, within 5% at 9; the unrolled form
#   1.27x at one of them).
# * a SimpleRNN's fused op by its input's features: LiteRT's UNIDIRECTIONAL_SEQUENCE_RNN multiplies each step's
#   input by the input weights inside the step (kernel_utils.cc RnnBatchStep: a matrix-vector product per step on
#   the builtin kernels), where the other forms take all the steps' inputs in one FULLY_CONNECTED (forms/__init__).
#   Over 200 steps of 8 features it is the fastest form at 15 of the 17 grid points the two fused SimpleRNN rows
#   take (0.03-0.23x the official model; the unrolled form up to 2.44x its time, the loop 10.24x): at up to 32
#   units at batch 1 or with the sequence out, and at two threads with the sequence out at batch 1 at any size
#   (with the last step out at batch 4 the unrolled form wins: the op 1.24-1.92x). At 64 features and up to 32
#   units at batch 1 under 200 steps, at two threads, the unrolled form (0.06-0.22x the official model, the op
#   up to 1.66x its time).
# * small layers at batch 1: LiteRT's fused sequence ops run on one thread, which at 2 threads beats splitting a
#   small layer's tiny products over the pool (not a GRU's, which has no such op: unrolled, or the loop from 200
#   steps with the last step out); at one thread, a small LSTM over 200 steps (the other forms' per-step ops cost
#   more than its products) and a small SimpleRNN of few features (above).
# A batch known only at run time is read as 1. Sizes between the grid's are not measured: the unit boundary sits
# between 16 and 64, at 32; the features' between 8 and 64, at 16. Over 200 steps (the longest measured) the loop,
# or a small LSTM's or SimpleRNN's fused op: the unrolled file grows with the steps (up to 45x the loop's file at
# 200 steps of 16 units, +0.8 MB).
SMALL_UNITS = 32
LONGEST_MEASURED = 200
MAX_STEP_WEIGHTS = 16  # MiB: the most packed weight the unrolled form may hold by default
SMALL_FEATURES = 16  # the grid's features: 8 and 64


def _small_at_batch_1(s: LayerSize) -> bool:
    return s.units <= SMALL_UNITS and s.batch in (1, None)


def _few_features(s: LayerSize) -> bool:
    return s.features is not None and s.features <= SMALL_FEATURES


def _long_lstm_sequence(s: LayerSize) -> bool:
    return s.family == "LSTM" and bool(s.sequence) and s.steps >= LONGEST_MEASURED and (
        (s.units <= 2 * SMALL_UNITS and s.batch in (1, None)) or (s.units <= SMALL_UNITS and s.directions == 2))


_BATCH_1 = "at batch 1 or a run-time batch"
_LONG = SizeRule("loop", f"over {LONGEST_MEASURED} steps", lambda s: s.steps > LONGEST_MEASURED)
_BOUNDED = SizeRule("unrolled", f"at most {MAX_STEP_WEIGHTS} MiB of step weights",
                    lambda s: s.step_weights <= MAX_STEP_WEIGHTS)
_ELSE = SizeRule("loop", f"over {MAX_STEP_WEIGHTS} MiB of step weights", lambda s: True)
_LONG_LSTM_SEQUENCE = SizeRule(
    "fused", f"an LSTM with the sequence out and {LONGEST_MEASURED} steps or more: at most {2 * SMALL_UNITS} units "
    f"{_BATCH_1}, or at most {SMALL_UNITS} units in two directions", _long_lstm_sequence)
_WIDE_BIDIRECTIONAL_LSTM = SizeRule("loop", "an LSTM of two directions over 8 MiB of step weights",
                                    lambda s: s.family == "LSTM" and s.directions == 2 and s.step_weights > 8)
_LAST_PAST_8_MIB = SizeRule("loop", "the last step out and over 8 MiB of step weights",
                            lambda s: not s.sequence and s.step_weights > 8)
SIZE_RULES: dict[int, tuple[SizeRule, ...]] = {
    1: (SizeRule("fused", f"an LSTM of at most {SMALL_UNITS} units {_BATCH_1} and {LONGEST_MEASURED} steps or more",
                 lambda s: s.family == "LSTM" and _small_at_batch_1(s) and s.steps >= LONGEST_MEASURED),
        SizeRule("fused", f"a SimpleRNN of at most {SMALL_UNITS} units over {LONGEST_MEASURED} steps or more of at "
                 f"most {SMALL_FEATURES} features, {_BATCH_1} or the sequence out",
                 lambda s: s.family == "SimpleRNN" and s.units <= SMALL_UNITS and s.steps >= LONGEST_MEASURED
                 and _few_features(s) and (s.batch in (1, None) or bool(s.sequence))),
        _LONG_LSTM_SEQUENCE,
        _LONG,
        _WIDE_BIDIRECTIONAL_LSTM,
        SizeRule("loop", "a GRU with the last step out, 50 steps or more and 0.5 MiB of step weights or more",
                 lambda s: s.family == "GRU" and not s.sequence and s.steps >= 50 and s.step_weights >= 0.5),
        SizeRule("unrolled", "at most 1 MiB of step weights", lambda s: s.step_weights <= 1),
        SizeRule("loop", "two directions with the last step out (over 1 MiB of step weights)",
                 lambda s: s.directions == 2 and not s.sequence),
        SizeRule("unrolled", "the last step out and at most 8 MiB of step weights",
                 lambda s: not s.sequence and s.step_weights <= 8),
        _LAST_PAST_8_MIB,
        _BOUNDED, _ELSE),
    2: (SizeRule("unrolled", f"a SimpleRNN of at most {SMALL_UNITS} units {_BATCH_1} over fewer than "
                 f"{LONGEST_MEASURED} steps of over {SMALL_FEATURES} features",
                 lambda s: s.family == "SimpleRNN" and _small_at_batch_1(s) and s.steps < LONGEST_MEASURED
                 and s.features is not None and s.features > SMALL_FEATURES),
        SizeRule("fused", f"an LSTM or a SimpleRNN of at most {SMALL_UNITS} units {_BATCH_1}",
                 lambda s: s.family != "GRU" and _small_at_batch_1(s)),
        SizeRule("fused", f"a SimpleRNN with the sequence out over {LONGEST_MEASURED} steps or more of at most "
                 f"{SMALL_FEATURES} features: at most {SMALL_UNITS} units, or {_BATCH_1}",
                 lambda s: s.family == "SimpleRNN" and bool(s.sequence) and s.steps >= LONGEST_MEASURED
                 and _few_features(s) and (s.units <= SMALL_UNITS or s.batch in (1, None))),
        _LONG_LSTM_SEQUENCE,
        _LONG,
        _WIDE_BIDIRECTIONAL_LSTM,
        SizeRule("loop", f"{LONGEST_MEASURED} steps or more with the last step out",
                 lambda s: not s.sequence and s.steps >= LONGEST_MEASURED),
        SizeRule("loop", "an LSTM or a GRU of two directions with the last step out, 50 steps or more at a batch "
                 "over 1", lambda s: s.family != "SimpleRNN" and s.directions == 2 and not s.sequence
                 and s.steps >= 50 and (s.batch or 1) > 1),
        SizeRule("unrolled", f"at most {SMALL_UNITS} units at a larger batch", lambda s: s.units <= SMALL_UNITS),
        _LAST_PAST_8_MIB,
        _BOUNDED, _ELSE),
}


def sized_form(rnn_forms: dict, size: LayerSize | None) -> tuple[str, str] | None:
    """(form, why) for a layer of ``size`` where this conversion chooses default forms by size
    (``rnn_forms[BY_SIZE]``: the thread count), else None (a quantized model, a form asked for, a size not known
    here: the family's form in ``rnn_forms``). A GRU's "fused" is its unrolled form (LiteRT has no GRU op)."""
    threads = rnn_forms.get(BY_SIZE)
    if threads is None or size is None or not size.steps or not size.units or ("keras", size.family) not in GATE_ORDERS:
        return None
    compiled = bool(rnn_forms.get(COMPILED))
    rule = next(r for r in SIZE_RULES[threads] if r.test(size) and not (compiled and r.form == "fused"))
    form = "unrolled" if rule.form == "fused" and size.family == "GRU" else rule.form
    why = f"by size at {threads} thread{'s' if threads > 1 else ''}: {size}, {rule.when}"
    if size.batch is None and form in size.needs_batch:
        return "loop", f"{why}; but the {form} form needs a static batch, and the loop keeps this one's run-time batch"
    return form, why


def default_forms(threads: int = DEFAULT_THREADS, quantized: bool = False, sixteen: bool = False) -> dict[str, str]:
    """Each family's default form for a model run with ``threads`` LiteRT threads (quantized or TFLite Micro:
    ``quantized``; 16x8 for LiteRT: ``sixteen``); a "tf_keras.<family>" entry is that of tf-keras layers where it
    differs, a "<family>.unknown_length" one the family's form at an unknown length where it differs."""
    if quantized:
        return SIXTEEN_BY_EIGHT_FORMS if sixteen else QUANTIZED_FORMS
    return DEFAULT_FORMS if threads <= 1 else TWO_THREAD_FORMS if threads == 2 else THREADED_FORMS


def form_key(rnn_forms: dict, kind: str, flavour: str | None) -> str:
    """The entry of ``rnn_forms`` for a ``kind`` layer of Keras ``flavour`` ("tf_keras", "keras" or None)."""
    own = f"tf_keras.{kind}"
    return own if flavour == "tf_keras" and own in rnn_forms else kind


def rnn_forms(rnn_form: str, quantized: bool, bidirectional: str = "split",
              threads: int = DEFAULT_THREADS, static_length: str | None = None,
              sixteen: bool = False, compiled: bool = False, integer: bool = False) -> dict[str, str]:
    """The form of each family ({"LSTM": ..., "SimpleRNN": ..., "GRU": ..., "stateful": ...}) for the option
    ``rnn_form`` ("default", "fused", "unrolled" or "loop"; "auto" is resolved by the converter into the
    others), a quantized (dynamic range, int8, 16x8) or TFLite Micro conversion (``quantized``) and the LiteRT
    thread count the model will run with (``threads``). With ``bidirectional="fused"`` (keep LiteRT's
    bidirectional ops) and the default forms, a ``"Bidirectional"`` entry keeps LSTM and SimpleRNN Bidirectional
    layers fused. A layer of unknown length whose form needs a static one (unrolled) takes the loop form (the
    ``"unknown_length"`` entry), unless ``static_length`` says why no loop may be written (TFLite Micro, an
    integer-only model): then :func:`at_length` raises :class:`NeedsStaticLength` with that reason. ``sixteen``:
    a 16x8 conversion for LiteRT (its LSTMs unrolled into 16x8 builtins: LiteRT has no 16x8 LSTM kernel).
    ``compiled``: the file must load in LiteRT's CompiledModel API (no variable tensors): the default forms are
    never the fused ones (:func:`compiled_forms`); ``integer``: the conversion is int8 or 16x8."""
    length = {STATIC_LENGTH: static_length} if static_length else {UNKNOWN_LENGTH: "loop"}
    if rnn_form in ("fused", "unrolled", "loop"):
        return {**dict.fromkeys((*DEFAULT_FORMS, "stateful"), rnn_form),
                "GRU": "unrolled" if rnn_form == "fused" else rnn_form,  # no fused GRU op
                "masked": "loop" if rnn_form == "loop" else "unrolled", **length}  # the fused ops have no mask
    # a stateful layer by default: the fused op's in-place state (its unrolled form was not measured); a masked
    # one: the loop at any thread count (float; measured faster than the official WHILE at 1 and 2 threads, where
    # the unrolled form is slower than it at 2), unrolled when quantized (int8 does not enter a loop body)
    forms = {**default_forms(threads, quantized, sixteen), "stateful": "fused",
             "masked": "unrolled" if quantized else "loop",
             **length}
    if not quantized and threads in SIZE_RULES:
        forms[BY_SIZE] = threads  # each layer's form by its size where known (sized_form)
    if compiled:
        forms = compiled_forms(forms, integer)
    if bidirectional == "fused":
        forms["Bidirectional"] = "fused"
    return forms


def compiled_forms(forms: dict, integer: bool) -> dict:
    """``forms`` (the defaults) for a file LiteRT's CompiledModel loads: every fused form (its state in variable
    tensors) becomes the loop, or for int8 / 16x8 the unrolled form (the integer rules do not enter a loop's body;
    an LSTM of unknown length keeps LiteRT's integer LSTM op, for the Interpreter alone: the report says so); the
    size rules' fused rows are skipped (``COMPILED``)."""
    instead = "unrolled" if integer else "loop"
    # an int8 / 16x8 SimpleRNN's fused op is the quantizer's own unrolled form's start (passes/unroll_rnn.py)
    keep = {"SimpleRNN"} if integer else set()
    out = {key: instead if form == "fused" and key not in keep else form for key, form in forms.items()}
    # a stateful layer: unrolled (its batch is its state's: a SavedModel's recognised stateful loop in the loop form
    # was written at batch 1, not its state's batch of 2, and refused that input; tests/test_rnn_stateful.py)
    out["stateful"] = "unrolled"
    if integer:
        out["LSTM.unknown_length"] = "fused"
    out[COMPILED] = True
    return out


NO_SETTINGS = {"LSTM": "fused", "SimpleRNN": "fused"}  # a composite fused outside a conversion's pipeline


def forms_of(c) -> dict:
    """The form of each family this conversion asks for (``Composite.settings["rnn_forms"]``, :func:`rnn_forms`'s
    result; without one, LSTM and SimpleRNN fused)."""
    return c.settings.get("rnn_forms", NO_SETTINGS)


def at_length(rnn_forms: dict, form: str, steps: int | None, what: str, fused: bool = True,
              family: str | None = None) -> str:
    """The form a layer (``what``, for the error) of ``steps`` time steps (None: known only at run time) is
    written in: ``form`` where it takes that many (the loop form any number; LiteRT's fused sequence ops too,
    where the family has one: ``fused``; the unrolled form a static number), else the form of layers of unknown
    length (``rnn_forms["unknown_length"]``: the loop), or :class:`NeedsStaticLength` where none may be written
    (``rnn_forms["static_length"]`` says why), naming the layer and how to give the length. A
    "<family>.unknown_length" entry is that ``family``'s own form at an unknown length (a 16x8 LSTM's fused op)."""
    if steps is not None or form == "loop" or (form == "fused" and fused):
        return form
    instead = rnn_forms.get(f"{family}.{UNKNOWN_LENGTH}") or rnn_forms.get(UNKNOWN_LENGTH)
    if instead:
        return instead
    raise static_length_error(what, rnn_forms.get(STATIC_LENGTH) or "its form writes the steps one by one", form)


def static_length_error(what: str, why: str, form: str = "unrolled") -> NeedsStaticLength:
    """The error for a layer (``what``) of unknown length whose ``form`` needs a static one, for ``why``."""
    return NeedsStaticLength(f"{what} has an input of unknown length, but {why}: the {form} form needs a static "
                             f"number of time steps; {HOW_TO_FIX_LENGTH}")


def layer_label(c, kind: str) -> str:
    """A recurrent composite's layer as the user knows it: "GRU layer 'gru_1'" (its Keras name, where known)."""
    name = c.attrs.get("layer_name")
    return f"{kind} layer '{name}'" if name else f"a {kind} layer"


def forms_reason(rnn_form: str, quantized: bool, threads: int, target: str, sixteen: bool = False) -> str:
    """Why the recurrent layers get the forms they get, for the report."""
    if rnn_form != "default":
        return f"rnn_form={rnn_form!r}" + (" (GRU unrolled: LiteRT has no GRU op)" if rnn_form == "fused" else "")
    if quantized and sixteen:
        return ("the defaults for 16x8 on LiteRT: LSTMs unrolled into 16x8 builtins (LiteRT has no 16x8 LSTM kernel; "
                "its integer LSTM where the length is unknown or over 512 steps), the other layers as for int8")
    if quantized:
        why = {"micro": "TFLite Micro", "ethos-u": "Ethos-U (Vela; TFLite Micro on its CPU)"}.get(
            target, "a quantized conversion")
        return f"the defaults for {why} (LiteRT's and TFLite Micro's quantized sequence kernels), at any thread count"
    forms = default_forms(threads)
    which = ", ".join(f"{kind.replace('tf_keras.', 'tf-keras ')} {form}" for kind, form in forms.items())
    if threads in SIZE_RULES:
        rule = "; ".join(f"{r.form} if {r.when}" for r in SIZE_RULES[threads])
        return (f"the defaults for {threads} thread{'s' if threads > 1 else ''}, each layer's form by its size, the "
                f"first that holds: {rule}; a layer whose size is known only at run time: {which} "
                "(docs/rnn.md#by-layer-size)")
    if threads <= 1:
        why = "the loop is the fastest there"
    elif threads == 2:
        why = ("the loop's per-step ops wait on the thread pool, and it stays ahead of the official converter's "
               "WHILE there but not of LiteRT's fused LSTM op, which tf-keras LSTMs keep as the official converter "
               "writes them")
    else:
        why = "a loop's per-step ops wait on the thread pool, the fused ops' kernels do not (a GRU has no LiteRT op)"
    return f"the defaults for {threads} thread{'s' if threads > 1 else ''} ({which}): {why} (docs/rnn.md#thread-count)"


def traced_form(rnn_forms: dict, kind: str, stateful: bool, masked: bool = False, flavour: str | None = None,
                size: LayerSize | None = None) -> tuple[str, str]:
    """The form of a layer met in a SavedModel or concrete function (a tf-keras composite, a recognised loop),
    where a Bidirectional is two separate layers: as ``rnn_forms`` says for ``kind`` (a stateful layer's, under
    "stateful"; a masked one's, under "masked"), except that with a "Bidirectional" entry
    (``bidirectional="fused"``) an unmasked LSTM or SimpleRNN keeps the fused op, so that a forward / backward
    pair can become LiteRT's bidirectional op (passes/bidirectional.py). A stateless, unmasked layer of known
    ``size`` takes the form its size gives (:func:`sized_form`) where the conversion chooses so. Returns the
    form and a note for the report (" (by size ...)", or "")."""
    if masked and not stateful and "masked" in rnn_forms:
        return rnn_forms["masked"], ""
    if kind != "GRU" and "Bidirectional" in rnn_forms:
        return "fused", ""
    sized = None if stateful else sized_form(rnn_forms, size)
    if sized:
        return sized[0], f" ({sized[1]})"
    key = "stateful" if stateful else form_key(rnn_forms, kind, flavour)
    return rnn_forms.get(key, "unrolled" if kind == "GRU" else "fused"), ""


def layer_steps(c) -> int | None:
    """The number of time steps of a Keras recurrent composite's sequence input (its first argument, batch- or
    time-major as ``c.attrs["time_major"]`` says): None where it is known only at run time; 0 where the input's
    rank is not known here (the forms decline it themselves)."""
    x = c.args[0] if c.args else None
    if x is None or x.shape is None or len(x.shape) < 2:
        return 0
    return x.shape[0 if c.attrs.get("time_major") else 1]


def layer_size(c, kind: str, directions: int = 1, needs_batch: frozenset[str] = frozenset()) -> LayerSize | None:
    """The size of a Keras recurrent composite (units, its sequence input's steps, batch and features, whether it
    returns its sequence) as :func:`sized_form` reads it (``directions``, ``needs_batch``: as :class:`LayerSize` says);
    None where the steps are known only at run time."""
    x, steps = c.args[0] if c.args else None, layer_steps(c)
    if not steps or "units" not in c.attrs:
        return None
    batch = x.shape[1 if c.attrs.get("time_major") else 0] or c.batch_size
    return LayerSize(kind, int(c.attrs["units"]), steps, batch, directions, needs_batch,
                     bool(c.attrs.get("return_sequences")), x.shape[-1])


def chosen_form(c, kind: str, forms: dict, fallback: str = "fused", key: str | None = None,
                size: LayerSize | None = None):
    """The results of the form ``forms_of(c)`` asks for a ``kind`` layer, built by ``forms[form](c)``
    ("unrolled", "loop"), with the form in ``c.form`` for the report; None where the ``fallback`` form (the
    fused op, built by the caller) is to be written: asked for, or the asked form cannot be written (a dynamic
    number of steps, a stateful layer), with the reason kept. Where the form needs a static batch, the
    conversion is run again at one (``NeedsStaticBatch``), in the same form. A masked
    layer takes the form under "masked" (the loop, or the unrolled form: the fused ops have no mask), and falls
    back to the unrolled form. A layer of unknown length whose form needs a static one takes the loop form, or
    stops the conversion with :class:`NeedsStaticLength` (:func:`at_length`). ``key``: the entry of
    ``forms_of(c)`` to read where it has one (default: ``kind``, or "tf_keras.<kind>" for a tf-keras layer
    where ``forms_of(c)`` has one). Where the conversion chooses default forms by size, a stateless, unmasked
    layer of known ``size`` (:func:`layer_size`) takes the form its size gives (:func:`sized_form`), and
    ``c.form`` says so."""
    a = c.attrs
    asked_key = key in forms_of(c)
    key = "stateful" if a.get("state_variables") else key if asked_key else \
        form_key(forms_of(c), kind, a.get("flavour"))
    form = forms_of(c).get(key, fallback)
    masked = bool(a.get("has_mask"))
    sized = None if masked or asked_key or key == "stateful" else sized_form(forms_of(c), size)
    if sized:
        form = sized[0]
    by_size = f" ({sized[1]})" if sized else ""
    if masked:
        form = forms_of(c).get("masked", form)
        if form != "loop":
            form = "unrolled"  # the fused ops have no mask
    asked = form if form in forms else fallback
    form = at_length(forms_of(c), asked, layer_steps(c), layer_label(c, kind), fused=kind != "GRU",
                     family=None if masked else kind)
    unknown_length = UNKNOWN_LENGTH_NOTE.replace("unrolled", asked) if form != asked else ""
    if masked and form != "loop":
        c.form = "unrolled (masked)"
        return forms["unrolled"](c)
    if form not in forms:
        c.form = fallback + by_size
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
    c.form = (f"{form} (masked)" if masked else form) + unknown_length + by_size
    return results
