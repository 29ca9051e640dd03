"""Constants after the flatbuffer (schema.fbs ``Buffer.offset`` / ``size``), as LiteRT reads them and the official
converter's ``_experimental_use_buffer_offset`` writes them: chosen when the constants pass what a flatbuffer holds
(2 GiB: tested here with the limit lowered, GiB-sized files live in benchmarks/), or asked for."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter
from test_ecosystem import open_in_tools

import fuselite
from fuselite.errors import ConversionError
from fuselite.inspect import describe
from fuselite.runtime import run
from fuselite.tflite import flatbuffer

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def dense():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(300, activation="relu"), keras.layers.Dense(7)])


X = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)


def _outside(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each buffer kept after the flatbuffer."""
    m = schema.Model.GetRootAs(data, 0)
    return [(m.Buffers(i).Offset(), m.Buffers(i).Size()) for i in range(m.BuffersLength())
            if m.Buffers(i).Offset() > 1]


def _check_layout(data: bytes) -> None:
    outside = _outside(data)
    assert outside
    flat_end = min(offset for offset, _ in outside)
    for offset, size in outside:
        assert offset % flatbuffer.BUFFER_ALIGNMENT == 0 and offset + size + 16 <= len(data)  # + XNNPACK's tail
    assert data[-16:] == bytes(16)
    m = schema.Model.GetRootAs(data, 0)
    names = {m.Metadata(i).Name().decode(): m.Metadata(i).Buffer() for i in range(m.MetadataLength())}
    location = m.Buffers(names["buffer_location"])
    assert bytes(location.DataAsNumpy()) == b"outside flatbuffers" and flat_end > 0


@pytest.mark.parametrize("how", ["attribute", "keyword", "option"])
def test_asked_for_the_constants_follow_the_flatbuffer_and_run_from_bytes_and_a_path(dense, how, tmp_path):
    if how == "attribute":  # the official converter's spelling
        conv = fuselite.Converter.from_keras_model(dense)
        conv._experimental_use_buffer_offset = True
        assert conv.buffer_offsets is True
    elif how == "keyword":
        conv = fuselite.Converter.from_keras_model(dense, _experimental_use_buffer_offset=True)
    else:
        conv = fuselite.Converter.from_keras_model(dense, buffer_offsets=True)
    data = conv.convert()
    _check_layout(data)
    assert sum(size for _, size in _outside(data)) >= 64 * 300 * 4
    assert any("written after the flatbuffer" in w for w in conv.report.warnings)
    info = describe(data)
    assert info["bytes"]["after_flatbuffer"] == info["bytes"]["weights"] >= 64 * 300 * 4
    want = np.asarray(dense(X))
    for builtin in (False, True):
        got = next(iter(run(data, [X], builtin_kernels=builtin).values()))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    interp = Interpreter(model_path=str(path))
    runner = interp.get_signature_runner()
    got = next(iter(runner(**{interp.get_signature_list()["serving_default"]["inputs"][0]: X}).values()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_tools_open_a_file_with_buffer_offsets(dense, tmp_path):
    """Model Explorer's two adapters, TensorFlow's flatbuffer importer and ai-edge-quantizer (each in a
    subprocess: a native tool may crash)."""
    data = fuselite.Converter.from_keras_model(dense, buffer_offsets=True).convert()
    assert open_in_tools(data, tmp_path) == {t: "ok" for t in ("mlir", "flatbuffer", "tf_importer", "quantizer")}


def test_quantized_weights_after_the_flatbuffer(dense):
    conv = fuselite.Converter.from_keras_model(dense, buffer_offsets=True)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic range: int8 weights
    data = conv.convert()
    _check_layout(data)
    want = np.asarray(dense(X))
    got = next(iter(run(data, [X]).values()))
    assert np.abs(got - want).max() / np.ptp(want) < 0.02


def test_constants_past_the_limit_choose_offsets_unless_told_not_to(dense, monkeypatch):
    # the limit lowered to what this model's constants pass (the real one: 2 GiB, benchmarks/memory.py)
    monkeypatch.setattr(flatbuffer, "MAX_FLATBUFFER_BYTES", flatbuffer._GRAPH_ALLOWANCE + 50_000)
    conv = fuselite.Converter.from_keras_model(dense)
    data = conv.convert()
    _check_layout(data)
    assert any("more than a flatbuffer holds" in w for w in conv.report.warnings)
    np.testing.assert_allclose(next(iter(run(data, [X]).values())), np.asarray(dense(X)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ConversionError, match="buffer_offsets=False keeps them inside it"):
        fuselite.Converter.from_keras_model(dense, buffer_offsets=False).convert()


def test_inline_by_default_below_the_limit(dense):
    data = fuselite.Converter.from_keras_model(dense).convert()
    assert not _outside(data) and not flatbuffer.buffer_offsets_of(data)


def test_tflite_micro_refuses_buffer_offsets_in_one_line(dense):
    with pytest.raises(ConversionError, match="TFLite Micro's loader reads constants inside the flatbuffer only"):
        fuselite.Converter.from_keras_model(dense, buffer_offsets=True, target="micro").convert()


def test_a_placeholder_left_unpatched_is_caught(dense, monkeypatch):
    """The offsets are patched into the finished flatbuffer at their vtable slots: a wrong slot is an error, not a
    file whose constants LiteRT reads as missing ("lacks data" at the first invoke)."""
    monkeypatch.setattr(flatbuffer, "_BUFFER_OFFSET_SLOT", 4)  # the data field's slot: absent for such a buffer
    with pytest.raises(ConversionError, match="placeholder is missing"):
        fuselite.Converter.from_keras_model(dense, buffer_offsets=True).convert()


def test_struct_layout_assumption():
    """Buffer's fields are data, offset, size (schema.fbs): vtable slots 4, 6, 8."""
    b = __import__("flatbuffers").Builder(64)
    schema.BufferStart(b)
    schema.BufferAddOffset(b, 7)
    schema.BufferAddSize(b, 9)
    b.Finish(schema.BufferEnd(b))
    buf = schema.Buffer.GetRootAs(b.Output(), 0)
    tab = buf._tab
    assert struct.unpack_from("<Q", tab.Bytes, tab.Pos + tab.Offset(flatbuffer._BUFFER_OFFSET_SLOT))[0] == 7
    assert struct.unpack_from("<Q", tab.Bytes, tab.Pos + tab.Offset(flatbuffer._BUFFER_SIZE_SLOT))[0] == 9
