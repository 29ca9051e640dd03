"""tf-keras LSTMs saved with tf.saved_model.save (composite "lstm_<uuid>") -> UNIDIRECTIONAL_SEQUENCE_LSTM."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_stateless_and_matches, form_name, invoke_twice, litert_op_names, match_outputs

import fuselite
from fuselite.fusion.evaluate import evaluate_function
from fuselite.rnn.cells.gru import numpy_gru
from fuselite.rnn.cells.lstm import numpy_lstm
from fuselite.runtime import interpreter

TOL = 1e-5


def _tf_keras():
    import tf_keras

    return tf_keras


def _model(build, shape=(7, 3), seed=0):
    k = _tf_keras()
    k.utils.set_random_seed(seed)
    i = k.Input(shape)
    return k.Model(i, build(k.layers, i))


def _save(model, tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "saved_model")
    tf.saved_model.save(model, path)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``saved(flavour, build, shape=(7, 3))``: the model and SavedModel path ``_saved`` gives, built and saved once
    in this module (saving takes seconds a model; the tests only read both). ``saved.masked(build)``: the same for
    ``_masked_tf_keras``; ``saved.once(key, make)``: ``make(folder)``'s once."""
    cache = {}

    def once(key, make):
        if key not in cache:
            cache[key] = make(tmp_path_factory.mktemp("saved"))
        return cache[key]

    def get(flavour, build, shape=(7, 3)):
        return once((flavour, build, shape), lambda d: _saved(flavour, build, d, shape))

    get.masked = lambda build: once(("masked", build), lambda d: _masked_tf_keras(d, build))
    get.once = once  # any other (model, path) maker, by a key of its own
    return get






def check_converted(conv, model, xs, n_fused=1, fused=True):
    """The model converts, runs twice bit-identically on LiteRT and matches Keras within 1e-5."""
    data = conv.convert()
    ops = litert_op_names(data)
    if fused:
        # a forward/backward pair is merged into one BIDIRECTIONAL_SEQUENCE_LSTM after fusion (bidirectional="fused")
        assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") + 2 * ops.count("BIDIRECTIONAL_SEQUENCE_LSTM") == n_fused, ops
        assert "WHILE" not in ops, ops
        lstm = [r for r in conv.report.composites if r["interface"].startswith("lstm_")]
        assert len(lstm) == n_fused, conv.report.composites
        for r in lstm:
            assert r["status"] == "fused", r
            assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in r["into"], r
        assert "fused into" in str(conv.report)
    assert_stateless_and_matches(data, model, xs, TOL)
    return data, ops


def _inputs(model, batch, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([batch] + list(t.shape[1:])).astype(np.float32) for t in model.inputs]


def _time_major(units, layer="LSTM", **kw):
    """A time-major tf-keras LSTM (or GRU) between two transposes, so the composite's axis 1 is the batch."""

    def build(L, i):
        import tensorflow as tf

        x = L.Lambda(lambda t: tf.transpose(t, [1, 0, 2]))(i)
        y = getattr(L, layer)(units, time_major=True, **kw)(x)
        return L.Lambda(lambda t: tf.transpose(t, [1, 0, 2]))(y) if kw.get("return_sequences") else y

    return build


VARIANTS = {
    "last_step": (lambda L, i: L.LSTM(6)(i), 1),
    "sequences": (lambda L, i: L.LSTM(6, return_sequences=True)(i), 1),
    # outputs, new_h and new_c of the composite all reach the model's outputs
    "go_backwards_state": (lambda L, i: L.LSTM(6, go_backwards=True, return_sequences=True, return_state=True)(i), 1),
    "time_major": (_time_major(5, return_sequences=True), 1),
    "time_major_backwards_last": (_time_major(5, go_backwards=True), 1),
    "stacked": (lambda L, i: L.LSTM(4)(L.LSTM(5, return_sequences=True)(i)), 2),
    "bidirectional": (lambda L, i: L.Bidirectional(L.LSTM(4, return_sequences=True))(i), 2),
}
ALSO_BATCH_2 = {"sequences", "time_major_backwards_last"}  # and the text classifier


def _runs_at_batch(data, model, batch: int, seed: int = 4):
    """The file's input keeps a dynamic batch, and at ``batch`` it gives Keras' outputs within TOL."""
    from fuselite.inspect import describe

    signature = describe(data)["signatures"]["serving_default"]
    assert all(i["shape"][0] == -1 for i in signature["inputs"]), signature
    xs = _inputs(model, batch, seed=seed)
    want = model(xs[0])
    for got, ref in match_outputs(list(fuselite.runtime.run(data, xs).values()),
                                  [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]):
        np.testing.assert_allclose(got, ref, atol=TOL)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_saved_model_lstm_fused(saved, variant):
    build, n = VARIANTS[variant]
    model, path = saved("tf_keras", build)
    conv = fuselite.Converter.from_saved_model(path, rnn_form="fused")  # the unknown batch stays dynamic
    data, ops = check_converted(conv, model, _inputs(model, 1), n_fused=n)
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    _runs_at_batch(data, model, 3)
    if variant == "bidirectional":  # the pair is split again by default (the form every tool opens) ...
        assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 2, ops
        conv = fuselite.Converter.from_saved_model(path, bidirectional="fused", rnn_form="fused")  # ... or kept as LiteRT's one op
        _, ops = check_converted(conv, model, _inputs(model, 1), n_fused=n)
        assert ops.count("BIDIRECTIONAL_SEQUENCE_LSTM") == 1, ops
    if variant in ALSO_BATCH_2:
        conv = fuselite.Converter.from_saved_model(path, batch_size=2, rnn_form="fused")
        check_converted(conv, model, _inputs(model, 2, seed=1), n_fused=n)
        assert not any("batch size of 1" in w for w in conv.report.warnings)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_saved_model_lstm_in_the_loop_form(saved, variant):
    """rnn_form="loop": each tf-keras LSTM composite becomes one WHILE without TensorLists, its batch dynamic."""
    build, n = VARIANTS[variant]
    model, path = saved("tf_keras", build)
    conv = fuselite.Converter.from_saved_model(path, rnn_form="loop")
    data = conv.convert()
    ops = litert_op_names(data)
    assert ops.count("WHILE") == n and "UNIDIRECTIONAL_SEQUENCE_LSTM" not in ops, ops
    lstm = [r for r in conv.report.composites if r["interface"].startswith("lstm_")]
    assert [(r["status"], r["form"]) for r in lstm] == [("fused", "loop")] * n, lstm
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL)
    assert not [w for w in conv.report.warnings if "batch size" in w], conv.report.warnings  # dynamic, as from memory
    _runs_at_batch(data, model, 3)
    if variant == "bidirectional":  # bidirectional="fused" asks for LiteRT's op: the pair stays fused and merges
        conv = fuselite.Converter.from_saved_model(path, bidirectional="fused")
        _, ops = check_converted(conv, model, _inputs(model, 1), n_fused=n)
        assert ops.count("BIDIRECTIONAL_SEQUENCE_LSTM") == 1, ops


