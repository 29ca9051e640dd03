"""End-to-end tests of the gradient ops' lowering rules (``fuselite.lower.gradients``): each case takes gradients with
``tf.GradientTape`` inside the traced function (w.r.t. the inputs and the weights: weights as function inputs or as
constants, ``W``), converts with fuselite, runs on stock LiteRT (XNNPACK and builtin kernels) and compares every
gradient with TensorFlow eager (``lowering_kit.py``; floats within 1e-5 relative to each output's largest magnitude,
at least 1e-5 absolute: :func:`_relative`; integers exactly). Cases on
``tf.raw_ops.*Grad`` reach the attribute variants the tape does not write; the Keras cases take the gradients of whole
models w.r.t. their trainable variables; a tf.Module trains in place on LiteRT as in TensorFlow.
"""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from lowering_kit import ATOL, C, Case, F, I, V, W, check_case, missing_rules

import fuselite
from fuselite.runtime import interpreter, kernel_set, run

# --------------------------------------------------------------------------------------------
# helpers: a loss of the outputs, and the gradients of it
# --------------------------------------------------------------------------------------------


def _loss(y):
    """A loss whose gradient is neither constant (the gradient ops would fold away before lowering) nor all ones:
    a sign-varying weighting of the squared outputs."""
    y = tf.nest.flatten(y)[0]
    weights = tf.sin(tf.reshape(tf.range(tf.size(y), dtype=tf.float32), tf.shape(y)) * 0.7 + 0.3)
    return tf.reduce_sum(y * y * weights)


def grads(forward, n_watched=None):
    """fn(*args) -> (loss, d loss / d each of the first ``n_watched`` args (all by default))."""

    def fn(*args):
        watched = list(args if n_watched is None else args[:n_watched])
        with tf.GradientTape() as tape:
            tape.watch(watched)
            loss = _loss(forward(*args))
        return [loss, *tape.gradient(loss, watched)]

    return fn


def grads_with_weights(forward, *weight_shapes, n_watched=None):
    """As :func:`grads`, with constant weights (``W``) passed after the inputs and watched too."""

    def fn(*args):
        ws = [tf.constant(W(*s)) for s in weight_shapes]
        watched = list(args if n_watched is None else args[:n_watched]) + ws
        with tf.GradientTape() as tape:
            tape.watch(watched)
            loss = _loss(forward(*args, *ws))
        return [loss, *tape.gradient(loss, watched)]

    return fn


def _relative(got: list, expected: list) -> None:
    """Floats within 1e-5 of TensorFlow relative to each output's largest magnitude (at least 1e-5 absolute: a
    loss of 100 is good to float32's 1e-5 relative, not absolute); integers exactly."""
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if e.dtype.kind in "fc":
            scale = max(1.0, float(np.abs(e).max())) if e.size else 1.0
            np.testing.assert_allclose(g, e, rtol=0, atol=ATOL * scale, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {i}")


def G(id, fn, *specs, **options) -> Case:  # noqa: A002  (lowering_kit's C, compared by _relative)
    return C(id, fn, *specs, check=_relative, **options)


def _dense_relu(x, w, b):
    return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))


def _xent_dense(logits, labels):
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels, logits))
    return loss, tape.gradient(loss, logits)


def _xent_sparse(logits, labels):
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return loss, tape.gradient(loss, logits)


_SOFTMAX_XENT = tf.raw_ops.SoftmaxCrossEntropyWithLogits
_SPARSE_XENT = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits


def R(*shape, spec):
    """A float32 input of the static ``spec`` (None: dynamic) fed with fixed random values of ``shape``."""
    value = np.random.default_rng(sum(shape) * 7 + len(shape)).standard_normal(shape).astype(np.float32)
    return V(value, *spec)


def _labels(batch, classes):
    rng = np.random.default_rng(batch * 31 + classes)
    p = rng.uniform(0.0, 1.0, (batch, classes)).astype(np.float32)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------

