"""End-to-end tests of the lowering rules of the first families (math, array, nn, quant, control flow, variables,
einsum): tf.function -> fuselite -> stock LiteRT (both kernel sets) vs TF eager. The harness and its tolerances are
in ``lowering_kit.py``; families added later have their own ``test_lowering_<family>.py``
(``lowering_kit.FAMILY_TESTS``).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from lowering_kit import FAMILY_TESTS, C, Case, F, I, V, W, check_case, missing_rules
from tensorflow.compiler.tf2xla.python import xla

from fuselite.lower import LOWERINGS
from fuselite.ops.text_kernels import TEXT_KERNELS

# --------------------------------------------------------------------------------------------
# helpers for cases that need statements or loop variables
# --------------------------------------------------------------------------------------------


def _complex(*shape):
    """A complex64 input (values fixed by the shape: the harness draws real ones only)."""
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    return V((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64), *shape)


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


def _while_stateful(x):
    # the Assert makes the loop a (stateful) While instead of a StatelessWhile
    def body(i, acc):
        tf.debugging.assert_less(i, 100)
        return i + 1, acc * 1.5 - 0.25

    return tf.while_loop(lambda i, acc: i < 4, body, (tf.constant(0), x))[1]


def _cond_stateful(x):
    # the Assert makes the conditional a (stateful) If instead of a StatelessIf
    def then():
        tf.debugging.assert_greater(tf.reduce_sum(x), -1e9)
        return x * 2.0

    return tf.cond(tf.reduce_sum(x) > -1e6, then, lambda: x - 1.0)


_VARIABLES: dict = {}


def _variable_updates(x):
    # resource-variable rules (tests/test_variables.py has the multi-invoke tests); the first
    # assign makes every call start from the same state
    if "acc" not in _VARIABLES:
        with tf.init_scope():
            _VARIABLES["acc"] = tf.Variable(tf.zeros([2, 3]), name="acc")
    v = _VARIABLES["acc"]
    v.assign(x)
    v.assign_add(x * 2.0)
    v.assign_sub(tf.ones_like(x))
    return v.read_value()


def _reduce(f, axes, keep):
    return lambda x: f(x, axis=axes, keepdims=keep)


def _binary(f):
    return lambda a, b: f(a, b)


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
    # -- FakeQuant (quantization-aware training): QUANTIZE / DEQUANTIZE on TF's nudged grid ----------------
    C("fake_quant_vars", lambda x: tf.quantization.fake_quant_with_min_max_vars(x, -3.0, 3.0), F(2, 4),
      expect=["QUANTIZE", "DEQUANTIZE"]),
    C("fake_quant_args_narrow", lambda x: tf.quantization.fake_quant_with_min_max_args(
        x, -1.0, 2.5, num_bits=4, narrow_range=True), F(2, 4), expect=["QUANTIZE", "MAXIMUM"]),
    C("fake_quant_per_channel", lambda x: tf.quantization.fake_quant_with_min_max_vars_per_channel(
        x, [-1.0, -0.5, 0.0, -2.0], [1.0, 2.0, 3.0, 2.0]), F(2, 4), expect=["FLOOR"]),
    # -- QuantizeAndDequantize V2 / V3 / V4 with a given range: TF's kernel's arithmetic, exactly ------------------
    C("quantize_dequantize_v2", lambda x: tf.quantization.quantize_and_dequantize_v2(x, -1.0, 1.0, range_given=True),
      F(3, 8, lo=-1.5, hi=1.5), atol=0),
    C("quantize_dequantize_raw_v2", lambda x: tf.raw_ops.QuantizeAndDequantizeV2(
        input=x, input_min=-2.0, input_max=1.0, range_given=True, num_bits=6), F(3, 8, lo=-3, hi=2), atol=0),
    C("quantize_dequantize_v4_narrow_half_up", lambda x: tf.raw_ops.QuantizeAndDequantizeV4(
        input=x, input_min=-0.5, input_max=2.0, range_given=True, num_bits=5, narrow_range=True,
        round_mode="HALF_UP"), F(3, 8, lo=-1, hi=2.5), atol=0),
    C("quantize_dequantize_v3_unsigned", lambda x: tf.raw_ops.QuantizeAndDequantizeV3(
        input=x, input_min=0.0, input_max=3.0, num_bits=4, range_given=True, signed_input=False),
      F(3, 8, lo=-1, hi=4), atol=0),
    # -- integer Relu / Relu6 / Square: LiteRT's RELU and SQUARE are float / quantized kernels ---------------------
    C("relu_int32", tf.nn.relu, I(2, 5), expect=["MAXIMUM"], absent=["RELU"]),
    C("relu6_int64", lambda x: tf.nn.relu6(tf.cast(x, tf.int64) * 2), I(2, 5), expect=["MINIMUM"]),
    C("square_int32", tf.square, I(2, 5, lo=-300, hi=300), expect=["MUL"], absent=["SQUARE"]),
    # -- MatMul -----------------------------------------------------------------------------
    C("matmul", lambda x: tf.matmul(x, W(4, 3)), F(2, 4), expect=["FULLY_CONNECTED"]),
    C("matmul_transpose_a", lambda x: tf.matmul(x, W(4, 3), transpose_a=True), F(4, 2)),
    C("matmul_transpose_b", lambda x: tf.matmul(x, W(3, 4), transpose_b=True), F(2, 4)),
    C("matmul_transpose_ab", lambda x: tf.matmul(x, W(3, 4), transpose_a=True, transpose_b=True), F(4, 2)),
    C("matmul_dynamic_rhs", lambda a, b: tf.matmul(a, b), F(2, 4), F(4, 3), expect=["BATCH_MATMUL"]),
    C("matmul_dynamic_rhs_ta_tb", lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True), F(4, 2), F(3, 4)),
    C("matmul_const_lhs", lambda x: tf.matmul(W(3, 4), x), F(4, 2)),
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
    C("bmm_const_rank2_rhs_dynamic_batch", lambda a: tf.matmul(a, W(4, 5)), F(None, 3, 4)),
    C("raw_batch_matmul_v1", lambda a, b: tf.raw_ops.BatchMatMul(x=a, y=b, adj_y=True), F(2, 3, 4), F(2, 5, 4)),
    C("raw_batch_matmul_v3", lambda a, b: tf.raw_ops.BatchMatMulV3(x=a, y=b, Tout=tf.float32), F(2, 3, 4),
      F(2, 4, 5)),
    # -- BiasAdd ----------------------------------------------------------------------------
    C("bias_add", lambda x: tf.nn.bias_add(x, W(4)), F(2, 3, 4)),
    C("bias_add_nonconst", lambda x, b: tf.nn.bias_add(x, b), F(2, 3, 4), F(4)),
    # -- Conv3D (ConvLSTM3D's steps): CONV_3D, TensorFlow's filter layout --------------------------------------
    C("conv3d_same", lambda x: tf.nn.conv3d(x, W(2, 3, 3, 2, 4), [1, 1, 1, 1, 1], "SAME"), F(1, 3, 5, 5, 2),
      expect=["CONV_3D"]),
    C("conv3d_valid_strided", lambda x: tf.nn.conv3d(x, W(2, 2, 2, 2, 3), [1, 1, 2, 1, 1], "VALID"),
      F(1, 4, 6, 5, 2)),  # (TensorFlow's CPU Conv3D takes no dilation to check against)
    # -- Conv2D -----------------------------------------------------------------------------
    C("conv2d_same", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "SAME"), F(1, 5, 5, 2), expect=["CONV_2D"]),
    C("conv2d_valid", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "VALID"), F(1, 5, 5, 2)),
    C("conv2d_same_stride2", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 4), 2, "SAME"), F(1, 6, 6, 2)),
    C("conv2d_valid_stride_2x1", lambda x: tf.nn.conv2d(x, W(2, 3, 2, 4), [1, 2, 1, 1], "VALID"), F(2, 7, 6, 2)),
    C("conv2d_explicit_padding", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 2), 1, [[0, 0], [1, 2], [0, 1], [0, 0]]),
      F(1, 5, 5, 2), expect=["PAD", "CONV_2D"]),
    C("depthwise_explicit_padding_strided", lambda x: tf.nn.depthwise_conv2d(
        x, W(3, 3, 2, 2), [1, 2, 2, 1], [[0, 0], [2, 0], [1, 1], [0, 0]]), F(1, 6, 6, 2),
      expect=["PAD", "DEPTHWISE_CONV_2D"]),
    C("conv2d_dilation2_same", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 3), 1, "SAME", dilations=2), F(1, 7, 7, 2)),
    C("conv2d_dilation2_valid", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 3), 1, "VALID", dilations=2), F(1, 7, 7, 2)),
    C("conv2d_bias_relu6",
      lambda x: tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(x, W(3, 3, 2, 4), 1, "SAME"), W(4))), F(1, 5, 5, 2, lo=-4, hi=4)),
    # -- DepthwiseConv2dNative --------------------------------------------------------------
    C("conv2d_dynamic_batch", lambda x: tf.nn.conv2d(x, W(3, 3, 2, 3), 1, "SAME"), F(None, 4, 4, 2)),
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
    C("conv2d_transpose_dynamic_batch",
      lambda x: tf.nn.conv2d_transpose(x, W(3, 3, 4, 2), tf.stack([tf.shape(x)[0], 8, 8, 4]), strides=2,
                                       padding="SAME"), F(None, 4, 4, 2)),
    C("fused_batch_norm",
      lambda x: tf.compat.v1.nn.fused_batch_norm(x, W(4), W(4), W(4), W(4, lo=0.5, hi=2.0), epsilon=1e-3,
                                                 is_training=False)[0], F(1, 3, 3, 4)),
    C("fused_batch_norm_v1",
      lambda x: tf.raw_ops.FusedBatchNorm(x=x, scale=W(3), offset=W(3), mean=W(3), variance=W(3, lo=0.5, hi=2.0),
                                          epsilon=1e-3, is_training=False)[0], F(1, 2, 2, 3)),
    C("fused_batch_norm_v2",
      lambda x: tf.raw_ops.FusedBatchNormV2(x=x, scale=W(3), offset=W(3), mean=W(3), variance=W(3, lo=0.5, hi=2.0),
                                            epsilon=1e-3, is_training=False)[0], F(1, 2, 2, 3)),
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
        _reduce(f, axes, keep), F(2, 3, 4))
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
    C("softplus", lambda x: tf.nn.softplus(x), F(2, 8, lo=-30, hi=30)),
    C("softplus_large", lambda x: tf.nn.softplus(x * 40.0), F(2, 8, lo=-5, hi=5)),  # exp(x) would overflow
    C("mish", lambda x: x * tf.tanh(tf.nn.softplus(x)), F(2, 8, lo=-6, hi=6)),
    C("softsign", lambda x: tf.nn.softsign(x), F(2, 8, lo=-30, hi=30)),
    # -- Fourier transforms and complex values (lower/fft.py). Sums of up to 600 products of values ~1: float32
    # rounding of results up to ~25, so atol 1e-4 (2e-4) where the sums are long -------------------------------------
    C("rfft_abs", lambda x: tf.abs(tf.signal.rfft(x)), F(2, 512), atol=2e-4, expect=["RFFT2D", "COMPLEX_ABS"]),
    C("rfft_real_imag", lambda x: tf.math.real(tf.signal.rfft(x)) + tf.math.imag(tf.signal.rfft(x)), F(3, 512),
      atol=2e-4, expect=["RFFT2D", "REAL", "IMAG"]),
    C("rfft_short_power_of_two", lambda x: tf.abs(tf.signal.rfft(x)), F(2, 16), atol=1e-5,
      expect=["FULLY_CONNECTED", "SQRT"], absent=["RFFT2D", "COMPLEX_ABS"]),
    C("rfft_padded_length", lambda x: tf.abs(tf.signal.rfft(x, [80])), F(3, 40), atol=1e-4, absent=["RFFT2D", "PAD"]),
    C("rfft_cropped_complex_out", lambda x: tf.signal.rfft(x, [12]), F(2, 3, 20), atol=1e-5, expect=["BITCAST"]),
    C("rfft_imag_of_odd_length", lambda x: tf.math.imag(tf.signal.rfft(x)), F(4, 7), atol=1e-5, absent=["IMAG"]),
    C("dct_type2", lambda x: tf.signal.dct(x, type=2), F(3, 40), atol=1e-4, expect=["FULLY_CONNECTED"],
      absent=["PACK", "BITCAST", "PAD", "SUB"]),
    C("dct_type2_ortho", lambda x: tf.signal.dct(x, type=2, norm="ortho"), F(2, 5, 24), atol=1e-5,
      absent=["PACK", "BITCAST", "PAD", "SUB"]),
    C("rfft2d_any_length", lambda x: tf.signal.rfft2d(x), F(2, 6, 10), atol=1e-4),
    C("rfft2d_padded", lambda x: tf.abs(tf.signal.rfft2d(x, [8, 12])), F(2, 5, 9), atol=1e-4),
    C("rfft2d_powers_of_two", lambda x: tf.abs(tf.signal.rfft2d(x, [512, 512])), F(1, 20, 30), atol=2e-4,
      expect=["RFFT2D", "COMPLEX_ABS"]),
    C("irfft", lambda x: tf.signal.irfft(x), _complex(2, 9), atol=1e-5, absent=["BITCAST"]),
    C("irfft_cropped_and_padded", lambda x: tf.signal.irfft(x, [10]) + tf.signal.irfft(x, [24])[..., :10],
      _complex(2, 9), atol=1e-5),
    C("irfft_of_rfft", lambda x: tf.signal.irfft(tf.signal.rfft(x)), F(2, 12), atol=1e-5,
      expect=["FULLY_CONNECTED"], absent=["ADD", "PACK"]),
    C("irfft2d", lambda x: tf.signal.irfft2d(x), _complex(2, 6, 4), atol=1e-5),
    C("fft", lambda x: tf.signal.fft(x), _complex(2, 7), atol=1e-5),
    C("ifft", lambda x: tf.signal.ifft(x), _complex(2, 7), atol=1e-5),
    C("fft2d", lambda x: tf.signal.fft2d(x), _complex(2, 3, 5), atol=1e-5),
    C("ifft2d_abs", lambda x: tf.abs(tf.signal.ifft2d(x)), _complex(2, 4, 6), atol=1e-5),
    C("fft3d", lambda x: tf.signal.fft3d(x), _complex(2, 3, 4, 5), atol=1e-4),
    C("ifft3d", lambda x: tf.signal.ifft3d(x), _complex(1, 2, 3, 4), atol=1e-5),
    C("complex_abs_of_parts", lambda x, y: tf.abs(tf.complex(x, y)), F(2, 5), F(2, 5), expect=["SQRT"]),
    C("complex_output", lambda x, y: tf.complex(x, y * 2.0), F(2, 5), F(2, 5), expect=["BITCAST"]),
    C("complex_broadcast_parts", lambda x: tf.signal.fft(tf.complex(x, tf.constant(0.5))), F(3, 4), atol=1e-5),
    C("complex_slice_times_constant", lambda x: tf.math.real(
        tf.signal.rfft(x)[:, 1:4] * tf.constant([1 + 2j, -1j, 0.5], tf.complex64)), F(2, 10), atol=1e-5),
    C("complex_input_real_imag", lambda x: tf.math.real(x) * 2 + tf.math.imag(x), _complex(2, 8),
      expect=["REAL", "IMAG"]),
    C("complex_input_abs", lambda x: tf.abs(x), _complex(3, 4), expect=["COMPLEX_ABS"]),
    C("fft_abs_of_a_cast", lambda x: tf.abs(tf.signal.fft(tf.cast(x, tf.complex64))), F(3, 6), atol=1e-5,
      absent=["CAST", "BITCAST"]),
    # -- DFT of real parts (FNet's token mixing: Real(FFT2D(Complex(x, 0))): real matrix products) -----------
    C("fft2d_real_of_complex", lambda x: tf.math.real(tf.signal.fft2d(tf.complex(x, tf.zeros_like(x)))),
      F(2, 6, 4), atol=1e-5, expect=["FULLY_CONNECTED"], absent=["RFFT2D"]),
    C("fft2d_imag_of_complex", lambda x, y: tf.math.imag(tf.signal.fft2d(tf.complex(x, y))), F(2, 5, 3), F(2, 5, 3),
      atol=1e-5),
    C("fft_real_of_a_cast", lambda x: tf.math.real(tf.signal.fft(tf.cast(x, tf.complex64))), F(3, 7), atol=1e-5),
    # -- band_part (causal attention masks) ----------------------------------------------------
    *[C(f"band_part_{lo}_{up}".replace("-", "m"), lambda x, lo=lo, up=up: tf.linalg.band_part(x, lo, up),
        F(2, 5, 6), expect=["SELECT_V2"]) for lo, up in [(-1, 0), (0, -1), (1, 2), (0, 0)]],
    C("causal_mask_of_ones", lambda x: x * tf.linalg.band_part(tf.ones_like(x), -1, 0), F(3, 4, 4)),
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
    C("gelu_erf_form", lambda x: 0.5 * x * (1.0 + tf.math.erf(x / np.float32(np.sqrt(2.0)))), F(2, 8, lo=-5, hi=5),
      expect=["GELU"]),
    C("swish", lambda x: x * tf.sigmoid(x), F(2, 8, lo=-6, hi=6)),
    C("hard_swish", lambda x: x * tf.nn.relu6(x + 3.0) / 6.0, F(2, 8, lo=-5, hi=5), expect=["HARD_SWISH"]),
    C("hard_swish_mul_sixth", lambda x: x * (tf.nn.relu6(x + 3.0) * (1.0 / 6.0)), F(2, 8, lo=-5, hi=5),
      expect=["HARD_SWISH"]),
    # near-misses of hard-swish that must stay as they are
    C("hard_sigmoid", lambda x: tf.nn.relu6(x + 3.0) / 6.0, F(2, 8, lo=-5, hi=5), absent=["HARD_SWISH"]),
    C("x_relu6_x_plus_3", lambda x: x * tf.nn.relu6(x + 3.0), F(2, 8, lo=-5, hi=5), absent=["HARD_SWISH"]),
    C("y_relu6_x_plus_3_div6", lambda x, y: y * tf.nn.relu6(x + 3.0) / 6.0, F(2, 8, lo=-5, hi=5), F(2, 8),
      absent=["HARD_SWISH"]),
    C("x_relu6_x_plus_2_div6", lambda x: x * tf.nn.relu6(x + 2.0) / 6.0, F(2, 8, lo=-5, hi=5), absent=["HARD_SWISH"]),
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
    C("pow_int", lambda a, b: tf.pow(a, b), I(2, 4, lo=-3, hi=4), I(4, lo=0, hi=4)),
    C("raw_add_div", lambda a, b: tf.raw_ops.Div(x=tf.raw_ops.Add(x=a, y=b), y=b), F(2, 3), F(3, lo=0.5, hi=2.0)),
    C("sub_scalar_const", lambda a: 3.0 - a, F(2, 3)),
    C("div_scalar_const", lambda a: a / 4.0, F(2, 3)),
    # -- comparisons (ints give ties) -------------------------------------------------------
    *[C(f"{name}_int_bcast", _binary(f), I(2, 3, lo=0, hi=3), I(3, lo=0, hi=3))
      for name, f in [("less", tf.less), ("greater", tf.greater), ("equal", tf.equal), ("not_equal", tf.not_equal),
                      ("less_equal", tf.less_equal), ("greater_equal", tf.greater_equal)]],
    *[C(f"{name}_float_bcast", _binary(f), F(2, 3, 4), F(4))
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
    # XLA's DynamicUpdateSlice (keras-hub's KV cache): start indices at run time, clamped so the update fits
    C("xla_dynamic_update_slice", lambda x, u, i: xla.dynamic_update_slice(x, u, i),
      F(2, 6, 3), F(2, 2, 3), V(np.array([0, 3, 0], np.int32), 3), expect=("DYNAMIC_UPDATE_SLICE",)),
    C("xla_dynamic_update_slice_clamped", lambda x, u, i: xla.dynamic_update_slice(x, u, i),
      V(np.arange(24, dtype=np.float32).reshape(1, 6, 4), 1, None, 4), F(1, 3, 4),
      V(np.array([0, 7, -2], np.int64), 3)),
    C("xla_dynamic_update_slice_int", lambda x, u: xla.dynamic_update_slice(x, u, tf.constant([1, 0])),
      I(4, 3), I(2, 3)),
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
    C("strided_slice_dynamic_index", lambda x, i: x[i], F(4, 3), I(lo=0, hi=4)),
    C("strided_slice_dynamic_range", lambda x, i: x[:, i:i + 2], F(2, 5), I(lo=0, hi=3)),
    C("pad", lambda x: tf.pad(x, [[0, 1], [2, 0]]), F(2, 3)),
    C("pad_4d", lambda x: tf.pad(x, [[0, 0], [1, 1], [2, 1], [0, 0]]), F(1, 2, 3, 2)),
    C("padv2", lambda x: tf.pad(x, [[1, 0], [0, 2]], constant_values=1.5), F(2, 3)),
    C("mirror_pad_reflect", lambda x: tf.pad(x, [[1, 1], [2, 1]], mode="REFLECT"), F(3, 4)),
    C("mirror_pad_symmetric", lambda x: tf.pad(x, [[1, 2], [3, 0]], mode="SYMMETRIC"), F(3, 4)),
    C("squeeze_axis", lambda x: tf.squeeze(x, [1]), F(2, 1, 3, 1)),
    C("squeeze_all", lambda x: tf.squeeze(x), F(2, 1, 3, 1)),
    C("squeeze_neg_axis", lambda x: tf.squeeze(x, [-1]), F(2, 3, 1)),
    C("expand_dims", lambda x: tf.expand_dims(x, 1), F(2, 3)),
    C("expand_dims_neg", lambda x: tf.expand_dims(x, -1), F(2, 3)),
    C("pack", lambda a, b: tf.stack([a, b], axis=1), F(2, 3), F(2, 3)),
    C("pack_neg_axis", lambda a, b, c: tf.stack([a, b, c], axis=-1), F(2, 3), F(2, 3), F(2, 3)),
    C("pack_int", lambda a, b: tf.stack([a, b]), I(3), I(3)),
    C("unpack", lambda x: tf.unstack(x, axis=1), F(2, 3, 4)),
    C("unpack_axis0", lambda x: tf.unstack(x), F(2, 3)),
    C("unpack_neg_axis", lambda x: tf.unstack(x, axis=-1), F(2, 3)),
    C("gather_axis0", lambda x, i: tf.gather(x, i), F(4, 3), I(5, lo=0, hi=4)),
    C("gather_axis1", lambda x, i: tf.gather(x, i, axis=1), F(2, 4, 3), I(2, 3, lo=0, hi=4)),
    C("gather_const_indices", lambda x: tf.gather(x, [2, 0, 2], axis=1), F(2, 3)),
    C("gather_neg_axis", lambda x, i: tf.gather(x, i, axis=-1), F(2, 4), I(3, lo=0, hi=4)),
    C("gather_batch_dims", lambda x, i: tf.gather(x, i, axis=1, batch_dims=1), F(2, 4, 3), I(2, 3, lo=0, hi=4)),
    C("gather_v1", lambda x, i: tf.raw_ops.Gather(params=x, indices=i), F(4, 3), I(2, lo=0, hi=4)),
    C("gather_int_params", lambda x, i: tf.gather(x, i, axis=1), I(2, 4), I(3, lo=0, hi=4)),
    C("cast_float_to_int32", lambda x: tf.cast(x * 4.0, tf.int32), F(2, 5)),
    C("cast_int32_to_float", lambda x: tf.cast(x, tf.float32) * 0.5, I(2, 5)),
    C("cast_bool_to_float", lambda x: tf.cast(x > 0.0, tf.float32), F(2, 5)),
    C("cast_float_to_bool_int64", lambda x: (tf.cast(tf.round(x), tf.bool), tf.cast(x * 3.0, tf.int64)), F(2, 5)),
    C("fill_scalar_input", lambda v: tf.fill([2, 3], v), F()),
    C("fill_int", lambda v: tf.fill([3, 2], v), I()),
    C("fill_dynamic_dims", lambda d: tf.fill(d, 1.5), I(2, lo=1, hi=4)),
    C("tile", lambda x: tf.tile(x, [2, 1, 3]), F(2, 3, 2)),
    C("tile_int", lambda x: tf.tile(x, [3, 2]), I(1, 2)),
    C("range_int", lambda n: tf.range(n), I(lo=1, hi=8)),
    C("range_int_start_delta", lambda s: tf.range(s, 20, 3), I(lo=-3, hi=5)),
    C("range_float", lambda s: tf.range(s, 3.0, 0.5), F(lo=-1.0, hi=1.0)),
    C("select_v1", lambda a, b: tf.compat.v1.where(a > b, a, b), F(2, 3), F(2, 3)),
    C("select_v2", lambda a, b: tf.where(a > 0.0, a, b), F(2, 3), F(2, 3)),
    C("select_v2_bcast", lambda c, a, b: tf.where(c > 0.0, a, b), F(2, 1), F(2, 3), F(3)),
    C("select_v1_rank1_cond", lambda c, a, b: tf.compat.v1.where(c > 0.0, a, b), F(3), F(3, 2), F(3, 2)),
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
    # int64 |x| and sign (DeBERTa's relative positions): LiteRT's ABS and SIGN take no int64
    C("abs_int64", lambda x: tf.cast(tf.abs(tf.cast(x, tf.int64)), tf.float32), I(2, 6), absent=["ABS"]),
    C("sign_int64", lambda x: tf.cast(tf.sign(tf.cast(x, tf.int64)), tf.float32), I(2, 6), absent=["SIGN"]),
    C("floor_ceil_round", lambda x: (tf.floor(x), tf.math.ceil(x), tf.round(x)), F(2, 5, lo=-4, hi=4)),
    C("sin_cos", lambda x: (tf.sin(x), tf.cos(x)), F(2, 5, lo=-4, hi=4)),
    C("sign", lambda x: tf.sign(x), F(2, 5)),
    C("reciprocal", lambda x: tf.math.reciprocal(x), F(2, 5, lo=0.5, hi=2.0)),
    C("inv", lambda x: tf.raw_ops.Inv(x=x), F(2, 5, lo=0.5, hi=2.0)),
    C("atan2", lambda y, x: tf.math.atan2(y, x), F(2, 5), F(2, 5)),
    C("atan2_bcast", lambda y, x: tf.math.atan2(y, x), F(2, 5), F(5)),
    C("add_n", lambda a, b, c: tf.add_n([a, b, c]), F(2, 3), F(2, 3), F(2, 3)),
    C("clip_by_value", lambda x: tf.raw_ops.ClipByValue(t=x, clip_value_min=-0.5, clip_value_max=0.75), F(2, 5)),
    C("zeros_ones_like", lambda x: (tf.raw_ops.ZerosLike(x=x), tf.raw_ops.OnesLike(x=x)), F(2, 3)),
    C("ones_like_dynamic_batch", lambda x: tf.raw_ops.OnesLike(x=x) + x, F(None, 3)),
    C("logical", lambda a, b: (tf.logical_and(a > 0.0, b > 0.0), tf.logical_or(a > 0.0, b > 0.0),
                               tf.logical_not(a > b)), F(2, 5), F(5)),
    C("reduce_any_all", lambda x: (tf.reduce_any(x > 1.0, axis=1), tf.reduce_all(x > -1.0, axis=[0], keepdims=True)),
      F(3, 4)),
    C("argmax_argmin", lambda x: (tf.argmax(x, axis=1), tf.argmin(x, axis=0, output_type=tf.int32)), F(3, 4)),
    C("cumsum", lambda x: (tf.cumsum(x, axis=1), tf.cumsum(x, axis=0, exclusive=True, reverse=True)), F(3, 4)),
    C("reverse", lambda x: tf.reverse(x, [1]), F(2, 3, 4)),
    C("reverse_two_axes", lambda x: tf.reverse(x, [0, 2]), F(2, 3, 4)),
    C("reverse_contiguous_axes", lambda x: tf.reverse(x, [-1, 1]), F(2, 3, 4)),
    C("one_hot", lambda i: tf.one_hot(i, 4, on_value=2.0, off_value=-1.0), I(2, 3, lo=-1, hi=4)),
    C("one_hot_axis0", lambda i: tf.one_hot(i, 3, axis=0), I(4, lo=0, hi=3)),
    C("top_k", lambda x: tf.math.top_k(x, k=3), F(2, 6)),
    C("broadcast_to", lambda x: tf.broadcast_to(x, [2, 3, 4]), F(3, 1)),
    C("gather_nd", lambda x, i: tf.gather_nd(x, i), F(3, 4), I(5, 2, lo=0, hi=3)),
    # duplicate indices are summed, by both
    C("bucketize", lambda x: tf.raw_ops.Bucketize(input=x, boundaries=[-1.0, 0.0, 0.5, 2.0]), F(3, 5),
      expect=["BUCKETIZE"]),
    # int32 values equal to boundaries: each goes to the bucket above it, as TensorFlow's
    C("bucketize_at_boundaries", lambda i: tf.raw_ops.Bucketize(input=i, boundaries=[-1.0, 0.0, 1.0]),
      I(4, 5, lo=-2, hi=3), expect=["BUCKETIZE"]),
    C("bucketize_dynamic", lambda x: tf.raw_ops.Bucketize(input=x, boundaries=[0.0]), F(None, 4), expect=["BUCKETIZE"]),
    C("size_dynamic", lambda x: tf.cast(tf.size(x), tf.float32) + x, F(None, 4), expect=["SHAPE", "REDUCE_PROD"]),
    # ids at and past `size` (5) are dropped, as TensorFlow drops them
    C("dense_bincount", lambda i: tf.raw_ops.DenseBincount(input=i, size=5, weights=tf.constant([], tf.float32)),
      I(3, 4, lo=0, hi=7), expect=["ONE_HOT", "SUM"]),
    C("dense_bincount_binary", lambda i: tf.raw_ops.DenseBincount(input=i, size=5, weights=tf.constant([], tf.int32),
                                                                  binary_output=True),
      I(3, 4, lo=0, hi=5), expect=["ONE_HOT", "REDUCE_MAX"]),
    C("dense_bincount_weighted", lambda i, w: tf.raw_ops.DenseBincount(input=i, size=5, weights=w), I(3, 4, lo=0, hi=5),
      F(3, 4), expect=["ONE_HOT", "MUL", "SUM"]),
    C("dense_bincount_rank1", lambda i: tf.raw_ops.DenseBincount(input=i, size=6, weights=tf.constant([], tf.int64)),
      I(7, lo=0, hi=6), expect=["ONE_HOT", "SUM"]),
    C("where_coordinates", lambda x: tf.where(x > 0.3), F(3, 5), expect=["WHERE"]),
    C("where_numeric_condition", lambda x: tf.where(x), I(3, 4, lo=-1, hi=2), expect=["WHERE", "NOT_EQUAL"]),
    C("where_dynamic", lambda x: tf.cast(tf.where(x > 0.0), tf.float32) * 2.0, F(None, 4), expect=["WHERE"]),
    C("unsorted_segment_sum", lambda x, i: tf.math.unsorted_segment_sum(x, i, 5), F(6, 3), I(6, lo=-1, hi=4),
      expect=["UNSORTED_SEGMENT_SUM"]),  # id -1 skipped, segment 4 empty (0)
    C("unsorted_segment_max", lambda x, i: tf.math.unsorted_segment_max(x, i, 5), F(6, 3), I(6, lo=0, hi=4),
      expect=["UNSORTED_SEGMENT_MAX"]),  # segment 4 empty: float32's lowest, as TensorFlow's
    C("unsorted_segment_min_int64_ids", lambda x, i: tf.math.unsorted_segment_min(x, tf.cast(i, tf.int64), 4),
      F(2, 3, 5), I(2, 3, lo=0, hi=4), expect=["UNSORTED_SEGMENT_MIN"]),  # ids of rank 2, a prefix of the data's
    C("unsorted_segment_prod_counted", lambda x, i: tf.math.unsorted_segment_prod(x, i, tf.reduce_max(i) + 1),
      F(6, 3), I(6, lo=0, hi=4), expect=["UNSORTED_SEGMENT_PROD"]),  # the count known at run time
    C("scatter_nd", lambda u, i: tf.scatter_nd(i, u, [4, 3]), F(6, 3), I(6, 1, lo=0, hi=4), expect=["SCATTER_ND"]),
    C("scatter_nd_int64_indices", lambda u, i: tf.scatter_nd(tf.cast(i, tf.int64), u, tf.constant([2, 5], tf.int64)),
      F(4), I(4, 2, lo=0, hi=2), expect=["SCATTER_ND"]),
    # -- Einsum -----------------------------------------------------------------------------
    C("einsum_abc_cd_const", lambda a: tf.einsum("abc,cd->abd", a, W(4, 5)), F(2, 3, 4)),
    C("einsum_abc_cd", lambda a, b: tf.einsum("abc,cd->abd", a, b), F(2, 3, 4), F(4, 5)),
    # an ellipsis (RoFormer's rotary frequencies: '...,a->...a'), spelled with letters of its own
    C("einsum_ellipsis_outer", lambda x: tf.einsum("...,a->...a", x, W(4)), F(2, 5)),
    C("einsum_ellipsis_batched", lambda x: tf.einsum("...ij,jk->...ik", x, W(3, 4)), F(2, 2, 5, 3)),
    C("einsum_ellipsis_both", lambda a, b: tf.einsum("...ij,...jk->...ik", a, b), F(2, 5, 3), F(2, 3, 4)),
    # -- roll (Swin's shifted windows): static shifts as SLICEs concatenated --------------------------------
    C("roll_two_axes", lambda x: tf.roll(x, shift=[2, -1], axis=[1, 2]), F(1, 6, 5), expect=["CONCATENATION"],
      absent=["GATHER"]),
    C("roll_same_axis_twice", lambda x: tf.roll(x, shift=[3, 4], axis=[1, 1]), F(2, 5, 2)),
    C("einsum_bij_bjk", lambda a, b: tf.einsum("bij,bjk->bik", a, b), F(2, 3, 4), F(2, 4, 5)),
    C("einsum_aecd_abcd", lambda a, b: tf.einsum("aecd,abcd->acbe", a, b), F(2, 3, 4, 5), F(2, 6, 4, 5)),
    C("einsum_bhqd_bhkd", lambda a, b: tf.einsum("bqhd,bkhd->bhqk", a, b), F(1, 3, 2, 4), F(1, 5, 2, 4)),
    C("einsum_ij_jk_const_transposed", lambda a: tf.einsum("ij,kj->ik", a, W(5, 4)), F(3, 4)),
    C("einsum_abcd_cde_const", lambda a: tf.einsum("abcd,cde->abe", a, W(3, 4, 5)), F(2, 2, 3, 4)),
    # -- shape arithmetic with a dynamic batch ----------------------------------------------
    C("einsum_ij_jk", lambda a, b: tf.einsum("ij,jk->ik", a, b), F(3, 4), F(4, 2)),
    C("einsum_bij_jk", lambda a, b: tf.einsum("bij,jk->bik", a, b), F(2, 3, 4), F(4, 5)),
    C("einsum_transposed_out", lambda a, b: tf.einsum("ij,jk->ki", a, b), F(3, 4), F(4, 2)),
    C("einsum_outer", lambda a, b: tf.einsum("i,j->ij", a, b), F(3), F(4)),
    C("einsum_batch_dot", lambda a, b: tf.einsum("bi,bi->b", a, b), F(3, 4), F(3, 4)),
    C("einsum_abc_abd", lambda a, b: tf.einsum("abc,abd->acd", a, b), F(2, 3, 4), F(2, 3, 5)),
    C("einsum_dynamic_batch_const", lambda a: tf.einsum("bqd,dk->bqk", a, W(4, 5)), F(None, 3, 4)),
    C("einsum_dynamic_batch", lambda a, b: tf.einsum("bqd,bkd->bqk", a, b), F(None, 3, 4), F(None, 5, 4)),
    C("reshape_dynamic_batch", lambda x: tf.reshape(x, [tf.shape(x)[0], -1]), F(None, 2, 3)),
    C("reshape_dynamic_batch_arith", lambda x: tf.reshape(x, [tf.shape(x)[0] * 2, tf.shape(x)[2]]),
      F(None, 2, 3)),
    C("zeros_dynamic_batch", lambda x: tf.zeros([tf.shape(x)[0], 3]) + tf.reduce_sum(x, -1), F(None, 3)),
    C("shape_dynamic_batch", lambda x: tf.shape(x), F(None, 3)),
    C("shape_dynamic_batch_int64", lambda x: tf.shape(x, out_type=tf.int64), F(None, 2, 3)),
    C("rank_unknown_rank", lambda x, s: tf.rank(tf.reshape(x, s)), F(2, 3, 4), V(np.array([4, 6], np.int32), None)),
    C("dense_dynamic_batch", lambda x: tf.nn.relu(tf.matmul(x, W(4, 3)) + W(3)), F(None, 4)),
    # -- control flow -----------------------------------------------------------------------
    C("while_fixed_trips", _while_fixed, F(2, 3), expect=["WHILE"]),
    C("while_input_bound", _while_input_bound, F(2, 3), I(lo=0, hi=5), expect=["WHILE"]),
    C("while_stateful", _while_stateful, F(2, 3), expect=["WHILE"]),
    C("cond_stateful", _cond_stateful, F(2, 3), expect=["IF"]),
    C("cond_then", _cond(-1e6), F(2, 3), expect=["IF"]),
    C("cond_else", _cond(1e6), F(2, 3), expect=["IF"]),
    C("variable_updates", _variable_updates, F(2, 3),
      expect=["VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"]),
]

@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_lowering_rule(case: Case):
    check_case(case)


def test_every_lowering_rule_is_exercised():
    """Every rule in fuselite.lower.LOWERINGS outside the families with their own test file
    (``lowering_kit.FAMILY_TESTS``) runs while converting some case above."""
    modules = {getattr(rule, "__module__", None) for rule in LOWERINGS.values()} - set(FAMILY_TESTS)
    # tensorflow-text's ops become CUSTOM ops (not builtins): tests/test_text_kernels.py runs each end to end
    missing = sorted(set(missing_rules(CASES, modules)) - set(TEXT_KERNELS))
    assert not missing, f"lowering rules with no end-to-end case: {missing}"


@pytest.mark.parametrize("lo, up", [(-1, 0), (1, 2), (0, -1)])
def test_band_part_with_dynamic_dims_is_built_from_the_runtime_shape(lo, up):
    """A dynamic sequence length (every decoder with causal masking): the mask comes from RANGEs of SHAPE."""
    import fuselite
    from fuselite.runtime import run

    @tf.function(input_signature=[tf.TensorSpec([None, None, None], tf.float32)])
    def masked(x):
        return tf.linalg.band_part(x, lo, up)

    data = fuselite.Converter.from_concrete_functions([masked.get_concrete_function()]).convert()
    for shape in [(2, 5, 7), (1, 6, 3)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        got = next(iter(run(data, [x]).values()))
        np.testing.assert_array_equal(got, tf.linalg.band_part(x, lo, up).numpy())


@pytest.mark.parametrize("case", ["band_part_bounds_from_the_length", "roll_dynamic_length",
                                  "roll_dynamic_shift", "fft2d_dynamic_length"])
def test_dynamic_shapes_of_the_keras_hub_ops(case):
    """What keras-hub's backbones compute from a length known only at run time (Gemma 3's and Qwen 3's sliding
    window bounds, Swin's and FNet's shapes): the same file at two lengths, on both kernel sets."""
    import fuselite
    from fuselite.runtime import run

    fns = {
        "band_part_bounds_from_the_length": lambda x: tf.linalg.band_part(x, tf.shape(x)[1] - 3, tf.shape(x)[2] // 4),
        "roll_dynamic_length": lambda x: tf.roll(x, shift=2, axis=1),
        "roll_dynamic_shift": lambda x: tf.roll(x, shift=tf.stack([tf.shape(x)[1] // 2, -1]), axis=[1, 2]),
        "fft2d_dynamic_length": lambda x: tf.math.real(tf.signal.fft2d(tf.complex(x, tf.zeros_like(x)))),
    }
    fn = tf.function(fns[case], input_signature=[tf.TensorSpec([None, None, 6], tf.float32)])
    data = fuselite.Converter.from_concrete_functions([fn.get_concrete_function()]).convert()
    for shape in [(2, 7, 6), (1, 11, 6)]:
        x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        want = fn(x).numpy()
        for builtin in (False, True):
            got = next(iter(run(data, [x], builtin_kernels=builtin).values()))
            np.testing.assert_allclose(got, want, atol=2e-5 * max(1.0, float(np.abs(want).max())))


_DYN_EINSUM = [  # equation, input specs, constant weight shape, the inputs' shapes for (batch, seq, other seq)
    ("abc,cde->abde", [[None, None, 8]], (8, 2, 4), lambda b, t, s: [(b, t, 8)]),  # EinsumDense into heads
    ("abcd,cde->abe", [[None, None, 2, 4]], (2, 4, 6), lambda b, t, s: [(b, t, 2, 4)]),  # out of heads
    ("abcd,aecd->acbe", [[None, None, 2, 4], [None, None, 2, 4]], None,
     lambda b, t, s: [(b, t, 2, 4), (b, s, 2, 4)]),  # attention scores
    ("acbe,aecd->abcd", [[None, 2, None, None], [None, None, 2, 4]], None,
     lambda b, t, s: [(b, 2, t, s), (b, s, 2, 4)]),  # scores x values
]


@pytest.mark.parametrize("equation, specs, weight, shapes", _DYN_EINSUM, ids=[e[0] for e in _DYN_EINSUM])
def test_einsum_with_several_dynamic_dims_takes_sizes_at_run_time(equation, specs, weight, shapes):
    """Batch and sequence length both left open (every keras-hub text backbone's attention)."""
    import fuselite
    from fuselite.runtime import run

    rng = np.random.default_rng(0)
    w = None if weight is None else tf.constant(rng.standard_normal(weight).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec(s, tf.float32) for s in specs])
    def f(*xs):
        return tf.einsum(equation, *xs, w) if w is not None else tf.einsum(equation, *xs)

    data = fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert()
    for batch, seq, other in [(2, 5, 3), (1, 3, 7)]:
        arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes(batch, seq, other)]
        want = f(*arrays).numpy()
        got = next(iter(run(data, arrays).values()))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5)
