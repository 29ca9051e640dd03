"""Misuse gets one clear line, never a traceback, a hang or a lost file (issue 13)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import keras_flavour

import fuselite
from fuselite.errors import InputError
from fuselite.testing import models as zoo

CLI = [sys.executable, "-m", "fuselite.cli", "convert"]


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.keras"
    zoo.build("mlp", keras_flavour("keras3")).save(path)
    return path


def _cli(*args, timeout=300):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _one_clear_line(out, message):
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and message in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr  # no TensorFlow log lines before it


def test_cli_never_writes_over_its_input(keras_file):
    before = keras_file.read_bytes()
    _one_clear_line(_cli(keras_file, "-o", keras_file), "is the input model")
    assert keras_file.read_bytes() == before


def test_cli_output_that_is_a_directory_or_unwritable(keras_file, tmp_path):
    _one_clear_line(_cli(keras_file, "-o", tmp_path), "it is a directory")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        _one_clear_line(_cli(keras_file, "-o", locked / "m.tflite"), "cannot write")
    finally:
        locked.chmod(0o700)


def test_cli_random_bytes_and_misplaced_options(keras_file, tmp_path):
    bad = tmp_path / "bad.keras"
    bad.write_bytes(np.random.default_rng(0).bytes(1000))
    _one_clear_line(_cli(bad, "-o", tmp_path / "x.tflite"), "is not a Keras model file")
    _one_clear_line(_cli(keras_file, "-o", tmp_path / "x.tflite", "--signature-keys", "serving_default"),
                    "--signature-keys is for SavedModels")
    assert not any(p.name.startswith(".fuselite-") for p in tmp_path.iterdir())


def test_sigterm_during_the_write_leaves_no_temporary_file(tmp_path):
    """A conversion killed with SIGTERM while it writes: the temporary file goes too."""
    script = tmp_path / "slow_write.py"
    script.write_text(
        "import sys, time\n"
        "import fuselite.cli as cli, fuselite.converter as conv\n"
        "real = conv.os.replace\n"
        "def slow(*a):\n"
        "    print('writing', flush=True); time.sleep(60); real(*a)\n"
        "conv.os.replace = slow\n"
        f"sys.exit(cli.main(['convert', {str(tmp_path / 'model.keras')!r}, '-o', {str(tmp_path / 'out.tflite')!r}]))\n")
    zoo.build("mlp", keras_flavour("keras3")).save(tmp_path / "model.keras")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert any(p.name.startswith(".fuselite-") for p in tmp_path.iterdir())  # the write is under way
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    time.sleep(0.1)
    assert not any(p.name.startswith(".fuselite-") for p in tmp_path.iterdir())
    assert not (tmp_path / "out.tflite").exists()


def test_api_arguments_of_the_wrong_kind_are_named():
    model = zoo.build("mlp", keras_flavour("keras3"))
    for bad in (True, 10**12, 0, 2.0):
        with pytest.raises(InputError, match="batch_size must be a positive integer"):
            fuselite.Converter.from_keras_model(model, batch_size=bad)
    fn = tf.function(lambda x: x * 2).get_concrete_function(tf.TensorSpec([2], tf.float32))
    with pytest.raises(InputError, match=r"list of concrete functions.*\[f.get_concrete_function"):
        fuselite.Converter.from_concrete_functions(fn)
    assert fuselite.Converter.from_concrete_functions([fn]).convert()


def test_signature_keys_as_one_string_is_named(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: x + 1, input_signature=[tf.TensorSpec([2], tf.float32)])
    tf.saved_model.save(module, str(tmp_path), signatures=module.f)
    with pytest.raises(InputError, match=r"list of keys, got the string 'serving_default': pass \['serving_default'\]"):
        fuselite.Converter.from_saved_model(tmp_path, signature_keys="serving_default")
    assert fuselite.Converter.from_saved_model(tmp_path, signature_keys=["serving_default"]).convert()


# -- user fusion rules whose mistakes used to pass or abort the conversion ----------------------------

def _composite_model():
    """One ``tf.function`` composite: a Dense-like ``x @ w + b`` with implements ``test.Affine``."""
    w = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    b = np.arange(5, dtype=np.float32)

    @tf.function(experimental_implements="test.Affine", autograph=False)
    def affine(x):
        return tf.matmul(x, w) + b

    fn = tf.function(lambda x: affine(x)).get_concrete_function(tf.TensorSpec([2, 4], tf.float32))
    return fn, w, b


def _convert_with(rule):
    fn, w, b = _composite_model()
    conv = fuselite.Converter.from_concrete_functions([fn], fusions=[("test.Affine", rule)])
    data = conv.convert()  # the model is never lost: a bad rule is declined, the body converts
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    from fuselite.runtime import run

    got = list(run(data, [x]).values())[0]
    assert np.abs(got - (x @ w + b)).max() <= 1e-5
    (record,) = [c for c in conv.report.composites if c["interface"] == "test.Affine"]
    return record, str(conv.report)


@pytest.mark.parametrize("mistake, message", [
    ("shape", "result 0 would change shape from [2, 5] to [2, 4]"),
    ("unknown_op", "'NOT_AN_OP' is not a LiteRT builtin op"),
    ("bad_activation", "fused_activation_function='TANHH' is not one of"),
    ("bad_option", "FULLY_CONNECTED has no option 'no_such_option'"),
])
def test_a_rule_mistake_is_that_rules_decline_and_the_model_converts(mistake, message):
    def rule(c):
        x = c.args[0]
        weights = np.zeros((4, 4), np.float32) if mistake == "shape" else np.ones((5, 4), np.float32)
        opts = {"fused_activation_function": "TANHH" if mistake == "bad_activation" else "NONE"}
        if mistake == "bad_option":
            opts["no_such_option"] = 1
        kind = "NOT_AN_OP" if mistake == "unknown_op" else "FULLY_CONNECTED"
        return c.op(kind, [x, weights, None], opts, dtype=np.float32,
                    shape=(2, 4) if mistake == "shape" else (2, 5))

    rule.__name__ = rule.__qualname__ = f"my_{mistake}_rule"
    record, text = _convert_with(rule)
    assert record["status"] == "declined" and message in record["reason"], record
    assert record["rule"].endswith(f"my_{mistake}_rule") and "declined by rule" in text


@pytest.mark.parametrize("build, message", [
    (lambda: tf.function(lambda x: x * 2.0).get_concrete_function(tf.TensorSpec([2], tf.float64)),
     r"MUL 'mul' at .*test_misuse.py:\d+ \(inputs float64, float64; outputs float64\): Mul only supports FLOAT32"),
    (lambda: tf.function(lambda a, b: tf.matmul(a, b)).get_concrete_function(
        tf.TensorSpec([2, 3], tf.int64), tf.TensorSpec([3, 2], tf.int64)),
     r"BATCH_MATMUL .*\(inputs int64, int64; outputs int64\): .*batch_matmul.cc"),
])
def test_a_model_litert_cannot_run_is_an_error_not_a_file(build, message, tmp_path):
    conv = fuselite.Converter.from_concrete_functions([build()])
    with pytest.raises(fuselite.ConversionError, match=r"LiteRT \(with XNNPACK\) cannot run the converted model: " + message):
        conv.convert_to(tmp_path / "m.tflite")
    assert not list(tmp_path.iterdir())


def test_empty_saved_model_pb_is_named(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    with pytest.raises(InputError, match="saved_model.pb is empty"):
        fuselite.Converter.from_saved_model(tmp_path)


def test_constants_over_the_flatbuffer_limit_are_an_error_before_any_byte_is_built(monkeypatch):
    """The 2 GiB limit, scaled down, with buffer_offsets=False (the constants kept inside the flatbuffer; unset,
    they go after it: tests/test_buffer_offsets.py): the check counts distinct constants before the builder
    starts."""
    import fuselite.tflite.flatbuffer as fb

    monkeypatch.setattr(fb, "MAX_FLATBUFFER_BYTES", 1000)
    monkeypatch.setattr(fb, "_GRAPH_ALLOWANCE", 0)
    built = []
    monkeypatch.setattr(fb.FlatbufferWriter, "write", lambda self, offsets=False: built.append(1) or b"")
    conv = fuselite.Converter.from_keras_model(zoo.build("mlp", keras_flavour("keras3")), buffer_offsets=False)
    with pytest.raises(fuselite.ConversionError, match=r"constants take 0.00 GiB: a flatbuffer holds under 2 GiB"):
        conv.convert()
    assert not built


def test_a_custom_op_composite_with_a_function_attribute_is_declined_not_stripped():
    """A tfl_fusable_op composite whose implements carries a function (NameAttrList) attribute: a custom
    option cannot hold it, so the fusion is declined with the reason, not written without it."""
    implements = ('name: "my_custom_op" attr { key: "tfl_fusable_op" value { b: true } } '
                  'attr { key: "callback" value { func { name: "some_function" } } }')

    @tf.function(experimental_implements=implements, autograph=False)
    def composite(a, b):
        return a + b

    fn = tf.function(lambda a, b: composite(a, b)).get_concrete_function(
        tf.TensorSpec([1, 4], tf.float32), tf.TensorSpec([1, 4], tf.float32))
    conv = fuselite.Converter.from_concrete_functions([fn])
    data = conv.convert()
    (record,) = [c for c in conv.report.composites if c["interface"] == "my_custom_op"]
    assert record["status"] == "declined" and "custom option 'callback' is a function (some_function)" in \
        record["reason"], record
    from fuselite.runtime import run

    ones = np.ones((1, 4), np.float32)
    assert np.array_equal(list(run(data, [ones, ones]).values())[0], ones * 2)


def _wrong_embedding():
    """An ``embedding_lookup`` composite whose body is not a plain lookup: ``gather * 2 + 1``."""
    table = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)

    @tf.function(experimental_implements="embedding_lookup", autograph=False)
    def lookup(t, ids):
        return tf.gather(t, ids) * 2 + 1

    fn = tf.function(lambda ids: lookup(tf.constant(table), ids)).get_concrete_function(tf.TensorSpec([3], tf.int32))
    return fn, table


def test_a_fusion_that_does_not_compute_the_body_is_declined():
    from fuselite.runtime import run

    fn, table = _wrong_embedding()
    conv = fuselite.Converter.from_concrete_functions([fn])
    data = conv.convert()
    (record,) = conv.report.composites
    assert record["status"] == "declined" and "differs from the composite's body" in record["reason"], record
    ids = np.array([1, 2, 3], np.int32)
    assert np.abs(list(run(data, [ids]).values())[0] - (table[ids] * 2 + 1)).max() <= 1e-6
    conv = fuselite.Converter.from_concrete_functions([fn])  # the check off: the rule is trusted, as before
    conv.check_fusions = False
    data = conv.convert()
    assert conv.report.composites[0]["status"] == "fused" and "check" not in conv.report.composites[0]
    assert np.abs(list(run(data, [ids]).values())[0] - table[ids]).max() <= 1e-6  # the rule's (wrong) lookup


def test_a_right_fusion_is_checked_and_the_report_says_what_it_cost():
    model = zoo.build("lstm_64", keras_flavour("keras3"))
    conv = fuselite.Converter.from_keras_model(model)
    conv.convert()
    (record,) = conv.report.composites
    assert record["status"] == "fused" and record["check"]["checked"], record
    assert record["check"]["max_abs_error"] <= 1e-5 and record["check"]["seconds"] > 0
    assert "fusion checks: 1 of 1 fusion(s) run against their composite's body" in str(conv.report)


def test_a_rule_with_weights_in_the_wrong_layout_is_declined_not_a_broken_model():
    """FULLY_CONNECTED takes [out, in] weights; a rule passing Keras' [in, out] used to pass as fused and fail
    only inside LiteRT."""
    def rule(c):
        x = c.args[0]
        w = np.ones((4, 5), np.float32)  # [in, out]: the wrong layout for FULLY_CONNECTED
        return c.op("FULLY_CONNECTED", [x, w, None], {"fused_activation_function": "NONE"}, dtype=np.float32,
                    shape=(2, 5))

    record, _ = _convert_with(rule)
    assert record["status"] == "declined" and "the fused ops fail on LiteRT" in record["reason"], record


def test_cli_unwritable_output_directory_is_named_before_any_work(keras_file, tmp_path, monkeypatch, capsys):
    """(The subprocess test above cannot lock a directory for root: here os.access says no.)"""
    import fuselite.cli.convert as cli
    from fuselite.cli import main

    real = os.access
    monkeypatch.setattr(cli.os, "access", lambda p, mode: False if os.fspath(p) == str(tmp_path) else real(p, mode))
    monkeypatch.setattr(cli, "load_source", lambda *a: pytest.fail("converted before checking the output"))
    assert main(["convert", str(keras_file), "-o", str(tmp_path / "m.tflite")]) == 1
    err = capsys.readouterr().err
    assert "no permission to write in" in err and "Traceback" not in err


def test_runtime_run_names_a_wrong_signature_or_wrong_inputs():
    """fuselite.runtime.run: an unknown signature key, the wrong number of positional inputs, or inputs that are
    not the signature's are InputErrors naming what the model takes (not LiteRT's own ValueError)."""
    from fuselite.runtime import run

    x1, x2 = tf.keras.Input((3,), name="a"), tf.keras.Input((3,), name="b")
    data = fuselite.Converter.from_keras_model(tf.keras.Model([x1, x2], x1 + x2)).convert()
    ones = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(next(iter(run(data, [ones, ones]).values())), 2 * ones)
    with pytest.raises(InputError, match=r"no signature 'nope' in the model \(it has: serving_default\)"):
        run(data, [ones, ones], signature_key="nope")
    with pytest.raises(InputError, match=r"takes 2 input\(s\) \(a, b\), got 1"):
        run(data, [ones])
    with pytest.raises(InputError, match="takes the inputs a, b; given a, c"):
        run(data, {"a": ones, "c": ones})