CASES = [
    # -- Dense + bias + ReLU: MatMul's gradients, BiasAddGrad, ReluGrad -----------------------------------------------
    G("dense_relu", grads(_dense_relu), F(2, 4), F(4, 3), F(3), expect=["SUM", "BATCH_MATMUL"]),
    G("dense_relu_dynamic_batch", grads(_dense_relu), R(3, 4, spec=(None, 4)), F(4, 3), F(3), expect=["WHERE"]),
    G("dense_relu_const_weights", grads_with_weights(_dense_relu, (4, 3), (3,)), F(3, 4)),
    G("relu_grad_raw", lambda dy, x: tf.raw_ops.ReluGrad(gradients=dy, features=x), F(3, 5), F(3, 5)),
    G("bias_add_grad_nhwc", lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy), F(2, 3, 4, 5)),
    G("bias_add_grad_nchw", lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy, data_format="NCHW"), F(2, 3, 4, 5)),
    # -- broadcasting ops with shapes known at run time: BroadcastGradientArgs ----------------------------------------
    G("broadcast_mul_dynamic", grads(lambda a, b: a * b), R(3, 3, spec=(None, 3)), F(3)),
    G("broadcast_sub_dynamic_both", grads(lambda a, b: a - b), R(2, 1, 3, spec=(None, 1, 3)),
      R(2, 4, 1, spec=(None, 4, 1))),
    # (a dynamic dim that turns out to be 1 at run time: the gradient of a is summed over it)
    G("broadcast_add_broadcast_at_run_time", grads(lambda a, b: a + b * 2.0), R(1, 3, spec=(None, 3)),
      R(4, 3, spec=(None, 3))),
    G("broadcast_gradient_args_raw", lambda a, b: tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(a), s1=tf.shape(b)),
      R(2, 1, 3, spec=(None, 1, 3)), F(4, 1)),
    G("broadcast_gradient_args_raw_all_ones", lambda a, b: tf.raw_ops.BroadcastGradientArgs(
        s0=tf.shape(a), s1=tf.shape(b)), R(1, 1, spec=(None, None)), R(1, spec=(None,))),
    G("broadcast_gradient_args_raw_int64", lambda a, b: tf.raw_ops.BroadcastGradientArgs(
        s0=tf.shape(a, out_type=tf.int64), s1=tf.shape(b, out_type=tf.int64)), R(3, 1, 2, spec=(None, 1, None)),
      R(4, 1, spec=(None, 1))),
    # -- the cross-entropies: both outputs, stable (logits - max) --------------------------------------------------
    G("softmax_xent_tape", _xent_dense, F(3, 5), V(_labels(3, 5), 3, 5)),
    G("softmax_xent_tape_dynamic_batch", _xent_dense, R(3, 5, spec=(None, 5)), V(_labels(3, 5), None, 5)),
    G("softmax_xent_raw_large_logits", lambda x, y: _SOFTMAX_XENT(features=x * 100.0, labels=y), F(4, 6),
      V(_labels(4, 6), 4, 6)),
    G("softmax_xent_raw_broadcast_logits", lambda x, y: _SOFTMAX_XENT(features=x, labels=y), F(1, 6),
      V(_labels(4, 6), 4, 6)),
    G("sparse_xent_tape", _xent_sparse, F(3, 5), I(3, lo=0, hi=5)),
    G("sparse_xent_tape_dynamic_batch", _xent_sparse, R(3, 5, spec=(None, 5)), V(np.array([4, 0, 2], np.int32), None)),
    G("sparse_xent_raw_int64_large_logits",
      lambda x, y: _SPARSE_XENT(features=x * 100.0, labels=tf.cast(y, tf.int64)), F(4, 6), I(4, lo=0, hi=6)),
    G("sparse_xent_raw_dynamic_classes", lambda x, y: _SPARSE_XENT(features=x, labels=y), R(3, 5, spec=(None, None)),
      V(np.array([4, 0, 2], np.int32), None)),
]



def _conv(strides, padding, dilations=1):
    return lambda x, w: tf.nn.conv2d(x, w, strides, padding, dilations=dilations)


def _depthwise(strides, padding, dilations=None):
    return lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, strides, strides, 1], padding, dilations=dilations)


