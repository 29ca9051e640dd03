"""Quantization-aware training (issue 28): FakeQuant ops give the tensors they guard their trained ranges.

Without optimizations a FakeQuant is a QUANTIZE / DEQUANTIZE pair in a float model: TensorFlow's numbers
(``EXACT``: LiteRT's QUANTIZE rounds half away from zero, TensorFlow's kernel half up; on random inputs no value
lies on a tie). With ``optimizations=[DEFAULT]`` the model becomes int8 from the trained ranges, without a
representative dataset, and its outputs are within ``STEPS`` output quantization steps of the official converter's
(acceptance 1: one step; measured: 0 on the fake-quant functions, exactly 1 on the tfmot CNN, where the official
converter requantizes a convolution's input to its concatenation's range and fuselite the convolution's output).
Each on LiteRT's builtin kernels and with XNNPACK.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_on_tflm

import fuselite
from fuselite.lower.quant import nudged
from fuselite.quantize import QuantizationOptionError
from fuselite.runtime import run

EXACT = 1e-6
STEPS = 1.0 + 1e-3  # one output step (and float32 rounding of the scale)
KERNELS = (False, True)  # XNNPACK, builtin


def _run_raw(data: bytes, x: np.ndarray, builtin: bool) -> np.ndarray:
    """The official converter's file of a tf.function has no signature: run by tensor index."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if builtin else OpResolverType.AUTO
    it = Interpreter(model_content=data, experimental_op_resolver_type=kind)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def _output_step(data: bytes) -> float:
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    g = m.subgraphs[0]
    dq = [op for op in g.operators if m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.DEQUANTIZE]
    return float(g.tensors[dq[-1].inputs[0]].quantization.scale[0])


def _kinds(data: bytes) -> dict:
    from fuselite.inspect import describe

    return describe(data)["subgraphs"][0]["ops"]


WEIGHTS = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)


@tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
def fake_quant_vars_and_args(x):
    x = tf.quantization.fake_quant_with_min_max_vars(x, -3.0, 3.0, num_bits=8)
    w = tf.quantization.fake_quant_with_min_max_vars(tf.constant(WEIGHTS), -2.0, 2.0, narrow_range=True)
    return tf.quantization.fake_quant_with_min_max_args(tf.nn.relu(tf.matmul(x, w)), 0.0, 6.0)


@tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32)])
def narrow_and_per_channel(x):
    y = tf.quantization.fake_quant_with_min_max_vars(x, -1.0, 2.5, num_bits=4, narrow_range=True)
    return tf.quantization.fake_quant_with_min_max_vars_per_channel(y * 1.5, [-1.0, -0.5, 0.0], [1.0, 2.0, 3.0])


def _from_function(fn, official: bool = False):
    cls = tf.lite.TFLiteConverter if official else fuselite.Converter
    return cls.from_concrete_functions([fn.get_concrete_function()], fn)


@pytest.mark.parametrize("fn, shape", [(fake_quant_vars_and_args, (1, 8)), (narrow_and_per_channel, (2, 3))])
@pytest.mark.parametrize("builtin", KERNELS)
def test_fake_quant_without_optimizations_is_tensorflows_numbers(fn, shape, builtin):
    data = _from_function(fn).convert()
    rng = np.random.default_rng(1)
    for _ in range(8):
        x = (rng.normal(size=shape) * 2).astype(np.float32)
        got = list(run(data, [x], builtin_kernels=builtin).values())[0]
        np.testing.assert_allclose(got, fn(x).numpy(), atol=EXACT)


@pytest.mark.parametrize("builtin", KERNELS)
def test_fake_quant_function_with_optimizations_is_int8_without_a_dataset(builtin):
    conv = _from_function(fake_quant_vars_and_args)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    data = conv.convert()
    official = _from_function(fake_quant_vars_and_args, official=True)
    official.optimizations = [tf.lite.Optimize.DEFAULT]
    reference = official.convert()
    assert _kinds(data) == {"QUANTIZE": 1, "FULLY_CONNECTED": 1, "DEQUANTIZE": 1}
    assert conv.report.quantization["mode"] == "int8" and conv.report.calibration["fake_quant_ranges"] == 2
    assert any("quantization-aware-trained model (3 FakeQuant" in w for w in conv.report.warnings)
    step = _output_step(data)
    rng = np.random.default_rng(2)
    for _ in range(8):
        x = (rng.normal(size=(1, 8)) * 2).astype(np.float32)
        got = list(run(data, [x], builtin_kernels=builtin).values())[0]
        assert np.abs(got - _run_raw(reference, x, builtin)).max() <= STEPS * step
        assert np.abs(got - fake_quant_vars_and_args(x).numpy()).max() <= STEPS * step


def test_nudged_grid_is_tensorflows():
    for lo, hi, bits, narrow in [(-3.0, 3.0, 8, False), (-1.0, 2.5, 4, True), (0.1, 6.0, 8, False), (-5, -1, 7, False)]:
        g = nudged(lo, hi, bits, narrow)
        grid = (np.arange(g.q_min, g.q_max + 1) - g.zero_point[0]) * g.scale[0]
        xs = np.random.default_rng(0).uniform(lo - 1, hi + 1, 997).astype(np.float32)  # no ties (half up vs argmin)
        want = tf.quantization.fake_quant_with_min_max_args(xs, lo, hi, num_bits=bits, narrow_range=narrow).numpy()
        nearest = grid[np.abs(xs[:, None] - grid[None, :]).argmin(axis=1)]
        np.testing.assert_allclose(want, nearest, atol=1e-5 * max(abs(lo), abs(hi)))


