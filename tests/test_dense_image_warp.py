"""TensorFlow Addons' DenseImageWarp composite -> LiteRT's DenseImageWarp custom op (issue 17: every composite the
official converter's prepare-composites stage fuses).

As ``ConvertDenseImageWarpFunc`` does: one CUSTOM op, empty options; run with a NumPy kernel registered for it (the
stock Python interpreter has none) against the composite's TensorFlow body. A signature that does not fit is
declined and its body converted.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema

import fuselite
from fuselite.runtime.custom_ops import run
from fuselite.runtime.python_kernels import PythonKernel

SHAPE = (2, 5, 6, 3)


def _bilinear_corners(q, size):
    """tfa.image.interpolate_bilinear's per-axis floor (clipped to [0, size - 2]) and weight (clipped to [0, 1])."""
    floor = np.clip(np.floor(q), 0, size - 2)
    return floor.astype(np.int64), np.clip(q - floor, 0, 1)


def _numpy_warp(inputs, options):
    """dense_image_warp: out[b, y, x] = image sampled bilinearly at (y - flow[..., 0], x - flow[..., 1])."""
    image, flow = (np.asarray(a, np.float64) for a in inputs)
    b, h, w, _ = image.shape
    gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    (y0, ay), (x0, ax) = _bilinear_corners(gy - flow[..., 0], h), _bilinear_corners(gx - flow[..., 1], w)
    n = np.arange(b)[:, None, None]
    top = image[n, y0, x0] * (1 - ax[..., None]) + image[n, y0, x0 + 1] * ax[..., None]
    bottom = image[n, y0 + 1, x0] * (1 - ax[..., None]) + image[n, y0 + 1, x0 + 1] * ax[..., None]
    return (top * (1 - ay[..., None]) + bottom * ay[..., None]).astype(np.float32)


def _tf_warp(image, flow):
    """The same sampling in TensorFlow ops (the composite's body)."""
    b, h, w, _ = image.shape
    gy, gx = tf.meshgrid(tf.range(h), tf.range(w), indexing="ij")
    qy, qx = tf.cast(gy, tf.float32) - flow[..., 0], tf.cast(gx, tf.float32) - flow[..., 1]

    def corners(q, size):
        floor = tf.clip_by_value(tf.floor(q), 0.0, float(size - 2))
        return tf.cast(floor, tf.int32), tf.clip_by_value(q - floor, 0.0, 1.0)[..., None]

    (y0, ay), (x0, ax) = corners(qy, h), corners(qx, w)
    n = tf.broadcast_to(tf.reshape(tf.range(b), [b, 1, 1]), [b, h, w])

    def at(y, x):
        return tf.gather_nd(image, tf.stack([n, y, x], -1))

    top = at(y0, x0) * (1 - ax) + at(y0, x0 + 1) * ax
    bottom = at(y0 + 1, x0) * (1 - ax) + at(y0 + 1, x0 + 1) * ax
    return top * (1 - ay) + bottom * ay


def _model(n_args=2):
    @tf.function(experimental_implements=fuselite.implements("addons:DenseImageWarp"), autograph=False)
    def warp(image, flow):
        return _tf_warp(image, flow)

    @tf.function(experimental_implements=fuselite.implements("addons:DenseImageWarp"), autograph=False)
    def warp_fixed_flow(image):  # one argument: not the op's signature
        return _tf_warp(image, tf.ones(SHAPE[:3] + (2,)) * 0.3)

    if n_args == 1:
        return tf.function(lambda image: warp_fixed_flow(image), input_signature=[tf.TensorSpec(SHAPE, tf.float32)])
    return tf.function(lambda image, flow: warp(image, flow),
                       input_signature=[tf.TensorSpec(SHAPE, tf.float32), tf.TensorSpec(SHAPE[:3] + (2,), tf.float32)])


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(SHAPE).astype(np.float32), (2 * rng.standard_normal(SHAPE[:3] + (2,))).astype(np.float32)]


def test_numpy_kernel_is_the_tensorflow_body():
    xs = _inputs()
    np.testing.assert_allclose(_numpy_warp(xs, b""), _tf_warp(*map(tf.constant, xs)).numpy(), atol=1e-5)


def test_fused_into_the_custom_op_with_empty_options():
    model = _model()
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()])
    data = conv.convert()
    (record,) = conv.report.composites
    assert (record["interface"], record["status"], record["into"]) == ("addons:DenseImageWarp", "fused", ["CUSTOM"])
    m = schema.ModelT.InitFromPackedBuf(data, 0)
    (op,) = m.subgraphs[0].operators
    assert m.operatorCodes[op.opcodeIndex].customCode == b"DenseImageWarp"
    assert op.customOptions is None or len(op.customOptions) == 0  # the official stage writes "0x"
    xs = _inputs()
    (got,) = run(data, xs, kernels={"DenseImageWarp": PythonKernel(_numpy_warp, raw_options=True)}).values()
    np.testing.assert_allclose(got, model(*xs).numpy(), atol=1e-5)


def test_another_signature_is_declined_and_its_body_converted():
    model = _model(n_args=1)
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()])
    data = conv.convert()
    (record,) = conv.report.composites
    assert record["status"] == "declined" and "takes 2 arguments" in record["reason"], record
    x = _inputs()[0]
    (got,) = fuselite.runtime.run(data, [x]).values()
    np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5)
