"""Blockwise int4 weights (``supported_types=["int4"]``, issue 47): FULLY_CONNECTED weights as the schema's
``BlockwiseQuantization`` (INT4 two per byte, a FLOAT16 scale tensor per block of inputs, no zero points), run
by LiteRT's builtin ``EvalBlockwise4Bit`` and by XNNPACK, against the weights read back from the file and against
Keras; the ops the kernels cannot run blockwise are int8, the report says why."""

from __future__ import annotations

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import litert_op_names

import fuselite
from fuselite.quantize import QuantizationOptionError
from fuselite.runtime import run

INPUT_ROUNDING = 0.02  # of the output's range: LiteRT quantizes a blockwise FC's input per row to int8 (measured
# 0.3% to 0.9% against the same int4 weights in float64)


def mlp():
    """Weights [outputs, inputs] 128 x 64 (a fused ReLU), 64 x 128, 40 x 64: int4 at blocks 32 and 64; 3 x 40 is
    too small to quantize (float32, as the official converter leaves it)."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(64),
                             keras.layers.Dense(40), keras.layers.Dense(3)])


def _output(result) -> np.ndarray:
    (out,) = result.values()
    return np.asarray(out, np.float64)


def int4_convert(model, block_size=None):
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = ["DEFAULT"]
    conv.target_spec.supported_types = ["int4"]
    if block_size is not None:
        conv.block_size = block_size
    return conv, conv.convert()


def blockwise_weights(data: bytes) -> dict[str, dict]:
    """Each blockwise int4 tensor of the file: its values unpacked (low nibble first, signed), its scales, block
    size and the zero-points index, read with the schema alone."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.Model.GetRootAs(data, 0)
    g = m.Subgraphs(0)
    found = {}
    for i in range(g.TensorsLength()):
        t = g.Tensors(i)
        q = t.Quantization()
        if q is None or q.DetailsType() != schema.QuantizationDetails.BlockwiseQuantization:
            continue
        details = schema.BlockwiseQuantization()
        details.Init(q.Details().Bytes, q.Details().Pos)
        assert t.Type() == schema.TensorType.INT4
        shape = tuple(t.ShapeAsNumpy())
        raw = m.Buffers(t.Buffer()).DataAsNumpy()
        nibbles = np.stack([raw & 0xF, raw >> 4], axis=1).reshape(-1)[:int(np.prod(shape))].astype(np.int8)
        values = np.where(nibbles > 7, nibbles - 16, nibbles).reshape(shape)
        s = g.Tensors(details.Scales())
        assert s.Type() == schema.TensorType.FLOAT16
        scales = m.Buffers(s.Buffer()).DataAsNumpy().view(np.float16).reshape(tuple(s.ShapeAsNumpy()))
        found[t.Name().decode()] = {"values": values, "scales": scales, "block": details.BlockSize(),
                                    "zero_points": details.ZeroPoints(), "dim": q.QuantizedDimension()}
    return found


def dequantized(w: dict) -> np.ndarray:
    return w["values"] * np.repeat(w["scales"].astype(np.float64), w["block"], axis=1)


