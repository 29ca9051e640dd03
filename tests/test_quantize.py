"""Quantization options as on tf.lite.TFLiteConverter, and float16 weights on stock LiteRT vs the float Keras model."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema
from conftest import keras_flavour, match_outputs, run_on_tflm

import fuselite
from fuselite.converter import UnknownOptionError
from fuselite.quantize import QuantizationOptionError
from fuselite.quantize.dynamic import FLOAT_WEIGHTS_BELOW
from fuselite.quantize.float16 import MIN_ELEMENTS
from fuselite.quantize.integer_lstm import LSTM_16X8
from fuselite.runtime.quantization_error import real_output, tensor_quantization, to_input
from fuselite.testing import models as zoo

# float16 rounds each weight to 11 significant bits. Issue 11's acceptance: error <= 0.1% of the output's
# range against the float model (measured here up to 0.04%; TF's converter: <= 0.08% on its float16 models).
FLOAT16_RELATIVE_TOLERANCE = 1e-3
FLOAT16_MODELS = [("keras3", "mlp"), ("keras3", "cnn"), ("keras3", "lstm_64"), ("keras3", "gru"),
                  ("keras3", "bidirectional_lstm"), ("keras3", "simple_rnn"), ("keras3", "text_lstm"),
                  ("tf_keras", "lstm_64"), ("tf_keras", "stacked_lstm")]


def _float16(model):
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_types = [tf.float16]
    return conv, conv.convert()


def _tensors(data: bytes):
    m = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    return m, [(sg, op) for sg in m.subgraphs for op in sg.operators]


@pytest.mark.parametrize("flavour, name", FLOAT16_MODELS)
def test_float16_weights_run_on_litert_close_to_keras(built_models, flavour, name):
    model, xs, _ = built_models(flavour, name)
    conv, data = _float16(model)
    float_size = len(fuselite.Converter.from_keras_model(model).convert())
    m, ops = _tensors(data)
    codes = [schema.BuiltinOperator.DEQUANTIZE]
    deq = {i for i, c in enumerate(m.operatorCodes) if c.builtinCode in codes}
    assert deq and all(m.operatorCodes[i].version == 3 for i in deq)
    small = {}  # buffer -> bytes of the float32 constants too small for float16, read with float16 weights
    for sg, op in ops:  # no op but DEQUANTIZE reads a float32 constant (but tiny ones); DEQUANTIZE reads float16
        dequantized = {o for p in sg.operators if p.opcodeIndex in deq for o in p.outputs}
        for t in op.inputs:
            tensor = sg.tensors[t] if t >= 0 else None
            if tensor is None or m.buffers[tensor.buffer].data is None or len(m.buffers[tensor.buffer].data) == 0:
                continue  # an omitted operand, or not a constant
            if op.opcodeIndex in deq:
                assert tensor.type == schema.TensorType.FLOAT16
            elif tensor.type == schema.TensorType.FLOAT32:
                assert np.prod(tensor.shape) < MIN_ELEMENTS, f"{tensor.name} stayed float32"
                if dequantized & set(op.inputs):
                    small[tensor.buffer] = 4 * int(np.prod(tensor.shape))
    assert len(data) < float_size
    from fuselite.runtime import interpreter

    interp = interpreter(data)
    for d, x in zip(interp.get_input_details(), xs):
        interp.set_tensor(d["index"], x)
    interp.invoke()
    got = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    ref = model(xs[0] if len(xs) == 1 else xs, training=False)
    refs = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    for g, r in match_outputs(got, refs):
        span = float(r.max() - r.min()) or 1.0
        assert float(np.abs(g - r).max()) <= FLOAT16_RELATIVE_TOLERANCE * span
    q = conv.report.quantization
    kept = sum(small.values())
    assert q["mode"] == "float16" and (q["weight_bytes_after"] - kept) * 2 == q["weight_bytes_before"] - kept
    assert q["outputs"] and all(o["relative_error"] < FLOAT16_RELATIVE_TOLERANCE for o in q["outputs"])
    assert "quantization: float16" in str(conv.report)
    assert {"quantize-float16", "measure-quantization-error"} <= set(conv.report.stage_seconds)


def test_float16_on_a_stateful_model_quantizes_the_initial_values():
    k = keras_flavour("keras3")
    inp = k.Input(batch_shape=(1, 3, 2))
    model = k.Model(inp, k.layers.LSTM(4, stateful=True)(inp))
    conv, data = _float16(model)
    assert conv.report.mutable_variables
    x = np.random.default_rng(0).standard_normal((1, 3, 2)).astype(np.float32)
    from fuselite.runtime import run

    got = list(run(data, [x]).values())[0]
    want = np.asarray(model(x, training=False))
    assert np.abs(got - want).max() <= FLOAT16_RELATIVE_TOLERANCE * float(np.ptp(want) or 1.0)


def test_unknown_options_raise_and_name_the_known_ones():
    conv = fuselite.Converter.from_keras_model(zoo.build("mlp", keras_flavour("keras3")))
    with pytest.raises(UnknownOptionError, match="no option 'allow_custom_ops'.*optimizations"):
        conv.allow_custom_ops = True
    with pytest.raises(QuantizationOptionError, match="target_spec has no option 'experimental_select'"):
        conv.target_spec.experimental_select = True
    with pytest.raises(AttributeError):  # also an AttributeError, as Python code expects
        conv.experimental_new_converter = True


@pytest.mark.parametrize("settings, message", [
    ({"optimizations": ["default"], "target_spec.supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]},
     "int8 quantization needs a representative_dataset"),
    ({"optimizations": ["default"], "representative_dataset": lambda: iter([]), "target_spec.supported_ops":
      [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8], "inference_input_type": tf.int8},
     "int8 with int16x8 quantization: use int16 or float32"),
    ({"optimizations": ["default"], "representative_dataset": lambda: iter([]), "inference_output_type": tf.int16},
     "int16 with int8 quantization: use int8 or uint8 or float32"),
    ({"optimizations": ["default"], "target_spec.supported_ops": [tf.lite.OpsSet.SELECT_TF_OPS]}, "SELECT_TF_OPS"),
    ({"optimizations": ["fastest"]}, "optimizations: unknown value 'fastest'"),
    ({"optimizations": [tf.lite.Optimize.DEFAULT], "target_spec.supported_types": [tf.bfloat16]},
     "supported_types: unknown value"),
    ({"inference_input_type": tf.int8}, "need full-integer quantization"),
])
def test_unsupported_quantization_settings_are_errors_not_float_models(settings, message):
    conv = fuselite.Converter.from_keras_model(zoo.build("mlp", keras_flavour("keras3")))
    for key, value in settings.items():
        target = conv.target_spec if key.startswith("target_spec.") else conv
        setattr(target, key.split(".")[-1], value)
    with pytest.raises(QuantizationOptionError, match=message):
        conv.convert()


def test_supported_types_without_optimizations_is_float_as_in_tf_and_says_so():
    model = zoo.build("mlp", keras_flavour("keras3"))
    conv = fuselite.Converter.from_keras_model(model)
    conv.target_spec.supported_types = [tf.float16]
    assert conv.convert() == fuselite.Converter.from_keras_model(model).convert()
    assert any("not quantized" in w for w in conv.report.warnings) and not conv.report.quantization


def test_cli_quantize(tmp_path):
    model = zoo.build("mlp", keras_flavour("keras3"))
    model.save(tmp_path / "m.keras")
    base = [sys.executable, "-m", "fuselite.cli", "convert", str(tmp_path / "m.keras"), "-o"]
    out = subprocess.run(base + [str(tmp_path / "f16.tflite"), "--quantize", "float16"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "quantization: float16" in out.stdout and (tmp_path / "f16.tflite").exists()
    out = subprocess.run(base + [str(tmp_path / "dyn.tflite"), "--quantize", "dynamic", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ops = json.loads(out.stdout)["quantization"]["ops"]
    # the last Dense (under FLOAT_WEIGHTS_BELOW elements) stays float32, as TF's converter leaves it
    assert [r["mode"] for r in ops] == ["int8 weights"] * 2 + ["float"]
    last = ops[1]["op"]  # a node name as the report gives it
    out = subprocess.run(base + [str(tmp_path / "dyn.tflite"), "--quantize", "dynamic", "--keep-float", "SOFTMAX",
                                 "--keep-float", last, "--verbose"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "quantization: dynamic" in out.stdout and f"keep_float {last!r}" in out.stdout
    assert (tmp_path / "dyn.tflite").exists()
    inputs = [i.name.split(":")[0] for i in model.inputs]
    np.savez(tmp_path / "cal.npz", **{inputs[0]: np.random.default_rng(0).standard_normal((30, 32)).astype(np.float32)})
    out = subprocess.run(base + [str(tmp_path / "int8.tflite"), "--quantize", "int8", "--calibration-data",
                                 str(tmp_path / "cal.npz")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "calibration: 30 sample(s)" in out.stdout and "quantization: int8" in out.stdout
    assert "largest shares of the error" not in out.stdout and "--verbose" in out.stdout  # (the summary)
    out = subprocess.run(base + [str(tmp_path / "int8.tflite"), "--quantize", "int8", "--calibration-data",
                                 str(tmp_path / "cal.npz"), "--verbose"], capture_output=True, text=True, timeout=300)
    assert "largest shares of the error" in out.stdout
    out = subprocess.run(base + [str(tmp_path / "i16.tflite"), "--quantize", "int16x8", "--calibration-data",
                                 str(tmp_path / "cal.npz"), "--max-error", "0.5"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "quantization: int16x8" in out.stdout and "error budget 50%: met as it is" in out.stdout
    for bad, message, code in ((["--quantize", "int8"], "needs --calibration-data", 2),  # usage errors: 2
                               (["--quantize", "dynamic", "--max-error", "0.01"], "--max-error is for --quantize int8",
                                2),
                               (["--quantize", "dynamic", "--keep-float", "no_such_op"], "'no_such_op' matches no op",
                                1),
                               (["--keep-float", "SOFTMAX"], "--keep-float is for use with --quantize", 2)):
        out = subprocess.run(base + [str(tmp_path / "bad.tflite"), *bad], capture_output=True, text=True, timeout=300)
        assert out.returncode == code and message in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not (tmp_path / "bad.tflite").exists()


# -- dynamic range: int8 weights on LiteRT's hybrid kernels ---------------------------------------------

# Acceptance of issue 11: <= 2% of the output's range on every recurrent model against the float Keras model
# (the official converter: 0.8-3.5%). Measured with 20 inputs by benchmarks/quantization.py: 0.3-1.6%.
DYNAMIC_RELATIVE_TOLERANCE = 0.02
DYNAMIC_MODELS = ["mlp", "cnn", "lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm", "simple_rnn",
                  "gru", "text_lstm"]
# (operand indices that must be int8, per-channel axis or None, op version) per op kind
HYBRID = {
    "FULLY_CONNECTED": ((1,), 0, 12), "CONV_2D": ((1,), 0, 5), "DEPTHWISE_CONV_2D": ((1,), 3, 6),
    "EMBEDDING_LOOKUP": ((1,), None, 1), "UNIDIRECTIONAL_SEQUENCE_LSTM": ((1, 2, 3, 4, 5, 6, 7, 8), None, 3),
    "BIDIRECTIONAL_SEQUENCE_LSTM": ((1, 2, 3, 4, 5, 6, 7, 8, 18, 19, 20, 21, 22, 23, 24, 25), None, 3),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ((1, 2), None, 3), "BIDIRECTIONAL_SEQUENCE_RNN": ((1, 2, 5, 6), None, 3),
}


def _dynamic(model, **options):
    """Dynamic range; by default for the Interpreter (litert_api="interpreter": LiteRT's hybrid sequence kernels,
    which these tests check); the default API's forms are tested with litert_api="any"."""
    options.setdefault("litert_api", "interpreter")
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    for key, value in options.items():
        setattr(conv, key, value)
    return conv, conv.convert()


