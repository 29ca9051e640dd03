"""Keras 3's own quantized models (issue 28): ``quantize("int8")`` and ``quantize("int4")`` keep their precision.

int4 kernels are INT4 tensors behind a DEQUANTIZE (per output channel, with Keras' zero points), so the file is
smaller than the int8 one and the float one and computes Keras' numbers (``EXACT``: float32 rounding of
``(q - zero) * scale``; measured 1.2e-7 / 2.4e-7 on outputs of range ~2). A kernel in several sub-channel groups
cannot be int4 in LiteRT (blockwise int4 has no zero points): int8 per output channel, said in the report, error
within ``REQUANTIZED`` of the output range. On LiteRT's builtin kernels and with XNNPACK.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import fuselite
from fuselite.frontend.keras_quantized import UnsupportedKerasQuantization
from fuselite.runtime import run

EXACT = 1e-5
REQUANTIZED = 0.01  # int8 per channel of an int4 grid: half an int8 step per weight


def _model(inputs: int, mode: str | None, **config):
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(8)])
    if mode == "int4" and config:
        m.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(**config))
    elif mode:
        m.quantize(mode)
    return m


@pytest.fixture(scope="module")
def sizes():
    return {mode: len(fuselite.Converter.from_keras_model(_model(16, mode)).convert())
            for mode in (None, "int8", "int4")}


@pytest.mark.parametrize("config", [{}, {"block_size": -1}], ids=["sub-channel", "per-channel"])
@pytest.mark.parametrize("builtin", [False, True])
def test_keras_int4_is_int4_on_litert_with_keras_numbers(config, builtin, sizes):
    model = _model(16, "int4", **config)
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    from fuselite.inspect import describe

    assert describe(data)["subgraphs"][0]["ops"]["DEQUANTIZE"] == 2
    assert sum("kept as int4 weights" in w for w in conv.report.warnings) == 2
    assert len(data) < sizes["int8"] and len(data) < sizes[None]  # acceptance 2: smaller than int8 and float
    x = np.random.default_rng(1).normal(size=(4, 16)).astype(np.float32)
    want = np.asarray(model(x))
    got = list(run(data, [x], builtin_kernels=builtin).values())[0]
    assert np.abs(got - want).max() <= EXACT * max(1.0, float(np.ptp(want)))


def test_int4_kernel_in_several_groups_is_int8_and_the_report_says_why():
    model = _model(256, "int4")  # 256 inputs: two groups of 128 in the first Dense
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    notes = [w for w in conv.report.warnings if "int4 kernel" in w]
    assert any("kept as int8 weights" in w and "2 groups of 128" in w for w in notes), notes
    assert len(data) < len(fuselite.Converter.from_keras_model(_model(256, None)).convert())
    x = np.random.default_rng(2).normal(size=(4, 256)).astype(np.float32)
    want = np.asarray(model(x))
    for builtin in (False, True):
        got = list(run(data, [x], builtin_kernels=builtin).values())[0]
        assert np.abs(got - want).max() <= REQUANTIZED * float(np.ptp(want))


def test_keras_int8_keeps_int8_weights():
    from ai_edge_litert import schema_py_generated as schema

    model = _model(16, "int8")
    data = fuselite.Converter.from_keras_model(model).convert()
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    kernels = [t for t in m.subgraphs[0].tensors if t.name.decode().endswith("/kernel")]
    assert len(kernels) == 2 and all(t.type == schema.TensorType.INT8 for t in kernels)
    # (the file is not below the float one for so small a model yet: Keras' int8 graph is ~10 ops a Dense)
    x = np.random.default_rng(3).normal(size=(4, 16)).astype(np.float32)
    got = list(run(data, [x]).values())[0]
    assert np.abs(got - np.asarray(model(x))).max() <= EXACT


def test_float8_names_the_layer_and_what_is_supported():
    with pytest.raises(UnsupportedKerasQuantization, match="'sequential[_0-9]*/dense[_0-9]*' \\(Dense\\) is quantized as 'float8'.*"
                                                           "supported are quantize\\('int8'\\)"):
        fuselite.Converter.from_keras_model(_model(16, "float8")).convert()