CASES += [
    # -- Conv2D: Conv2DBackpropFilter (CONV_2D over the batch), Conv2DBackpropInput (TRANSPOSE_CONV, or a CONV_2D of
    # the flipped filter where TRANSPOSE_CONV cannot: dilations, explicit padding), ShapeN ----------------------------
    G("conv2d_same", grads_with_weights(_conv(1, "SAME"), (3, 3, 2, 4)), F(2, 5, 5, 2), expect=["TRANSPOSE_CONV"]),
    G("conv2d_valid", grads_with_weights(_conv(1, "VALID"), (3, 3, 2, 3)), F(1, 6, 5, 2)),
    G("conv2d_same_stride2", grads_with_weights(_conv(2, "SAME"), (3, 3, 2, 4)), F(1, 6, 6, 2)),
    G("conv2d_same_stride2_odd", grads_with_weights(_conv(2, "SAME"), (3, 3, 2, 4)), F(1, 7, 5, 2)),
    G("conv2d_valid_stride_2x1_remainder", grads_with_weights(_conv([1, 2, 1, 1], "VALID"), (2, 3, 2, 4)),
      F(2, 8, 6, 2)),
    G("conv2d_same_dilation2", grads_with_weights(_conv(1, "SAME", 2), (3, 3, 2, 3)), F(1, 7, 7, 2),
      absent=["TRANSPOSE_CONV"]),
    G("conv2d_valid_dilation_2x3", grads_with_weights(_conv(1, "VALID", [2, 3]), (2, 2, 2, 3)), F(1, 6, 7, 2)),
    G("conv2d_explicit_padding", grads_with_weights(_conv(2, [[0, 0], [1, 2], [0, 1], [0, 0]]), (3, 3, 2, 3)),
      F(1, 6, 6, 2), absent=["TRANSPOSE_CONV"]),
    G("conv2d_backprop_filter_explicit_padding", lambda x, dy: tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=[3, 3, 2, 3], out_backprop=dy, strides=[1, 2, 2, 1], padding="EXPLICIT",
        explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0]), F(1, 6, 6, 2), F(1, 4, 3, 3)),
    G("conv2d_backprop_input_explicit_padding", lambda dy: tf.raw_ops.Conv2DBackpropInput(
        input_sizes=[1, 6, 6, 2], filter=W(3, 3, 2, 3), out_backprop=dy, strides=[1, 2, 2, 1], padding="EXPLICIT",
        explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0]), F(1, 4, 3, 3), absent=["TRANSPOSE_CONV"]),
    G("conv2d_dynamic_batch", grads_with_weights(_conv(1, "SAME"), (3, 3, 2, 3)), V(np.random.default_rng(5)
      .standard_normal((3, 4, 4, 2)).astype(np.float32), None, 4, 4, 2)),
    # -- DepthwiseConv2D: DepthwiseConv2dNativeBackpropFilter / BackpropInput (grouped CONV_2D) ------------------------
    G("depthwise_same", grads_with_weights(_depthwise(1, "SAME"), (3, 3, 3, 2)), F(2, 5, 5, 3)),
    G("depthwise_valid_stride2", grads_with_weights(_depthwise(2, "VALID"), (3, 3, 2, 1)), F(1, 7, 8, 2)),
    G("depthwise_same_stride2", grads_with_weights(_depthwise(2, "SAME"), (3, 3, 2, 2)), F(1, 6, 5, 2)),
    G("depthwise_same_dilation2", grads_with_weights(_depthwise(1, "SAME", [2, 2]), (3, 3, 2, 1)), F(1, 6, 6, 2)),
    G("depthwise_dynamic_batch", grads_with_weights(_depthwise(1, "SAME"), (3, 3, 2, 2)), V(np.random.default_rng(6)
      .standard_normal((3, 4, 4, 2)).astype(np.float32), None, 4, 4, 2)),
]



def _batch_norm(x, scale, offset):
    mean, var = tf.constant([0.1, -0.2, 0.3]), tf.constant([1.0, 2.0, 0.5])
    return tf.compat.v1.nn.fused_batch_norm(x, scale, offset, mean, var, epsilon=1e-3, is_training=False)[0]


def _ties(shape):
    # small integers as floats: windows with several equal maxima (the first one takes the gradient)
    return np.random.default_rng(int(np.prod(shape))).integers(0, 3, shape).astype(np.float32)