SMALL_FLOAT_KINDS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                     "BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN")


def check_hybrid_ops(data: bytes, kept=()) -> dict[str, int]:
    """Every op with a hybrid kernel (but those of the ``kept`` kinds) has int8 weights (symmetric, per the
    kernel's scheme) read by its hybrid kernel, unless each of its weights is under FLOAT_WEIGHTS_BELOW elements
    (an FC, conv, sequence op): then all stay float32, as TF's converter leaves them; op kinds -> count of the
    hybrid ones."""
    m, ops = _tensors(data)
    kinds = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    seen: dict[str, int] = {}
    for sg, op in ops:
        code = m.operatorCodes[op.opcodeIndex]
        kind = kinds[code.builtinCode]
        if kind not in HYBRID or kind in kept:
            continue
        operands, axis, version = HYBRID[kind]
        weights = [sg.tensors[op.inputs[i]] for i in operands]
        small = kind in SMALL_FLOAT_KINDS and max(int(np.prod(t.shape)) for t in weights) < FLOAT_WEIGHTS_BELOW
        if small:
            assert all(t.type == schema.TensorType.FLOAT32 for t in weights), f"small {kind} not float"
            assert code.version < version  # the float kernel's version
            continue
        seen[kind] = seen.get(kind, 0) + 1
        assert code.version == version, f"{kind} v{code.version}"
        for t in weights:
            q = t.quantization
            assert t.type == schema.TensorType.INT8, f"{kind} {t.name} is not int8"
            assert q is not None and not any(q.zeroPoint)
            w = np.frombuffer(bytes(m.buffers[t.buffer].data), np.int8)
            assert w.min() >= -127 and np.abs(w).max() == 127  # symmetric, the full range used
            assert len(q.scale) == (1 if axis is None else t.shape[axis]) and (axis is None or q.quantizedDimension == axis)
        if kind not in ("CONV_2D", "DEPTHWISE_CONV_2D", "EMBEDDING_LOOKUP"):
            assert op.builtinOptions.asymmetricQuantizeInputs
        x = sg.tensors[op.inputs[0]]
        assert x.type == (schema.TensorType.INT32 if kind == "EMBEDDING_LOOKUP" else schema.TensorType.FLOAT32)
    return seen