def test_saved_model_lstm_default_form_by_its_size(saved):
    """The default at one thread: a small tf-keras LSTM composite unrolled by its size (rnn/forms/policy.py), its
    batch still dynamic (zero initial states); the report says the size and the rule."""
    model, path = saved("tf_keras", VARIANTS["stacked"][0])
    conv = fuselite.Converter.from_saved_model(path)
    data = conv.convert()
    lstm = [r for r in conv.report.composites if r["interface"].startswith("lstm_")]
    assert len(lstm) == 2 and all(r["form"].startswith("unrolled (by size at 1 thread: ") for r in lstm), lstm
    assert "WHILE" not in litert_op_names(data)
    assert not [w for w in conv.report.warnings if "batch size" in w], conv.report.warnings
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL)
    _runs_at_batch(data, model, 3)


def _stacked_long(L, i):
    return L.LSTM(64)(L.LSTM(64, return_sequences=True)(i))


def test_saved_model_lstm_default_form_reads_whether_its_sequence_is_used(saved):
    """Two tf-keras LSTMs of 64 units over 200 steps at batch 1, one thread: the composite whose ``outputs`` the
    model reads returns its sequence (the fused op by size, as the same layer from memory), the other its last step
    (12.5 MiB of step weights: the loop); the batch is read at run time. Read as the last step, both would be the
    loop."""
    model, path = saved("tf_keras", _stacked_long, (200, 8))
    conv = fuselite.Converter.from_saved_model(path, litert_api="interpreter")  # the size rule as measured
    data = conv.convert()
    lstm = [r for r in conv.report.composites if r["interface"].startswith("lstm_")]
    forms = sorted(r["form"] for r in lstm)
    assert [form_name(f) for f in forms] == ["fused", "loop"], lstm
    assert "the sequence out" in forms[0] and "the sequence out" not in forms[1], forms
    ops = litert_op_names(data)
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1 and ops.count("WHILE") == 1, ops
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL)  # XNNPACK and the builtin kernels


def test_saved_model_lstm_takes_the_official_fused_op_from_two_threads(tmp_path):
    """threads=2, for the Interpreter: a tf-keras SavedModel's LSTM composite keeps LiteRT's fused op (the
    official converter's form, which the loop does not beat at more than one thread); its GRU stays in the loop."""
    build = lambda L, i: L.GRU(3)(L.LSTM(5, return_sequences=True)(i))  # noqa: E731
    model = _model(build)
    conv = fuselite.Converter.from_saved_model(_save(model, tmp_path), threads=2, litert_api="interpreter")
    data = conv.convert()
    forms = {r["interface"].split("_")[0]: form_name(r["form"]) for r in conv.report.composites if r.get("form")}
    assert forms == {"lstm": "fused", "gru": "loop"}, conv.report.composites
    ops = litert_op_names(data)
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1 and ops.count("WHILE") == 1, ops
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL, num_threads=2)


def test_saved_model_text_classifier(tmp_path):
    k = _tf_keras()
    k.utils.set_random_seed(0)
    i = k.Input((12,), dtype="int32")
    x = k.layers.Embedding(100, 8)(i)
    x = k.layers.LSTM(16)(x)
    model = k.Model(i, k.layers.Dense(3, activation="softmax")(x))
    path = _save(model, tmp_path)
    for batch_size, batch in ((None, 1), (2, 2)):
        conv = fuselite.Converter.from_saved_model(path, batch_size=batch_size, rnn_form="fused")
        ids = np.random.default_rng(batch).integers(0, 100, (batch, 12)).astype(np.int32)
        check_converted(conv, model, [ids])


def _lstm_with_initial_states(folder):
    k = _tf_keras()
    k.utils.set_random_seed(0)
    x, h, c = k.Input((5, 3), name="seq"), k.Input((4,), name="h0"), k.Input((4,), name="c0")
    model = k.Model([x, h, c], k.layers.LSTM(4, return_sequences=True)(x, initial_state=[h, c]))
    return model, _save(model, folder)