@pytest.mark.parametrize("block", [32, 64])
@pytest.mark.parametrize("builtin", [False, True], ids=["xnnpack", "builtin"])
def test_blockwise_dense_layers_compute_the_files_weights(builtin, block):
    """Each FULLY_CONNECTED of 64 or 128 inputs is int4 (block 32 or 64): the weight in the file dequantized and
    multiplied in float64 gives LiteRT's numbers within the input's int8 rounding (both kernel sets, the same
    numbers); the fused ReLU is an op of its own (the builtin blockwise kernel does not apply it); against Keras'
    float model the error is int4's (bound 10% of the range, measured 5.9%)."""
    model = mlp()
    conv, data = int4_convert(model, block)
    weights = blockwise_weights(data)
    assert len(weights) == 3
    for w in weights.values():
        assert w["block"] == block and w["zero_points"] == -1 and w["dim"] == 0
        assert w["values"].min() >= -7 and w["values"].max() <= 7
        assert w["scales"].shape == (w["values"].shape[0], w["values"].shape[1] // block)
    ops = litert_op_names(data)
    assert ops.count("FULLY_CONNECTED") == 4 and "RELU" in ops
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    got = _output(run(data, [x], builtin_kernels=builtin))
    h = np.asarray(x, np.float64)
    by_shape = {w["values"].shape: dequantized(w) for w in weights.values()}  # [outputs, inputs]
    for layer in model.layers:
        kernel, bias = (np.asarray(v, np.float64) for v in layer.get_weights())
        h = h @ by_shape.get(kernel.T.shape, kernel.T).T + bias
        if layer.activation.__name__ == "relu":
            h = np.maximum(h, 0)
    assert np.abs(got - h).max() <= INPUT_ROUNDING * np.ptp(h), np.abs(got - h).max() / np.ptp(h)
    want = model(x).numpy()
    assert np.abs(got - want).max() <= 0.10 * np.ptp(want)
    other = _output(run(data, [x], builtin_kernels=not builtin))
    assert np.abs(other - got).max() <= 1e-5 * np.ptp(got)


def test_report_says_which_weights_are_int4_and_why_not():
    """48 inputs are no multiple of a block of 32 and 3 outputs are fewer than the builtin kernel takes: those
    weights are int8 (per channel), the report's record says why; the file's weight bytes are int4's (4.5 bits a
    weight at block 32)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((48,)), keras.layers.Dense(64), keras.layers.Dense(512),
                              keras.layers.Dense(3)])
    conv, data = int4_convert(model)
    ops = {o["op"].split("/")[-2]: o for o in conv.report.quantization["ops"]}
    assert conv.report.quantization["mode"] == "int4"
    modes = sorted((o["mode"], o["scheme"]) for o in ops.values())
    assert modes[0] == ("int4 weights", "blockwise (block 32)"), modes
    assert any("48 inputs are not a multiple of the block size 32" in s for _, s in modes), modes
    assert any("needs at least 4 outputs" in s for _, s in modes), modes
    int4 = next(o for o in ops.values() if o["mode"] == "int4 weights")
    assert int4["weight_bytes_after"] == 512 * 64 // 2 + 512 * 2 * 2  # values two a byte, a float16 per block
    x = np.random.default_rng(2).standard_normal((4, 48)).astype(np.float32)
    want = model(x).numpy()
    for builtin in (False, True):
        got = _output(run(data, [x], builtin_kernels=builtin))
        assert np.abs(got - want).max() <= 0.10 * np.ptp(want)


def test_int4_options_are_checked():
    model = mlp()
    conv = fuselite.Converter.from_keras_model(model)
    conv.block_size = 32
    with pytest.raises(QuantizationOptionError, match="block_size is the block of int4 weights"):
        conv.convert()  # no quantization asked: the option would do nothing
    conv.optimizations = ["DEFAULT"]
    with pytest.raises(QuantizationOptionError, match="dynamic"):
        conv.convert()
    conv.target_spec.supported_types = ["int4"]
    for bad in (48, 0, 16, "32"):
        conv.block_size = bad
        with pytest.raises(QuantizationOptionError, match="multiple of 32"):
            conv.convert()
    conv.block_size = None
    conv.representative_dataset = lambda: iter([[np.zeros((1, 64), np.float32)]])
    with pytest.raises(QuantizationOptionError, match="representative_dataset"):
        conv.convert()
    micro = fuselite.Converter.from_keras_model(model, target="micro")
    micro.optimizations, micro.target_spec.supported_types = ["DEFAULT"], ["int4"]
    with pytest.raises(QuantizationOptionError, match="TFLite Micro has no kernels for int4"):
        micro.convert()


def test_cli_quantize_int4(tmp_path):
    model = mlp()
    model.save(tmp_path / "m.keras")
    proc = subprocess.run([sys.executable, "-m", "fuselite.cli", "convert", str(tmp_path / "m.keras"), "-o",
                           str(tmp_path / "m.tflite"), "--quantize", "int4", "--block-size", "64", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    q = json.loads(proc.stdout)["quantization"]
    assert q["mode"] == "int4" and {o["scheme"] for o in q["ops"] if o["mode"] == "int4 weights"} == \
        {"blockwise (block 64)"}
    weights = blockwise_weights((tmp_path / "m.tflite").read_bytes())
    assert {w["block"] for w in weights.values()} == {64}
    proc = subprocess.run([sys.executable, "-m", "fuselite.cli", "convert", str(tmp_path / "m.keras"), "-o",
                           str(tmp_path / "n.tflite"), "--block-size", "64"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "block_size" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "n.tflite").exists()