def _keras_outputs(model, samples) -> np.ndarray:
    """The float Keras model's output for each of ``samples`` (lists of batch-1 inputs), stacked as the samples
    are: in one call over them as one batch where the model's batch is free and its output one tensor (an eager
    Keras call of a recurrent model takes 0.3-0.7 s here, whatever its batch), else one call each."""
    if len(model.outputs) == 1 and all(t.shape[0] is None for t in model.inputs):
        batch = [np.concatenate(inputs) for inputs in zip(*samples)]
        out = np.asarray(model(batch[0] if len(batch) == 1 else batch, training=False))
        return out.reshape((len(samples), 1) + out.shape[1:])
    return np.stack([np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False)) for xs in samples])


def _max_relative_error(data: bytes, model, samples) -> float:
    from fuselite.runtime import interpreter

    interp = interpreter(data)
    got = []
    for xs in samples:
        for d, x in zip(interp.get_input_details(), xs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        got.append(interp.get_tensor(interp.get_output_details()[0]["index"]).copy())
    got, want = np.stack(got), _keras_outputs(model, samples)
    return float(np.abs(got - want).max() / np.ptp(want))


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("name", DYNAMIC_MODELS)
def test_dynamic_range_int8_weights_on_every_hybrid_op_close_to_keras(built_models, flavour, name):
    model, _, _ = built_models(flavour, name)
    conv, data = _dynamic(model, litert_api="any")
    float_data = fuselite.Converter.from_keras_model(model).convert()
    seen = check_hybrid_ops(data)
    # by default (a file CompiledModel loads: no variable tensors) recurrent layers are loops or unrolled steps,
    # whose FULLY_CONNECTEDs are the hybrid ops; the hybrid sequence kernels: litert_api="interpreter" (below)
    assert ("CONV_2D" if name == "cnn" else "FULLY_CONNECTED") in seen
    assert not {"UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN"} & set(seen)
    if name == "text_lstm":
        assert "EMBEDDING_LOOKUP" in seen  # Keras' GATHER on the table became the hybrid lookup
    samples = [zoo.sample_inputs(model, seed=100 + i) for i in range(5)]
    assert _max_relative_error(data, model, samples) <= DYNAMIC_RELATIVE_TOLERANCE
    if "LSTM" in name.upper():  # weight-dominated: <= 0.3x (int8 weights, float biases, one scale per matrix)
        assert len(data) <= 0.3 * len(float_data)
    q = conv.report.quantization
    hybrid = [r for r in q["ops"] if r["mode"] == "int8 weights"]
    assert q["mode"] == "dynamic" and q["weight_bytes_after"] < q["weight_bytes_before"]
    # the quantized ops' weights at <= 0.3x (int8, float biases); ops with every weight under FLOAT_WEIGHTS_BELOW
    # elements stay float32 with that reason
    assert sum(r["weight_bytes_after"] for r in hybrid) < 0.3 * sum(r["weight_bytes_before"] for r in hybrid)
    assert all("fewer than" in r["reason"] for r in q["ops"] if r["mode"] == "float" and r["kind"] in SMALL_FLOAT_KINDS)
    assert all(o["relative_error"] <= DYNAMIC_RELATIVE_TOLERANCE for o in q["outputs"])
    quantized = [r for r in q["ops"] if r["mode"] == "int8 weights"]
    assert sum(seen.values()) == len(quantized) or name == "gru"  # GRU: 50 steps share one weight tensor
    assert all(r.get("reason") for r in q["ops"] if r["mode"] == "float")
    # per op, against the same tensor of the float model on 8 drawn inputs: an op's whole output (a sequence op's
    # every step, where the model returns the last) measured 0.2-2.0% of its range
    errors = [r["output_error"]["relative_error"] for r in quantized if "output_error" in r]
    assert errors and max(errors) <= 2.5 * DYNAMIC_RELATIVE_TOLERANCE


@pytest.mark.parametrize("name, op", [("lstm_64", "UNIDIRECTIONAL_SEQUENCE_LSTM"),
                                      ("bidirectional_lstm", "UNIDIRECTIONAL_SEQUENCE_LSTM"),
                                      ("simple_rnn", "UNIDIRECTIONAL_SEQUENCE_RNN")])
def test_dynamic_range_keeps_the_hybrid_sequence_kernels_for_the_interpreter(built_models, name, op):
    """litert_api="interpreter": the hybrid sequence kernels (int8 weights, variable state tensors) as before,
    within the same tolerance, and the report says the file is the Interpreter's."""
    model, _, _ = built_models("keras3", name)
    conv, data = _dynamic(model, litert_api="interpreter")
    seen = check_hybrid_ops(data)
    assert op in seen, seen
    samples = [zoo.sample_inputs(model, seed=100 + i) for i in range(5)]
    assert _max_relative_error(data, model, samples) <= DYNAMIC_RELATIVE_TOLERANCE
    assert conv.report.litert_api["apis"] == ["Interpreter"]


def test_dynamic_range_mobilenet_v2(built_models):
    model, _, _ = built_models("keras3", "mobilenet_v2")
    conv, data = _dynamic(model)
    seen = check_hybrid_ops(data)
    # the convolutions with 1024 weights or more; the 8 with fewer (the first conv, the early depthwise ones) float
    assert seen == {"CONV_2D": 27, "DEPTHWISE_CONV_2D": 10, "FULLY_CONNECTED": 1}
    samples = [zoo.sample_inputs(model, seed=100 + i) for i in range(3)]
    assert _max_relative_error(data, model, samples) <= DYNAMIC_RELATIVE_TOLERANCE
    # measured 0.316x: the 18 convolutions under FLOAT_WEIGHTS_BELOW elements stay float32 (0.30x when int8 too)
    assert len(data) < 0.33 * len(fuselite.Converter.from_keras_model(model).convert())


@pytest.mark.parametrize("units", [16, 40])
def test_dynamic_range_bidirectional_sequence_ops_hybrid_or_float(units):
    """A sequence op whose every weight is under FLOAT_WEIGHTS_BELOW elements (16 units over 8 features: 128 and
    256) stays float32 (as TF's converter leaves each such tensor); a larger one (40 units: a 1600-element
    recurrent weight) runs the hybrid kernel. check_hybrid_ops says which."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    inp = k.Input((12, 8))
    samples = [zoo.sample_inputs(k.Model(inp, inp), seed=i) for i in range(3)]
    for layer in (k.layers.SimpleRNN(units, return_sequences=True), k.layers.LSTM(units)):
        model = k.Model(inp, k.layers.Bidirectional(layer)(inp))
        kind = type(layer).__name__.replace("SimpleRNN", "RNN").upper()
        for form in ("fused", "split"):
            conv, data = _dynamic(model, bidirectional=form)
            want = {f"BIDIRECTIONAL_SEQUENCE_{kind}": 1} if form == "fused" else {f"UNIDIRECTIONAL_SEQUENCE_{kind}": 2}
            assert check_hybrid_ops(data) == ({} if units == 16 else want)
            small = [r for r in conv.report.quantization["ops"] if "fewer than 1024 elements" in r.get("reason", "")]
            assert bool(small) == (units == 16)
            assert _max_relative_error(data, model, samples) <= DYNAMIC_RELATIVE_TOLERANCE


def test_dynamic_range_constant_batch_matmul():
    rhs = np.random.default_rng(1).standard_normal((2, 8, 80)).astype(np.float32)  # over FLOAT_WEIGHTS_BELOW
    fn = tf.function(lambda x: tf.matmul(x, rhs)).get_concrete_function(tf.TensorSpec([2, 3, 8], tf.float32))
    conv = fuselite.Converter.from_concrete_functions([fn])
    conv.optimizations = ["DEFAULT"]
    data = conv.convert()
    m, ops = _tensors(data)
    (sg, op), = ops
    assert m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.BATCH_MATMUL
    assert m.operatorCodes[op.opcodeIndex].version == 4 and op.builtinOptions.asymmetricQuantizeInputs
    assert sg.tensors[op.inputs[1]].type == schema.TensorType.INT8
    assert len(sg.tensors[op.inputs[1]].quantization.scale) == 1  # per tensor: the kernel reads params.scale
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    from fuselite.runtime import run

    got, want = list(run(data, [x]).values())[0], np.asarray(fn(x))
    assert np.abs(got - want).max() <= DYNAMIC_RELATIVE_TOLERANCE * np.ptp(want)


def test_keep_float_by_kind_and_scope_and_errors(built_models):
    model, _, _ = built_models("keras3", "text_lstm")
    conv, data = _dynamic(model, keep_float=["UNIDIRECTIONAL_SEQUENCE_LSTM"])
    seen = check_hybrid_ops(data, kept=["UNIDIRECTIONAL_SEQUENCE_LSTM"])
    # the Dense (8 x 4 weights) stays float32 whatever keep_float says: under FLOAT_WEIGHTS_BELOW elements
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in seen and "EMBEDDING_LOOKUP" in seen
    kept = [r for r in conv.report.quantization["ops"] if r["kind"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    assert kept and kept[0]["mode"] == "float" and "keep_float" in kept[0]["reason"]
    assert "keep_float 'UNIDIRECTIONAL_SEQUENCE_LSTM'" in str(conv.report)
    dense = next(r["op"] for r in conv.report.quantization["ops"] if r["kind"] == "FULLY_CONNECTED")
    scope = dense.rsplit("/", 1)[0]
    conv, data = _dynamic(model, keep_float=[scope])
    assert "FULLY_CONNECTED" not in check_hybrid_ops(data, kept=["FULLY_CONNECTED"])
    m, ops = _tensors(data)
    assert any(m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.FULLY_CONNECTED
               and sg.tensors[op.inputs[1]].type == schema.TensorType.FLOAT32 for sg, op in ops)
    conv, half = _float16(model)
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations, conv.target_spec.supported_types = ["DEFAULT"], ["float16"]
    conv.keep_float = ["EMBEDDING_LOOKUP", "GATHER"]
    with pytest.raises(QuantizationOptionError, match="'EMBEDDING_LOOKUP' matches no op"):
        conv.convert()  # float16 keeps Keras' GATHER (no lookup needed): the entry is a typo for this model
    conv.keep_float = ["GATHER"]
    data = conv.convert()
    m, ops = _tensors(data)
    gather = [(sg, op) for sg, op in ops
              if m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.GATHER]
    assert gather and all(sg.tensors[op.inputs[0]].type == schema.TensorType.FLOAT32 for sg, op in gather)
    assert len(half) < len(data)
    plain = fuselite.Converter.from_keras_model(model)
    plain.keep_float = ["GATHER"]
    with pytest.raises(QuantizationOptionError, match="no quantization is set"):
        plain.convert()
    with pytest.raises(QuantizationOptionError, match="must be a list"):
        _dynamic(model, keep_float="GATHER")


# -- full integer int8 ------------------------------------------------------------------------------------

# Measured on 20 held-out inputs after calibrating on 50 (see docs/quantization.md): the official converter's
# int8 error on these models is 0.6-4% of the output range; fuselite's must stay within 4%.
INT8_RELATIVE_TOLERANCE = 0.04
INT8_MODELS = ["mlp", "cnn", "text_model", "lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm",
               "simple_rnn", "gru", "text_lstm"]
# softmax / sigmoid outputs that random weights keep within ~1% of their centre: one step of the fixed 1/256 scale
FIXED_SCALE_OUTPUTS = ("text_model", "text_lstm")


def test_int8_mobilenet_v2(built_models):
    model, _, _ = built_models("keras3", "mobilenet_v2")
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(20)]
    conv, data = _int8(model, calibration)
    assert conv.report.ops_after == {"ADD": 10, "CONV_2D": 35, "DEPTHWISE_CONV_2D": 17, "FULLY_CONNECTED": 1,
                                     "MEAN": 1, "SOFTMAX": 1}
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(5)]
    assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE


def _int8(model, samples, integer_only=True, io=tf.int8, **options):
    """int8; by default for the Interpreter (litert_api="interpreter": LiteRT's integer LSTM kernel, which these
    tests check); the default API's unrolled integer LSTMs: test_int8_default_lstms_are_integer_builtins."""
    options.setdefault("litert_api", "interpreter")
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: iter(samples)
    if integer_only:
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = io
    for key, value in options.items():
        setattr(conv, key, value)
    return conv, conv.convert()


def _int8_error(data: bytes, model, samples, absolute: bool = False) -> float:
    from fuselite.runtime import interpreter

    interp = interpreter(data)
    got = []
    for xs in samples:
        for d, x in zip(interp.get_input_details(), xs):
            scale, zp = d["quantization"]
            if scale and np.dtype(d["dtype"]).kind in "iu":
                info = np.iinfo(d["dtype"])
                x = np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(d["dtype"])
            interp.set_tensor(d["index"], x.astype(d["dtype"]))
        interp.invoke()
        out = interp.get_output_details()[0]
        y = interp.get_tensor(out["index"]).astype(np.float64)
        scale, zp = out["quantization"]
        got.append((y - zp) * scale if scale else y)
    got, want = np.stack(got), _keras_outputs(model, samples)
    return float(np.abs(got - want).max() / (1.0 if absolute else np.ptp(want)))


@pytest.mark.parametrize("name", ["lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm", "text_lstm"])
def test_int8_default_lstms_are_integer_builtins(built_models, name):
    """By default (a file CompiledModel loads: no variable tensors) an int8 LSTM is unrolled into integer builtins,
    its steps 16x8 as the integer LSTM's insides are: every tensor integer, no LSTM op, close to Keras."""
    from fuselite.runtime.compiled import loader_problems

    model, _, _ = built_models("keras3", name)
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(50)]
    conv, data = _int8(model, calibration, litert_api="any")
    assert loader_problems(data) == [] and conv.report.litert_api["apis"] == ["Interpreter", "CompiledModel"]
    m, ops = _tensors(data)
    kinds = {m.operatorCodes[op.opcodeIndex].builtinCode for _, op in ops}
    assert schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM not in kinds
    assert all(t.type in (schema.TensorType.INT8, schema.TensorType.INT32, schema.TensorType.BOOL,
                          schema.TensorType.INT16, schema.TensorType.INT64) for sg in m.subgraphs for t in sg.tensors)
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(20)]
    if name in FIXED_SCALE_OUTPUTS:  # a softmax output (scale 1/256): within one step, as the integer LSTM's
        assert _int8_error(data, model, held_out, absolute=True) <= 1 / 256
    else:
        assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("name", INT8_MODELS)