@pytest.mark.parametrize("form", ["fused", "loop"])
def test_saved_model_initial_states_as_inputs(saved, form):
    """Non-constant initial states become the fused op's (re-written) state tensors, or the loop's first carries."""
    model, path = saved.once("lstm_with_initial_states", _lstm_with_initial_states)
    conv = fuselite.Converter.from_saved_model(path, rnn_form=form)
    data = conv.convert()
    assert {"fused": "UNIDIRECTIONAL_SEQUENCE_LSTM", "loop": "WHILE"}[form] in litert_op_names(data)
    rng = np.random.default_rng(3)
    xv, hv, cv = (rng.standard_normal(s).astype(np.float32) for s in ((1, 5, 3), (1, 4), (1, 4)))
    details = interpreter(data).get_input_details()
    names = [d["name"] for d in details]
    by_name = {"seq": xv, "h0": hv, "c0": cv}
    feeds = [next(v for key, v in by_name.items() if key in n) for n in names]
    first, second = invoke_twice(data, feeds)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_allclose(first[0], model([xv, hv, cv]), atol=TOL)


def test_concrete_function_lstm_fused():
    import tensorflow as tf

    model = _model(lambda L, i: L.LSTM(6, go_backwards=True)(i))
    fn = tf.function(lambda x: model(x, training=False))
    cf = fn.get_concrete_function(tf.TensorSpec([2, 7, 3], tf.float32))
    conv = fuselite.Converter.from_concrete_functions([cf], model, rnn_form="fused")
    check_converted(conv, model, _inputs(model, 2, seed=2))


def test_masked_lstm_is_declined_and_correct(tmp_path):
    k = _tf_keras()
    k.utils.set_random_seed(0)
    i = k.Input((6,), dtype="int32")
    model = k.Model(i, k.layers.LSTM(4)(k.layers.Embedding(20, 3, mask_zero=True)(i)))
    conv = fuselite.Converter.from_saved_model(_save(model, tmp_path), rnn_form="fused")
    data = conv.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in litert_op_names(data)
    lstm = [r for r in conv.report.composites if r["interface"].startswith("lstm_")]
    assert lstm and all(r["status"] != "fused" and r["reason"] for r in lstm), conv.report.composites
    assert "mask" in str(conv.report)
    ids = np.array([[3, 5, 1, 0, 0, 0]], np.int32)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [ids]).values())), model(ids), atol=TOL)


# -- the flag detection itself ---------------------------------------------------------------


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_numpy_reference_matches_the_tf_keras_function(time_major, go_backwards):
    """The NumPy LSTM the rule compares against is tf-keras' standard_lstm, run as a FunctionDef."""
    import tensorflow as tf
    from tf_keras.src.layers.rnn.lstm import standard_lstm

    rng = np.random.default_rng(0)
    t, b, f, u = 4, 2, 3, 5
    x = rng.standard_normal((t, b, f) if time_major else (b, t, f)).astype(np.float32)
    h0, c0 = (rng.standard_normal((b, u)).astype(np.float32) for _ in range(2))
    k, rk, bias = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((f, 4 * u), (u, 4 * u), (4 * u,)))

    @tf.function(autograph=False)
    def fn(x, h0, c0, k, rk, bias):
        return standard_lstm(x, h0, c0, k, rk, bias, None, time_major, go_backwards, None, False, True)

    cf = fn.get_concrete_function(*(tf.TensorSpec(a.shape, tf.float32) for a in (x, h0, c0, k, rk, bias)))
    library = {f.signature.name: f for f in cf.graph.as_graph_def().library.function}
    got = evaluate_function(cf.function_def, library, [x, h0, c0, k, rk, bias])
    seq, h, c = numpy_lstm(x, h0, c0, k, rk, bias, time_major=time_major, go_backwards=go_backwards)
    want = [seq[-1], seq if time_major else seq.transpose(1, 0, 2), h, c]
    for g, w in zip(got[:4], want):
        np.testing.assert_allclose(g, w, atol=TOL)


def _hand_made_composite(time_major, go_backwards, return_sequences, attrs=None, body_scale=1.0, variables=False):
    """A concrete function calling tf-keras' standard_lstm as an "lstm_*" composite, like tf-keras does;
    with ``variables``, the weights are passed as variables (resource arguments)."""
    import tensorflow as tf
    from tf_keras.src.layers.rnn.lstm import standard_lstm

    rng = np.random.default_rng(5)
    t, b, f, u = 6, 2, 3, 4
    k, rk, bias = ((tf.Variable if variables else tf.constant)(rng.standard_normal(s).astype(np.float32) * 0.5)
                   for s in ((f, 4 * u), (u, 4 * u), (4 * u,)))
    attributes = {"api_implements": "lstm_hand_made", "time_major": time_major, "go_backwards": go_backwards}
    attributes.update(attrs or {})

    @tf.function(autograph=False, experimental_attributes=attributes)
    def lstm(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
        res = standard_lstm(inputs, init_h, init_c, kernel, recurrent_kernel, bias, None, time_major,
                            go_backwards, None, False, return_sequences)
        return (res[0] * body_scale,) + tuple(res[1:])

    shape = [t, b, f] if time_major else [b, t, f]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32)])
    def model(x):
        zeros = tf.zeros([b, u])
        last, outputs, h, c, _ = lstm(x, zeros, zeros, k, rk, bias)
        return {"last": last, "outputs": outputs, "h": h, "c": c}

    x = rng.standard_normal(shape).astype(np.float32)
    return model, x


@pytest.mark.parametrize("flags", [(False, False, True), (True, True, False), (True, False, True), (False, True, False)])
def test_flags_are_determined_by_evaluation(flags):
    model, x = _hand_made_composite(*flags)
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], rnn_form="fused")
    data = conv.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in litert_op_names(data) and "WHILE" not in litert_op_names(data)
    assert conv.report.composites[0]["status"] == "fused", conv.report.composites
    got = fuselite.runtime.run(data, [x])
    want = {k: np.asarray(v) for k, v in model(x).items()}
    assert len(got) == len(want)
    for name, w in want.items():
        g = next(v for key, v in got.items() if name in key)
        np.testing.assert_allclose(g, w, atol=TOL)


