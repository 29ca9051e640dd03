"""End-to-end tests of every lowering rule: tf.function -> fuselite -> stock LiteRT vs TF eager.

Each case is ``Case(id, fn, specs, atol, expect)``: ``fn`` is traced as a ``tf.function``
for the input ``specs`` (shapes with ``None`` for dynamic dims, fed as size 1), converted
with fuselite, run on the LiteRT interpreter and compared with TF eager.

* float results: ``|tflite - tf| <= atol`` with ``atol = 1e-5`` unless a case says why not;
* integer / bool results: exact equality (and equal dtypes everywhere);
* every op of the converted model must be a TFLite builtin (no CUSTOM / Flex ops);
* ``expect`` lists builtins that must appear (e.g. a fused pattern such as HARD_SWISH).

Weights (``W``) and inputs are drawn from RNGs seeded by the case id, so every run sees the
same numbers.
"""

from __future__ import annotations

import os
import zlib
from typing import Any, Callable, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter

import fuselite
from fuselite.runtime import run

ATOL = 1e-5

# --------------------------------------------------------------------------------------------
# input specs and weights
# --------------------------------------------------------------------------------------------


class In(NamedTuple):
    shape: tuple
    dtype: Any = tf.float32
    lo: float | None = None  # uniform [lo, hi) if given, standard normal otherwise (floats)
    hi: float | None = None
    nonzero: bool = False  # ints: never 0 (divisors)


def F(*shape, lo=None, hi=None):
    """A float32 input."""
    return In(tuple(shape), tf.float32, lo, hi)


def I(*shape, lo=-5, hi=6, nonzero=False):  # noqa: E743
    """An int32 input, uniform in [lo, hi)."""
    return In(tuple(shape), tf.int32, lo, hi, nonzero)