def test_int8_every_tensor_integer_on_litert_close_to_keras(built_models, flavour, name):
    model, _, _ = built_models(flavour, name)
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(50)]
    conv, data = _int8(model, calibration)
    m, ops = _tensors(data)
    for sg in m.subgraphs:
        for t in sg.tensors:  # int8 activations and weights, int32 biases / shapes / ids, bool masks, the LSTM's
            if t.type == schema.TensorType.FLOAT32:  # int16 cell state, the RNN cells' int16 steps and int64
                # biases (16x8); no float but the LSTM's empty placeholders
                assert list(t.shape) == [0] and "intermediate" in t.name.decode(), t.name
                continue
            assert t.type in (schema.TensorType.INT8, schema.TensorType.INT32, schema.TensorType.BOOL,
                              schema.TensorType.INT16, schema.TensorType.INT64), (t.name, t.type)
    if name in ("simple_rnn", "gru"):  # unrolled cells (no integer RNN kernel), their steps 16x8
        kinds = {m.operatorCodes[op.opcodeIndex].builtinCode for _, op in ops}
        assert schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_RNN not in kinds
        tanh = [sg.tensors[op.outputs[0]] for sg, op in ops
                if m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.TANH]
        assert tanh and all(t.type == schema.TensorType.INT16 and t.quantization.scale[0] == 1 / 32768 for t in tanh)
    if "lstm" in name:  # the integer LSTM: int8 weights, int32 biases, int16 cell state at 2^-15..2^-9
        lstms = [(sg, op) for sg, op in ops
                 if m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM]
        assert lstms
        for sg, op in lstms:
            types = [sg.tensors[i].type if i >= 0 else None for i in op.inputs]
            assert types[0] == types[18] == schema.TensorType.INT8 and types[19] == schema.TensorType.INT16
            assert set(types[1:9]) == {schema.TensorType.INT8} and set(types[12:16]) == {schema.TensorType.INT32}
            cell = sg.tensors[op.inputs[19]].quantization.scale[0]
            assert -15 <= np.log2(cell) <= -9 and np.log2(cell) == int(np.log2(cell))
            out, state, last = sg.tensors[op.outputs[0]], sg.tensors[op.inputs[18]], sg.tensors[op.intermediates[4]]
            assert out.quantization.scale == state.quantization.scale == last.quantization.scale
            assert out.quantization.zeroPoint == state.quantization.zeroPoint == last.quantization.zeroPoint
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(20)]
    if name in FIXED_SCALE_OUTPUTS:
        assert _int8_error(data, model, held_out, absolute=True) <= 1 / 256
        return
    assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE
    q = conv.report.quantization
    assert q["mode"] == "int8" and all(r["mode"] == ("int16x8" if _int16_out(r) else "int8") for r in q["ops"])
    modes = {r["mode"] for r in q["ops"]}  # the unrolled cells' steps run 16x8
    assert "int16x8" in modes if name in ("simple_rnn", "gru") else modes == {"int8"}
    assert conv.report.calibration["samples"] == 50
    assert all(o["relative_error"] <= INT8_RELATIVE_TOLERANCE for o in q["outputs"])
    _, float_io = _int8(model, calibration, io=None)  # float edges: one QUANTIZE in, one DEQUANTIZE out
    m, ops = _tensors(float_io)
    kinds = [m.operatorCodes[op.opcodeIndex].builtinCode for _, op in ops]
    assert kinds.count(schema.BuiltinOperator.DEQUANTIZE) == 1 and kinds[-1] == schema.BuiltinOperator.DEQUANTIZE
    from_float = [op for sg, op in ops if m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.QUANTIZE
                  and sg.tensors[op.inputs[0]].type == schema.TensorType.FLOAT32]  # not the int8 requantizations
    assert len(from_float) == (0 if "text" in name else 1)
    if name in FIXED_SCALE_OUTPUTS:
        return
    assert _int8_error(float_io, model, held_out) <= INT8_RELATIVE_TOLERANCE