@pytest.mark.parametrize("flags", [(False, False, True), (True, True, False)])
def test_weights_passed_as_variables_are_frozen_and_fused(flags):
    """Resource arguments (tf.Variables passed to the composite, read only inside its loop) are read as
    constants; the body is evaluated with variables holding them (was: declined, 'only float32 LSTMs')."""
    model, x = _hand_made_composite(*flags, variables=True)
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], rnn_form="fused")
    data = conv.convert()
    assert [(r["interface"], r["status"]) for r in conv.report.composites] == [("lstm_hand_made", "fused")], \
        conv.report.composites
    assert "WHILE" not in litert_op_names(data)
    got = fuselite.runtime.run(data, [x])
    for name, w in model(x).items():
        np.testing.assert_allclose(next(v for key, v in got.items() if name in key), w, atol=TOL)


def _declined_composite(conv):
    """The "lstm_*" composite was declined; its inlined body's while loop, a plain LSTM, may be fused
    (recognised and verified by rnn/sources/loops.py) instead."""
    (composite,) = [r for r in conv.report.composites if r["interface"].startswith("lstm_")]
    assert composite["status"] == "declined", conv.report.composites
    loops = [r for r in conv.report.composites if r["interface"] == "Keras LSTM loop (recognised)"]
    assert len(loops) <= 1 and all(r["status"] == "fused" for r in loops), conv.report.composites
    return composite


def test_contradicting_attribute_is_declined():
    model, x = _hand_made_composite(True, False, True, attrs={"time_major": False})
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], rnn_form="fused")
    data = conv.convert()
    assert "contradicts" in _declined_composite(conv)["reason"], str(conv.report)
    got = next(v for key, v in fuselite.runtime.run(data, [x]).items() if "outputs" in key)
    np.testing.assert_allclose(got, model(x)["outputs"], atol=TOL)


def test_body_that_is_not_a_standard_lstm_is_declined():
    model, x = _hand_made_composite(False, False, True, body_scale=1.01)
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], rnn_form="fused")
    data = conv.convert()
    assert "did not reproduce" in _declined_composite(conv)["reason"], str(conv.report)
    got = next(v for key, v in fuselite.runtime.run(data, [x]).items() if "last" in key)
    np.testing.assert_allclose(got, model(x)["last"], atol=TOL)


def test_weights_that_hide_the_step_order_fall_back_to_random_weights():
    """Zero kernels make every step order give the same outputs; the flags are found with random weights."""
    import tensorflow as tf

    model = _model(lambda L, i: L.LSTM(4, kernel_initializer="zeros", recurrent_initializer="zeros",
                                       go_backwards=True)(i))
    fn = tf.function(lambda x: model(x, training=False))
    conv = fuselite.Converter.from_concrete_functions([fn.get_concrete_function(tf.TensorSpec([1, 7, 3]))], model, rnn_form="fused")
    check_converted(conv, model, _inputs(model, 1))


# -- GRU and Bidirectional(SimpleRNN) in SavedModels: Keras 3 (model.export) and tf-keras -----------
#
# Keras 3 GRUs and tf-keras GRUs with reset_after=False (or another activation, no bias) are
# plain while loops: the loop is recognised, checked against a NumPy GRU cell and unrolled like
# an in-memory GRU (rnn/forms/unrolled.py). A tf-keras GRU that could run on cuDNN is its "gru_*"
# composite (standard_gru) around such a loop; the composite itself is fused into the same
# unrolled builtins (rnn/sources/tf_keras.py).

FLAVOURS = ["keras3", "tf_keras"]


def _saved(flavour, build, tmp_path, shape=(7, 3)):
    """A one-input model in ``flavour``, saved as a SavedModel the way its users do."""
    import tensorflow as tf
    from conftest import keras_flavour

    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    i = k.Input(shape)
    model = k.Model(i, build(k.layers, i))
    path = str(tmp_path / "saved_model")
    if flavour == "keras3":
        model.export(path, verbose=False)
    else:
        tf.saved_model.save(model, path)
    return model, path


GRU_VARIANTS = {  # name: (build, input shape, number of GRU layers)
    "last_step": (lambda L, i: L.GRU(5)(i), (7, 3), 1),
    "sequences": (lambda L, i: L.GRU(5, return_sequences=True)(i), (7, 3), 1),
    "go_backwards": (lambda L, i: L.GRU(5, go_backwards=True, return_sequences=True)(i), (7, 3), 1),
    "go_backwards_last": (lambda L, i: L.GRU(5, go_backwards=True)(i), (7, 3), 1),
    "state": (lambda L, i: L.GRU(5, return_sequences=True, return_state=True)(i), (7, 3), 1),
    "reset_before": (lambda L, i: L.GRU(5, reset_after=False, return_sequences=True)(i), (7, 3), 1),
    "reset_before_backwards_last": (lambda L, i: L.GRU(5, reset_after=False, go_backwards=True)(i), (7, 3), 1),
    "no_bias": (lambda L, i: L.GRU(5, use_bias=False)(i), (7, 3), 1),
    "relu": (lambda L, i: L.GRU(5, activation="relu", return_sequences=True)(i), (7, 3), 1),
    "stacked": (lambda L, i: L.GRU(4)(L.GRU(5, return_sequences=True)(i)), (7, 3), 2),
    "long": (lambda L, i: L.GRU(8, return_sequences=True)(i), (100, 3), 1),
}


