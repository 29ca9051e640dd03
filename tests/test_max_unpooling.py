"""TensorFlow Addons' MaxUnpooling2D composite -> LiteRT's MaxUnpooling2D custom op (issue 17).

The official converter's options (TfLitePoolParams as raw bytes), one CUSTOM op; run with a NumPy
kernel registered for it (stock LiteRT's Python interpreter has none) against TensorFlow; a wrong
attribute stops the conversion naming it.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema

import fuselite
from fuselite.errors import ConversionError
from fuselite.runtime.custom_ops import run
from fuselite.runtime.python_kernels import PythonKernel


def _unpool(updates, mask, strides):
    """TensorFlow Addons' max_unpooling_2d (SAME padding): each value to its argmax position."""
    b, h, w, ch = updates.shape
    out = [b, h * strides[0], w * strides[1], ch]
    mask = tf.cast(mask, tf.int32)
    ones = tf.ones_like(mask)
    batch = ones * tf.reshape(tf.range(b), [b, 1, 1, 1])
    y = mask // (out[2] * out[3])
    x = (mask // out[3]) % out[2]
    f = ones * tf.range(out[3])
    indices = tf.transpose(tf.reshape(tf.stack([batch, y, x, f]), [4, -1]))
    return tf.scatter_nd(indices, tf.reshape(updates, [-1]), out)


def _model(**attrs):
    attrs = {"pool_size": [2, 2], "strides": [2, 2], "padding": "SAME", **attrs}

    @tf.function(experimental_implements=fuselite.implements("addons:MaxUnpooling2D", **attrs), autograph=False)
    def unpool(updates, mask):
        return _unpool(updates, mask, (2, 2))

    # the pooled values and argmax indices as inputs (MaxPoolWithArgmax has no LiteRT builtin)
    @tf.function(input_signature=[tf.TensorSpec([1, 2, 2, 3], tf.float32), tf.TensorSpec([1, 2, 2, 3], tf.int64)])
    def model(pooled, argmax):
        return unpool(pooled, argmax)

    return model


def _inputs():
    x = tf.constant(np.random.default_rng(0).standard_normal((1, 4, 4, 3)).astype(np.float32))
    pooled, argmax = tf.nn.max_pool_with_argmax(x, 2, 2, "SAME", include_batch_in_index=False)
    return [pooled.numpy(), argmax.numpy()]


def _numpy_unpool(inputs, options):
    updates, mask = inputs
    padding, sw, sh, fw, fh = struct.unpack("<10i", options)[:5]
    b, h, w, ch = updates.shape
    out = np.zeros((b, h * sh, w * sw, ch), updates.dtype)
    for n, i, j, k in np.ndindex(updates.shape):
        idx = int(mask[n, i, j, k])
        out[n, idx // (w * sw * ch), (idx // ch) % (w * sw), k] += updates[n, i, j, k]
    return out


def test_fused_into_the_custom_op_with_the_official_options():
    model = _model()
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()])
    data = conv.convert()
    (record,) = conv.report.composites
    assert (record["interface"], record["status"]) == ("addons:MaxUnpooling2D", "fused"), record
    m = schema.ModelT.InitFromPackedBuf(data, 0)
    customs = [op for op in m.subgraphs[0].operators if m.operatorCodes[op.opcodeIndex].customCode]
    (op,) = customs
    assert m.operatorCodes[op.opcodeIndex].customCode == b"MaxUnpooling2D"
    # TfLitePoolParams: padding SAME (1), stride w, h, filter w, h, activation NONE, computed padding 0 x4
    assert bytes(op.customOptions) == struct.pack("<10i", 1, 2, 2, 2, 2, 0, 0, 0, 0, 0)
    xs = _inputs()
    (got,) = run(data, xs, kernels={"MaxUnpooling2D": PythonKernel(_numpy_unpool, raw_options=True)}).values()
    np.testing.assert_allclose(got, model(*xs).numpy(), atol=1e-6)


@pytest.mark.parametrize("attrs, message", [
    ({"padding": "FULL"}, "'padding' must be 'SAME' or 'VALID'"),
    ({"strides": [2]}, "'strides' must be two positive integers"),
    ({"pool_size": [0, 2]}, "'pool_size' must be two positive integers"),
])
def test_a_wrong_attribute_stops_the_conversion_naming_it(attrs, message):
    model = _model(**attrs)
    with pytest.raises(ConversionError, match=message):
        fuselite.Converter.from_concrete_functions([model.get_concrete_function()]).convert()
