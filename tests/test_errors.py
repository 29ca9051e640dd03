"""Bad input gets one clear ConversionError, never a traceback from deep inside."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.errors import ConversionError, InputError, MutableVariableError, UnsupportedOpsError


def test_unsupported_ops_are_listed_together_with_source_lines():
    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
    def f(x):
        a = tf.math.digamma(x)  # no LiteRT builtin (nor a composition of them in fuselite)
        b = tf.math.bessel_i0e(x)  # no LiteRT builtin
        return a + b

    with pytest.raises(UnsupportedOpsError) as info:
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert()
    msg = str(info.value)
    assert "Digamma" in msg and "BesselI0e" in msg
    assert len(info.value.problems) == 2
    assert f"{os.path.basename(__file__)}:" in msg  # the user's own source line
    assert "Traceback" not in msg


def test_missing_saved_model_path(tmp_path):
    with pytest.raises(InputError, match="does not exist") as info:
        fuselite.Converter.from_saved_model(str(tmp_path / "nope"))
    assert "\n" not in str(info.value)


def test_not_a_saved_model(tmp_path):
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(InputError, match="not a SavedModel directory"):
        fuselite.Converter.from_saved_model(str(tmp_path))


def test_corrupt_saved_model(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"\x00garbage")
    with pytest.raises(InputError, match="cannot read SavedModel") as info:
        fuselite.Converter.from_saved_model(str(tmp_path))
    assert "\n" not in str(info.value)


def test_wrong_signature_key(tmp_path):
    m = tf.Module()
    m.f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([2], tf.float32)])
    tf.saved_model.save(m, str(tmp_path), signatures={"double": m.f})
    with pytest.raises(InputError, match=r"'nope'.*available: 'double'") as info:
        fuselite.Converter.from_saved_model(str(tmp_path), signature_keys=["nope"])
    assert "\n" not in str(info.value)


def test_unsupported_input_dtype():
    f = tf.function(lambda x: tf.math.real(x), input_signature=[tf.TensorSpec([2], tf.complex128, name="z")])
    with pytest.raises(InputError, match="input 'z'.*complex128") as info:
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert()
    assert "\n" not in str(info.value)


def test_not_a_keras_model():
    with pytest.raises(InputError, match="expects a Keras model"):
        fuselite.Converter.from_keras_model(object())


def test_not_a_concrete_function():
    with pytest.raises(InputError, match="not a ConcreteFunction"):
        fuselite.Converter.from_concrete_functions([tf.function(lambda x: x)])


def test_bad_batch_size():
    f = tf.function(lambda x: x, input_signature=[tf.TensorSpec([2], tf.float32)])
    with pytest.raises(InputError, match="batch_size"):
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()], batch_size=0)


def test_assigned_variable_converts_but_unsupported_uses_are_named():
    """assign_add converts (a LiteRT resource variable); a scatter update into it (duplicate rows: TF leaves the
    winner unspecified) is an error naming op and variable."""

    class Counter(tf.Module):
        def __init__(self):
            self.count = tf.Variable([0.0, 0.0], name="count")

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def __call__(self, x):
            self.count.assign_add(tf.stack([x, x]))
            return self.count.read_value()

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def scatter(self, x):
            self.count.scatter_update(tf.IndexedSlices(x[None], tf.constant([0])))
            self.count.assign_add(tf.stack([x, x]))
            return self.count.read_value()

    c = Counter()
    conv = fuselite.Converter.from_concrete_functions([c.__call__.get_concrete_function()], c)
    conv.convert()
    assert [v["name"] for v in conv.report.mutable_variables] == ["count"]
    with pytest.raises(MutableVariableError, match="ResourceScatterUpdate .*'count'"):
        fuselite.Converter.from_concrete_functions([c.scatter.get_concrete_function()], c).convert()


def test_errors_are_conversion_errors():
    assert issubclass(UnsupportedOpsError, ConversionError)
    assert issubclass(InputError, ConversionError)
    assert issubclass(MutableVariableError, ConversionError)


def _cli(*args, cwd=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "fuselite.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    good = tf.Module()
    good.f = tf.function(lambda x: tf.nn.relu(x) * 3.0, input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    tf.saved_model.save(good, str(root / "good"), signatures={"serving_default": good.f})
    bad = tf.Module()
    bad.f = tf.function(lambda x: tf.math.digamma(x), input_signature=[tf.TensorSpec([4], tf.float32)])
    tf.saved_model.save(bad, str(root / "bad"), signatures={"serving_default": bad.f})
    return root


def test_cli_convert_writes_model_and_summary(saved_models, tmp_path):
    out = tmp_path / "m.tflite"
    r = _cli("convert", str(saved_models / "good"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "RELU" in r.stdout and "MUL" in r.stdout and "bytes" in r.stdout
    data = out.read_bytes()
    from fuselite.runtime import run

    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(next(iter(run(data, [x]).values())), np.maximum(x, 0) * 3)


def test_cli_failure_writes_nothing_and_keeps_old_file(saved_models, tmp_path):
    out = tmp_path / "m.tflite"
    r = _cli("convert", str(saved_models / "bad"), "-o", str(out))
    assert r.returncode == 1
    assert "Digamma" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    out.write_bytes(b"previous")
    r = _cli("convert", str(saved_models / "bad"), "-o", str(out))
    assert out.read_bytes() == b"previous"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".fuselite-")]  # no temp files left


def test_cli_missing_source(tmp_path):
    r = _cli("convert", str(tmp_path / "missing"), "-o", str(tmp_path / "x.tflite"))
    assert r.returncode == 1
    assert "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_cli_strict_fusion(tmp_path):
    m = tf.Module()

    @tf.function(experimental_implements="embedding_lookup")
    def lookup(params, ids, extra):
        return tf.gather(params, ids) + extra

    table = tf.Variable(np.ones((4, 2), np.float32))
    m.table = table
    m.f = tf.function(lambda ids: lookup(table, ids, 1.0), input_signature=[tf.TensorSpec([3], tf.int32)])
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.f})
    out = tmp_path / "m.tflite"
    r = _cli("convert", str(tmp_path / "sm"), "-o", str(out))
    assert r.returncode == 0 and "declined" in r.stdout
    r = _cli("convert", str(tmp_path / "sm"), "-o", str(tmp_path / "strict.tflite"), "--strict-fusion")
    assert r.returncode == 1 and "strict fusion" in r.stderr and not (tmp_path / "strict.tflite").exists()


def test_convert_to_writes_a_normally_readable_file(tmp_path):
    f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([2], tf.float32)])
    out = tmp_path / "m.tflite"
    fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert_to(out)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