def _value(spec: In, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(1 if d is None else d for d in spec.shape)
    if spec.dtype == tf.int32:
        v = rng.integers(spec.lo, spec.hi, size=shape).astype(np.int32)
        if spec.nonzero:
            v[v == 0] = 1
        return v
    if spec.lo is None:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.uniform(spec.lo, spec.hi, size=shape).astype(np.float32)


_W = {"seed": 0, "n": 0}


def W(*shape, lo=None, hi=None):
    """A constant float32 weight: the k-th W() call of a case gets the same values every time
    the case's function runs (tracing for fuselite and the eager reference run)."""
    rng = np.random.default_rng([_W["seed"], _W["n"]])
    _W["n"] += 1
    if lo is None:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def _reset_weights(seed: int) -> None:
    _W.update(seed=seed, n=0)


class Case(NamedTuple):
    id: str
    fn: Callable
    specs: tuple
    atol: float = ATOL
    expect: tuple = ()  # builtin op names that must appear in the converted model
    marks: tuple = ()


def C(id, fn, *specs, atol=ATOL, expect=(), marks=()):
    return Case(id, fn, tuple(specs), atol, tuple(expect), tuple(marks))


# --------------------------------------------------------------------------------------------
# control flow helpers (need statements)
# --------------------------------------------------------------------------------------------


def _while_fixed(x):
    def body(i, acc):
        return i + 1, acc * 0.5 + tf.sin(acc)

    _, out = tf.while_loop(lambda i, acc: i < 3, body, (tf.constant(0), x))
    return out


def _while_input_bound(x, n):
    def body(i, acc):
        return i + 1, acc + tf.cast(i, tf.float32) * x

    i, out = tf.while_loop(lambda i, acc: i < n, body, (tf.constant(0), tf.zeros_like(x)))
    return out, i


def _cond(threshold):
    def f(x):
        return tf.cond(tf.reduce_sum(x) > threshold, lambda: x * 2.0 + 1.0, lambda: tf.exp(x) - x)

    return f


def _gelu_tanh_keras_style(x):
    # the same function written as Keras/BERT spell it
    c = np.float32(np.sqrt(2.0 / np.pi))
    return 0.5 * x * (1.0 + tf.tanh(c * (x + 0.044715 * x * x * x)))


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------

_rb = tf.compat.v1.image.resize_bilinear
_rn = tf.compat.v1.image.resize_nearest_neighbor

CASES = [
    # -- MatMul -----------------------------------------------------------------------------
    C("matmul", lambda x: tf.matmul(x, W(4, 3)), F(2, 4), expect=["FULLY_CONNECTED"]),
    C("matmul_transpose_a", lambda x: tf.matmul(x, W(4, 3), transpose_a=True), F(4, 2)),
    C("matmul_transpose_b", lambda x: tf.matmul(x, W(3, 4), transpose_b=True), F(2, 4)),
    C("matmul_transpose_ab", lambda x: tf.matmul(x, W(3, 4), transpose_a=True, transpose_b=True), F(4, 2)),
    C("matmul_dynamic_rhs", lambda a, b: tf.matmul(a, b), F(2, 4), F(4, 3), expect=["BATCH_MATMUL"]),
    C("matmul_dynamic_rhs_ta_tb", lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True), F(4, 2), F(3, 4)),
    C("matmul_bias_relu", lambda x: tf.nn.relu(tf.nn.bias_add(tf.matmul(x, W(4, 3)), W(3))), F(2, 4)),
    # -- BatchMatMulV2 ----------------------------------------------------------------------
    C("bmm", lambda a, b: tf.matmul(a, b), F(2, 3, 4), F(2, 4, 5)),
    C("bmm_adj_x", lambda a, b: tf.matmul(a, b, adjoint_a=True), F(2, 4, 3), F(2, 4, 5)),
    C("bmm_adj_y", lambda a, b: tf.matmul(a, b, adjoint_b=True), F(2, 3, 4), F(2, 5, 4)),
    C("bmm_adj_xy", lambda a, b: tf.matmul(a, b, adjoint_a=True, adjoint_b=True), F(2, 4, 3), F(2, 5, 4)),
    C("bmm_broadcast", lambda a, b: tf.matmul(a, b), F(2, 1, 3, 4), F(3, 4, 5)),
    C("bmm_const_rank2_rhs", lambda a: tf.matmul(a, W(4, 5)), F(2, 3, 4), expect=["FULLY_CONNECTED"]),
    C("bmm_const_rank2_rhs_adj_y", lambda a: tf.matmul(a, W(5, 4), adjoint_b=True), F(2, 3, 4)),
    C("bmm_const_rank2_rhs_adj_x", lambda a: tf.matmul(a, W(4, 5), adjoint_a=True), F(2, 4, 3)),
    C("bmm_const_rank2_rhs_rank4", lambda a: tf.matmul(a, W(4, 5)), F(2, 2, 3, 4)),
    # -- BiasAdd ----------------------------------------------------------------------------
    C("bias_add", lambda x: tf.nn.bias_add(x, W(4)), F(2, 3, 4)),
    C("bias_add_nonconst", lambda x, b: tf.nn.bias_add(x, b), F(2, 3, 4), F(4)),
    # -- Conv2D -----------------------------------------------------------------------------
    C("conv2d_same", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "SAME"), F(1, 5, 5, 2), expect=["CONV_2D"]),
    C("conv2d_valid", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "VALID"), F(1, 5, 5, 2)),
    C("conv2d_same_stride2", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 4), 2, "SAME"), F(1, 6, 6, 2)),
    C("conv2d_valid_stride_2x1", lambda x: tf.nn.conv2d(x, W(2, 3, 2, 4), [1, 2, 1, 1], "VALID"), F(2, 7, 6, 2)),
    C("conv2d_dilation2_same", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 3), 1, "SAME", dilations=2), F(1, 7, 7, 2)),
    C("conv2d_dilation2_valid", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 3), 1, "VALID", dilations=2), F(1, 7, 7, 2)),
    C("conv2d_bias_relu6",
      lambda x: tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "SAME"), W(4))), F(1, 5, 5, 2, lo=-4, hi=4)),
    # -- DepthwiseConv2dNative --------------------------------------------------------------
    C("depthwise_mult2_same", lambda x: tf.nn.depthwise_conv2d(x, W(3, 3, 3, 2), [1, 1, 1, 1], "SAME"), F(1, 5, 5, 3),
      expect=["DEPTHWISE_CONV_2D"]),
    C("depthwise_mult2_valid_stride2", lambda x: tf.nn.depthwise_conv2d(x, W(3, 3, 3, 2), [1, 2, 2, 1], "VALID"),
      F(1, 7, 7, 3)),
    C("depthwise_mult1_dilation2",
      lambda x: tf.nn.depthwise_conv2d(x, W(3, 3, 2, 1), [1, 1, 1, 1], "SAME", dilations=[2, 2]), F(1, 6, 6, 2)),
    # -- Conv2DBackpropInput ----------------------------------------------------------------
    C("conv2d_transpose_same_s2",
      lambda x: tf.nn.conv2d_transpose(x, W(3, 3, 4, 2), [1, 8, 8, 4], strides=2, padding="SAME"), F(1, 4, 4, 2),
      expect=["TRANSPOSE_CONV"]),
    C("conv2d_transpose_valid_s2",
      lambda x: tf.nn.conv2d_transpose(x, W(3, 3, 4, 2), [1, 9, 9, 4], strides=2, padding="VALID"), F(1, 4, 4, 2)),
    C("conv2d_transpose_same_s2_bias_relu",
      lambda x: tf.nn.relu(tf.nn.bias_add(
          tf.nn.conv2d_transpose(x, W(2, 2, 3, 2), [1, 6, 6, 3], strides=2, padding="SAME"), W(3))), F(1, 3, 3, 2)),
    # -- FusedBatchNormV3 (inference) -------------------------------------------------------
    C("fused_batch_norm",
      lambda x: tf.compat.v1.nn.fused_batch_norm(x, W(4), W(4), W(4), W(4, lo=0.5, hi=2.0), epsilon=1e-3,
                                                 is_training=False)[0], F(1, 3, 3, 4)),
    C("conv_fused_batch_norm",
      lambda x: tf.compat.v1.nn.fused_batch_norm(tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "SAME"), W(4), W(4), W(4),
                                                 W(4, lo=0.5, hi=2.0), is_training=False)[0], F(1, 4, 4, 2)),
    # -- pooling ----------------------------------------------------------------------------
    C("max_pool_valid", lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), F(1, 4, 4, 3)),
    C("max_pool_same_3x3_s2", lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"), F(2, 5, 5, 3)),
    C("avg_pool_valid", lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID"), F(1, 4, 4, 3)),
    C("avg_pool_same_3x3_s2", lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), F(2, 5, 5, 3)),
    C("avg_pool_2x3_s1", lambda x: tf.nn.avg_pool2d(x, [2, 3], [1, 1], "VALID"), F(1, 4, 5, 2)),
    # -- reductions -------------------------------------------------------------------------
    *[C(f"{name}_axes{''.join(map(str, axes))}_keep{int(keep)}",
        (lambda f, axes, keep: lambda x: f(x, axis=axes, keepdims=keep))(f, axes, keep), F(2, 3, 4))
      for name, f in [("mean", tf.reduce_mean), ("sum", tf.reduce_sum), ("max", tf.reduce_max),
                      ("min", tf.reduce_min), ("prod", tf.reduce_prod)]
      for axes, keep in [([1], False), ([0, 2], True), ([-1], True), ([0, 2], False)]],
    C("sum_all", lambda x: tf.reduce_sum(x), F(2, 3, 4)),
    C("mean_hw_keep", lambda x: tf.reduce_mean(x, [1, 2], keepdims=True), F(1, 3, 3, 4)),
    C("sum_int32", lambda x: tf.reduce_sum(x, 1), I(2, 3, 4)),
    C("max_int32_keep", lambda x: tf.reduce_max(x, [0, 2], keepdims=True), I(2, 3, 4)),
    # -- activations ------------------------------------------------------------------------
    C("relu", lambda x: tf.nn.relu(x), F(2, 8)),
    C("relu6", lambda x: tf.nn.relu6(x), F(2, 8, lo=-8, hi=8)),
    C("leaky_relu", lambda x: tf.nn.leaky_relu(x, alpha=0.1), F(2, 8)),
    C("elu", lambda x: tf.nn.elu(x), F(2, 8)),
    C("selu", lambda x: tf.nn.selu(x), F(2, 8)),
    C("sigmoid", lambda x: tf.sigmoid(x), F(2, 8, lo=-6, hi=6)),
    C("tanh", lambda x: tf.tanh(x), F(2, 8, lo=-4, hi=4)),
    C("tanh_after_add", lambda x: tf.tanh(x + W(8)), F(2, 8)),
    C("tanh_after_dense", lambda x: tf.tanh(tf.matmul(x, W(4, 3)) + W(3)), F(2, 4)),
    C("relu_after_add", lambda x, y: tf.nn.relu(x + y), F(2, 8), F(8)),
    C("softmax", lambda x: tf.nn.softmax(x), F(2, 3, 8)),
    C("log_softmax", lambda x: tf.nn.log_softmax(x), F(2, 8)),
    C("gelu_exact", lambda x: tf.nn.gelu(x, approximate=False), F(2, 8, lo=-5, hi=5), expect=["GELU"]),
    C("gelu_tanh", lambda x: tf.nn.gelu(x, approximate=True), F(2, 8, lo=-5, hi=5), expect=["GELU"]),
    C("gelu_tanh_keras_style", _gelu_tanh_keras_style, F(2, 8, lo=-5, hi=5), expect=["GELU"]),
    C("swish", lambda x: x * tf.sigmoid(x), F(2, 8, lo=-6, hi=6)),
    C("hard_swish", lambda x: x * tf.nn.relu6(x + 3.0) / 6.0, F(2, 8, lo=-5, hi=5), expect=["HARD_SWISH"]),
    C("hard_swish_mul_sixth", lambda x: x * (tf.nn.relu6(x + 3.0) * (1.0 / 6.0)), F(2, 8, lo=-5, hi=5),
      expect=["HARD_SWISH"]),
    # -- elementwise binary, with broadcasting ----------------------------------------------
    C("add_bcast", lambda a, b: a + b, F(2, 3, 4), F(3, 1)),
    C("sub_bcast", lambda a, b: a - b, F(2, 3, 4), F(4)),
    C("mul_bcast", lambda a, b: a * b, F(2, 3, 4), F(2, 1, 4)),
    C("realdiv_bcast", lambda a, b: a / b, F(2, 3, 4), F(3, 1, lo=0.5, hi=2.0)),
    C("maximum_bcast", lambda a, b: tf.maximum(a, b), F(2, 3, 4), F(4)),
    C("minimum_bcast", lambda a, b: tf.minimum(a, b), F(2, 3, 4), F(1, 3, 1)),
    C("pow_bcast", lambda a, b: tf.pow(a, b), F(2, 3, 4, lo=0.5, hi=2.0), F(4, lo=-2.0, hi=2.0)),
    C("squared_difference_bcast", lambda a, b: tf.math.squared_difference(a, b), F(2, 3, 4), F(3, 4)),
    C("floordiv_float_bcast", lambda a, b: tf.math.floordiv(a, b), F(2, 3, 4, lo=-5, hi=5), F(4, lo=0.5, hi=2.0)),
    C("floormod_float_bcast", lambda a, b: tf.math.floormod(a, b), F(2, 3, 4, lo=-5, hi=5), F(4, lo=0.5, hi=2.0)),
    C("floordiv_int_bcast", lambda a, b: tf.math.floordiv(a, b), I(2, 3, 4, lo=-10, hi=10),
      I(4, lo=-4, hi=5, nonzero=True)),
    C("floormod_int_bcast", lambda a, b: tf.math.floormod(a, b), I(2, 3, 4, lo=-10, hi=10),
      I(4, lo=-4, hi=5, nonzero=True)),
    C("add_int", lambda a, b: a + b, I(2, 3), I(3)),
    C("mul_int", lambda a, b: a * b, I(2, 3), I(2, 1)),
    C("sub_scalar_const", lambda a: 3.0 - a, F(2, 3)),
    C("div_scalar_const", lambda a: a / 4.0, F(2, 3)),
    # -- comparisons (ints give ties) -------------------------------------------------------
    *[C(f"{name}_int_bcast", (lambda f: lambda a, b: f(a, b))(f), I(2, 3, lo=0, hi=3), I(3, lo=0, hi=3))
      for name, f in [("less", tf.less), ("greater", tf.greater), ("equal", tf.equal), ("not_equal", tf.not_equal),
                      ("less_equal", tf.less_equal), ("greater_equal", tf.greater_equal)]],
    *[C(f"{name}_float_bcast", (lambda f: lambda a, b: f(a, b))(f), F(2, 3, 4), F(4))
      for name, f in [("less", tf.less), ("greater", tf.greater), ("less_equal", tf.less_equal),
                      ("greater_equal", tf.greater_equal)]],
    C("equal_float_ties", lambda a, b: (tf.equal(tf.round(a), tf.round(b)), tf.not_equal(tf.round(a), tf.round(b))),
      F(3, 4), F(4)),
    # -- shape / data movement --------------------------------------------------------------
    C("reshape", lambda x: tf.reshape(x, [4, 6]), F(2, 3, 4)),
    C("reshape_minus1", lambda x: tf.reshape(x, [-1, 2]), F(2, 3, 4)),
    C("reshape_int", lambda x: tf.reshape(x, [3, 2, 4]), I(2, 3, 4)),
    C("transpose", lambda x: tf.transpose(x, [2, 0, 1]), F(2, 3, 4)),
    C("transpose_4d", lambda x: tf.transpose(x, [0, 3, 1, 2]), F(1, 2, 3, 4)),
    C("concat_axis1", lambda a, b: tf.concat([a, b], axis=1), F(2, 3, 4), F(2, 2, 4)),
    C("concat_neg_axis_3", lambda a, b, c: tf.concat([a, b, c], axis=-1), F(2, 3), F(2, 1), F(2, 2)),
    C("concat_int", lambda a, b: tf.concat([a, b], axis=0), I(2, 3), I(1, 3)),
    C("split", lambda x: tf.split(x, 3, axis=1), F(2, 6, 4)),
    C("split_neg_axis", lambda x: tf.split(x, 2, axis=-1), F(2, 3, 4)),
    C("split_v", lambda x: tf.split(x, [1, 3, 2], axis=-1), F(2, 6)),
    C("split_v_minus1", lambda x: tf.split(x, [2, -1], axis=0), F(5, 3)),
    C("slice", lambda x: tf.slice(x, [0, 1, 1], [2, 2, -1]), F(2, 3, 4)),
    C("slice_int", lambda x: tf.slice(x, [1, 0], [1, 2]), I(2, 3)),
    C("strided_slice_begin_end_mask", lambda x: x[1:, ::2], F(3, 5, 2)),
    C("strided_slice_shrink", lambda x: x[:, 1], F(3, 5, 2)),
    C("strided_slice_shrink_last", lambda x: x[-1], F(3, 5, 2)),
    C("strided_slice_ellipsis", lambda x: x[..., 1:3], F(2, 3, 5)),
    C("strided_slice_ellipsis_shrink", lambda x: x[0, ..., 2], F(2, 3, 4, 5)),
    C("strided_slice_new_axis", lambda x: x[:, tf.newaxis, 1:], F(2, 3, 4)),
    C("strided_slice_new_axis_ellipsis", lambda x: x[..., tf.newaxis, ::2], F(2, 3, 4)),
    C("strided_slice_negative_strides", lambda x: x[::-1, 3:0:-1], F(3, 5, 2)),
    C("strided_slice_negative_stride2", lambda x: x[:, ::-2, 1], F(2, 5, 3)),
    C("strided_slice_explicit_masks",
      lambda x: tf.strided_slice(x, [0, 1, 0], [0, 3, 2], [1, 1, 1], begin_mask=0b101, end_mask=0b001,
                                 shrink_axis_mask=0b000), F(2, 4, 3)),
    C("pad", lambda x: tf.pad(x, [[0, 1], [2, 0]]), F(2, 3)),
    C("pad_4d", lambda x: tf.pad(x, [[0, 0], [1, 1], [2, 1], [0, 0]]), F(1, 2, 3, 2)),
    C("padv2", lambda x: tf.pad(x, [[1, 0], [0, 2]], constant_values=1.5), F(2, 3)),
    C("mirror_pad_reflect", lambda x: tf.pad(x, [[1, 1], [2, 1]], mode="REFLECT"), F(3, 4)),
    C("mirror_pad_symmetric", lambda x: tf.pad(x, [[1, 2], [3, 0]], mode="SYMMETRIC"), F(3, 4)),
    C("squeeze_axis", lambda x: tf.squeeze(x, [1]), F(2, 1, 3, 1)),
    C("squeeze_all", lambda x: tf.squeeze(x), F(2, 1, 3, 1)),
    C("expand_dims", lambda x: tf.expand_dims(x, 1), F(2, 3)),
    C("expand_dims_neg", lambda x: tf.expand_dims(x, -1), F(2, 3)),
    C("pack", lambda a, b: tf.stack([a, b], axis=1), F(2, 3), F(2, 3)),
    C("pack_neg_axis", lambda a, b, c: tf.stack([a, b, c], axis=-1), F(2, 3), F(2, 3), F(2, 3)),
    C("pack_int", lambda a, b: tf.stack([a, b]), I(3), I(3)),
    C("unpack", lambda x: tf.unstack(x, axis=1), F(2, 3, 4)),
    C("unpack_axis0", lambda x: tf.unstack(x), F(2, 3)),
    C("gather_axis0", lambda x, i: tf.gather(x, i), F(4, 3), I(5, lo=0, hi=4)),
    C("gather_axis1", lambda x, i: tf.gather(x, i, axis=1), F(2, 4, 3), I(2, 3, lo=0, hi=4)),
    C("gather_const_indices", lambda x: tf.gather(x, [2, 0, 2], axis=1), F(2, 3)),
    C("gather_int_params", lambda x, i: tf.gather(x, i, axis=1), I(2, 4), I(3, lo=0, hi=4)),
    C("cast_float_to_int32", lambda x: tf.cast(x * 4.0, tf.int32), F(2, 5)),
    C("cast_int32_to_float", lambda x: tf.cast(x, tf.float32) * 0.5, I(2, 5)),
    C("cast_bool_to_float", lambda x: tf.cast(x > 0.0, tf.float32), F(2, 5)),
    C("fill_scalar_input", lambda v: tf.fill([2, 3], v), F()),
    C("fill_dynamic_dims", lambda d: tf.fill(d, 1.5), I(2, lo=1, hi=4)),
    C("tile", lambda x: tf.tile(x, [2, 1, 3]), F(2, 3, 2)),
    C("tile_int", lambda x: tf.tile(x, [3, 2]), I(1, 2)),
    C("range_int", lambda n: tf.range(n), I(lo=1, hi=8)),
    C("range_int_start_delta", lambda s: tf.range(s, 20, 3), I(lo=-3, hi=5)),
    C("range_float", lambda s: tf.range(s, 3.0, 0.5), F(lo=-1.0, hi=1.0)),
    C("select_v1", lambda a, b: tf.compat.v1.where(a > b, a, b), F(2, 3), F(2, 3)),
    C("select_v2", lambda a, b: tf.where(a > 0.0, a, b), F(2, 3), F(2, 3)),
    C("select_v2_bcast", lambda c, a, b: tf.where(c > 0.0, a, b), F(2, 1), F(2, 3), F(3)),
    C("select_v2_int", lambda a, b: tf.where(a > b, a * 2, b), I(2, 3), I(2, 3)),
    # -- resize -----------------------------------------------------------------------------
    C("resize_bilinear", lambda x: _rb(x, [6, 8]), F(1, 3, 4, 2)),
    C("resize_bilinear_align_corners", lambda x: _rb(x, [6, 7], align_corners=True), F(1, 3, 4, 2)),
    C("resize_bilinear_half_pixel", lambda x: _rb(x, [6, 8], half_pixel_centers=True), F(1, 3, 4, 2)),
    C("resize_bilinear_tf2_down", lambda x: tf.image.resize(x, [2, 3]), F(2, 5, 7, 2)),
    C("resize_nearest", lambda x: _rn(x, [6, 8]), F(1, 3, 4, 2)),
    C("resize_nearest_align_corners", lambda x: _rn(x, [5, 7], align_corners=True), F(1, 3, 4, 2)),
    C("resize_nearest_half_pixel", lambda x: _rn(x, [6, 8], half_pixel_centers=True), F(1, 3, 4, 2)),
    C("resize_nearest_tf2", lambda x: tf.image.resize(x, [7, 5], method="nearest"), F(1, 3, 4, 2)),
    # -- unary math -------------------------------------------------------------------------
    C("square", lambda x: tf.square(x), F(2, 5)),
    C("sqrt", lambda x: tf.sqrt(x), F(2, 5, lo=0.1, hi=4.0)),
    C("rsqrt", lambda x: tf.math.rsqrt(x), F(2, 5, lo=0.5, hi=4.0)),
    C("exp", lambda x: tf.exp(x), F(2, 5)),
    C("log", lambda x: tf.math.log(x), F(2, 5, lo=0.1, hi=4.0)),
    C("pow_scalar_const", lambda x: tf.pow(x, 3.0), F(2, 5)),
    C("pow_fractional", lambda x: tf.pow(x, 0.5), F(2, 5, lo=0.1, hi=4.0)),
    C("neg_abs", lambda x: tf.abs(-x), F(2, 5)),
    # -- Einsum -----------------------------------------------------------------------------
    C("einsum_abc_cd_const", lambda a: tf.einsum("abc,cd->abd", a, W(4, 5)), F(2, 3, 4)),
    C("einsum_abc_cd", lambda a, b: tf.einsum("abc,cd->abd", a, b), F(2, 3, 4), F(4, 5)),
    C("einsum_bij_bjk", lambda a, b: tf.einsum("bij,bjk->bik", a, b), F(2, 3, 4), F(2, 4, 5)),
    C("einsum_aecd_abcd", lambda a, b: tf.einsum("aecd,abcd->acbe", a, b), F(2, 3, 4, 5), F(2, 6, 4, 5)),
    C("einsum_bhqd_bhkd", lambda a, b: tf.einsum("bqhd,bkhd->bhqk", a, b), F(1, 3, 2, 4), F(1, 5, 2, 4)),
    C("einsum_ij_jk_const_transposed", lambda a: tf.einsum("ij,kj->ik", a, W(5, 4)), F(3, 4)),
    C("einsum_abcd_cde_const", lambda a: tf.einsum("abcd,cde->abe", a, W(3, 4, 5)), F(2, 2, 3, 4)),
    # -- shape arithmetic with a dynamic batch ----------------------------------------------
    C("reshape_dynamic_batch", lambda x: tf.reshape(x, [tf.shape(x)[0], -1]), F(None, 2, 3)),
    C("reshape_dynamic_batch_arith", lambda x: tf.reshape(x, [tf.shape(x)[0] * 2, tf.shape(x)[2]]),
      F(None, 2, 3)),
    C("zeros_dynamic_batch", lambda x: tf.zeros([tf.shape(x)[0], 3]) + tf.reduce_sum(x, -1), F(None, 3)),
    C("dense_dynamic_batch", lambda x: tf.nn.relu(tf.matmul(x, W(4, 3)) + W(3)), F(None, 4)),
    # -- control flow -----------------------------------------------------------------------
    C("while_fixed_trips", _while_fixed, F(2, 3), expect=["WHILE"]),
    C("while_input_bound", _while_input_bound, F(2, 3), I(lo=0, hi=5), expect=["WHILE"]),
    C("cond_then", _cond(-1e6), F(2, 3), expect=["IF"]),
    C("cond_else", _cond(1e6), F(2, 3), expect=["IF"]),
]

