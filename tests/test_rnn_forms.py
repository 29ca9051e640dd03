"""rnn_form: the form of Keras LSTM, SimpleRNN and GRU layers (issue 18).

"fused" (LiteRT's sequence op; a GRU has none and is unrolled), "unrolled" (one FULLY_CONNECTED for
every step's input, then the recurrent product and the cell per step), "loop" (the same projection,
then a WHILE whose body does the recurrent product and the cell, no TensorLists), "auto" (each
converted, timed here, the fastest kept) and the default per family. Every form exact (1e-5 against
Keras, on LiteRT with and without XNNPACK) and stateless, for every variant of the layers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_stateless_and_matches, invoke_twice, keras_flavour, litert_op_names

import fuselite
from fuselite.errors import InputError
from fuselite.quantize import QuantizationOptionError
from fuselite.rnn.forms.policy import QUANTIZED_FORMS, default_forms, form_key, rnn_forms
from fuselite.runtime.compiled import loader_problems

TOL = 1e-5
SEQUENCE_OPS = {"LSTM": "UNIDIRECTIONAL_SEQUENCE_LSTM", "SimpleRNN": "UNIDIRECTIONAL_SEQUENCE_RNN"}

LAYERS = {
    "lstm_last": ("LSTM", lambda L, i: L.LSTM(6)(i)),
    "lstm_sequences_backwards": ("LSTM", lambda L, i: L.LSTM(6, return_sequences=True, go_backwards=True)(i)),
    "lstm_state": ("LSTM", lambda L, i: L.LSTM(6, return_state=True)(i)),
    "lstm_relu_no_bias": ("LSTM", lambda L, i: L.LSTM(5, activation="relu", use_bias=False)(i)),
    "stacked_lstm": ("LSTM", lambda L, i: L.LSTM(4)(L.LSTM(5, return_sequences=True)(i))),
    "bidirectional_lstm": ("LSTM", lambda L, i: L.Bidirectional(L.LSTM(4, return_sequences=True))(i)),
    "simple_rnn": ("SimpleRNN", lambda L, i: L.SimpleRNN(6)(i)),
    "simple_rnn_sequences_state": ("SimpleRNN", lambda L, i: L.SimpleRNN(6, return_sequences=True,
                                                                         return_state=True)(i)),
    "bidirectional_simple_rnn_sum": ("SimpleRNN", lambda L, i: L.Bidirectional(L.SimpleRNN(4), merge_mode="sum")(i)),
    "gru_last": ("GRU", lambda L, i: L.GRU(6)(i)),
    "gru_sequences_backwards_state": ("GRU", lambda L, i: L.GRU(5, return_sequences=True, go_backwards=True,
                                                             return_state=True)(i)),
    "gru_reset_before": ("GRU", lambda L, i: L.GRU(5, reset_after=False)(i)),
    "bidirectional_gru_state": ("GRU", lambda L, i: L.Bidirectional(L.GRU(4, return_sequences=True),
                                                                    merge_mode="mul")(i)),
    "bidirectional_lstm_state": ("LSTM", lambda L, i: L.Bidirectional(L.LSTM(3, return_state=True))(i)),
}
DIRECTIONS = {name: 2 if name.startswith("bidirectional") else 1 for name in LAYERS}
DIRECTIONS["stacked_lstm"] = 2


def _model(k, build, shape=(7, 3)):
    k.utils.set_random_seed(0)
    i = k.Input(shape)
    return k.Model(i, build(k.layers, i))


def _inputs(model, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, *t.shape[1:])).astype(np.float32) for t in model.inputs]


@pytest.mark.parametrize("form", ["fused", "unrolled", "loop"])
@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_every_form_is_exact_and_stateless(flavour, name, form):
    kind, build = LAYERS[name]
    model = _model(keras_flavour(flavour), build)
    conv = fuselite.Converter.from_keras_model(model, rnn_form=form)
    data = conv.convert()
    ops = litert_op_names(data)
    # one WHILE per direction in the loop form (its body's ops are in another subgraph), none otherwise
    assert ops.count("WHILE") == (DIRECTIONS[name] if form == "loop" else 0), ops
    fused = any(op in ops for op in (SEQUENCE_OPS.get(kind), "BIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_RNN"))
    assert fused == (form == "fused" and kind != "GRU"), ops
    want = "unrolled" if form == "fused" and kind == "GRU" else form  # no fused GRU op
    assert {r.get("form") for r in conv.report.composites} == {want}, conv.report.composites
    assert_stateless_and_matches(data, model, _inputs(model), TOL)


def test_loop_form_body_has_no_tensor_lists_and_weights_once():
    """The loop's body: the step's projection gathered, the recurrent product, the cell; its WHILE carries the
    counter, the states and the projections (passed through), and its file is about the weights' size."""
    from ai_edge_litert import schema_py_generated as schema

    model = _model(keras_flavour("keras3"), lambda L, i: L.LSTM(16)(i), shape=(30, 8))
    data = fuselite.Converter.from_keras_model(model, rnn_form="loop").convert()
    m = schema.Model.GetRootAsModel(data, 0)
    codes = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    per_subgraph = []
    for g in range(m.SubgraphsLength()):
        sg = m.Subgraphs(g)
        per_subgraph.append(sorted(codes[m.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode()]
                                   for i in range(sg.OperatorsLength())))
    body = max(per_subgraph, key=len)
    assert body.count("FULLY_CONNECTED") == 1 and "GATHER" in body and "LOGISTIC" in body, body
    assert not any("LIST" in op or "SLICE" in op for op in body), body  # the last step only: no sequence written
    weights = 4 * (8 * 64 + 16 * 64 + 64)
    assert len(data) < weights + 12_000, (len(data), weights)