def check_unrolled_gru(conv, model, xs, n_layers):
    """No WHILE: every GRU (recognised loop or tf-keras "gru_*" composite) was unrolled; stateless and
    within 1e-5 of Keras. Returns the report records of the recognised loops."""
    data = conv.convert()
    ops = litert_op_names(data)
    assert "WHILE" not in ops, ops
    assert {"FULLY_CONNECTED", "UNPACK", "SPLIT_V", "LOGISTIC"} <= set(ops), ops
    grus = [r for r in conv.report.composites if r["interface"] == "Keras GRU loop (recognised)"]
    composites = [r for r in conv.report.composites if r["interface"].startswith("gru_") and r["status"] == "fused"]
    assert len(grus) + len(composites) == n_layers, conv.report.composites
    assert all(r["status"] == "fused" for r in grus), conv.report.composites
    assert_stateless_and_matches(data, model, xs, TOL)
    return grus


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", sorted(GRU_VARIANTS))
def test_saved_model_gru_unrolled(saved, flavour, variant):
    build, shape, n = GRU_VARIANTS[variant]
    model, path = saved(flavour, build, shape)
    grus = check_unrolled_gru(fuselite.Converter.from_saved_model(path, rnn_form="unrolled"), model,
                              _inputs(model, 1), n)
    # recognised loops only (tf-keras' fused "gru_*" composites are reset_after=True and tanh by construction)
    assert all(r["attrs"]["reset_after"] == (not variant.startswith("reset_before")) for r in grus), grus
    assert all(r["attrs"]["activation"] == ("relu" if variant == "relu" else "tanh") for r in grus), grus
    if variant in ("sequences", "reset_before"):
        check_unrolled_gru(fuselite.Converter.from_saved_model(path, batch_size=2, rnn_form="unrolled"), model,
                           _inputs(model, 2, seed=1), n)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", ["sequences", "reset_before_backwards_last", "stacked", "state"])
def test_saved_model_recognised_loops_in_the_loop_form(saved, flavour, variant):
    """By default a recognised GRU loop, and tf-keras' "gru_*" composite, becomes the loop form: the input
    projection, then a WHILE without TensorLists, one per layer."""
    build, shape, n = GRU_VARIANTS[variant]
    model, path = saved(flavour, build, shape)
    conv = fuselite.Converter.from_saved_model(path)
    data = conv.convert()
    loops = [r for r in conv.report.composites if r["interface"] == "Keras GRU loop (recognised)"
             or r["interface"].startswith("gru_")]
    assert len(loops) == n and all((r["status"], form_name(r["form"])) == ("fused", "loop") for r in loops), loops
    assert litert_op_names(data).count("WHILE") == n, litert_op_names(data)
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL)


def test_saved_model_gru_hard_sigmoid_stays_a_correct_loop(tmp_path):
    """A cell the NumPy GRU does not reproduce (other gate activation) is left a WHILE loop, and the report
    says so."""
    model, path = _saved("keras3", lambda L, i: L.GRU(5, recurrent_activation="hard_sigmoid")(i), tmp_path)
    conv = fuselite.Converter.from_saved_model(path)
    data = conv.convert()
    assert "WHILE" in litert_op_names(data)
    # said in the report: the loop looked like a GRU, but its cell is not one the unrolled form computes
    assert [r["status"] for r in conv.report.composites if r["interface"] == "Keras GRU loop (recognised)"] == \
        ["not fused"]
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL)


# -- tf-keras' "gru_*" composite (standard_gru) -> the loop form or the unrolled GRU, also with strict_fusion --

# tf-keras calls standard_gru for tanh / sigmoid, reset_after=True, use_bias, no recurrent dropout
TF_KERAS_GRU = {  # name: (build, input shape, number of "gru_*" composites)
    **{name: GRU_VARIANTS[name] for name in ("last_step", "sequences", "go_backwards", "go_backwards_last",
                                              "state", "long")},
    "time_major": (_time_major(5, "GRU", return_sequences=True), (7, 3), 1),
    "time_major_backwards_last": (_time_major(5, "GRU", go_backwards=True), (7, 3), 1),
    "dropout": (lambda L, i: L.GRU(5, dropout=0.3, return_sequences=True)(i), (7, 3), 1),
    "one_step": (lambda L, i: L.GRU(5, return_sequences=True)(i), (1, 3), 1),
    # reset_after=False never reaches standard_gru: a plain loop, nothing for strict fusion to reject
    "reset_before": GRU_VARIANTS["reset_before"][:2] + (0,),
}


def check_fused_gru_composites(conv, model, xs, n, form="unrolled"):
    """Every "gru_*" composite is fused into the unrolled builtins (no WHILE) or the loop form (a WHILE each,
    no TensorLists: its body's ops are another subgraph's); stateless, within 1e-5."""
    data = conv.convert()
    ops = litert_op_names(data)
    assert ops.count("WHILE") == (n if form == "loop" else 0) and "FULLY_CONNECTED" in ops, ops
    assert not any(op.startswith("TENSOR_LIST") for op in ops), ops
    grus = [r for r in conv.report.composites if r["interface"].startswith("gru_")]
    assert len(grus) == n, conv.report.composites
    for r in grus:
        assert (r["status"], form_name(r["form"])) == ("fused", form), r
        assert ({"FULLY_CONNECTED", "WHILE"} if form == "loop" else {"FULLY_CONNECTED", "UNPACK", "LOGISTIC"}) <= set(
            r["into"]), r
    assert not [r for r in conv.report.composites if r["status"] != "fused"], conv.report.composites
    if n:
        assert "fused into" in str(conv.report) and "no fusion rule" not in str(conv.report)
        assert not any(r["interface"] == "Keras GRU loop (recognised)" for r in conv.report.composites)
    assert_stateless_and_matches(data, model, xs, TOL)
    return data