def _int16_out(rec: dict) -> bool:
    """The report's scales say the op's first result is int16 (zero point 0, scale below int8's)."""
    out = rec["scales"]["outputs"][0]
    return out is not None and out[1] == 0 and rec["mode"] == "int16x8"


def _int16x8(model, samples, io=tf.int16, target="litert"):
    conv = fuselite.Converter.from_keras_model(model, target=target)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: iter(samples)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    conv.inference_input_type = conv.inference_output_type = io
    return conv, conv.convert()


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("name", INT8_MODELS)
def test_int16x8_every_tensor_integer_on_litert_close_to_keras(built_models, flavour, name):
    """16x8: int16 activations (zero point 0), int8 weights, int64 biases wherever LiteRT has the 16x8 kernel;
    an LSTM is unrolled into 16x8 builtins (LiteRT has no 16x8 LSTM kernel; where it cannot be unrolled it stays
    the 8x8->16 integer LSTM, between int16 <-> int8 QUANTIZEs)."""
    model, _, _ = built_models(flavour, name)
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(50)]
    conv, data = _int16x8(model, calibration)
    m, ops = _tensors(data)
    for sg in m.subgraphs:
        for t in sg.tensors:
            if t.type == schema.TensorType.FLOAT32:
                assert list(t.shape) == [0] and "intermediate" in t.name.decode(), t.name
            elif t.type == schema.TensorType.INT16 and t.quantization is not None and t.quantization.zeroPoint is not None:
                assert not np.any(t.quantization.zeroPoint), t.name  # symmetric, as every 16x8 kernel requires
    records = conv.report.quantization["ops"]
    assert conv.report.quantization["mode"] == "int16x8" and records
    for r in records:  # ops that only move values (reshapes, slices) follow their neighbours
        if r["kind"] == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            assert r["mode"] == "int8" and r["scheme"] == "integer LSTM (8x8->16)"
        elif r["kind"] in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL", "LOGISTIC", "TANH",
                           "SOFTMAX", "GELU", "RELU", "MEAN"):
            assert r["mode"] == "int16x8" and _int16_out(r), r
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(20)]
    if name in FIXED_SCALE_OUTPUTS:
        assert _int8_error(data, model, held_out, absolute=True) <= 1 / 256
    else:
        assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE


