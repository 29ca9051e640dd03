"""End-to-end tests of the special math and bitwise lowering rules (``fuselite.lower.math_special``): each case is a
tf.function converted with fuselite, run on stock LiteRT (XNNPACK and builtin kernels) and compared with TF eager
(``lowering_kit.py``). Integer and bool results are exact; each float case states its tolerance and why.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from lowering_kit import C, F, I, V, check_case, missing_rules

import fuselite
from fuselite.runtime import kernel_set, run

NAN, INF = np.float32(np.nan), np.float32(np.inf)


def f32(*values) -> np.ndarray:
    return np.asarray(values, np.float32)


def relative(rtol: float):
    """Compare float outputs to ``rtol`` relative to TF's values (inf, -inf and NaN where TF has them)."""

    def check(got, expected):
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=0)

    return check


def scaled(tol: float):
    """|tflite - tf| <= tol * max(1, |tf|): relative for large values, absolute near zeros (Lgamma's at 1 and 2)."""

    def check(got, expected):
        for g, e in zip(got, expected, strict=True):
            finite = np.isfinite(e)
            np.testing.assert_array_equal(g[~finite], e[~finite])
            err = np.abs(g[finite].astype(np.float64) - e[finite]) / np.maximum(1.0, np.abs(e[finite]))
            assert err.max(initial=0) <= tol, f"largest scaled error {err.max():.3g} > {tol}"

    return check


def _as_uint32(op):
    """``op`` of the int32 inputs read as uint32 (a LiteRT input cannot be uint32), the result as int64."""
    return lambda x, y: tf.cast(op(tf.cast(x, tf.uint32), tf.cast(y, tf.uint32)), tf.int64)


# |x| from 1e-30 to 20, both signs: where exp(x) - 1 and log(1 + x) lose their digits (|x| << 1) and beyond
_NEAR_ZERO = np.concatenate([s * np.logspace(-30, np.log10(20), 97) for s in (1, -1)]).astype(np.float32)
_LOG1P_ARGS = np.concatenate([np.logspace(-30, 6, 97), -np.logspace(-30, np.log10(0.999), 97)]).astype(np.float32)
# negative non-integers, the poles' neighbourhoods, the zeros at 1 and 2, large values
_LGAMMA_ARGS = np.concatenate([np.linspace(-9.95, 9.95, 200), -np.array([0.5, 1.5, 2.5, 3.001, 4.999, 7.25, 30.5]),
                               np.array([1e-20, 1e-6, 0.999, 1.001, 1.999, 2.001, 50.0, 1e4, 1e10, 1e30])])
_LGAMMA_ARGS = _LGAMMA_ARGS.astype(np.float32)