_BUILTINS = {k: v for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
_BUILTIN_NAMES = set(_BUILTINS) - {"CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES"}


def _model_ops(model: bytes) -> list[str]:
    """Builtin names of every operator code in the model (all subgraphs)."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model, 0))
    names = {v: k for k, v in _BUILTINS.items()}
    out = []
    for code in m.operatorCodes:
        b = max(code.builtinCode, code.deprecatedBuiltinCode)
        out.append(code.customCode.decode() if b == schema.BuiltinOperator.CUSTOM else names.get(b, str(b)))
    return out


def _flat(outputs) -> list[np.ndarray]:
    return [np.asarray(t) for t in tf.nest.flatten(outputs)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_lowering_rule(case: Case):
    seed = zlib.crc32(case.id.encode())
    rng = np.random.default_rng(seed)
    specs = [tf.TensorSpec(s.shape, s.dtype, name=f"in{i}") for i, s in enumerate(case.specs)]
    values = [_value(s, rng) for s in case.specs]

    _reset_weights(seed)
    cf = tf.function(case.fn, autograph=False).get_concrete_function(*specs)
    model = fuselite.Converter.from_concrete_functions([cf]).convert()

    # only TFLite builtins, in the main subgraph (interpreter view) and in every subgraph
    ops = [d["op_name"] for d in Interpreter(model_content=model)._get_ops_details()]
    assert ops, "the converted model has no ops"
    assert set(ops) <= _BUILTIN_NAMES, f"non-builtin ops: {sorted(set(ops) - _BUILTIN_NAMES)}"
    all_ops = _model_ops(model)
    assert set(all_ops) <= _BUILTIN_NAMES, f"non-builtin ops: {sorted(set(all_ops) - _BUILTIN_NAMES)}"
    for kind in case.expect:
        assert kind in all_ops, f"expected {kind} in {sorted(set(all_ops))}"

    _reset_weights(seed)
    expected = _flat(case.fn(*[tf.constant(v) for v in values]))
    got = run(model, values)
    got = [got[f"output_{i}"] for i in range(len(expected))]
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype} != {e.dtype}"
        assert g.shape == e.shape, f"output {i}: shape {g.shape} != {e.shape}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=0, atol=case.atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {i}")