CASES += [
    # -- BatchNormalization in inference mode: FusedBatchNormGradV3 (is_training=False) -----------------------------
    G("batch_norm_inference", grads(_batch_norm), F(2, 4, 4, 3), F(3), F(3)),
    G("batch_norm_inference_const_weights", grads_with_weights(_batch_norm, (3,), (3,)), F(1, 3, 3, 3)),
    G("batch_norm_inference_dynamic_batch", grads(_batch_norm), V(np.random.default_rng(7).standard_normal(
        (2, 3, 3, 3)).astype(np.float32), None, 3, 3, 3), F(3), F(3)),
    G("fused_batch_norm_grad_v1_raw", lambda dy, x: tf.raw_ops.FusedBatchNormGrad(
        y_backprop=dy, x=x, scale=W(2), reserve_space_1=W(2), reserve_space_2=W(2, lo=0.5, hi=2.0), epsilon=1e-3,
        is_training=False)[:3], F(2, 3, 1, 2), F(2, 3, 1, 2)),
    G("fused_batch_norm_grad_v2_raw", lambda dy, x: tf.raw_ops.FusedBatchNormGradV2(
        y_backprop=dy, x=x, scale=W(2), reserve_space_1=W(2), reserve_space_2=W(2, lo=0.5, hi=2.0), epsilon=1e-2,
        is_training=False)[:3], F(1, 2, 3, 2), F(1, 2, 3, 2)),
    # -- pooling: MaxPoolGrad (the first maximum of a window), AvgPoolGrad (padding not counted) ---------------------
    G("max_pool_valid", grads(lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID")), F(2, 4, 4, 3),
      expect=["TRANSPOSE_CONV"]),
    G("max_pool_same_3x3_s2_overlapping", grads(lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME")), F(1, 5, 6, 2)),
    G("max_pool_valid_remainder", grads(lambda x: tf.nn.max_pool2d(x, [2, 3], [2, 2], "VALID")), F(1, 5, 8, 2)),
    G("max_pool_ties", grads(lambda x: tf.nn.max_pool2d(x, 3, 1, "SAME")), V(_ties((1, 4, 5, 2)), 1, 4, 5, 2)),
    G("max_pool_dynamic_batch", grads(lambda x: tf.nn.max_pool2d(x, 2, 2, "SAME")), V(np.random.default_rng(8)
      .standard_normal((3, 5, 5, 2)).astype(np.float32), None, 5, 5, 2)),
    G("max_pool_grad_v2_raw", lambda x, dy: tf.raw_ops.MaxPoolGradV2(
        orig_input=x, orig_output=tf.nn.max_pool2d(x, 2, 1, "VALID"), grad=dy, ksize=[1, 2, 2, 1],
        strides=[1, 1, 1, 1], padding="VALID"), F(1, 4, 4, 2), F(1, 3, 3, 2)),
    G("avg_pool_valid", grads(lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID")), F(2, 4, 4, 3)),
    G("avg_pool_same_3x3_s2", grads(lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME")), F(1, 5, 6, 2)),
    G("avg_pool_same_2x3_s1", grads(lambda x: tf.nn.avg_pool2d(x, [2, 3], 1, "SAME")), F(1, 4, 5, 2)),
    G("avg_pool_dynamic_batch", grads(lambda x: tf.nn.avg_pool2d(x, 2, 2, "SAME")), V(np.random.default_rng(9)
      .standard_normal((2, 5, 5, 2)).astype(np.float32), None, 5, 5, 2)),
    G("global_average_pooling", grads(lambda x: tf.reduce_mean(x, [1, 2])), F(2, 4, 4, 3)),
]



def _embedding(ids, table):
    # the gradient of a gather is IndexedSlices: a dense update makes it UnsortedSegmentSum
    return tf.gather(table, ids) * 1.5


def _embedding_dense_grad(ids, table):
    with tf.GradientTape() as tape:
        tape.watch(table)
        loss = _loss(_embedding(ids, table))
    return loss, tf.convert_to_tensor(tape.gradient(loss, table))


def _act(name, f, x_spec):
    return G(f"{name}_grad", grads(f), x_spec)


_DROPOUT = keras.layers.Dropout(0.5)
_UP_BILINEAR = keras.layers.UpSampling2D(2, interpolation="bilinear")


def _mse(pred, target):
    return tf.reduce_mean(tf.square(pred - target))


CASES += [
    # -- activations: the tape's *Grad ops -------------------------------------------------------------------------
    _act("relu", tf.nn.relu, F(3, 6)),
    _act("relu6", tf.nn.relu6, F(3, 6, lo=-8, hi=8)),
    _act("elu", tf.nn.elu, F(3, 6)),
    _act("selu", tf.nn.selu, F(3, 6)),
    _act("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.1), F(3, 6)),
    _act("sigmoid", tf.sigmoid, F(3, 6)),
    _act("tanh", tf.tanh, F(3, 6)),
    _act("softplus", tf.nn.softplus, F(3, 6)),  # (TensorFlow's gradient is a sigmoid, no SoftplusGrad)
    _act("softsign", tf.nn.softsign, F(3, 6)),
    _act("rsqrt", tf.math.rsqrt, F(3, 6, lo=0.5, hi=3.0)),
    _act("sqrt", tf.sqrt, F(3, 6, lo=0.5, hi=3.0)),
    _act("reciprocal", tf.math.reciprocal, F(3, 6, lo=0.5, hi=3.0)),
    _act("softmax", tf.nn.softmax, F(3, 6)),
    G("relu6_grad_raw_at_the_kinks", lambda dy: tf.raw_ops.Relu6Grad(gradients=dy, features=tf.constant(
        [[-1.0, 0.0, 3.0, 6.0, 7.0]])), F(1, 5)),
    G("leaky_relu_grad_raw", lambda dy, x: tf.raw_ops.LeakyReluGrad(gradients=dy, features=x, alpha=0.3), F(2, 5),
      F(2, 5)),
    G("softplus_grad_raw", lambda dy, x: tf.raw_ops.SoftplusGrad(gradients=dy, features=x), F(2, 5), F(2, 5)),
    G("softsign_grad_raw", lambda dy, x: tf.raw_ops.SoftsignGrad(gradients=dy, features=x), F(2, 5), F(2, 5)),
    G("elu_grad_raw", lambda dy, y: tf.raw_ops.EluGrad(gradients=dy, outputs=y), F(2, 5), F(2, 5, lo=-1, hi=2)),
    G("selu_grad_raw", lambda dy, y: tf.raw_ops.SeluGrad(gradients=dy, outputs=y), F(2, 5), F(2, 5, lo=-1.7, hi=2)),
    G("sigmoid_grad_raw", lambda y, dy: tf.raw_ops.SigmoidGrad(y=y, dy=dy), F(2, 5, lo=0, hi=1), F(2, 5)),
    G("tanh_grad_raw", lambda y, dy: tf.raw_ops.TanhGrad(y=y, dy=dy), F(2, 5, lo=-1, hi=1), F(2, 5)),
    G("rsqrt_grad_raw", lambda y, dy: tf.raw_ops.RsqrtGrad(y=y, dy=dy), F(2, 5, lo=0.2, hi=2), F(2, 5)),
    G("sqrt_grad_raw", lambda y, dy: tf.raw_ops.SqrtGrad(y=y, dy=dy), F(2, 5, lo=0.2, hi=2), F(2, 5)),
    G("reciprocal_grad_raw", lambda y, dy: tf.raw_ops.ReciprocalGrad(y=y, dy=dy), F(2, 5, lo=0.2, hi=2), F(2, 5)),
    G("inv_grad_raw", lambda y, dy: tf.raw_ops.InvGrad(y=y, dy=dy), F(2, 5, lo=0.2, hi=2), F(2, 5)),
    # -- losses, embedding, dropout, flatten --------------------------------------------------------------------
    G("mse", grads(_mse), F(4, 3), F(4, 3)),
    G("mse_dynamic_batch", grads(_mse), V(np.random.default_rng(10).standard_normal((3, 2)).astype(np.float32),
                                          None, 2), V(np.zeros((3, 2), np.float32), None, 2)),
    G("embedding_dense_gradient", _embedding_dense_grad, V(np.array([1, 4, 1, 0, 7], np.int32), 5),
      V(np.random.default_rng(11).standard_normal((8, 3)).astype(np.float32), 8, 3),
      expect=["UNSORTED_SEGMENT_SUM"]),
    G("embedding_dense_gradient_2d_ids", _embedding_dense_grad, V(np.array([[1, 4], [1, 1]], np.int32), 2, 2),
      V(np.random.default_rng(12).standard_normal((6, 2)).astype(np.float32), 6, 2)),
    G("concat_dynamic_batch", grads(lambda a, b: tf.concat([a, b * 2.0], -1)), R(3, 2, spec=(None, 2)),
      R(3, 3, spec=(None, 3)), expect=["CUMSUM"]),
    G("concat_offset_raw", lambda a, b, c: tf.raw_ops.ConcatOffset(
        concat_dim=1, shape=[tf.shape(a), tf.shape(b), tf.shape(c)]), R(2, 1, spec=(None, 1)), R(2, 3, spec=(None, 3)),
      R(2, 2, spec=(None, 2))),
    # -- slicing: StridedSliceGrad ----------------------------------------------------------------------------
    G("slice_range", grads(lambda x: x[:, 1:3]), F(2, 5)),
    G("slice_strided", grads(lambda x: x[:, ::2, 1:]), F(2, 5, 3)),
    G("slice_strided_remainder", grads(lambda x: x[:, 1::3]), F(2, 8)),
    G("slice_reversed", grads(lambda x: x[:, ::-2]), F(2, 5)),
    G("slice_reversed_range", grads(lambda x: x[:, 3:0:-1]), F(2, 5)),
    G("slice_shrink_dynamic_batch", grads(lambda x: x[:, 0] * 2.0 + x[:, -1]), R(3, 4, spec=(None, 4))),
    G("slice_ellipsis_new_axis", grads(lambda x: x[..., tf.newaxis, 1:2] * 3.0), F(2, 3, 4)),
    G("slice_ellipsis_dynamic_batch", grads(lambda x: x[..., 1, ::2]), R(2, 3, 5, spec=(None, 3, 5))),
    # -- resizing (UpSampling2D, tf.image.resize): ResizeBilinearGrad, ResizeNearestNeighborGrad ------------------
    G("upsampling2d_bilinear", grads(lambda x: _UP_BILINEAR(x)), F(2, 3, 4, 2)),
    G("upsampling2d_bilinear_dynamic_batch", grads(lambda x: _UP_BILINEAR(x)), R(2, 3, 3, 2, spec=(None, 3, 3, 2))),
    *[G(f"resize_{kind}_{'align' if align else 'half' if half else 'legacy'}_{h}x{w}",
        grads(lambda x, kind=kind, h=h, w=w, align=align, half=half: (
            tf.compat.v1.image.resize_bilinear if kind == "bilinear" else tf.compat.v1.image.resize_nearest_neighbor)(
            x, [h, w], align_corners=align, half_pixel_centers=half)), F(1, 3, 5, 2))
      for kind in ("bilinear", "nearest") for align, half in ((False, False), (True, False), (False, True))
      for h, w in ((7, 4), (2, 9))],
    G("dense_dropout_inference_flatten", grads_with_weights(
        lambda x, w: tf.matmul(_DROPOUT(tf.reshape(x, [-1, 12]), training=False), w),
        (12, 3)), F(2, 2, 2, 3)),
    # -- trained filters (weights as inputs): the forward ops take them too ------------------------------------------
    G("conv2d_filter_input", grads(_conv(2, "SAME")), F(1, 6, 6, 2), F(3, 3, 2, 3), absent=["TRANSPOSE_CONV"]),
    G("depthwise_filter_input", grads(_depthwise(1, "VALID")), F(1, 5, 5, 2), F(3, 3, 2, 2)),
]



def _sigmoid_xent(logits, labels):
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)


# -- Keras models people fine-tune on device: the tape's gradients w.r.t. the input and every trainable weight --------

_KERAS: dict = {}


def _keras(name: str, build, loss, watch_input=True):
    """A case function: ``loss(model(x, training=False))`` and its gradients (the model is built once, outside
    tf.function; its variables are frozen into the converted model as constants)."""

    def fn(x, target):
        if name not in _KERAS:
            with tf.init_scope():
                keras.utils.set_random_seed(len(name))
                _KERAS[name] = build()
        model = _KERAS[name]
        with tf.GradientTape() as tape:
            if watch_input:
                tape.watch(x)
            value = loss(target, model(x, training=False))
        watched = ([x] if watch_input else []) + list(model.trainable_variables)
        return [value, *(tf.convert_to_tensor(g) for g in tape.gradient(value, watched))]

    return fn


def _cnn():
    return keras.Sequential([
        keras.Input((6, 6, 2)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.DepthwiseConv2D(3, strides=2, padding="same", activation="relu6"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(2, padding="same"),
        keras.layers.Conv2D(3, 1),
        keras.layers.AveragePooling2D(1),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(3),
    ])


def _mlp():
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(4, activation="elu"), keras.layers.Dense(2, activation="sigmoid")])


def _gap_head():
    return keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Conv2D(2, 2, activation="selu"),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax")])


def _embedding_model():
    return keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(10, 3),
                             keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])


_SPARSE_CCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

CASES += [
    # -- losses: sigmoid cross-entropy (Log1p), Keras' losses -------------------------------------------------------
    G("sigmoid_cross_entropy", grads(_sigmoid_xent, 1), F(3, 4), V(_labels(3, 4), 3, 4)),
    G("keras_cnn_sparse_categorical_crossentropy", _keras("cnn", _cnn, _SPARSE_CCE), F(2, 6, 6, 2),
      V(np.array([0, 2], np.int32), 2)),
    G("keras_mlp_binary_crossentropy", _keras("mlp", _mlp, keras.losses.BinaryCrossentropy()), F(3, 5),
      V(np.array([[0, 1], [1, 1], [0, 0]], np.float32), 3, 2)),
    G("keras_mlp_mse_dynamic_batch", _keras("mlp", _mlp, keras.losses.MeanSquaredError()),
      V(np.random.default_rng(13).standard_normal((3, 5)).astype(np.float32), None, 5),
      V(np.random.default_rng(14).standard_normal((3, 2)).astype(np.float32), None, 2)),
    G("keras_gap_head_categorical_crossentropy", _keras("gap", _gap_head, keras.losses.CategoricalCrossentropy()),
      F(2, 4, 4, 3), V(np.eye(3, dtype=np.float32)[[1, 2]], 2, 3)),
    G("keras_embedding_mse", _keras("embedding", _embedding_model, keras.losses.MeanSquaredError(),
                                    watch_input=False), I(2, 4, lo=0, hi=10), F(2, 1)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_rule(case: Case):
    check_case(case)


def test_every_rule_of_the_family_is_exercised():
    assert missing_rules(CASES, ["fuselite.lower.gradients"]) == []


def _convert_fn(fn, *specs) -> bytes:
    cf = tf.function(fn, autograph=False).get_concrete_function(*specs)
    return fuselite.Converter.from_concrete_functions([cf]).convert()


@pytest.mark.parametrize("builtin", [False, True], ids=["xnnpack", "builtin"])
def test_a_label_out_of_range_gives_nan_rows(builtin):
    # TensorFlow's CPU kernel raises on such a label (its GPU kernel and the official converter's lowering give
    # NaN): the rows of the labels in range are TensorFlow's, the others NaN, loss and gradient alike
    model = _convert_fn(lambda x, y: _SPARSE_XENT(features=x, labels=y), tf.TensorSpec((4, 5)),
                        tf.TensorSpec((4,), tf.int32))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    labels = np.array([1, 5, -1, 4], np.int32)
    out = run(model, [x, labels], builtin_kernels=builtin)
    loss, backprop = out["output_0"], out["output_1"]
    ok = [0, 3]
    want_loss, want_backprop = _SPARSE_XENT(features=x[ok], labels=labels[ok])
    np.testing.assert_allclose(loss[ok], want_loss, rtol=0, atol=1e-6)
    np.testing.assert_allclose(backprop[ok], want_backprop, rtol=0, atol=1e-6)
    assert np.isnan(loss[[1, 2]]).all() and np.isnan(backprop[[1, 2]]).all()


def _bn_grad_training(dy, x):
    return tf.raw_ops.FusedBatchNormGradV3(y_backprop=dy, x=x, scale=tf.ones([2]), reserve_space_1=tf.zeros([2]),
                                           reserve_space_2=tf.ones([2]), reserve_space_3=tf.zeros([0]),
                                           is_training=True)[0]


_NHWC4 = tf.TensorSpec((1, 4, 4, 2))
REFUSED = [
    ("batch_norm_training", _bn_grad_training, (_NHWC4, _NHWC4), "FusedBatchNormGradV3 .*training-mode"),
    ("conv_filter_nchw", lambda x, dy: tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=[2, 2, 1, 3], out_backprop=dy, strides=[1, 1, 1, 1], padding="VALID",
        data_format="NCHW"), (tf.TensorSpec((1, 1, 4, 4)), tf.TensorSpec((1, 3, 3, 3))),
     "Conv2DBackpropFilter .*data_format NCHW"),
    ("conv_filter_wrong_gradient_size", lambda x, dy: tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=[3, 3, 2, 3], out_backprop=dy, strides=[1, 2, 2, 1], padding="VALID"),
     (_NHWC4, tf.TensorSpec((1, 2, 1, 3))), "Conv2DBackpropFilter .*does not match an input of 4"),
    ("max_pool_grad_dynamic_spatial", lambda x: tf.raw_ops.MaxPoolGrad(
        orig_input=x, orig_output=tf.nn.max_pool2d(x, 2, 2, "VALID"), grad=tf.nn.max_pool2d(x, 2, 2, "VALID"),
        ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"), (tf.TensorSpec((1, None, 4, 2)),),
     "MaxPoolGrad .*spatial sizes .* must be static"),
    ("bias_add_grad_unknown_rank", lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy), (tf.TensorSpec(None),),
     "BiasAddGrad .*rank of the gradient must be known"),
    ("broadcast_gradient_args_unknown_rank", lambda a, b: tf.raw_ops.BroadcastGradientArgs(
        s0=tf.shape(a), s1=tf.shape(b)), (tf.TensorSpec(None), tf.TensorSpec((3,))),
     "BroadcastGradientArgs .*ranks of both operands must be known"),
    ("relu_grad_int32", lambda dy, x: tf.raw_ops.ReluGrad(gradients=dy, features=x),
     (tf.TensorSpec((3,), tf.int32), tf.TensorSpec((3,), tf.int32)), "ReluGrad .*take float32, got int32"),
]


@pytest.mark.parametrize("fn, specs, message", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_what_cannot_be_expressed_is_a_conversion_error_naming_the_op(fn, specs, message):
    with pytest.raises(fuselite.ConversionError) as info:
        _convert_fn(fn, *specs)
    assert any(re.search(message, p) for p in info.value.problems), info.value.problems


class _ConvClassifier(tf.Module):
    """A small CNN whose weights are resource variables that ``train`` updates in place (SGD): the gradient ops
    with weights that are not constants (CONV_2D of a variable filter, the filter gradients, batch norm's scale)."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.conv = tf.Variable(rng.standard_normal((3, 3, 2, 4)).astype(np.float32) * 0.3)
        self.depthwise = tf.Variable(rng.standard_normal((3, 3, 4, 1)).astype(np.float32) * 0.3)
        self.gamma, self.beta = tf.Variable(np.ones(4, np.float32)), tf.Variable(np.zeros(4, np.float32))
        self.dense = tf.Variable(rng.standard_normal((16, 3)).astype(np.float32) * 0.3)
        self.bias = tf.Variable(np.zeros(3, np.float32))

    @tf.function(input_signature=[tf.TensorSpec((2, 6, 6, 2)), tf.TensorSpec((2,), tf.int32)])
    def train(self, x, y):
        weights = [self.conv, self.depthwise, self.gamma, self.beta, self.dense, self.bias]
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, self.conv, 1, "SAME"))
            h = tf.nn.relu6(tf.nn.depthwise_conv2d(h, self.depthwise, [1, 2, 2, 1], "SAME"))
            h = tf.compat.v1.nn.fused_batch_norm(h, self.gamma, self.beta, tf.constant([0.1] * 4),
                                                 tf.constant([1.5] * 4), is_training=False)[0]
            h = tf.nn.avg_pool2d(tf.nn.max_pool2d(h, 2, 1, "SAME"), 2, 1, "VALID")
            logits = tf.nn.bias_add(tf.matmul(tf.reshape(h, [2, 16]), self.dense), self.bias)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        for w, g in zip(weights, tape.gradient(loss, weights), strict=True):
            w.assign_sub(0.1 * g)
        return {"loss": loss}


@pytest.mark.parametrize("builtin", [False, True], ids=["xnnpack", "builtin"])
def test_a_cnn_trains_in_place_on_litert_as_in_tensorflow(builtin):
    module = _ConvClassifier()  # (kept alive: the traced method holds it weakly)
    model = fuselite.Converter.from_concrete_functions([module.train.get_concrete_function()]).convert()
    runner = interpreter(model, **kernel_set(builtin)).get_signature_runner("serving_default")
    x = np.random.default_rng(1).standard_normal((2, 6, 6, 2)).astype(np.float32)
    y = np.array([0, 2], np.int32)
    reference = _ConvClassifier()
    got = [float(runner(x=x, y=y)["loss"]) for _ in range(10)]
    want = [float(reference.train(x, y)["loss"]) for _ in range(10)]
    assert want[-1] < want[0] * 0.9  # it learns
    np.testing.assert_allclose(got, want, rtol=1e-5)