CASES = [
    # DivNoNan / MulNoNan: 0 wherever y == 0 (0 / 0, NaN / 0, inf / 0, NaN * 0, inf * 0 included)
    C("div_no_nan", lambda x, y: tf.math.divide_no_nan(x, y), F(2, 3), F(2, 3)),
    C("div_no_nan_edges", lambda x, y: tf.math.divide_no_nan(x, y),
      V(f32(1, 0, NAN, INF, -2, 3, 5), 7), V(f32(0, 0, 0, 0, 4, INF, -0.0), 7)),
    C("div_no_nan_broadcast", lambda x, y: tf.math.divide_no_nan(x, y), F(2, 3), V(f32(2, 0, -4), 3)),
    C("mul_no_nan", lambda x, y: tf.math.multiply_no_nan(x, y), F(2, 3), F(1, 3)),
    C("mul_no_nan_edges", lambda x, y: tf.math.multiply_no_nan(x, y),
      V(f32(NAN, INF, 2, 3, -INF), 5), V(f32(0, 0, NAN, 4, 0), 5)),
    # Xdivy / Xlogy / Xlog1py: 0 wherever x == 0, whatever y is (Xlogy(0, 0) = 0)
    C("xdivy", lambda x, y: tf.math.xdivy(x, y), F(2, 3), F(2, 3, lo=0.5, hi=2.0)),
    C("xdivy_edges", lambda x, y: tf.math.xdivy(x, y), V(f32(0, 0, 0, 2, 1), 5), V(f32(0, NAN, INF, 4, INF), 5)),
    C("xlogy", lambda x, y: tf.math.xlogy(x, y), F(2, 3), F(2, 3, lo=0.01, hi=10.0)),
    C("xlogy_edges", lambda x, y: tf.math.xlogy(x, y),
      V(f32(0, 0, 0, 0, 2, 1, 3), 7), V(f32(0, NAN, -1, INF, 3, 1, -2), 7)),
    # 2 * log1p(1e-8) is 2e-8 exactly in float32; the official converter's LOG(1 + y) gives 0
    C("xlog1py_edges", lambda x, y: tf.math.xlog1py(x, y),
      V(f32(0, 0, 0, 2, 1, 3, 0.5), 7), V(f32(-1, NAN, -3, 1e-8, -0.999, 2.5, -0.3), 7), check=relative(2e-6)),
    C("xlog1py", lambda x, y: tf.math.xlog1py(x, y), F(2, 3), F(2, 3, lo=-0.9, hi=3.0)),
    # Expm1 / Log1p to float32's relative precision from |x| = 1e-30 up (a few ulp: 2e-6 relative; LiteRT's EXP and
    # LOG are not correctly rounded), and inf / -inf / NaN / -1 as TF
    C("expm1", lambda x: tf.math.expm1(x), V(_NEAR_ZERO, None), check=relative(2e-6)),
    C("expm1_edges", lambda x: tf.math.expm1(x), V(f32(INF, -INF, NAN, 0, -0.0, 89, -104), 7),
      check=relative(2e-6)),
    C("log1p", lambda x: tf.math.log1p(x), V(_LOG1P_ARGS, None), check=relative(2e-6)),
    # up to 1e38: XNNPACK's LOG overflows to inf above 2^127 (tf.math.log too)
    C("log1p_edges", lambda x: tf.math.log1p(x), V(f32(INF, -1, -2, NAN, 0, -0.0, 1e38), 7),
      check=relative(2e-6)),
    C("log1p_random", lambda x: tf.math.log1p(x), F(2, 3, lo=-0.99, hi=5.0)),
    # Lgamma: Lanczos (g = 7, 9 terms) in float32 against TF's lgammaf; 1e-5 of max(1, |lgamma|) (measured
    # 1.8e-6 on both kernel sets, as the official file; the reflection's log|sin(pi x)| dominates near the poles);
    # the poles +inf, +-inf +inf, NaN NaN
    C("lgamma", lambda x: tf.math.lgamma(x), V(_LGAMMA_ARGS, None), check=scaled(1e-5)),
    C("lgamma_edges", lambda x: tf.math.lgamma(x), V(f32(0, -1, -2, -7, INF, -INF, NAN, 1, 2), 9),
      check=scaled(1e-5)),
    # Rint: ties to even, exactly
    C("rint", lambda x: tf.math.rint(x), V(f32(0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6, 1e9 + 0.5, 8388609.0,
                                              INF, -INF), 12), atol=0),
    C("rint_random", lambda x: tf.math.rint(x * 4.0), F(2, 3), atol=0, expect=["ROUND"]),
    # TruncateDiv: toward zero (-7 / 2 = -3); int32 exact, the narrow types through int32, float32 exact
    C("truncate_div_int32", lambda x, y: tf.truncatediv(x, y), I(2, 3, lo=-50, hi=50), I(2, 3, nonzero=True),
      expect=["DIV"], absent=["CAST"]),
    C("truncate_div_int32_broadcast", lambda x, y: tf.truncatediv(x, y), I(2, 3, lo=-50, hi=50),
      V(np.array([3, -2, 7], np.int32), 3)),
    C("truncate_div_int8", lambda x, y: tf.truncatediv(x, y),
      V(np.array([7, -7, -128, 127, -1, 100], np.int8), 6), V(np.array([2, 2, -1, -3, 5, -7], np.int8), 6)),
    C("truncate_div_int16", lambda x, y: tf.truncatediv(x, y),
      V(np.array([7, -7, -32768, 32767, -1], np.int16), 5), V(np.array([2, 2, 3, -3, 5], np.int16), 5)),
    C("truncate_div_uint8", lambda x, y: tf.truncatediv(x, y),
      V(np.array([7, 255, 200, 1], np.uint8), 4), V(np.array([2, 7, 255, 3], np.uint8), 4)),
    C("truncate_div_float32", lambda x, y: tf.truncatediv(x, y),
      V(f32(7, -7, 7.5, -7.5, 1, NAN, 0), 7), V(f32(2, 2, -2, -2, 3, 1, INF), 7), atol=0),
    # TruncateMod / Mod: the remainder with x's sign (C's %, fmod), exact; the official converter refuses both
    C("truncate_mod_int32", lambda x, y: tf.truncatemod(x, y), I(2, 3, lo=-50, hi=50), I(2, 3, nonzero=True)),
    C("truncate_mod_int32_edges", lambda x, y: tf.truncatemod(x, y),
      V(np.array([7, -7, 7, -7, -2**31, 2**31 - 1, 0, 6], np.int32), 8),
      V(np.array([2, 2, -2, -2, 3, -7, 5, -3], np.int32), 8)),
    C("mod_int64", lambda x, y: tf.raw_ops.Mod(x=x, y=y),
      V(np.array([7, -7, 2**40 + 3, -(2**40) - 3], np.int64), 4), V(np.array([2, 2, -5, 7], np.int64), 4)),
    C("truncate_mod_float32", lambda x, y: tf.truncatemod(x, y),
      V(f32(7.5, -7.5, 7.5, -7.5, -1e-10, 1e10, 3, INF, 2, 0), 10),
      V(f32(2, 2, -2, -2, 1, 3, INF, 2, 0, 5), 10), atol=0),
    C("mod_float32_broadcast", lambda x, y: tf.raw_ops.Mod(x=x, y=y), F(2, 3), V(f32(0.7, -0.3, 2.0), 3), atol=0),
    # IsNan / IsInf / IsFinite on NaN, +-inf, finite values
    C("is_nan", lambda x: tf.math.is_nan(x), V(f32(NAN, INF, -INF, 0, -1, 3e38), 6)),
    C("is_inf", lambda x: tf.math.is_inf(x), V(f32(NAN, INF, -INF, 0, -1, 3e38), 6)),
    C("is_finite", lambda x: tf.math.is_finite(x), V(f32(NAN, INF, -INF, 0, -1, 3e38), 6)),
    C("is_nan_of_math", lambda x: tf.math.is_nan(tf.math.log(x)), F(2, 3)),
    # Bitcast: same width, narrower (a last dim added), wider (the last dim removed), exact
    C("bitcast_f32_i32", lambda x: tf.bitcast(x, tf.int32), V(f32(1, -2, NAN, INF, 0, -0.0), 6)),
    C("bitcast_i32_f32", lambda x: tf.bitcast(x, tf.float32), V(np.array([0x3F800000, -1082130432, 0], np.int32), 3),
      atol=0),
    C("bitcast_i32_u8", lambda x: tf.bitcast(x, tf.uint8), I(2, 3, lo=-100000, hi=100000), expect=["BITCAST"]),
    C("bitcast_u8_i32", lambda x: tf.bitcast(x, tf.int32), V(np.arange(24, dtype=np.uint8).reshape(2, 3, 4), 2, 3, 4)),
    C("bitcast_f32_i16", lambda x: tf.bitcast(x, tf.int16), F(2, 3)),
    C("bitcast_i64_i32", lambda x: tf.bitcast(x, tf.int32), V(np.array([1, -1, 2**40 + 7], np.int64), 3)),
    C("bitcast_i16_f16", lambda x: tf.bitcast(x, tf.float16), V(np.array([0x3C00, -1024, 0x7C00], np.int16), 3),
      atol=0),
    C("bitcast_f64_i64", lambda x: tf.bitcast(x, tf.int64), V(np.array([1.5, -2.0, np.inf], np.float64), 3)),
    # the bitwise ops, exact: each integer width LiteRT holds, broadcasting, the sign bit
    C("bitwise_xor_int32", lambda x, y: tf.bitwise.bitwise_xor(x, y), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=-2**31, hi=2**31 - 1), expect=["BITWISE_XOR"]),
    C("bitwise_xor_broadcast", lambda x, y: tf.bitwise.bitwise_xor(x, y), I(2, 3, lo=-1000, hi=1000),
      V(np.array([0x0F0F, -1, 0], np.int32), 3)),
    C("bitwise_xor_int8", lambda x, y: tf.bitwise.bitwise_xor(x, y),
      V(np.array([-128, 127, 5, -1], np.int8), 4), V(np.array([1, -1, 3, 127], np.int8), 4)),
    C("bitwise_xor_uint8", lambda x, y: tf.bitwise.bitwise_xor(x, y),
      V(np.array([255, 128, 5, 0], np.uint8), 4), V(np.array([1, 255, 3, 7], np.uint8), 4)),
    C("bitwise_xor_int64", lambda x, y: tf.bitwise.bitwise_xor(x, y),
      V(np.array([2**62 + 5, -1, -(2**63), 12345678901], np.int64), 4),
      V(np.array([3, 2**40, 1, -98765432101], np.int64), 4)),
    C("bitwise_xor_uint32", _as_uint32(tf.bitwise.bitwise_xor), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=0, hi=2**31 - 1)),
    C("invert_int32", lambda x: tf.bitwise.invert(x), I(2, 3, lo=-2**31, hi=2**31 - 1)),
    C("invert_uint8", lambda x: tf.bitwise.invert(x), V(np.array([0, 1, 128, 255], np.uint8), 4)),
    C("invert_int64", lambda x: tf.bitwise.invert(x), V(np.array([0, -1, 2**62, -(2**63)], np.int64), 4)),
    C("invert_int16", lambda x: tf.bitwise.invert(x), V(np.array([0, -1, 32767, -32768], np.int16), 4)),
    C("bitwise_and_int32", lambda x, y: tf.bitwise.bitwise_and(x, y), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=-2**31, hi=2**31 - 1)),
    C("bitwise_or_int32", lambda x, y: tf.bitwise.bitwise_or(x, y), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=-2**31, hi=2**31 - 1)),
    C("bitwise_and_edges", lambda x, y: tf.bitwise.bitwise_and(x, y),
      V(np.array([-2**31, -1, 2**31 - 1, -2**31, 0x55555555, -7], np.int32), 6),
      V(np.array([-1, -2**31, -1, 2**31 - 1, -0x55555556, 6], np.int32), 6)),
    C("bitwise_or_edges", lambda x, y: tf.bitwise.bitwise_or(x, y),
      V(np.array([-2**31, 0, 2**31 - 1, -2**31, 0x55555555, -7], np.int32), 6),
      V(np.array([2**31 - 1, -2**31, 0, 0, -0x55555556, 6], np.int32), 6)),
    C("bitwise_and_broadcast", lambda x, y: tf.bitwise.bitwise_and(x, y), I(2, 3, lo=-2**31, hi=2**31 - 1),
      V(np.array(0x00FF00FF, np.int32))),
    C("bitwise_and_int8", lambda x, y: tf.bitwise.bitwise_and(x, y),
      V(np.array([-128, 127, -1, -3, 85], np.int8), 5), V(np.array([-1, -128, -128, 6, -86], np.int8), 5)),
    C("bitwise_or_uint8", lambda x, y: tf.bitwise.bitwise_or(x, y),
      V(np.array([128, 127, 255, 0, 85], np.uint8), 5), V(np.array([1, 128, 0, 0, 170], np.uint8), 5)),
    C("bitwise_or_int16", lambda x, y: tf.bitwise.bitwise_or(x, y),
      V(np.array([-32768, 32767, -1, 0, 21845], np.int16), 5), V(np.array([1, -32768, 0, 0, -21846], np.int16), 5)),
    C("bitwise_and_int64", lambda x, y: tf.bitwise.bitwise_and(x, y),
      V(np.array([2**62 + 5, -1, -(2**63), 12345678901], np.int64), 4),
      V(np.array([-3, 2**40, -1, -98765432101], np.int64), 4)),
    C("bitwise_or_int64", lambda x, y: tf.bitwise.bitwise_or(x, y),
      V(np.array([2**62 + 5, -1, -(2**63), 12345678901], np.int64), 4),
      V(np.array([-3, 2**40, 1, -98765432101], np.int64), 4)),
    C("bitwise_and_uint32", _as_uint32(tf.bitwise.bitwise_and), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=-2**31, hi=2**31 - 1)),
    # shifts: arithmetic right shifts of negatives, shifts clamped to [0, bits - 1] as TF (40 and -1)
    C("right_shift_int32", lambda x, y: tf.bitwise.right_shift(x, y), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=0, hi=32), expect=["RIGHT_SHIFT"]),
    C("right_shift_clamped", lambda x, y: tf.bitwise.right_shift(x, y),
      V(np.array([-100, -3, 5, 2**30], np.int32), 4), V(np.array([31, 40, -1, 3], np.int32), 4)),
    C("right_shift_int8", lambda x, y: tf.bitwise.right_shift(x, y),
      V(np.array([-128, 127, -3, 64], np.int8), 4), V(np.array([1, 3, 9, 6], np.int8), 4)),
    C("right_shift_broadcast", lambda x, y: tf.bitwise.right_shift(x, y), I(2, 3, lo=-1000, hi=1000),
      V(np.array(2, np.int32))),
    C("right_shift_int64", lambda x, y: tf.bitwise.right_shift(x, y),
      V(np.array([2**62 + 12345, -(2**63), -1, -5, 2**40 + 7, -(2**40) - 7, 123456789012, -98765432101, 7, -7],
                 np.int64), 10),
      V(np.array([0, 63, 5, 1, 31, 32, 33, 40, 100, -3], np.int64), 10)),
    C("right_shift_int64_random", lambda x, y: tf.bitwise.right_shift(x, tf.cast(y, tf.int64)),
      V(np.random.default_rng(1).integers(-2**63, 2**63 - 1, (4, 16), dtype=np.int64), 4, 16), I(4, 16, lo=0, hi=64)),
    C("left_shift_int64", lambda x, y: tf.bitwise.left_shift(x, y),
      V(np.array([1, 1, -3, 5, 2**40 + 7, -(2**40) - 7, 3, 1, 123456789012, 7], np.int64), 10),
      V(np.array([0, 63, 62, 31, 32, 33, 40, 100, 20, -3], np.int64), 10)),
    C("left_shift_int64_random", lambda x, y: tf.bitwise.left_shift(x, tf.cast(y, tf.int64)),
      V(np.random.default_rng(2).integers(-2**63, 2**63 - 1, (4, 16), dtype=np.int64), 4, 16), I(4, 16, lo=0, hi=64)),
    C("left_shift_int32", lambda x, y: tf.bitwise.left_shift(x, y), I(2, 3, lo=-2**31, hi=2**31 - 1),
      I(2, 3, lo=0, hi=32)),
    C("left_shift_clamped", lambda x, y: tf.bitwise.left_shift(x, y),
      V(np.array([1, -3, 5, 3, 2**30], np.int32), 5), V(np.array([31, 40, -1, 0, 1], np.int32), 5)),
    C("left_shift_int8", lambda x, y: tf.bitwise.left_shift(x, y),
      V(np.array([1, 3, 5, -1, 100], np.int8), 5), V(np.array([7, 20, -1, 7, 2], np.int8), 5)),
    C("left_shift_uint8", lambda x, y: tf.bitwise.left_shift(x, y),
      V(np.array([1, 255, 5, 3], np.uint8), 4), V(np.array([7, 1, 9, 6], np.uint8), 4)),
    C("left_shift_uint32", _as_uint32(tf.bitwise.left_shift), I(2, 3, lo=-2**31, hi=2**31 - 1), I(2, 3, lo=0, hi=32)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_lowering_rule(case):
    check_case(case)


def test_every_rule_of_the_family_is_exercised():
    assert missing_rules(CASES, ["fuselite.lower.math_special"]) == []


def _official(fn, x: np.ndarray, builtin_kernels: bool) -> np.ndarray:
    """``fn(x)`` as the official converter's file computes it on LiteRT (``kernel_set``: XNNPACK or builtin)."""
    # a static shape: the official file of Lgamma with a dynamic one fails to prepare ("[217] and [0] are not
    # broadcastable")
    cf = tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
    model = tf.lite.TFLiteConverter.from_concrete_functions([cf]).convert()
    interp = Interpreter(model_content=model, **kernel_set(builtin_kernels))
    index = interp.get_input_details()[0]["index"]
    interp.allocate_tensors()
    interp.set_tensor(index, x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


@pytest.mark.parametrize("fn, x", [(tf.math.expm1, _NEAR_ZERO), (tf.math.log1p, _LOG1P_ARGS),
                                   (tf.math.lgamma, _LGAMMA_ARGS)], ids=["expm1", "log1p", "lgamma"])
def test_at_least_as_accurate_as_the_official_converter(fn, x):
    # the largest error relative to max(1e-30, |tf|) (expm1, log1p) or max(1, |tf|) (lgamma), on both kernel sets
    cf = tf.function(fn).get_concrete_function(tf.TensorSpec([None], tf.float32))
    ours = fuselite.Converter.from_concrete_functions([cf]).convert()
    expected = fn(x).numpy().astype(np.float64)
    floor = 1.0 if fn is tf.math.lgamma else 1e-30
    finite = np.isfinite(expected)

    def error(got):
        return np.max(np.abs(got[finite] - expected[finite]) / np.maximum(floor, np.abs(expected[finite])))

    for builtin in (False, True):
        mine = error(next(iter(run(ours, [x], builtin_kernels=builtin).values())))
        theirs = error(_official(fn, x, builtin))
        kernels = "builtin kernels" if builtin else "XNNPACK"
        print(f"{fn.__name__}, {kernels}: fuselite {mine:.3g}, official {theirs:.3g}")
        assert mine <= theirs, f"{fn.__name__}: fuselite {mine:.3g} > official {theirs:.3g}"
        if fn is not tf.math.lgamma:
            assert mine < 2e-6 < theirs  # the official form loses every digit near 0


_S = tf.TensorSpec


@pytest.mark.parametrize("fn, specs, match", [
    (tf.math.expm1, [_S([3], tf.float64)], "float64 is not supported: LiteRT's kernels this op is composed of"),
    (tf.math.lgamma, [_S([3], tf.float16)], "float16 is not supported"),
    (lambda x: tf.bitwise.right_shift(tf.cast(x, tf.uint64), tf.cast(x, tf.uint64)), [_S([3], tf.int32)],
     "no uint64"),
    (tf.truncatediv, [_S([3], tf.int64)] * 2, "LiteRT's DIV divides float32 and int32 only"),
    (tf.bitwise.bitwise_xor, [_S([1, 2, 1, 2, 3], tf.int32), _S([2, 3], tf.int32)], "broadcast up to 4 dims only"),
    (lambda x: tf.bitwise.invert(tf.cast(x, tf.uint64)), [_S([3], tf.int32)], "no uint64"),
], ids=["expm1_float64", "lgamma_float16", "right_shift_uint64", "truncate_div_int64",
        "xor_broadcast_5d", "invert_uint64"])
def test_refused_variants_say_why(fn, specs, match):
    cf = tf.function(fn).get_concrete_function(*specs)
    with pytest.raises(fuselite.ConversionError, match=match):
        fuselite.Converter.from_concrete_functions([cf]).convert()