def test_a_bad_fake_quant_range_names_the_op():
    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def reversed_range(x):
        return tf.quantization.fake_quant_with_min_max_vars(x, 2.0, -2.0)

    with pytest.raises(fuselite.ConversionError, match="FakeQuantWithMinMaxVars.*min \\[2.0\\] is not below max"):
        _from_function(reversed_range).convert()


def test_int8_without_a_dataset_or_fake_quants_still_asks_for_one():
    conv = _from_function(tf.function(lambda x: tf.nn.relu(x), input_signature=[tf.TensorSpec([1, 4], tf.float32)]))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    with pytest.raises(QuantizationOptionError, match="needs a representative_dataset .* or a quantization-aware"):
        conv.convert()


# -- tfmot: quantize_model on a tf-keras CNN, one short fit on random data ---------------------------------------


@pytest.fixture(scope="module")
def qat_cnn():
    tfmot = pytest.importorskip("tensorflow_model_optimization")
    k = pytest.importorskip("tf_keras")
    k.utils.set_random_seed(0)
    i = k.Input((16, 16, 3))
    x = k.layers.ReLU()(k.layers.BatchNormalization()(k.layers.Conv2D(8, 3, padding="same")(i)))
    y = k.layers.ReLU(6.0)(k.layers.BatchNormalization()(k.layers.DepthwiseConv2D(3, padding="same")(x)))
    x = k.layers.MaxPooling2D()(k.layers.Add()([x, y]))
    x = k.layers.Concatenate()([x, k.layers.Conv2D(8, 1, activation="relu")(x)])
    out = k.layers.Dense(4)(k.layers.Flatten()(k.layers.AveragePooling2D()(x)))
    model = tfmot.quantization.keras.quantize_model(k.Model(i, out, name="qat_cnn"))
    model.compile("adam", "mse")
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(64, 16, 16, 3)).astype(np.float32), rng.normal(size=(64, 4)).astype(np.float32),
              epochs=1, verbose=0)
    converted = {}
    for name, cls in (("fuselite", fuselite.Converter), ("official", tf.lite.TFLiteConverter)):
        conv = cls.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        converted[name] = (conv.convert(), conv)
    return model, converted


@pytest.mark.parametrize("builtin", KERNELS)
def test_tfmot_cnn_is_int8_within_one_step_of_the_official_converter(qat_cnn, builtin):
    model, converted = qat_cnn
    data, conv = converted["fuselite"]
    kinds = _kinds(data)
    assert kinds["QUANTIZE"] <= 2 and kinds["DEQUANTIZE"] == 1, kinds  # the input, and one requantization
    assert all(r["mode"] == "int8" for r in conv.report.quantization["ops"])
    assert conv.report.calibration["samples"] == 0
    step = _output_step(data)
    xs = np.random.default_rng(3).normal(size=(8, 1, 16, 16, 3)).astype(np.float32)
    got = np.stack([list(run(data, [x], builtin_kernels=builtin).values())[0] for x in xs])
    official = np.stack([list(run(converted["official"][0], [x], builtin_kernels=builtin).values())[0] for x in xs])
    keras_out = np.stack([model(x).numpy() for x in xs])
    assert np.abs(got - official).max() <= STEPS * step
    assert np.abs(got - keras_out).max() <= STEPS * step  # the official converter's own error is one step too


def test_tfmot_cnn_runs_on_tflite_micro(qat_cnn, tmp_path):
    model, _ = qat_cnn
    conv = fuselite.Converter.from_keras_model(model, target="micro")
    conv.optimizations = [tf.lite.Optimize.DEFAULT]  # a QAT model: int8, not dynamic range (which TFLM lacks)
    data = conv.convert()
    xs = np.random.default_rng(4).normal(size=(3, 1, 16, 16, 3)).astype(np.float32)
    proc, got = run_on_tflm(data, xs, tmp_path)
    assert got is not None, proc.stderr[-2000:]
    want = np.stack([list(run(data, [x], builtin_kernels=True).values())[0] for x in xs])
    assert np.abs(got.reshape(want.shape) - want).max() <= STEPS * _output_step(data)


def test_partly_quantization_aware_lstm_model_calibrates_the_rest():
    """tfmot 0.8 refuses an LSTM ("Layer lstm ... is not supported"); a model whose Dense alone is annotated
    takes its range from training and the LSTM's from the representative dataset (the official converter fails on
    the tf-keras LSTM's TensorList here)."""
    tfmot = pytest.importorskip("tensorflow_model_optimization")
    k = pytest.importorskip("tf_keras")
    qk = tfmot.quantization.keras
    k.utils.set_random_seed(0)
    model = qk.quantize_apply(k.Sequential([k.Input((6, 4)), k.layers.LSTM(8),
                                            qk.quantize_annotate_layer(k.layers.Dense(3))]))
    model.compile("adam", "mse")
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(32, 6, 4)).astype(np.float32), rng.normal(size=(32, 3)).astype(np.float32),
              epochs=1, verbose=0)
    draws = [rng.normal(size=(1, 6, 4)).astype(np.float32) for _ in range(16)]
    conv = fuselite.Converter.from_keras_model(model, litert_api="interpreter")  # the integer LSTM op's ranges
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([d] for d in draws)
    data = conv.convert()
    modes = {r["kind"]: r["mode"] for r in conv.report.quantization["ops"]}
    assert modes["UNIDIRECTIONAL_SEQUENCE_LSTM"] == "int8" and modes["FULLY_CONNECTED"] == "int8"
    assert conv.report.calibration["fake_quant_ranges"] >= 1
    step = _output_step(data)
    for x in draws[:4]:
        got = list(run(data, [x], builtin_kernels=True).values())[0]
        assert np.abs(got - model(x).numpy()).max() <= 4 * step  # the LSTM's own int8 error, a few steps