def test_int8_error_budget_makes_the_fewest_layers_wider_and_reports_each_layers_share(built_models, monkeypatch):
    """Each layer's share is measured (quantized again with it 16x8); a budget below the all-int8 error makes
    layers 16x8, largest share first, until it is met — every step measured, the model still integer. The shares'
    time limit (the conversion's own time, at least MIN_SHARE_SECONDS) is raised here: on a loaded machine (the
    other xdist worker running LiteRT-LM subprocesses) it cut the four measurements short; the limit itself is
    tested in test_integer_ops."""
    from fuselite.stages import quantization

    monkeypatch.setattr(quantization, "MIN_SHARE_SECONDS", 120.0)
    model, _, _ = built_models("keras3", "cnn")
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(30)]
    conv, data = _int8(model, calibration, io=None)
    layers = conv.report.quantization["layers"]
    assert len(layers["layers"]) == 4 and layers["layers_not_measured"] == 0  # 2 conv, depthwise, dense
    full = layers["end_to_end_error"]
    assert full == max(o["relative_error"] for o in conv.report.quantization["outputs"])
    best = layers["layers"][0]
    assert best["share"] == pytest.approx((full - best["error_without_int8"]) / full) and best["share"] > 0
    assert all(r["layer_error_share"] is not None for r in conv.report.quantization["ops"]
               if r["kind"] in ("CONV_2D", "FULLY_CONNECTED"))
    budget = (full + best["error_without_int8"]) / 2  # met by the best layer alone
    conv, wider = _int8(model, calibration, io=None, max_quantization_error=budget)
    plan = conv.report.quantization["layers"]
    assert plan["met"] and plan["promoted"] == [best["layer"]] and plan["final_error"] <= budget
    assert max(o["relative_error"] for o in conv.report.quantization["outputs"]) == pytest.approx(plan["final_error"])
    promoted = [r for r in conv.report.quantization["ops"] if r["op"].startswith(best["layer"] + "/")]
    assert promoted and all(r["mode"] == "int16x8" for r in promoted if r["kind"] != "RESHAPE")
    assert "error budget" in str(conv.report)
    conv, _ = _int8(model, calibration, io=None, max_quantization_error=1e-6)  # unreachable: said, not hidden
    plan = conv.report.quantization["layers"]
    assert not plan["met"] and len(plan["promoted"]) == 4 and "not met" in str(conv.report)
    with pytest.raises(QuantizationOptionError, match="between 0 and 1"):
        _int8(model, calibration, io=None, max_quantization_error=2)


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_text_classifier_int8_meets_two_percent_with_an_error_budget(built_models, flavour):
    """The Embedding -> LSTM -> Dense text classifier (the official converter crashes on it in int8). Its softmax's
    outputs span a few steps of the int8 kernel's fixed 1/256 (~25% of this random-weight model's tiny output
    range in half a step, as plain int8 was held to): the softmax runs on its int16 kernel (1/32768) inside the
    int8 model, requantized to int8 at its calibrated range (measured: 1.1e-4 / 1.3e-4 absolute, half a step
    was 1.95e-3); with max_quantization_error=0.02 the model, still integer only, is within 2% of the range on
    held-out inputs."""
    model, _, _ = built_models(flavour, "text_lstm")
    calibration = [zoo.sample_inputs(model, seed=2000 + i) for i in range(100)]
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(20)]
    conv, plain = _int8(model, calibration, io=None)
    assert {r["mode"] for r in conv.report.quantization["ops"] if r["kind"] == "SOFTMAX"} == {"int16x8"}
    step = _int8_error(plain, model, held_out, absolute=True)
    assert step < 0.5 / 256 / 8  # under an eighth of the int8 grid's half step
    conv, data = _int8(model, calibration, io=None, max_quantization_error=0.02)
    assert conv.report.quantization["layers"]["met"]
    assert _int8_error(data, model, held_out) <= 0.02