@pytest.mark.parametrize("form", ["fused", "unrolled", "loop"])
def test_cell_state_beyond_ten_is_exact_in_every_form(form):
    """Gates pinned open, a constant candidate: the cell state grows ~1 per step to ~40 (the official converter
    clips it at 10)."""
    k = keras_flavour("keras3")
    model = _model(k, lambda L, i: L.LSTM(3, return_state=True)(i), shape=(40, 2))
    lstm = model.layers[-1]
    kernel, rec, bias = lstm.get_weights()
    bias[:] = 8.0
    lstm.set_weights([kernel * 0.01, rec * 0.0, bias])
    assert float(np.min(model(np.ones((1, 40, 2), np.float32))[2])) > 30
    data = fuselite.Converter.from_keras_model(model, rnn_form=form).convert()
    assert_stateless_and_matches(data, model, [np.ones((1, 40, 2), np.float32)], TOL)


@pytest.mark.parametrize("form", ["fused", "unrolled", "loop"])
def test_text_classifier_in_every_form(form):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((12,), dtype="int32")
    x = k.layers.Embedding(30, 8)(i)
    model = k.Model(i, k.layers.Dense(2)(k.layers.LSTM(6)(x)))
    data = fuselite.Converter.from_keras_model(model, rnn_form=form).convert()
    ids = np.random.default_rng(0).integers(0, 30, (1, 12)).astype(np.int32)
    assert_stateless_and_matches(data, model, [ids], TOL)


@pytest.mark.parametrize(("name", "form"), [("lstm_state", "unrolled"), ("lstm_state", "loop"),
                                            ("gru_sequences_backwards_state", "loop")])
def test_unrolled_and_loop_forms_keep_the_batch_dynamic(name, form):
    """(The unrolled GRU needs a static batch: its first step folds the zero state into constants.)"""
    from ai_edge_litert.interpreter import Interpreter

    model = _model(keras_flavour("keras3"), LAYERS[name][1])
    conv = fuselite.Converter.from_keras_model(model, rnn_form=form)
    data = conv.convert()
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    runner = Interpreter(model_content=data).get_signature_runner()
    (name,) = runner.get_input_details()
    for batch in (3, 1, 2):
        x = _inputs(model, batch)[0]
        got = sorted(runner(**{name: x}).values(), key=lambda v: float(v.sum()))
        want = sorted((np.asarray(w) for w in model(x)), key=lambda v: float(v.sum()))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, atol=TOL)