@pytest.mark.parametrize("variant", sorted(TF_KERAS_GRU))
def test_saved_model_tf_keras_gru_composite_fused(saved, variant):
    build, shape, n = TF_KERAS_GRU[variant]
    model, path = saved("tf_keras", build, shape)
    conv = fuselite.Converter.from_saved_model(path, strict_fusion=True, rnn_form="unrolled")  # batch 1
    check_fused_gru_composites(conv, model, _inputs(model, 1), n)
    assert any("batch size of 1" in w for w in conv.report.warnings), conv.report.warnings
    if variant in ("sequences", "time_major_backwards_last"):
        conv = fuselite.Converter.from_saved_model(path, batch_size=2, strict_fusion=True, rnn_form="unrolled")
        check_fused_gru_composites(conv, model, _inputs(model, 2, seed=1), n)


@pytest.mark.parametrize("variant", sorted(v for v in TF_KERAS_GRU if TF_KERAS_GRU[v][2]))
def test_saved_model_tf_keras_gru_composite_in_the_loop_form(saved, variant):
    """By default the composite becomes the loop form; where tf-keras leaves the batch unknown at the
    composite (a layer returning its sequence), it stays dynamic."""
    build, shape, n = TF_KERAS_GRU[variant]
    model, path = saved("tf_keras", build, shape)
    conv = fuselite.Converter.from_saved_model(path, strict_fusion=True)
    data = check_fused_gru_composites(conv, model, _inputs(model, 1), n, form="loop")
    if variant in ("sequences", "long", "dropout"):
        assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
        runner = interpreter(data).get_signature_runner("serving_default")
        (name,) = fuselite.runtime.signature_inputs(data, "serving_default")
        for batch in (2, 3):
            xs = _inputs(model, batch, seed=batch)
            (got,) = runner(**{name: xs[0]}).values()
            np.testing.assert_allclose(got, np.asarray(model(xs[0])), atol=TOL)


def test_stacked_tf_keras_gru_strict_fusion(saved):
    """The second GRU's composite sees the static number of steps the first fused one produces."""
    model, path = saved("tf_keras", GRU_VARIANTS["stacked"][0])
    for form in ("unrolled", "loop"):
        check_fused_gru_composites(fuselite.Converter.from_saved_model(path, strict_fusion=True, rnn_form=form), model,
                                   _inputs(model, 1), 2, form)


def _gru_with_an_initial_state(folder):
    k = _tf_keras()
    k.utils.set_random_seed(0)
    x, h = k.Input((5, 3), name="seq"), k.Input((4,), name="h0")
    model = k.Model([x, h], k.layers.GRU(4, return_sequences=True, go_backwards=True)(x, initial_state=[h]))
    return model, _save(model, folder)


@pytest.mark.parametrize("form", ["unrolled", "loop"])
def test_saved_model_tf_keras_gru_initial_state_as_input(saved, form):
    """A non-constant initial state feeds the first step's recurrent projection (the loop's first carry)."""
    model, path = saved.once("gru_with_an_initial_state", _gru_with_an_initial_state)
    conv = fuselite.Converter.from_saved_model(path, strict_fusion=True, rnn_form=form)
    data = conv.convert()
    assert litert_op_names(data).count("WHILE") == (form == "loop")
    assert [(r["status"], r["form"]) for r in conv.report.composites if r["interface"].startswith("gru_")] == [
        ("fused", form)]
    rng = np.random.default_rng(3)
    xv, hv = (rng.standard_normal(s).astype(np.float32) for s in ((1, 5, 3), (1, 4)))
    names = [d["name"] for d in interpreter(data).get_input_details()]
    feeds = [xv if "seq" in n else hv for n in names]
    first, second = invoke_twice(data, feeds)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_allclose(first[0], model([xv, hv]), atol=TOL)


@pytest.mark.parametrize("form", ["unrolled", "loop"])
def test_concrete_function_tf_keras_gru_fused(form):
    import tensorflow as tf

    model = _model(lambda L, i: L.GRU(6, go_backwards=True)(i))
    fn = tf.function(lambda x: model(x, training=False))
    cf = fn.get_concrete_function(tf.TensorSpec([2, 7, 3], tf.float32))
    conv = fuselite.Converter.from_concrete_functions([cf], model, strict_fusion=True, rnn_form=form)
    check_fused_gru_composites(conv, model, _inputs(model, 2, seed=2), 1, form)


MASKED_TOKENS = np.array([[5, 3, 9, 4, 0, 0, 0, 0],      # right padding
                          [0, 0, 0, 7, 2, 8, 1, 6],      # left padding
                          [4, 0, 6, 0, 0, 3, 0, 2]], np.int32)  # holes
MASKED_TF_KERAS = {  # name: (layer over a masked sequence, number of tf-keras composites)
    "lstm_last": (lambda L, x: L.LSTM(4)(x), 1),
    "lstm_sequences_backwards": (lambda L, x: L.LSTM(4, return_sequences=True, go_backwards=True)(x), 1),
    "lstm_state": (lambda L, x: L.LSTM(4, return_state=True)(x), 1),
    "gru_last": (lambda L, x: L.GRU(4)(x), 1),
    "gru_sequences_backwards": (lambda L, x: L.GRU(4, return_sequences=True, go_backwards=True)(x), 1),
    "bidirectional_lstm_sequences": (lambda L, x: L.Bidirectional(L.LSTM(3, return_sequences=True))(x), 2),
    "bidirectional_gru_last": (lambda L, x: L.Bidirectional(L.GRU(3))(x), 2),
}


def _masked_tf_keras(tmp_path, build, batch=3):
    k = _tf_keras()
    k.utils.set_random_seed(0)
    i = k.Input((8,), dtype="int32", batch_size=batch)
    y = build(k.layers, k.layers.Embedding(20, 3, mask_zero=True)(i))
    model = k.Model(i, list(y) if isinstance(y, (list, tuple)) else y)
    return model, _save(model, tmp_path)