def test_int8_ops_without_an_integer_form_fall_back_or_are_listed(built_models):
    model, _, _ = built_models("keras3", "transformer_block")  # attention: integer BATCH_MATMUL, NEG as x * -1
    calibration = [zoo.sample_inputs(model, seed=i) for i in range(20)]
    conv, data = _int8(model, calibration)
    kinds = {r["kind"]: r["mode"] for r in conv.report.quantization["ops"]}
    assert kinds["BATCH_MATMUL"] == "int8" and "NEG" not in kinds and "float" not in kinds.values()
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(5)]
    assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE
    model, _, _ = built_models("keras3", "lstm_64")  # keep_float works in integer mode too
    conv, data = _int8(model, [zoo.sample_inputs(model, seed=i) for i in range(5)], integer_only=False, io=None,
                       keep_float=["UNIDIRECTIONAL_SEQUENCE_LSTM"])
    kept = [r for r in conv.report.quantization["ops"] if r["kind"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    assert kept[0]["mode"] == "float" and "keep_float" in kept[0]["reason"]


def test_int8_with_uint8_inputs_and_outputs(built_models):
    model, _, _ = built_models("keras3", "cnn")
    conv, data = _int8(model, [zoo.sample_inputs(model, seed=200 + i) for i in range(20)], io=tf.uint8)
    from fuselite.runtime import interpreter

    interp = interpreter(data)
    assert interp.get_input_details()[0]["dtype"] == interp.get_output_details()[0]["dtype"] == np.uint8
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(5)]
    assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE


def test_int8_calibration_data_must_fit_the_inputs(built_models):
    model, _, _ = built_models("keras3", "mlp")
    with pytest.raises(fuselite.ConversionError, match="input 'features' has shape"):
        _int8(model, [[np.zeros((1, 7), np.float32)]])
    with pytest.raises(fuselite.ConversionError, match="gave no samples"):
        _int8(model, [])


_ON_TFLM = [("keras3", n) for n in INT8_MODELS] + [("keras3", "mobilenet_v2"), ("tf_keras", "text_model"),
                                                   ("tf_keras", "text_lstm")]


@pytest.mark.parametrize("mode", ["int8", "int16x8"])
@pytest.mark.parametrize("flavour, name", _ON_TFLM)
def test_integer_models_run_on_tflite_micro_as_on_litert(built_models, tmp_path, flavour, name, mode):
    """With target="micro", TFLite Micro's interpreter (a subprocess: a native runtime may crash) gives LiteRT's
    integer outputs: Keras 3's GELU (the MLP) and Embedding masking (int32 SELECT_V2) in forms TFLM runs, the
    16x8 embedding table int8 (TFLM's GATHER has no int16 form)."""
    model, _, _ = built_models(flavour, name)
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(20)]
    conv, data = _int8(model, calibration, target="micro") if mode == "int8" else \
        _int16x8(model, calibration, target="micro")
    assert conv.report.micro["ran"]
    if mode == "int16x8" and any(r.get("scheme") == LSTM_16X8 for r in conv.report.quantization["ops"]):
        # the LSTM with int16 activations is TFLM's kernel alone (LiteRT registers the op up to version 4):
        # LiteRT refuses the file; TFLM's outputs against the float Keras model instead
        assert any(w.startswith("not run on LiteRT") for w in conv.report.warnings)
        with pytest.raises((RuntimeError, ValueError)):
            __import__("fuselite.runtime", fromlist=["interpreter"]).interpreter(data)
        x = [zoo.sample_inputs(model, seed=i)[0] for i in range(3)]
        (q_in,), (q_out,) = tensor_quantization(data)
        out, got = run_on_tflm(data, np.stack([to_input(q_in, v) for v in x]), tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        want = np.stack([np.asarray(model(v, training=False)) for v in x])
        # measured: 6.4e-5 (text) to 3e-3 (stacked LSTM); int8 weights are the floor (docs/ethos-u.md)
        assert np.abs(real_output(q_out, got) - want).max() < 0.01
        return
    from fuselite.runtime import interpreter

    lit = interpreter(data)
    d = lit.get_input_details()[0]
    scale, zp = d["quantization"]
    xs = np.stack([zoo.sample_inputs(model, seed=i)[0] for i in range(3)])
    if scale:  # int8 (int16) features; token ids stay int32
        info = np.iinfo(d["dtype"])
        xs = np.clip(np.rint(xs / scale) + zp, info.min, info.max).astype(d["dtype"])
    want = []
    for x in xs:
        lit.set_tensor(d["index"], x)
        lit.invoke()
        want.append(lit.get_tensor(lit.get_output_details()[0]["index"]).copy())
    out, got = run_on_tflm(data, xs, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    diff = np.abs(got.astype(int) - np.stack(want).astype(int))
    # The two runtimes' integer kernels round some products differently (TFLM's LSTM is its own code); a recurrence
    # carries a one-step difference on, so a Bidirectional LSTM's output differs by up to 2 steps (measured).
    assert got.dtype == (np.int8 if mode == "int8" else np.int16)
    if mode == "int8":
        assert diff.max() <= (2 if "lstm" in name else 1)
    else:  # int16 steps: an LSTM (int8 inside, 257 int16 steps per int8 step) within 2 int8 steps; the 16x8
        # cells' recurrences carry a kernel rounding difference on (measured: SimpleRNN 16, GRU 4, CNN 1)
        assert diff.max() <= (2 * 257 if "lstm" in name else 32)


@pytest.mark.parametrize("sequences", [True, False])
def test_int8_bidirectional_simple_rnn_unrolled_both_directions(sequences):
    """BIDIRECTIONAL_SEQUENCE_RNN has no integer kernel: both directions unrolled (the backward one in reverse,
    its steps time-aligned), merged by an integer CONCATENATION; relu cells keep their calibrated ranges."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    inp = k.Input((12, 8))
    layer = k.layers.Bidirectional(k.layers.SimpleRNN(16, activation="relu", return_sequences=sequences))
    model = k.Model(inp, layer(inp))
    calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(30)]
    conv, data = _int8(model, calibration, io=None)
    m, ops = _tensors(data)
    kinds = [m.operatorCodes[op.opcodeIndex].builtinCode for _, op in ops]
    assert schema.BuiltinOperator.BIDIRECTIONAL_SEQUENCE_RNN not in kinds
    assert kinds.count(schema.BuiltinOperator.RELU) == 24 and kinds.count(schema.BuiltinOperator.QUANTIZE) >= 1
    held_out = [zoo.sample_inputs(model, seed=100 + i) for i in range(10)]
    assert _int8_error(data, model, held_out) <= INT8_RELATIVE_TOLERANCE


@pytest.mark.parametrize("mode", ["int8", "int16x8"])
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "GRU", "SimpleRNN"])
def test_integer_stateful_rnn_state_carried_and_reset(flavour, layer, mode, tmp_path):
    """A stateful RNN in int8: its state variables hold int8 (int16 for an LSTM's cell and the 16x8 cells)
    values, carried across invokes as in Keras, reset by the reset signature; LiteRT with and without its
    default delegate, and TFLite Micro, agree."""
    from ai_edge_litert.interpreter import OpResolverType

    from fuselite.runtime import interpreter, reset_variables

    k = keras_flavour(flavour)
    k.utils.set_random_seed(1)
    i = k.Input((6, 3), batch_size=2)
    model = k.Model(i, getattr(k.layers, layer)(16, stateful=True)(i))
    stream = np.random.default_rng(0).standard_normal((130, 2, 6, 3)).astype(np.float32)
    calibration = [[x] for x in stream[:100]]  # the state carries over the samples
    conv, data = _int8(model, calibration, io=None) if mode == "int8" else _int16x8(model, calibration, io=None)
    m, _ = _tensors(data)
    for sg in m.subgraphs:  # float only at the model's edges (float inputs and outputs asked for)
        edges = set(sg.inputs) | set(sg.outputs)
        for n, t in enumerate(sg.tensors):
            assert t.type != schema.TensorType.FLOAT32 or n in edges or list(t.shape) == [0], t.name
    variables = [r for r in conv.report.quantization["ops"] if r["kind"] == "READ_VARIABLE"]
    assert variables and all(r["mode"] in ("int8", "int16x8") for r in variables)
    # no float reset witness in an integer-only model: said
    assert any("reset_all_variables() does not reset" in w for w in conv.report.warnings), conv.report.warnings
    for layer_ in model.layers:
        if getattr(layer_, "stateful", False):
            layer_.reset_states()
    want = [np.asarray(model(x)) for x in stream[100:]]
    runs = []
    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        interp = interpreter(data, experimental_op_resolver_type=resolver)
        got = []
        for x in stream[100:]:
            interp.set_tensor(interp.get_input_details()[0]["index"], x)
            interp.invoke()
            got.append(interp.get_tensor(interp.get_output_details()[0]["index"]).copy())
        runs.append(np.stack(got))
        reset_variables(interp)  # back to zero state: the first chunk again gives the first answer
        interp.set_tensor(interp.get_input_details()[0]["index"], stream[100])
        interp.invoke()
        assert np.array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), got[0])
    assert np.abs(runs[0] - np.stack(want)).max() <= INT8_RELATIVE_TOLERANCE * np.ptp(np.stack(want))
    assert np.abs(runs[0] - runs[1]).max() <= 1e-6  # the same integers (XNNPACK's DEQUANTIZE rounds its own way)
    out, got = run_on_tflm(data, stream[100:], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    scale = max(np.abs(runs[0]).max(), 1e-6) / 127  # within a few int8 steps of the output (recurrence)
    assert np.abs(got - runs[0]).max() <= 4 * scale


def test_int8_lstm_with_an_initial_state_computed_in_the_graph():
    """An encoder's state as a decoder LSTM's initial state: copied into the integer LSTM's state tensors by
    QUANTIZE (int8 h, int16 cell state), the model fully integer and close to Keras."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    x, h = k.Input((8, 4), batch_size=1), k.Input((6,), batch_size=1)
    start = k.layers.Dense(16, activation="tanh")(h)
    model = k.Model([x, h], k.layers.LSTM(16)(x, initial_state=[start, start]))
    rng = np.random.default_rng(0)
    samples = [[rng.standard_normal((1, 8, 4)).astype(np.float32), rng.standard_normal((1, 6)).astype(np.float32)]
               for _ in range(70)]
    conv, data = _int8(model, samples[:50], io=None)
    records = {r["kind"]: r for r in conv.report.quantization["ops"]}
    assert records["UNIDIRECTIONAL_SEQUENCE_LSTM"]["mode"] == "int8"
    m, ops = _tensors(data)
    (sg, lstm), = [(sg, op) for sg, op in ops
                   if m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM]
    assert [sg.tensors[lstm.inputs[i]].type for i in (18, 19)] == [schema.TensorType.INT8, schema.TensorType.INT16]
    from fuselite.runtime import run

    got = np.stack([list(run(data, xs).values())[0] for xs in samples[50:]])
    want = np.stack([np.asarray(model(xs)) for xs in samples[50:]])
    assert np.abs(got - want).max() <= INT8_RELATIVE_TOLERANCE * np.ptp(want)


@pytest.mark.parametrize("name", ["cnn", "lstm_64", "mlp", "bidirectional_lstm", "text_model"])
def test_report_says_whether_the_float_model_would_run_on_tflite_micro(built_models, tmp_path, name):
    """The report's static TFLM check (op resolver and known kernel type limits) agrees with TFLM's interpreter."""
    model, _, _ = built_models("keras3", name)
    conv = fuselite.Converter.from_keras_model(model, bidirectional="fused")
    data = conv.convert()
    micro = conv.report.micro
    out, _ = run_on_tflm(data, np.stack([zoo.sample_inputs(model, seed=0)[0]]), tmp_path)
    assert micro["runs"] == (out.returncode == 0), (micro, out.stderr[-800:])
    if not micro["runs"]:
        kind = {"mlp": "GELU", "bidirectional_lstm": "BIDIRECTIONAL_SEQUENCE_LSTM", "text_model": "SELECT_V2",
                "lstm_64": "FILL"}[name]  # the LSTM's state with a dynamic batch
        assert any(p.startswith(kind) for p in micro["problems"]) and "TFLite Micro" in str(conv.report)


def test_quantization_error_skips_a_tensor_no_kernel_wrote():
    """A SPLIT output nothing reads is never allocated ("Tensor data is null"): the per-tensor error leaves it
    out instead of raising LiteRT's ValueError; every tensor that was written is compared."""
    import keras

    from fuselite.runtime.interpreters import interpreter
    from fuselite.runtime.quantization_error import quantization_error

    x = keras.Input((12,))
    a, _, c = keras.ops.split(keras.layers.Dense(12)(x), 3, axis=-1)
    model = keras.Model(x, keras.layers.Dense(4)(keras.ops.concatenate([a, c], -1)))
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 12)).astype(np.float32)] for _ in range(8)]
    reference = fuselite.Converter.from_keras_model(model).convert()
    quantized = fuselite.Converter.from_keras_model(model, optimizations=[tf.lite.Optimize.DEFAULT],
                                                    representative_dataset=lambda: iter(calibration)).convert()
    names = [{t["name"] for t in interpreter(d, allocate=False).get_tensor_details()} for d in (reference, quantized)]
    shared = names[0] & names[1]
    unread = {n for n in shared if n.endswith("split:1_1")}
    assert unread, sorted(shared)
    _, outputs, per_tensor = quantization_error(reference, quantized, tensors={n: n for n in shared})
    assert not unread & set(per_tensor)
    assert {n for n in shared if "split:2" in n} <= set(per_tensor) and len(per_tensor) >= 5, sorted(per_tensor)
    assert outputs[0]["relative_error"] < 0.05