@pytest.mark.parametrize("rnn_form", ["loop", "default"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_initial_states_keep_a_dynamic_batch(kind, rnn_form):
    """Initial states are the loop's first carries: the batch stays dynamic (the fused op needs a fixed one). By
    default a small layer given initial states, its batch unknown, is not unrolled or fused by its size (either
    would fix the batch): the loop, and the report says why."""
    from ai_edge_litert.interpreter import Interpreter

    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    x = k.Input((6, 3))
    states = [k.Input((4,)) for _ in range(2 if kind == "LSTM" else 1)]
    model = k.Model([x, *states], getattr(k.layers, kind)(4, return_sequences=True)(x, initial_state=states))
    conv = fuselite.Converter.from_keras_model(model, rnn_form=rnn_form)
    data = conv.convert()
    (form,) = [r["form"] for r in conv.report.composites]
    if rnn_form == "loop":
        assert form == "loop", form
    else:
        assert form.startswith("loop (by size at 1 thread: 4 units x 6 steps") and "needs a static batch" in form, form
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    runner = Interpreter(model_content=data).get_signature_runner()
    names = fuselite.runtime.signature_inputs(data, "serving_default")
    for batch in (2, 5):
        xs = _inputs(model, batch, seed=batch)
        (got,) = runner(**dict(zip(names, xs))).values()
        np.testing.assert_allclose(got, np.asarray(model(xs)), atol=TOL)


def test_loop_form_runs_on_tflite_micro(tmp_path):
    from test_micro import check_micro, keras_outputs

    model = _model(keras_flavour("keras3"), lambda L, i: L.Dense(2)(L.GRU(4)(L.LSTM(5, return_sequences=True)(i))))
    runs = [_inputs(model, seed=s) for s in (1, 2)]
    conv = check_micro(model, tmp_path, runs, [keras_outputs(model, xs) for xs in runs], rnn_form="loop")
    assert [r["form"] for r in conv.report.composites] == ["loop", "loop"]


def test_loop_form_cannot_be_integer_quantized():
    model = _model(keras_flavour("keras3"), LAYERS["lstm_last"][1])
    conv = fuselite.Converter.from_keras_model(model, rnn_form="loop")
    conv.optimizations = ["DEFAULT"]
    conv.representative_dataset = lambda: iter([_inputs(model)])
    with pytest.raises(QuantizationOptionError, match="rnn_form='loop' cannot be quantized to integers"):
        conv.convert()


def test_loop_form_with_dynamic_range_quantization():
    model = _model(keras_flavour("keras3"), LAYERS["lstm_sequences_backwards"][1])
    conv = fuselite.Converter.from_keras_model(model, rnn_form="loop")
    conv.optimizations = ["DEFAULT"]
    data = conv.convert()
    assert [r["form"] for r in conv.report.composites] == ["loop"]
    x = _inputs(model)
    first, second = invoke_twice(data, x)
    np.testing.assert_array_equal(first[0], second[0])
    err = float(np.abs(first[0] - np.asarray(model(x[0]))).max())
    assert err < 0.02, err  # int8 weights, float activations (measured 9e-4 on a 10-step LSTM(8))


@pytest.mark.parametrize("form", ["unrolled", "loop"])
def test_a_dynamic_number_of_steps_takes_the_loop_form(form):
    """A dynamic number of steps cannot be unrolled: the loop form, which reads the length at run time, and the
    report says why (the loop form asked for takes it as it is)."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((None, 3))
    model = k.Model(i, k.layers.LSTM(4)(i))
    conv = fuselite.Converter.from_keras_model(model, rnn_form=form)
    data = conv.convert()
    assert "WHILE" in litert_op_names(data) and "UNIDIRECTIONAL_SEQUENCE_LSTM" not in litert_op_names(data)
    (record,) = conv.report.composites
    want = "loop" if form == "loop" else "loop (not unrolled: the number of time steps is known only at run time)"
    assert record["form"] == want, record


# the default forms of this file's small layers (4-6 units over 7 steps: well under 1 MiB of step weights) with a
# batch known only at run time, by the thread count (rnn/forms/policy.py SIZE_RULES): unrolled at one thread, LiteRT's
# fused ops at two (a GRU has none, and its unrolled form would pin the batch: the loop), the family defaults at more
SMALL_LAYER_FORMS = {1: {"LSTM": "unrolled", "SimpleRNN": "unrolled", "GRU": "loop"},
                     2: {"LSTM": "fused", "SimpleRNN": "fused", "GRU": "loop"},
                     4: {"LSTM": "fused", "SimpleRNN": "fused", "GRU": "loop"}}


def test_default_forms_are_the_measured_ones():
    """One thread (the default): a small layer unrolled by its size, the report saying its size and the rule; a
    GRU of a run-time batch in the loop, which keeps the batch dynamic (its unrolled form would fix it)."""
    from ai_edge_litert.interpreter import Interpreter

    k = keras_flavour("keras3")
    for name in ("lstm_last", "simple_rnn", "gru_last"):
        kind, build = LAYERS[name]
        model = _model(k, build)
        conv = fuselite.Converter.from_keras_model(model)
        data = conv.convert()
        (form,) = [r["form"] for r in conv.report.composites]
        want = SMALL_LAYER_FORMS[1][kind]
        assert form.startswith(f"{want} (by size at 1 thread: 6 units x 7 steps of 3 features, a run-time batch: "), \
            form
        assert ("static batch" in form) == (kind == "GRU") and not conv.report.warnings, (form, conv.report.warnings)
        assert_stateless_and_matches(data, model, _inputs(model), TOL)
        runner = Interpreter(model_content=data).get_signature_runner()  # the batch stays dynamic
        (got,) = runner(**dict(zip(fuselite.runtime.signature_inputs(data, "serving_default"),
                                   _inputs(model, 3)))).values()
        np.testing.assert_allclose(got, np.asarray(model(_inputs(model, 3))), atol=TOL)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_default_forms_follow_the_thread_count(flavour, threads):
    """threads=N: each layer's default form for a model run with N LiteRT threads (at 1 and 2 by its size, at
    more by its family: LSTM and SimpleRNN fused, a GRU in the loop), exact and stateless at that thread count;
    the report says which form each layer got and why. The fused ops (variable tensors) are the Interpreter's
    alone: litert_api="interpreter" here; by default such a layer takes the loop (below)."""
    k = keras_flavour(flavour)
    for name in ("lstm_last", "bidirectional_lstm", "simple_rnn", "gru_last"):
        kind, build = LAYERS[name]
        model = _model(k, build)
        conv = fuselite.Converter.from_keras_model(model, threads=threads, litert_api="interpreter")
        data = conv.convert()
        want = SMALL_LAYER_FORMS[threads][kind]
        if threads > 2:
            forms = default_forms(threads)
            assert want == forms[form_key(forms, kind, "tf_keras" if flavour == "tf_keras" else "keras")]
        (form,) = [r["form"] for r in conv.report.composites]
        assert form.split(" ")[0] == want and ("by size" in form) == (threads <= 2), (name, form)
        ops = litert_op_names(data)
        assert (SEQUENCE_OPS.get(kind, "-") in " ".join(ops)) == (want == "fused") and \
            ("WHILE" in ops) == (want == "loop"), ops
        assert conv.report.recurrent["threads"] == threads
        text = str(conv.report)
        assert f"(form: {want}" in text and f"the defaults for {threads} thread" in text, text
        assert_stateless_and_matches(data, model, _inputs(model), TOL, num_threads=threads)
        if want == "fused":  # the default (litert_api="any"): a form CompiledModel loads
            default = fuselite.Converter.from_keras_model(model, threads=threads)
            default_data = default.convert()
            (form,) = [r["form"] for r in default.report.composites]
            assert not form.startswith("fused") and loader_problems(default_data) == [], form
            assert_stateless_and_matches(default_data, model, _inputs(model), TOL, num_threads=threads)


# grid points of benchmarks/rnn_sizes.py and the form the measured rule gives each (its key, threads, form)
SIZED_POINTS = [
    ("keras3.LSTM.plain.u16.t200.f8.b1.last", 1, "fused"),  # an LSTM of 16 units at batch 1 over 200 steps
    ("keras3.LSTM.plain.u64.t50.f8.b1.last", 1, "unrolled"),  # 3.1 MiB of step weights, the last step: at most 8
    ("keras3.LSTM.bidirectional.u16.t200.f8.b4.last", 1, "loop"),  # two directions, the last step, 1.6 MiB
    ("keras3.GRU.plain.u16.t200.f8.b4.last", 1, "loop"),  # a GRU, the last step, 200 steps, 0.59 MiB
    ("tf_keras.GRU.plain.u16.t50.f8.b4.last", 1, "unrolled"),  # a GRU, the last step, 0.15 MiB: at most 1
    ("tf_keras.GRU.plain.u64.t50.f8.b4.sequence", 1, "unrolled"),  # 2.3 MiB, the sequence out: at most 16
    ("keras3.LSTM.plain.u256.t50.f8.b4.sequence", 1, "loop"),  # 50 MiB, the sequence out: over 16
    ("keras3.SimpleRNN.plain.u256.t200.f8.b1.last", 1, "loop"),  # 50 MiB
    ("tf_keras.LSTM.bidirectional.u64.t200.f8.b1.sequence", 1, "fused"),  # an LSTM, the sequence out, 64 units
    ("keras3.LSTM.bidirectional.u256.t8.f8.b1.sequence", 1, "loop"),  # an LSTM of two directions, 16 MiB
    ("tf_keras.SimpleRNN.plain.u16.t200.f8.b1.last", 1, "fused"),  # a SimpleRNN of 16 units, 200 steps of 8 features
    ("keras3.LSTM.plain.u16.t50.f8.b4.sequence", 2, "unrolled"),  # 16 units at batch 4
    ("keras3.LSTM.bidirectional.u16.t200.f64.b4.sequence", 2, "fused"),  # two directions of 16, the sequence out
    ("keras3.GRU.plain.u64.t200.f8.b4.last", 2, "loop"),  # 200 steps, the last step out
    ("tf_keras.LSTM.plain.u16.t8.f8.b1.last", 2, "fused"),  # 16 units at batch 1
    ("keras3.GRU.plain.u64.t200.f8.b1.sequence", 2, "unrolled"),  # 9.4 MiB, the sequence out: at most 16
    ("tf_keras.SimpleRNN.bidirectional.u256.t50.f8.b1.last", 2, "loop"),  # 25 MiB
    ("keras3.SimpleRNN.plain.u16.t50.f64.b1.last", 2, "unrolled"),  # a small SimpleRNN at batch 1, 64 features
    ("keras3.SimpleRNN.plain.u64.t200.f8.b1.sequence", 2, "fused"),  # a SimpleRNN, 200 steps of 8, the sequence out
    ("tf_keras.LSTM.bidirectional.u16.t50.f8.b4.last", 2, "loop"),  # two directions, the last step, batch 4, 50 steps
    ("keras3.GRU.plain.u16.t200.f8.b1.last", 2, "loop"),  # a small GRU at batch 1 (no fused op), 200 steps, the last
    ("keras3.SimpleRNN.plain.u256.t50.f8.b4.last", 2, "loop"),  # the last step out, 12.5 MiB: over 8
]


@pytest.mark.parametrize("point, threads, want", SIZED_POINTS, ids=[f"{p}@{t}" for p, t, _ in SIZED_POINTS])
def test_default_form_follows_the_layer_size(point, threads, want):
    """The default form by the layer's size as a conversion writes it, and as benchmarks/rnn_sizes.py's default
    column reads it from the policy (so that the grid's table measures what the converter does); exact."""
    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.append(benchmarks)
    import rnn_sizes

    (p,) = [q for q in rnn_sizes.grid() if rnn_sizes.key(q) == point]
    assert rnn_sizes.default_form(p, threads) == want
    model = rnn_sizes.build(p)
    # the measured rule is the Interpreter's (its fused rows write variable tensors): litert_api="interpreter"
    conv = fuselite.Converter.from_keras_model(model, threads=threads, litert_api="interpreter")
    data = conv.convert()
    (form,) = [r["form"] for r in conv.report.composites]
    assert form.startswith(f"{want} (by size at {threads} thread"), form
    assert f"{p['units']} units x {p['steps']} steps of {p['features']} features" in form, form
    assert f"batch {p['batch']}" in form, form
    assert_stateless_and_matches(data, model, _inputs(model, batch=p["batch"]), TOL, num_threads=threads)
    if want == "fused":  # by default the next row that holds and is not fused: a file CompiledModel loads
        default = fuselite.Converter.from_keras_model(model, threads=threads)
        default_data = default.convert()
        (form,) = [r["form"] for r in default.report.composites]
        instead = rnn_sizes.default_form(p, threads, compiled=True)
        assert instead != "fused" and form.startswith(f"{instead} (by size at {threads} thread"), form
        assert loader_problems(default_data) == []
        assert_stateless_and_matches(default_data, model, _inputs(model, batch=p["batch"]), TOL, num_threads=threads)


def test_thread_count_leaves_quantized_and_micro_forms_alone():
    """Quantized conversions and TFLite Micro keep their forms at any thread count (the fused ops' quantized
    kernels); an asked form is the asked form at any thread count."""
    for threads in (1, 2, 8):
        assert rnn_forms("default", True, threads=threads) == {**QUANTIZED_FORMS, "stateful": "fused",
                                                               "masked": "unrolled", "unknown_length": "loop"}
        assert rnn_forms("loop", False, threads=threads)["LSTM"] == "loop"
    model = _model(keras_flavour("keras3"), LAYERS["lstm_last"][1])
    conv = fuselite.Converter.from_keras_model(model, target="micro", threads=4)
    conv.convert()
    assert [r["form"] for r in conv.report.composites] == ["fused"]
    assert "TFLite Micro" in conv.report.recurrent["reason"]


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_masked_layers_keep_the_loop_at_every_thread_count(flavour):
    """A masked layer has no fused op: where the default for its family is the fused op (more threads), it takes
    the loop (measured faster than the official converter's WHILE there), not the unrolled form."""
    from fuselite.testing import models as zoo

    model = zoo.build("masked_text_lstm", keras_flavour(flavour))
    xs = zoo.sample_inputs(model, seed=0)
    for threads in (2, 4):
        conv = fuselite.Converter.from_keras_model(model, threads=threads)
        data = conv.convert()
        assert [r["form"] for r in conv.report.composites if r.get("form")] == ["loop (masked)"], \
            conv.report.composites
        assert_stateless_and_matches(data, model, xs, TOL, num_threads=threads)


@pytest.mark.parametrize("bad", [0, -1, "2", 2.0, True, 2000])
def test_bad_thread_count_is_a_clear_error(bad):
    model = _model(keras_flavour("keras3"), LAYERS["simple_rnn"][1])
    with pytest.raises(InputError, match="threads is the LiteRT num_threads the model will run with"):
        fuselite.Converter.from_keras_model(model, threads=bad).convert()


def test_auto_times_the_forms_at_the_thread_count(monkeypatch):
    import fuselite.verify

    real, seen = fuselite.verify.bench, []

    def spy(models, seconds=2.0, num_threads=1, **options):
        seen.append(num_threads)
        return real(models, seconds, num_threads, **options)

    monkeypatch.setattr(fuselite.verify, "bench", spy)
    model = _model(keras_flavour("keras3"), LAYERS["lstm_last"][1], shape=(20, 8))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="auto", threads=2)
    data = conv.convert()
    auto = conv.report.recurrent["auto"]
    assert seen == [2] * auto["blocks"] and auto["blocks"] in (8, 16)  # eight blocks, or sixteen when close
    fastest = auto["fastest_block_us"]
    assert auto["threads"] == 2 and auto["chosen"] == min(fastest, key=fastest.get)
    assert any(w.startswith("rnn_form='auto'") and w.endswith("LiteRT, 2 threads)") for w in conv.report.warnings)
    assert_stateless_and_matches(data, model, _inputs(model), TOL, num_threads=2)


def test_auto_times_every_form_and_keeps_the_fastest():
    model = _model(keras_flavour("keras3"), LAYERS["simple_rnn"][1], shape=(20, 8))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="auto")
    data = conv.convert()
    (note,) = [w for w in conv.report.warnings if w.startswith("rnn_form='auto'")]
    # "fused 12.3 us (12.5, 12.9), unrolled 4.5 us (4.6, 4.8), loop 6.7 us (6.8, 7.0)": each form's fastest block
    # (what auto ranks by), the median of its blocks and its slowest block
    measured = note.split("here (")[1].split(" per invoke")[0]
    parts = [part.replace("(", "").replace(")", "").replace(",", "").split() for part in measured.split("), ")]
    fastest = {p[0]: float(p[1]) for p in parts}
    middle = {p[0]: float(p[3]) for p in parts}
    slowest = {p[0]: float(p[4]) for p in parts}
    assert set(fastest) == {"fused", "unrolled", "loop"}, note
    chosen = min(fastest, key=fastest.get)
    assert f"the {chosen} form is the fastest" in note
    auto = conv.report.recurrent["auto"]
    assert auto["chosen"] == chosen and all(abs(auto["fastest_block_us"][f] - fastest[f]) <= 0.05 for f in fastest)
    assert all(abs(auto["median_us"][f] - middle[f]) <= 0.05 for f in fastest), auto
    assert all(fastest[f] <= middle[f] <= slowest[f] for f in fastest), note
    assert [r["form"] for r in conv.report.composites] == [chosen]
    assert_stateless_and_matches(data, model, _inputs(model), TOL)