@pytest.mark.parametrize("variant", sorted(MASKED_TF_KERAS))
def test_masked_tf_keras_composites_in_the_loop_form(saved, variant):
    """tf-keras' masked LSTM / GRU composites (a mask argument; zero_output_for_mask found by evaluation, as
    Bidirectional sets it for sequences) take the loop form by default, strict fusion included: no TensorList,
    a WHILE per layer and direction, stateless and within 1e-5 of Keras for any mask."""
    build, n = MASKED_TF_KERAS[variant]
    model, path = saved.masked(build)
    conv = fuselite.Converter.from_saved_model(path, strict_fusion=True)
    data = conv.convert()
    ops = litert_op_names(data)
    assert ops.count("WHILE") == n and not any(op.startswith("TENSOR_LIST") for op in ops), ops
    rnns = [r for r in conv.report.composites if r["interface"].startswith(("lstm_", "gru_"))]
    assert [(r["status"], r["form"]) for r in rnns] == [("fused", "loop (masked)")] * n, conv.report.composites
    assert_stateless_and_matches(data, model, [MASKED_TOKENS], TOL)


def test_masked_tf_keras_lstm_keeps_a_dynamic_batch(tmp_path):
    model, path = _masked_tf_keras(tmp_path, lambda L, x: L.LSTM(4, return_sequences=True)(x), batch=None)
    conv = fuselite.Converter.from_saved_model(path)
    data = conv.convert()
    assert [r["form"] for r in conv.report.composites if r["interface"].startswith("lstm_")] == ["loop (masked)"]
    assert not any("batch size" in w for w in conv.report.warnings), conv.report.warnings
    runner = interpreter(data).get_signature_runner("serving_default")
    (name,) = fuselite.runtime.signature_inputs(data, "serving_default")
    for tokens in (MASKED_TOKENS, MASKED_TOKENS[1:]):
        (got,) = runner(**{name: tokens}).values()
        np.testing.assert_allclose(got, np.asarray(model(tokens)), atol=TOL)


@pytest.mark.parametrize("form", ["unrolled", "fused"])
@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_masked_tf_keras_composite_in_other_forms_is_declined_and_correct(saved, layer, form):
    """Only the loop form takes tf-keras' masked composites: in the others the composite is declined with the
    reason and converted, correctly, from its body (strict fusion refuses it)."""
    model, path = saved.masked(MASKED_TF_KERAS[f"{layer.lower()}_last"][0])
    conv = fuselite.Converter.from_saved_model(path, rnn_form=form)
    data = conv.convert()
    rnns = [r for r in conv.report.composites if r["interface"].startswith(("lstm_", "gru_"))]
    assert rnns and all(r["status"] == "declined" and "mask" in r["reason"] for r in rnns), conv.report.composites
    assert "only the loop form takes it here (rnn_form='loop')" in str(conv.report)
    np.testing.assert_allclose(next(iter(fuselite.runtime.run(data, [MASKED_TOKENS]).values())), model(MASKED_TOKENS),
                               atol=TOL)
    with pytest.raises(fuselite.FusionError, match="mask"):
        fuselite.Converter.from_saved_model(path, rnn_form=form, strict_fusion=True).convert()


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_numpy_gru_matches_the_tf_keras_function(time_major, go_backwards):
    """The NumPy GRU the "gru_*" rule compares against is tf-keras' standard_gru, run as a FunctionDef."""
    import tensorflow as tf
    from tf_keras.src.layers.rnn.gru import standard_gru

    rng = np.random.default_rng(0)
    t, b, f, u = 4, 2, 3, 5
    x = rng.standard_normal((t, b, f) if time_major else (b, t, f)).astype(np.float32)
    h0 = rng.standard_normal((b, u)).astype(np.float32)
    k, rk, bias = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((f, 3 * u), (u, 3 * u), (2, 3 * u)))

    @tf.function(autograph=False)
    def fn(x, h0, k, rk, bias):
        return standard_gru(x, h0, k, rk, bias, None, time_major, go_backwards, None, False, True)

    cf = fn.get_concrete_function(*(tf.TensorSpec(a.shape, tf.float32) for a in (x, h0, k, rk, bias)))
    library = {f.signature.name: f for f in cf.graph.as_graph_def().library.function}
    got = evaluate_function(cf.function_def, library, [x, h0, k, rk, bias])
    seq, h = numpy_gru(x, h0, k, rk, bias, time_major=time_major, go_backwards=go_backwards)
    for g, w in zip(got[:3], [seq[-1], seq if time_major else seq.transpose(1, 0, 2), h]):
        np.testing.assert_allclose(g, w, atol=TOL)


def _hand_made_gru_composite(time_major, go_backwards, return_sequences, attrs=None, body_scale=1.0):
    """A concrete function calling tf-keras' standard_gru as a "gru_*" composite, like tf-keras does."""
    import tensorflow as tf
    from tf_keras.src.layers.rnn.gru import standard_gru

    rng = np.random.default_rng(5)
    t, b, f, u = 6, 2, 3, 4
    k, rk, bias = (tf.constant(rng.standard_normal(s).astype(np.float32) * 0.5)
                   for s in ((f, 3 * u), (u, 3 * u), (2, 3 * u)))
    attributes = {"api_implements": "gru_hand_made", "time_major": time_major, "go_backwards": go_backwards}
    attributes.update(attrs or {})

    @tf.function(autograph=False, experimental_attributes=attributes)
    def gru(inputs, init_h, kernel, recurrent_kernel, bias):
        res = standard_gru(inputs, init_h, kernel, recurrent_kernel, bias, None, time_major, go_backwards, None,
                           False, return_sequences)
        return (res[0] * body_scale,) + tuple(res[1:])

    shape = [t, b, f] if time_major else [b, t, f]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32)])
    def model(x):
        last, outputs, h, _ = gru(x, tf.zeros([b, u]), k, rk, bias)
        return {"last": last, "outputs": outputs, "h": h}

    return model, rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("form", ["unrolled", "loop"])