def test_fastest_form_keeps_the_fastest_block_and_times_a_model_once(monkeypatch):
    import fuselite.verify as verify

    k = keras_flavour("keras3")
    small = fuselite.Converter.from_keras_model(_model(k, lambda L, i: L.Dense(4)(i), shape=(8,))).convert()
    big = fuselite.Converter.from_keras_model(_model(k, lambda L, i: L.Dense(4)(L.Dense(1024)(L.Dense(1024)(i))),
                                                     shape=(8,))).convert()
    timed = verify.fastest_form({"big": big, "small": small, "copy": bytes(bytearray(small))})
    assert timed["chosen"] == "small" and timed["blocks"] == verify.AUTO_BLOCKS  # 1024x1024 products: not close
    assert set(timed["fastest_block_us"]) == {"big", "small"}  # the copy timed once, under the first name
    assert all(timed["fastest_block_us"][f] <= timed["median_us"][f] <= timed["slowest_block_us"][f]
               for f in ("big", "small")), timed
    assert verify.fastest_form({"a": small, "b": small}) == {
        "chosen": "a", "fastest_block_us": None, "median_us": None, "slowest_block_us": None, "blocks": 0}
    with pytest.raises(InputError, match="at least one model"):
        verify.fastest_form({})
    # a burst of load that slows one block of the fastest form does not change the choice; close forms get as
    # many blocks again
    calls = []

    def loaded(models, seconds, num_threads, burst):
        calls.append(len(models))
        disturbed = len(calls) == 1
        return [{"median_us": 300.0 if disturbed else 100.0}, {"median_us": 104.0}]

    monkeypatch.setattr(verify, "bench", loaded)
    timed = verify.fastest_form({"unrolled": small, "loop": big})
    assert timed["chosen"] == "unrolled" and timed["blocks"] == 2 * verify.AUTO_BLOCKS  # 4% apart: timed again
    assert timed["slowest_block_us"]["unrolled"] == 300.0 and timed["fastest_block_us"]["unrolled"] == 100.0


def test_auto_without_recurrent_layers_converts_once_and_says_nothing():
    k = keras_flavour("keras3")
    model = _model(k, lambda L, i: L.Dense(2)(i))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="auto")
    conv.convert()
    assert not any("rnn_form" in w for w in conv.report.warnings)


@pytest.mark.parametrize("bad", ["while", "Fused", 1])
def test_unknown_form_is_a_clear_error(bad):
    model = _model(keras_flavour("keras3"), LAYERS["simple_rnn"][1])
    with pytest.raises(InputError, match="rnn_form must be one of 'default', 'fused', 'unrolled', 'loop', 'auto'"):
        fuselite.Converter.from_keras_model(model, rnn_form=bad).convert()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_stateful_layer_in_the_loop_form_carries_its_state_between_invokes(kind):
    """rnn_form="loop" on a stateful layer: its states are the loop's first carries and written back after it, so
    three invokes follow Keras' stateful layer (the default keeps the fused op's in-place state for LSTM)."""
    from ai_edge_litert.interpreter import Interpreter

    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((5, 3), batch_size=1)
    model = k.Model(i, getattr(k.layers, kind)(4, stateful=True)(i))
    conv = fuselite.Converter.from_keras_model(model, rnn_form="loop")
    data = conv.convert()
    assert [r["form"] for r in conv.report.composites] == ["loop"], conv.report.composites
    runner = Interpreter(model_content=data).get_signature_runner("serving_default")
    (name,) = runner.get_input_details()
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((1, 5, 3)).astype(np.float32)
        (got,) = runner(**{name: x}).values()
        np.testing.assert_allclose(got, np.asarray(model(x)), atol=TOL)