@pytest.mark.parametrize("flags", [(False, False, True), (True, True, False), (True, False, True), (False, True, False)])
def test_gru_flags_are_determined_by_evaluation(flags, form):
    model, x = _hand_made_gru_composite(*flags)
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], strict_fusion=True,
                                                      rnn_form=form)
    data = conv.convert()
    assert litert_op_names(data).count("WHILE") == (form == "loop")
    assert (conv.report.composites[0]["status"], conv.report.composites[0]["form"]) == ("fused", form), \
        conv.report.composites
    got = fuselite.runtime.run(data, [x])
    want = {k: np.asarray(v) for k, v in model(x).items()}
    assert len(got) == len(want)
    for name, w in want.items():
        np.testing.assert_allclose(next(v for key, v in got.items() if name in key), w, atol=TOL)


@pytest.mark.parametrize("case", ["not_a_gru", "contradicting_attribute"])
def test_gru_composite_that_does_not_fit_is_declined(case):
    if case == "not_a_gru":
        model, x = _hand_made_gru_composite(False, False, True, body_scale=1.01)
        reason = "did not reproduce"
    else:
        model, x = _hand_made_gru_composite(True, False, True, attrs={"time_major": False})
        reason = "contradicts"
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()])
    data = conv.convert()
    (composite,) = [r for r in conv.report.composites if r["interface"].startswith("gru_")]
    assert composite["status"] == "declined" and reason in composite["reason"], conv.report.composites
    got = fuselite.runtime.run(data, [x])
    for name, w in model(x).items():
        np.testing.assert_allclose(next(v for key, v in got.items() if name in key), w, atol=TOL)


BIDIRECTIONAL_RNN = {  # name: (build, input shape)
    "concat": (lambda L, i: L.Bidirectional(L.SimpleRNN(4, return_sequences=True))(i), (7, 3)),
    "sum": (lambda L, i: L.Bidirectional(L.SimpleRNN(4, return_sequences=True), merge_mode="sum")(i), (7, 3)),
    "ave": (lambda L, i: L.Bidirectional(L.SimpleRNN(4, return_sequences=True), merge_mode="ave")(i), (7, 3)),
    "mul": (lambda L, i: L.Bidirectional(L.SimpleRNN(4, return_sequences=True), merge_mode="mul")(i), (7, 3)),
    "sum_last": (lambda L, i: L.Bidirectional(L.SimpleRNN(4), merge_mode="sum")(i), (7, 3)),
    "concat_relu_last": (lambda L, i: L.Bidirectional(L.SimpleRNN(4, activation="relu"))(i), (7, 3)),
    "concat_long": (lambda L, i: L.Bidirectional(L.SimpleRNN(6, return_sequences=True))(i), (80, 3)),
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("variant", sorted(BIDIRECTIONAL_RNN))
def test_saved_model_bidirectional_simple_rnn_is_one_op(tmp_path, flavour, variant):
    """The two recognised loops become one BIDIRECTIONAL_SEQUENCE_RNN (bidirectional="fused"; by default it is
    split again into two unidirectional ops, tested with the Keras models in test_rnn.py)."""
    build, shape = BIDIRECTIONAL_RNN[variant]
    model, path = _saved(flavour, build, tmp_path, shape)
    conv = fuselite.Converter.from_saved_model(path, bidirectional="fused")
    data = conv.convert()
    ops = litert_op_names(data)
    assert ops.count("BIDIRECTIONAL_SEQUENCE_RNN") == 1, ops
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" not in ops and "WHILE" not in ops, ops
    loops = [r for r in conv.report.composites if r["interface"] == "Keras SimpleRNN loop (recognised)"]
    assert len(loops) == 2 and all(r["status"] == "fused" for r in loops), conv.report.composites
    assert_stateless_and_matches(data, model, _inputs(model, 1), TOL)


@pytest.mark.parametrize("batch", [1, None])
def test_keras3_lstm_through_tf_saved_model_save_is_fused(tmp_path, batch):
    """The codelab's route for a Keras 3 model (tf.saved_model.save, not model.export). With a static batch
    of 1 its loop body has the batch in its shapes: the loop matcher checked it at batch 2, did not
    reproduce it, and left a WHILE loop; it is checked at the loop's own batch now."""
    import keras
    import tensorflow as tf

    from fuselite.runtime import run

    keras.utils.set_random_seed(0)
    i = keras.Input((10, 4), batch_size=batch)
    model = keras.Model(i, keras.layers.LSTM(8)(i))
    tf.saved_model.save(model, str(tmp_path))
    x = np.random.default_rng(0).standard_normal((1, 10, 4)).astype(np.float32)
    for form, op in (("loop", "WHILE"), ("fused", "UNIDIRECTIONAL_SEQUENCE_LSTM")):
        conv = fuselite.Converter.from_saved_model(tmp_path, rnn_form=form)
        data = conv.convert()
        (record,) = [r for r in conv.report.composites if r["interface"] == "Keras LSTM loop (recognised)"]
        assert record["status"] == "fused" and record["form"] == ("loop" if op == "WHILE" else "fused"), record
        ops = litert_op_names(data)
        assert ops.count(op) == 1 and not {"WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM"} - {op} & set(ops), ops
        np.testing.assert_allclose(next(iter(run(data, [x]).values())), np.asarray(model(x)), atol=TOL)
