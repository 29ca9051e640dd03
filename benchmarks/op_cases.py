"""The cases of the op-coverage benchmark (``op_coverage.py``): every TF op that ``tf.lite.TFLiteConverter``
legalizes to a TFLite builtin, one small function each (more where users set attribute variants).

A case is ``C(id, op, fn, *inputs, ...)``: ``fn`` is traced as a ``tf.function`` for the inputs' specs, ``op`` is
the TF op type the case exercises (it must appear in the traced graph), ``inputs`` are fixed arrays or random
draws (``f``, ``i``, ``b``: seeded by the case id, so every run feeds the same numbers). A stateful case (variables,
tables) passes ``make=``: a factory returning ``(fn, trackable)``, called once per conversion and once for the TF
reference, so each starts from the same state.

How a result is judged (:func:`judge`):

* ``"values"`` (the default): every output's dtype and shape equal to TF eager's; integers and bools exactly;
  floats (and complex) within ``tol`` × max(1, max |TF|) with ``tol = 1e-5`` unless the case states more and why;
  NaN where TF has NaN;
* ``"random"``: dtype and shape, and ``check(values)`` of the case: a distribution check (random ops);
* ``"shape"``: dtype and shape only (``Empty``: its values are undefined).

``SOURCES`` names where the official converter handles each op (files under ``tensorflow/compiler/mlir``);
``OFFICIAL_WRONG`` lists cases where the official converter is known to give wrong results.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

TOL = 1e-5

# where each source abbreviation points (tensorflow/compiler/mlir/...)
FILES = {
    "LP": "lite/transforms/legalize_patterns.td",
    "LT": "lite/transforms/legalize_tf.cc",
    "LTD": "tensorflow/transforms/lower_tf.td (TF::PopulateLoweringTFPatterns, pulled in by legalize_tf.cc)",
    "LTC": "tensorflow/transforms/lower_tf.cc (TF::PopulateLoweringTFPatterns)",
    "PT": "lite/transforms/prepare_tf.cc / prepare_patterns.td (ConvertTFConv2D, ConvertRfftToRfft2d, "
          "PreparePerChannelFakeQuant, ...)",
    "TL": "lite/transforms/lower_static_tensor_list.cc",
    "CF": "lite/transforms/legalize_tf_while.cc and the functional If/While legalization of tf_tfl_passes.cc",
    "VAR": "lite/transforms/legalize_variables.td",
    "DRO": "tensorflow/transforms/decompose_resource_ops.td (then legalize_variables.td)",
    "HT": "lite/transforms/legalize_hashtables.cc",
    "CAN": "TF dialect canonicalization / graph import (tensorflow/ir/tf_ops*.cc folders, import of the GraphDef)",
    "INL": "the inliner of tf_tfl_passes.cc (function calls)",
    "OBS": "measured: tf.lite.TFLiteConverter (TF 2.21) lowers it to builtins by default; the pattern's file is not "
           "traced in this survey (TF canonicalization, prepare_tf.cc or, for XLA ops, the TF -> HLO -> TFL path)",
}


class In(NamedTuple):
    """One input: a fixed value, or a random draw of ``shape`` and ``dtype`` (``spec``: the traced shape)."""

    shape: tuple
    dtype: Any
    lo: float | None = None
    hi: float | None = None
    value: Any = None
    spec: tuple | None = None  # the TensorSpec shape when it differs (None dims: dynamic)


def f(*shape, lo=None, hi=None, spec=None) -> In:
    """A float32 input: standard normal, or uniform in [lo, hi)."""
    return In(tuple(shape), np.float32, lo, hi, None, spec)


def i(*shape, lo=-5, hi=6, dtype=np.int32, spec=None) -> In:
    """An integer input, uniform in [lo, hi)."""
    return In(tuple(shape), dtype, lo, hi, None, spec)


def b(*shape) -> In:
    """A bool input."""
    return In(tuple(shape), np.bool_)


def v(value, dtype=None, spec=None) -> In:
    """A fixed input value."""
    given = isinstance(value, np.ndarray | np.generic)
    a = np.asarray(value, dtype=dtype)
    if not given and dtype is None:  # Python numbers: float32 and int32, as TF makes them
        a = a.astype({np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32}.get(a.dtype, a.dtype))
    return In(a.shape, a.dtype, value=a, spec=spec)


class Case(NamedTuple):
    id: str
    op: str  # the TF op type this case exercises
    fn: Callable | None
    inputs: tuple
    judge: str = "values"  # values | random | shape
    tol: float = TOL
    why: str = ""  # why a case states a larger tol, or a note
    check: Callable | None = None  # random cases: check(list of output arrays) -> error text or None
    make: Callable | None = None  # stateful cases: () -> (fn, trackable)

    @property
    def source(self) -> str:
        return SOURCES[self.op]


def C(id, op, fn, *inputs, judge="values", tol=TOL, why="", check=None, make=None) -> Case:
    return Case(id, op, fn, tuple(inputs), judge, tol, why, check, make)


def seed(case: Case) -> int:
    return zlib.crc32(case.id.encode())


def values_of(case: Case) -> list[np.ndarray]:
    """The case's inputs (the same every run)."""
    rng = np.random.default_rng(seed(case))
    out = []
    for s in case.inputs:
        if s.value is not None:
            out.append(s.value)
        elif s.dtype == np.float32:
            x = rng.standard_normal(s.shape) if s.lo is None else rng.uniform(s.lo, s.hi, size=s.shape)
            out.append(np.asarray(x, np.float32))
        elif s.dtype == np.bool_:
            out.append(rng.integers(0, 2, size=s.shape).astype(np.bool_))
        else:
            out.append(rng.integers(s.lo, s.hi, size=s.shape).astype(s.dtype))
    return out


def specs_of(case: Case) -> list[tf.TensorSpec]:
    return [tf.TensorSpec(s.spec if s.spec is not None else s.shape, tf.as_dtype(np.dtype(s.dtype)), name=f"in{k}")
            for k, s in enumerate(case.inputs)]


# -------------------------------------------------------------------------------------------------------------
# judging
# -------------------------------------------------------------------------------------------------------------


def judge(case: Case, got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    """None when ``got`` (one kernel set's outputs) is right for ``want`` (TF eager's), else what is wrong."""
    if len(got) != len(want):
        return f"{len(got)} outputs, TF has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype:
            return f"output {k}: dtype {g.dtype}, TF {w.dtype}"
        if g.shape != w.shape:
            return f"output {k}: shape {list(g.shape)}, TF {list(w.shape)}"
    if case.judge == "shape":
        return None
    if case.judge == "random":
        return case.check(got) if case.check else None
    for k, (g, w) in enumerate(zip(got, want)):
        if w.dtype.kind in "fc":
            nan = np.isnan(w)
            if np.any(np.isnan(g) != nan):
                return f"output {k}: NaN at {int(np.sum(np.isnan(g) != nan))} places where TF differs"
            fin = ~nan
            if not fin.any():
                continue
            wf, gf = w[fin], g[fin]
            inf = np.isinf(wf)
            if np.any(gf[inf] != wf[inf]):
                return f"output {k}: infinities differ"
            if (~inf).any():
                err = float(np.max(np.abs(gf[~inf] - wf[~inf])))
                limit = case.tol * max(1.0, float(np.max(np.abs(wf[~inf]))))
                if not err <= limit:
                    return f"output {k}: max abs error {err:.3g} > {limit:.3g}"
        elif w.dtype.kind in "OSU":
            if not np.array_equal(g.astype(object), w.astype(object)):
                return f"output {k}: strings differ"
        elif not np.array_equal(g, w):
            bad = int(np.sum(g != w))
            return f"output {k}: {bad} of {w.size} values differ (e.g. {g.ravel()[np.argmax((g != w).ravel())]} " \
                   f"for {w.ravel()[np.argmax((g != w).ravel())]})"
    return None


def uniform_check(lo: float, hi: float) -> Callable:
    """Random uniform in [lo, hi): every value in range, mean and spread near the uniform's."""
    def check(out):
        x = out[0].astype(np.float64).ravel()
        if x.min() < lo or x.max() >= hi:
            return f"values outside [{lo}, {hi}): {x.min():.3g} .. {x.max():.3g}"
        mean, std = (lo + hi) / 2, (hi - lo) / np.sqrt(12)
        if abs(x.mean() - mean) > 5 * std / np.sqrt(x.size) or abs(x.std() - std) > 0.1 * std:
            return f"mean {x.mean():.3g}, std {x.std():.3g}: not uniform on [{lo}, {hi})"
        if len(np.unique(x)) < x.size // 2:
            return "values repeat: not random"
        return None
    return check


def normal_check(mean: float, std: float) -> Callable:
    def check(out):
        x = out[0].astype(np.float64).ravel()
        if abs(x.mean() - mean) > 5 * std / np.sqrt(x.size) or abs(x.std() - std) > 0.1 * std:
            return f"mean {x.mean():.3g}, std {x.std():.3g}: not N({mean}, {std}^2)"
        if len(np.unique(x)) < x.size // 2:
            return "values repeat: not random"
        return None
    return check


def categorical_check(probs: np.ndarray) -> Callable:
    """tf.random.categorical: each row's draws in range, their frequencies near the softmax's."""
    def check(out):
        x = out[0]
        if x.min() < 0 or x.max() >= probs.shape[1]:
            return f"classes outside [0, {probs.shape[1]})"
        for r in range(x.shape[0]):
            freq = np.bincount(x[r], minlength=probs.shape[1]) / x.shape[1]
            if np.max(np.abs(freq - probs[r])) > 5 * np.sqrt(0.25 / x.shape[1]):
                return f"row {r}: frequencies {np.round(freq, 3).tolist()} far from {np.round(probs[r], 3).tolist()}"
        return None
    return check


# -------------------------------------------------------------------------------------------------------------
# the cases
# -------------------------------------------------------------------------------------------------------------

raw = tf.raw_ops


def _w(seed_: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed_).standard_normal(shape).astype(np.float32)


def _variable_case(body: Callable, init) -> Callable:
    """make= for a case on a variable: ``body(var, *inputs)``."""
    def make():
        m = tf.Module()
        m.var = tf.Variable(np.asarray(init))
        return (lambda *xs: body(m.var, *xs)), m
    return make


def _table_case(keys, values, default, body: Callable) -> Callable:
    def make():
        m = tf.Module()
        m.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), default)
        return (lambda *xs: body(m.table, *xs)), m
    return make


def _call_case(stateful: bool) -> Callable:
    """A nested tf.function call (PartitionedCall, or StatefulPartitionedCall when it reads a variable)."""
    def make():
        m = tf.Module()
        m.var = tf.Variable(np.float32(2.0))

        @tf.function(autograph=False)
        def inner(x):
            return x * m.var if stateful else tf.tanh(x) * 2.0

        return (lambda x: inner(x) + 1.0), m
    return make


def _while_stateful() -> tuple:
    m = tf.Module()
    m.var = tf.Variable(np.float32(0.0))

    def fn(x):
        def body(k, acc):
            m.var.assign_add(1.0)
            return k + 1, acc * 0.5 + m.var
        return tf.while_loop(lambda k, acc: k < 3, body, [tf.constant(0), x])[1]
    return fn, m


def _if_stateful() -> tuple:
    m = tf.Module()
    m.var = tf.Variable(np.float32(1.5))

    def fn(x, p):
        def yes():
            m.var.assign_add(1.0)
            return x * m.var
        return tf.cond(p, yes, lambda: x - 1.0)
    return fn, m


_BOXES = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                   [0, 100, 1, 101]], np.float32)
_SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)
_LOGITS = np.log(np.array([[0.2, 0.3, 0.5], [0.7, 0.2, 0.1]], np.float32))
_PROBS = np.exp(_LOGITS) / np.exp(_LOGITS).sum(1, keepdims=True)
_MIXED = np.array([[-np.inf, -2.5, -0.5, 0.0], [0.5, 1.5, 2.5, np.inf], [np.nan, 3.0, -3.5, 1e30]], np.float32)
_COMPLEX = (np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.5]]) + 1j * np.array([[0.5, 2.0, -1.0], [0.0, -4.0, 2.5]])
            ).astype(np.complex64)
_HALVES = np.array([[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, 3.49, -3.51]], np.float32)


def _xla():
    from tensorflow.compiler.tf2xla.python import xla
    from tensorflow.compiler.xla import xla_data_pb2

    return xla, xla_data_pb2


def _xla_gather(x, k):
    xla, pb = _xla()
    dims = pb.GatherDimensionNumbers(offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0],
                                     index_vector_dim=1)
    return xla.gather(x, k, dimension_numbers=dims, slice_sizes=[1, 3], indices_are_sorted=False)


def _xla_conv(x):
    xla, pb = _xla()
    dims = pb.ConvolutionDimensionNumbers(
        input_batch_dimension=0, input_feature_dimension=3, input_spatial_dimensions=[1, 2],
        kernel_input_feature_dimension=2, kernel_output_feature_dimension=3, kernel_spatial_dimensions=[0, 1],
        output_batch_dimension=0, output_feature_dimension=3, output_spatial_dimensions=[1, 2])
    return xla.conv(x, _w(40, 3, 3, 2, 4), window_strides=[1, 1], padding=[[1, 1], [0, 1]], lhs_dilation=[1, 1],
                    rhs_dilation=[1, 1], dimension_numbers=dims)


def _tensor_list_push_back(x):
    handle = raw.EmptyTensorList(element_shape=tf.constant([3], tf.int32), max_num_elements=-1,
                                 element_dtype=tf.float32)
    for k in range(2):
        handle = raw.TensorListPushBack(input_handle=handle, tensor=x[k])
    return raw.TensorListStack(input_handle=handle, element_shape=tf.constant([3], tf.int32),
                               element_dtype=tf.float32, num_elements=2)


def _asserted(x):
    with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(x > -100.0), [x])]):
        return x + 1.0


def _tensor_array_loop(x):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[3])

    def body(k, t):
        return k + 1, t.write(k, x[k] * tf.cast(k, tf.float32))
    return tf.while_loop(lambda k, t: k < 4, body, [tf.constant(0), ta])[1].stack()


CASES: list[Case] = [
    # ---------------------------------------------------------------- elementwise unary (legalize_patterns.td)
    C("abs", "Abs", tf.abs, f(2, 5)),
    C("abs_int", "Abs", tf.abs, i(2, 5)),
    C("ceil", "Ceil", tf.math.ceil, f(2, 5, lo=-3, hi=3)),
    C("cos", "Cos", tf.cos, f(2, 5, lo=-4, hi=4)),
    C("elu", "Elu", tf.nn.elu, f(2, 5)),
    C("exp", "Exp", tf.exp, f(2, 5)),
    C("floor", "Floor", tf.floor, f(2, 5, lo=-3, hi=3)),
    C("leaky_relu", "LeakyRelu", lambda x: tf.nn.leaky_relu(x, alpha=0.3), f(2, 5)),
    C("log", "Log", tf.math.log, f(2, 5, lo=0.1, hi=4)),
    C("log1p", "Log1p", tf.math.log1p, f(2, 5, lo=-0.5, hi=4)),
    C("logical_not", "LogicalNot", tf.logical_not, b(2, 5)),
    C("log_softmax", "LogSoftmax", tf.nn.log_softmax, f(2, 5)),
    C("neg", "Neg", tf.negative, f(2, 5)),
    C("neg_int", "Neg", tf.negative, i(2, 5)),
    C("relu", "Relu", tf.nn.relu, f(2, 5)),
    C("relu_int", "Relu", tf.nn.relu, i(2, 5)),
    C("relu_int64", "Relu", tf.nn.relu, i(2, 5, dtype=np.int64)),
    C("softsign", "Softsign", tf.nn.softsign, f(2, 5)),
    C("relu6", "Relu6", tf.nn.relu6, f(2, 5, lo=-4, hi=10)),
    C("round", "Round", tf.round, v(_HALVES)),
    C("rsqrt", "Rsqrt", tf.math.rsqrt, f(2, 5, lo=0.1, hi=4)),
    C("sigmoid", "Sigmoid", tf.sigmoid, f(2, 5)),
    C("sin", "Sin", tf.sin, f(2, 5, lo=-4, hi=4)),
    C("softmax", "Softmax", tf.nn.softmax, f(2, 5)),
    C("softmax_axis0", "Softmax", lambda x: tf.nn.softmax(x, axis=0), f(3, 4)),
    C("softplus", "Softplus", tf.nn.softplus, f(2, 5, lo=-5, hi=5)),
    C("sqrt", "Sqrt", tf.sqrt, f(2, 5, lo=0, hi=4)),
    C("square", "Square", tf.square, f(2, 5)),
    C("square_int", "Square", tf.square, i(2, 5)),
    C("tanh", "Tanh", tf.tanh, f(2, 5)),
    C("sign", "Sign", tf.sign, v(np.array([[-2.0, 0.0, 3.0], [0.5, -0.0, -1e-3]], np.float32))),
    C("sign_int", "Sign", tf.sign, i(2, 5)),
    C("zeros_like", "ZerosLike", lambda x: tf.zeros_like(x) + 1.0, f(2, 3, spec=(None, 3))),
    C("zeros_like_int", "ZerosLike", tf.zeros_like, i(2, 3, spec=(2, None))),
    C("cast_float_int", "Cast", lambda x: tf.cast(x, tf.int32), f(2, 5, lo=-4, hi=4)),
    C("cast_int_float", "Cast", lambda x: tf.cast(x, tf.float32), i(2, 5)),
    C("cast_bool_float", "Cast", lambda x: tf.cast(x, tf.float32), b(2, 5)),
    C("cast_int_int64", "Cast", lambda x: tf.cast(x, tf.int64) * 3, i(2, 5)),
    C("bitcast", "Bitcast", lambda x: tf.bitcast(x, tf.int32), f(2, 5)),
    # ---------------------------------------------------------------- elementwise binary
    C("add", "Add", lambda x, y: raw.Add(x=x, y=y), f(2, 5), f(2, 5)),
    C("add_v2", "AddV2", tf.add, f(2, 5), f(2, 5)),
    C("add_v2_broadcast", "AddV2", tf.add, f(2, 1, 5), f(3, 1)),
    C("add_v2_int", "AddV2", tf.add, i(2, 5), i(5)),
    C("add_n", "AddN", lambda x, y, z: tf.add_n([x, y, z]), f(2, 5), f(2, 5), f(2, 5)),
    C("sub", "Sub", tf.subtract, f(2, 5), f(5)),
    C("sub_int", "Sub", tf.subtract, i(2, 5), i(2, 5)),
    C("mul", "Mul", tf.multiply, f(2, 5), f(2, 5)),
    C("mul_int_broadcast", "Mul", tf.multiply, i(2, 1, 5), i(3, 1)),
    C("real_div", "RealDiv", tf.divide, f(2, 5), f(2, 5, lo=0.5, hi=3)),
    C("div", "Div", lambda x, y: raw.Div(x=x, y=y), f(2, 5), f(2, 5, lo=0.5, hi=3)),
    C("div_int", "Div", lambda x, y: raw.Div(x=x, y=y), i(2, 5, lo=0, hi=20), i(2, 5, lo=1, hi=5)),
    C("floor_div", "FloorDiv", tf.math.floordiv, f(2, 5), f(2, 5, lo=0.5, hi=3)),
    C("floor_div_int", "FloorDiv", tf.math.floordiv, i(2, 5, lo=-20, hi=20), v([[3, -3, 4, -4, 7]])),
    C("floor_mod", "FloorMod", tf.math.floormod, f(2, 5, lo=-5, hi=5), f(2, 5, lo=0.5, hi=3)),
    C("floor_mod_int", "FloorMod", tf.math.floormod, i(2, 5, lo=-20, hi=20), v([[3, -3, 4, -4, 7]])),
    C("maximum", "Maximum", tf.maximum, f(2, 5), f(5)),
    C("minimum", "Minimum", tf.minimum, f(2, 5), f(5)),
    C("minimum_int", "Minimum", tf.minimum, i(2, 5), i(2, 5)),
    C("pow", "Pow", tf.pow, f(2, 5, lo=0.5, hi=2), f(2, 5, lo=-2, hi=2)),
    C("pow_int", "Pow", tf.pow, i(2, 5, lo=-3, hi=4), i(2, 5, lo=0, hi=4)),
    C("squared_difference", "SquaredDifference", tf.math.squared_difference, f(2, 5), f(5)),
    C("atan2", "Atan2", tf.atan2, f(2, 5), f(2, 5)),
    C("bitwise_xor", "BitwiseXor", tf.bitwise.bitwise_xor, i(2, 5, lo=-100, hi=100), i(2, 5, lo=-100, hi=100)),
    C("right_shift", "RightShift", tf.bitwise.right_shift, i(2, 5, lo=-100, hi=100), i(2, 5, lo=0, hi=5)),
    C("less", "Less", tf.less, f(2, 5), f(5)),
    C("less_equal", "LessEqual", tf.less_equal, i(2, 5), i(2, 5)),
    C("greater", "Greater", tf.greater, f(2, 5), f(2, 5)),
    C("greater_equal", "GreaterEqual", tf.greater_equal, i(2, 5), i(5)),
    C("equal", "Equal", tf.equal, i(2, 5, lo=0, hi=3), i(2, 5, lo=0, hi=3)),
    C("equal_float", "Equal", tf.equal, v([[1.0, 2.0, 3.0]]), v([[1.0, 2.5, 3.0]])),
    C("not_equal", "NotEqual", tf.not_equal, i(2, 5, lo=0, hi=3), i(5, lo=0, hi=3)),
    C("logical_and", "LogicalAnd", tf.logical_and, b(2, 5), b(2, 5)),
    C("logical_or", "LogicalOr", tf.logical_or, b(2, 5), b(5)),
    C("bias_add", "BiasAdd", tf.nn.bias_add, f(2, 3, 4), f(4)),
    C("select", "Select", lambda c, x, y: raw.Select(condition=c, x=x, y=y), b(2, 5), f(2, 5), f(2, 5)),
    C("select_v2", "SelectV2", tf.where, b(2, 5), f(2, 5), f(2, 5)),
    C("select_v2_broadcast", "SelectV2", tf.where, b(2, 1), f(2, 5), f(5)),
    # ---------------------------------------------------------------- lower_tf.td elementwise
    C("div_no_nan", "DivNoNan", tf.math.divide_no_nan, f(2, 5), v([[1.0, 0.0, 2.0, -0.5, 0.0], [0.0, 3.0, 1.0, 0.0, 4.0]])),
    C("mul_no_nan", "MulNoNan", tf.math.multiply_no_nan, v([[1.0, np.inf, 2.0]]), v([[0.0, 0.0, 3.0]])),
    C("truncate_div", "TruncateDiv", tf.truncatediv, i(2, 5, lo=-20, hi=20), v([[3, -3, 4, -4, 7]])),
    C("inv", "Inv", lambda x: raw.Inv(x=x), f(2, 5, lo=0.5, hi=3)),
    C("reciprocal", "Reciprocal", tf.math.reciprocal, f(2, 5, lo=0.5, hi=3)),
    C("is_inf", "IsInf", tf.math.is_inf, v(_MIXED)),
    C("is_nan", "IsNan", tf.math.is_nan, v(_MIXED)),
    C("is_finite", "IsFinite", tf.math.is_finite, v(_MIXED)),
    C("rint", "Rint", tf.math.rint, v(_HALVES)),
    C("xdivy", "Xdivy", tf.math.xdivy, v([[0.0, 1.0, 2.0]]), v([[0.0, 2.0, 0.5]])),
    C("xlogy", "Xlogy", tf.math.xlogy, v([[0.0, 1.0, 2.0]]), v([[0.0, 2.0, 0.5]])),
    C("xlog1py", "Xlog1py", tf.math.xlog1py, v([[0.0, 1.0, 2.0]]), v([[-1.0, 2.0, 0.5]])),
    C("selu", "Selu", tf.nn.selu, f(2, 5)),
    C("expm1", "Expm1", tf.math.expm1, f(2, 5)),
    C("lgamma", "Lgamma", tf.math.lgamma, f(2, 5, lo=0.2, hi=6), tol=1e-4,
      why="TF's lgamma is an approximation of its own; 1e-4 of the range"),
    C("ones_like", "OnesLike", lambda x: tf.ones_like(x) * 2.0, f(2, 3, spec=(None, 3))),
    C("l2_loss", "L2Loss", tf.nn.l2_loss, f(3, 4)),
    C("size", "Size", tf.size, f(3, 4, spec=(3, None))),
    C("size_int64", "Size", lambda x: tf.size(x, out_type=tf.int64), f(3, 4, spec=(None, 4))),
    # ---------------------------------------------------------------- gradients
    C("sigmoid_grad", "SigmoidGrad", lambda y, dy: raw.SigmoidGrad(y=y, dy=dy), f(2, 5, lo=0, hi=1), f(2, 5)),
    C("tanh_grad", "TanhGrad", lambda y, dy: raw.TanhGrad(y=y, dy=dy), f(2, 5, lo=-1, hi=1), f(2, 5)),
    C("rsqrt_grad", "RsqrtGrad", lambda y, dy: raw.RsqrtGrad(y=y, dy=dy), f(2, 5, lo=0.5, hi=2), f(2, 5)),
    C("sqrt_grad", "SqrtGrad", lambda y, dy: raw.SqrtGrad(y=y, dy=dy), f(2, 5, lo=0.5, hi=2), f(2, 5)),
    C("selu_grad", "SeluGrad", lambda g, o: raw.SeluGrad(gradients=g, outputs=o), f(2, 5), f(2, 5)),
    C("bias_add_grad", "BiasAddGrad", lambda g: raw.BiasAddGrad(out_backprop=g), f(2, 3, 4)),
    C("softmax_cross_entropy", "SoftmaxCrossEntropyWithLogits",
      lambda lab, lg: tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(lab), lg), f(3, 5), f(3, 5)),
    C("sparse_softmax_cross_entropy", "SparseSoftmaxCrossEntropyWithLogits",
      lambda lab, lg: tf.nn.sparse_softmax_cross_entropy_with_logits(lab, lg), i(3, lo=0, hi=5), f(3, 5)),
    # ---------------------------------------------------------------- reductions
    C("sum", "Sum", lambda x: tf.reduce_sum(x, axis=1), f(3, 4)),
    C("sum_keepdims_int", "Sum", lambda x: tf.reduce_sum(x, axis=[0, 2], keepdims=True), i(2, 3, 4)),
    C("mean", "Mean", lambda x: tf.reduce_mean(x, axis=-1), f(3, 4)),
    C("mean_keepdims", "Mean", lambda x: tf.reduce_mean(x, axis=[1, 2], keepdims=True), f(2, 3, 4, 5)),
    C("max", "Max", lambda x: tf.reduce_max(x, axis=0), f(3, 4)),
    C("max_int_all", "Max", tf.reduce_max, i(3, 4)),
    C("min", "Min", lambda x: tf.reduce_min(x, axis=1, keepdims=True), f(3, 4)),
    C("prod", "Prod", lambda x: tf.reduce_prod(x, axis=1), f(3, 4)),
    C("prod_int", "Prod", lambda x: tf.reduce_prod(x, axis=0), i(3, 4)),
    C("any", "Any", lambda x: tf.reduce_any(x, axis=1), b(3, 4)),
    C("all", "All", lambda x: tf.reduce_all(x, axis=0), b(3, 4)),
    C("arg_max", "ArgMax", lambda x: tf.argmax(x, axis=1), f(3, 5)),
    C("arg_max_int32", "ArgMax", lambda x: tf.argmax(x, axis=0, output_type=tf.int32), f(3, 5)),
    C("arg_min", "ArgMin", lambda x: tf.argmin(x, axis=1), f(3, 5)),
    C("arg_min_int_input", "ArgMin", lambda x: tf.argmin(x, axis=-1, output_type=tf.int32), v([[3, 1, 1, 4]])),
    C("cumsum", "Cumsum", lambda x: tf.cumsum(x, axis=1), f(3, 4)),
    C("cumsum_exclusive_reverse", "Cumsum", lambda x: tf.cumsum(x, axis=0, exclusive=True, reverse=True), f(3, 4)),
    C("cumsum_int", "Cumsum", lambda x: tf.cumsum(x, axis=1), i(3, 4)),
    C("segment_sum", "SegmentSum", lambda d, s: tf.math.segment_sum(d, s), f(5, 3), v([0, 0, 1, 2, 2])),
    C("unsorted_segment_sum", "UnsortedSegmentSum", lambda d, s: tf.math.unsorted_segment_sum(d, s, 3),
      f(5, 3), v([2, 0, 1, 0, 2])),
    C("unsorted_segment_max", "UnsortedSegmentMax", lambda d, s: tf.math.unsorted_segment_max(d, s, 3),
      f(5, 3), v([2, 0, 1, 0, 2])),
    C("unsorted_segment_min", "UnsortedSegmentMin", lambda d, s: tf.math.unsorted_segment_min(d, s, 3),
      f(5, 3), v([2, 0, 1, 0, 2])),
    C("unsorted_segment_prod", "UnsortedSegmentProd", lambda d, s: tf.math.unsorted_segment_prod(d, s, 3),
      f(5, 3), v([2, 0, 1, 0, 2])),
    # ---------------------------------------------------------------- shapes and moves
    C("shape", "Shape", tf.shape, f(2, 3, 4, spec=(None, 3, 4))),
    C("shape_int64_dynamic", "Shape", lambda x: tf.shape(x, out_type=tf.int64), f(2, 3, spec=(None, 3))),
    C("rank", "Rank", lambda x: raw.Rank(input=x), f(2, 3, spec=(None, 3))),
    C("reshape", "Reshape", lambda x: tf.reshape(x, [3, -1]), f(2, 3, 4)),
    C("reshape_dynamic", "Reshape", lambda x: tf.reshape(x, [-1, 2]), f(2, 3, 4, spec=(None, 3, 4))),
    C("expand_dims", "ExpandDims", lambda x: tf.expand_dims(x, -1), f(2, 3)),
    C("squeeze", "Squeeze", lambda x: tf.squeeze(x, axis=[1]), f(2, 1, 3, 1)),
    C("squeeze_all", "Squeeze", tf.squeeze, f(2, 1, 3, 1)),
    C("transpose", "Transpose", lambda x: tf.transpose(x, [2, 0, 1]), f(2, 3, 4)),
    C("transpose_int", "Transpose", tf.transpose, i(2, 3)),
    C("broadcast_to", "BroadcastTo", lambda x: tf.broadcast_to(x, [2, 3, 4]), f(3, 1)),
    C("broadcast_args", "BroadcastArgs", lambda x, y: tf.broadcast_dynamic_shape(tf.shape(x), tf.shape(y)),
      f(2, 1, 4, spec=(None, 1, 4)), f(3, 1)),
    C("fill", "Fill", lambda d: tf.fill(d, 2.5), v([2, 3])),
    C("fill_int", "Fill", lambda x: tf.fill(tf.shape(x), 7), f(2, 3, spec=(None, 3))),
    C("tile", "Tile", lambda x: tf.tile(x, [2, 3]), f(2, 3)),
    C("tile_int", "Tile", lambda x: tf.tile(x, [1, 2, 2]), i(2, 1, 3)),
    C("range", "Range", lambda n: tf.range(n), v(np.int32(5))),
    C("range_float", "Range", lambda a, d: tf.range(a, 3.0, d), v(np.float32(-1.0)), v(np.float32(0.5))),
    C("pack", "Pack", lambda x, y: tf.stack([x, y], axis=1), f(2, 3), f(2, 3)),
    C("pack_int_axis0", "Pack", lambda x, y: tf.stack([x, y]), i(3), i(3)),
    C("unpack", "Unpack", lambda x: tf.unstack(x, axis=1), f(2, 3, 4)),
    C("concat_v2", "ConcatV2", lambda x, y: tf.concat([x, y], axis=-1), f(2, 3), f(2, 2)),
    C("concat", "Concat", lambda x, y: raw.Concat(concat_dim=0, values=[x, y]), f(2, 3), f(1, 3)),
    C("concat_v2_int_axis0", "ConcatV2", lambda x, y: tf.concat([x, y], 0), i(1, 3), i(2, 3)),
    C("split", "Split", lambda x: tf.split(x, 2, axis=1), f(2, 4)),
    C("split_v", "SplitV", lambda x: tf.split(x, [1, 3, 2], axis=-1), f(2, 6)),
    C("split_v_inferred", "SplitV", lambda x: tf.split(x, [1, -1], axis=0), i(4, 3)),
    C("slice", "Slice", lambda x: tf.slice(x, [0, 1, 1], [2, 2, -1]), f(2, 3, 4)),
    C("strided_slice", "StridedSlice", lambda x: x[:, 1:3, ::2], f(2, 4, 6)),
    C("strided_slice_shrink", "StridedSlice", lambda x: x[1, :, -1], f(2, 4, 6)),
    C("strided_slice_new_axis_ellipsis", "StridedSlice", lambda x: x[..., tf.newaxis, 1:], f(2, 4, 6)),
    C("strided_slice_negative_stride", "StridedSlice", lambda x: x[::-1, 3:0:-2], f(3, 5)),
    C("reverse_v2", "ReverseV2", lambda x: tf.reverse(x, [1]), f(2, 3, 4)),
    C("reverse_v2_two_axes", "ReverseV2", lambda x: tf.reverse(x, [0, 2]), f(2, 3, 4)),
    C("reverse_sequence", "ReverseSequence", lambda x, n: tf.reverse_sequence(x, n, seq_axis=1, batch_axis=0),
      f(3, 4, 2), v(np.array([4, 1, 2], np.int64))),
    C("pad", "Pad", lambda x: tf.pad(x, [[1, 0], [0, 2]]), f(2, 3)),
    C("pad_int", "Pad", lambda x: tf.pad(x, [[0, 1], [2, 1]]), i(2, 3)),
    C("pad_v2", "PadV2", lambda x: tf.pad(x, [[1, 1], [0, 2]], constant_values=-1.5), f(2, 3)),
    C("mirror_pad_reflect", "MirrorPad", lambda x: tf.pad(x, [[1, 1], [2, 0]], mode="REFLECT"), f(3, 4)),
    C("mirror_pad_symmetric", "MirrorPad", lambda x: tf.pad(x, [[1, 2], [0, 1]], mode="SYMMETRIC"), f(3, 4)),
    C("gather", "Gather", lambda p, k: raw.Gather(params=p, indices=k), f(5, 3), v([[4, 0], [2, 2]])),
    C("gather_v2", "GatherV2", lambda p, k: tf.gather(p, k), f(5, 3), v([4, 0, 2])),
    C("gather_v2_axis1", "GatherV2", lambda p, k: tf.gather(p, k, axis=1), f(2, 5, 3), v([4, 0, 2, 2])),
    C("gather_v2_batch_dims", "GatherV2", lambda p, k: tf.gather(p, k, axis=1, batch_dims=1), f(2, 5, 3),
      v([[4, 0], [1, 3]])),
    C("gather_nd", "GatherNd", tf.gather_nd, f(4, 3, 2), v([[0, 1], [3, 2], [1, 0]])),
    C("gather_nd_int", "GatherNd", tf.gather_nd, i(4, 3), v([[3], [0]])),
    C("scatter_nd", "ScatterNd", lambda k, u: tf.scatter_nd(k, u, [5, 3]), v([[4], [0], [2]]), f(3, 3)),
    C("scatter_nd_int", "ScatterNd", lambda k, u: tf.scatter_nd(k, u, [4]), v([[1], [3], [1]]), i(3)),
    C("tensor_scatter_add", "TensorScatterAdd", tf.tensor_scatter_nd_add, f(5, 3), v([[4], [1], [4]]), f(3, 3)),
    C("tensor_scatter_update", "TensorScatterUpdate", tf.tensor_scatter_nd_update, f(5, 3), v([[4], [1]]),
      f(2, 3)),
    C("one_hot", "OneHot", lambda k: tf.one_hot(k, 4), v([0, 3, 1, -1, 5])),
    C("one_hot_axis0_values", "OneHot", lambda k: tf.one_hot(k, 3, on_value=5, off_value=-1, axis=0),
      v([[0, 2], [1, 1]])),
    C("where", "Where", lambda x: tf.where(x > 0.0), f(3, 4)),
    C("where_bool", "Where", tf.where, b(2, 3, 2)),
    C("unique", "Unique", lambda x: tf.unique(x), v([3, 1, 3, 0, 1, 7, 0])),
    C("unique_float", "Unique", lambda x: tf.unique(x), v([2.5, -1.0, 2.5, 0.0])),
    C("invert_permutation", "InvertPermutation", tf.math.invert_permutation, v([2, 0, 3, 1])),
    C("roll", "Roll", lambda x: tf.roll(x, shift=[1, -2], axis=[0, 1]), f(3, 5)),
    C("dynamic_stitch", "DynamicStitch", lambda x, y: tf.dynamic_stitch([[0, 2], [1, 3]], [x, y]), f(2, 3), f(2, 3),
      why="constant indices: the form lower_tf.cc lowers"),
    C("dynamic_stitch_runtime_indices", "DynamicStitch", lambda a, b_, x, y: tf.dynamic_stitch([a, b_], [x, y]),
      v([0, 2]), v([1, 3]), f(2, 3), f(2, 3)),
    C("parallel_dynamic_stitch", "ParallelDynamicStitch",
      lambda x, y: raw.ParallelDynamicStitch(indices=[[3, 0], [2, 1]], data=[x, y]), f(2, 3), f(2, 3),
      why="constant indices: the form lower_tf.cc lowers"),
    C("parallel_dynamic_stitch_runtime_indices", "ParallelDynamicStitch",
      lambda a, b_, x, y: raw.ParallelDynamicStitch(indices=[a, b_], data=[x, y]), v([3, 0]), v([2, 1]), f(2, 3),
      f(2, 3)),
    C("sparse_to_dense", "SparseToDense",
      lambda vals: tf.sparse.to_dense(tf.sparse.SparseTensor([[0, 1], [1, 3], [2, 0]], vals, [3, 4])), f(3)),
    C("bucketize", "Bucketize", lambda x: raw.Bucketize(input=x, boundaries=[-1.0, 0.0, 0.5, 2.0]), f(3, 4)),
    C("matrix_diag", "MatrixDiag", lambda x: raw.MatrixDiag(diagonal=x), f(2, 3)),
    C("matrix_diag_v2", "MatrixDiagV2", lambda x: raw.MatrixDiagV2(diagonal=x, k=0, num_rows=-1, num_cols=-1,
                                                                      padding_value=0.0), f(2, 3)),
    C("matrix_diag_v3", "MatrixDiagV3", tf.linalg.diag, f(2, 3)),
    C("matrix_set_diag_v3", "MatrixSetDiagV3", tf.linalg.set_diag, f(2, 3, 3), f(2, 3)),
    C("matrix_set_diag", "MatrixSetDiag", lambda x, d: raw.MatrixSetDiag(input=x, diagonal=d), f(3, 3), f(3)),
    C("matrix_set_diag_v2", "MatrixSetDiagV2", lambda x, d: raw.MatrixSetDiagV2(input=x, diagonal=d, k=0),
      f(2, 3, 3), f(2, 3)),
    C("matrix_band_part", "MatrixBandPart", lambda x: tf.linalg.band_part(x, 1, 0), f(4, 4)),
    C("matrix_band_part_upper", "MatrixBandPart", lambda x: tf.linalg.band_part(x, 0, -1), f(2, 3, 4)),
    C("space_to_depth", "SpaceToDepth", lambda x: tf.nn.space_to_depth(x, 2), f(1, 4, 6, 3)),
    C("depth_to_space", "DepthToSpace", lambda x: tf.nn.depth_to_space(x, 2), f(1, 2, 3, 8)),
    C("space_to_batch_nd", "SpaceToBatchND", lambda x: tf.space_to_batch_nd(x, [2, 2], [[1, 1], [0, 2]]),
      f(1, 4, 4, 3)),
    C("batch_to_space_nd", "BatchToSpaceND", lambda x: tf.compat.v1.batch_to_space_nd(x, [2, 2], [[0, 1], [1, 0]]),
      f(4, 3, 3, 2)),
    C("top_k", "TopKV2", lambda x: tf.math.top_k(x, 3), f(2, 6)),
    C("top_k_int", "TopKV2", lambda x: tf.math.top_k(x, 2), v([[5, 1, 9, 3], [2, 8, 4, 6]])),
    C("sort", "TopKV2", lambda x: tf.sort(x, direction="DESCENDING"), f(2, 6)),
    C("argsort", "TopKV2", lambda x: tf.argsort(x, direction="DESCENDING", stable=True), f(2, 6)),
    C("approx_top_k", "ApproxTopK", lambda x: tf.math.approx_max_k(x, 3), f(2, 6)),
    # ---------------------------------------------------------------- layers
    C("mat_mul", "MatMul", lambda x: tf.matmul(x, _w(1, 4, 3)), f(2, 4)),
    C("mat_mul_transpose_b", "MatMul", lambda x, y: tf.matmul(x, y, transpose_b=True), f(2, 4), f(3, 4)),
    C("mat_mul_transpose_a", "MatMul", lambda x, y: tf.matmul(x, y, transpose_a=True), f(4, 2), f(4, 3)),
    C("sparse_mat_mul", "SparseMatMul", lambda x, y: raw.SparseMatMul(a=x, b=y), f(2, 4), f(4, 3)),
    C("batch_mat_mul", "BatchMatMul", lambda x, y: raw.BatchMatMul(x=x, y=y), f(2, 3, 4), f(2, 4, 5)),
    C("batch_mat_mul_v2", "BatchMatMulV2", tf.matmul, f(2, 3, 4), f(4, 5)),
    C("batch_mat_mul_v2_adjoint", "BatchMatMulV2", lambda x, y: tf.matmul(x, y, adjoint_a=True, adjoint_b=True),
      f(2, 4, 3), f(2, 5, 4)),
    C("batch_mat_mul_v2_dynamic", "BatchMatMulV2", tf.matmul, f(2, 3, 4, spec=(None, 3, 4)), f(2, 4, 5)),
    C("batch_mat_mul_v3", "BatchMatMulV3", lambda x, y: raw.BatchMatMulV3(x=x, y=y, Tout=tf.float32), f(2, 3, 4),
      f(2, 4, 5)),
    C("einsum", "Einsum", lambda x, y: tf.einsum("bij,bjk->bik", x, y), f(2, 3, 4), f(2, 4, 5)),
    C("einsum_heads", "Einsum", lambda x, y: tf.einsum("bqhd,bkhd->bhqk", x, y), f(1, 3, 2, 4), f(1, 5, 2, 4)),
    C("conv2d", "Conv2D", lambda x: tf.nn.conv2d(x, _w(2, 3, 3, 3, 4), 1, "SAME"), f(1, 6, 6, 3)),
    C("conv2d_valid_strided", "Conv2D", lambda x: tf.nn.conv2d(x, _w(3, 3, 2, 3, 4), [1, 2, 1, 1], "VALID"),
      f(1, 7, 6, 3)),
    C("conv2d_dilated", "Conv2D", lambda x: tf.nn.conv2d(x, _w(4, 3, 3, 3, 2), 1, "SAME", dilations=2),
      f(1, 8, 8, 3)),
    C("conv2d_explicit_padding", "Conv2D",
      lambda x: tf.nn.conv2d(x, _w(5, 3, 3, 2, 2), 1, [[0, 0], [1, 2], [0, 1], [0, 0]]), f(1, 5, 5, 2)),
    C("depthwise_conv2d", "DepthwiseConv2dNative",
      lambda x: tf.nn.depthwise_conv2d(x, _w(6, 3, 3, 3, 2), [1, 1, 1, 1], "SAME"), f(1, 6, 6, 3)),
    C("depthwise_conv2d_strided_valid", "DepthwiseConv2dNative",
      lambda x: tf.nn.depthwise_conv2d(x, _w(7, 3, 3, 2, 1), [1, 2, 2, 1], "VALID"), f(1, 7, 7, 2)),
    C("depthwise_conv2d_dilated", "DepthwiseConv2dNative",
      lambda x: tf.nn.depthwise_conv2d(x, _w(8, 3, 3, 2, 1), [1, 1, 1, 1], "SAME", dilations=[2, 2]),
      f(1, 8, 8, 2)),
    C("conv2d_transpose", "Conv2DBackpropInput",
      lambda x: tf.nn.conv2d_transpose(x, _w(9, 3, 3, 2, 4), [1, 8, 8, 2], 2, "SAME"), f(1, 4, 4, 4)),
    C("conv2d_transpose_valid", "Conv2DBackpropInput",
      lambda x: tf.nn.conv2d_transpose(x, _w(10, 3, 3, 2, 4), [1, 9, 9, 2], 2, "VALID"), f(1, 4, 4, 4)),
    C("conv3d", "Conv3D", lambda x: tf.nn.conv3d(x, _w(11, 2, 3, 3, 2, 3), [1, 1, 1, 1, 1], "SAME"),
      f(1, 4, 5, 5, 2)),
    C("conv3d_transpose", "Conv3DBackpropInputV2",
      lambda x: tf.nn.conv3d_transpose(x, _w(12, 2, 3, 3, 2, 3), [1, 6, 8, 8, 2], [1, 2, 2, 2, 1], "SAME"),
      f(1, 3, 4, 4, 3)),
    C("avg_pool", "AvgPool", lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID"), f(1, 6, 6, 3)),
    C("avg_pool_same", "AvgPool", lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), f(1, 7, 7, 3)),
    C("max_pool", "MaxPool", lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), f(1, 6, 6, 3)),
    C("max_pool_same", "MaxPool", lambda x: tf.nn.max_pool2d(x, 3, [1, 2], "SAME"), f(1, 7, 7, 3)),
    C("lrn", "LRN", lambda x: tf.nn.local_response_normalization(x, 2, 1.0, 0.5, 0.75), f(1, 3, 3, 6)),
    C("fused_batch_norm", "FusedBatchNorm",
      lambda x: raw.FusedBatchNorm(x=x, scale=_w(13, 3), offset=_w(14, 3), mean=_w(15, 3),
                                   variance=np.abs(_w(16, 3)) + 0.5, is_training=False)[0], f(1, 4, 4, 3)),
    C("fused_batch_norm_v2", "FusedBatchNormV2",
      lambda x: raw.FusedBatchNormV2(x=x, scale=_w(17, 3), offset=_w(18, 3), mean=_w(19, 3),
                                     variance=np.abs(_w(20, 3)) + 0.5, is_training=False)[0], f(1, 4, 4, 3)),
    C("fused_batch_norm_v3", "FusedBatchNormV3",
      lambda x: tf.compat.v1.nn.fused_batch_norm(x, _w(21, 3), _w(22, 3), _w(23, 3), np.abs(_w(24, 3)) + 0.5,
                                                 epsilon=1e-3, is_training=False)[0], f(1, 4, 4, 3)),
    C("resize_bilinear", "ResizeBilinear", lambda x: tf.image.resize(x, [6, 8]), f(1, 3, 4, 2)),
    C("resize_bilinear_align_corners", "ResizeBilinear",
      lambda x: tf.compat.v1.image.resize_bilinear(x, [5, 7], align_corners=True), f(1, 3, 4, 2)),
    C("resize_bilinear_legacy", "ResizeBilinear",
      lambda x: raw.ResizeBilinear(images=x, size=[5, 7], align_corners=False, half_pixel_centers=False),
      f(1, 3, 4, 2)),
    C("resize_nearest", "ResizeNearestNeighbor", lambda x: tf.image.resize(x, [6, 8], method="nearest"),
      f(1, 3, 4, 2)),
    C("resize_nearest_align_corners", "ResizeNearestNeighbor",
      lambda x: tf.compat.v1.image.resize_nearest_neighbor(x, [5, 7], align_corners=True), f(1, 3, 4, 2)),
    C("resize_nearest_legacy", "ResizeNearestNeighbor",
      lambda x: raw.ResizeNearestNeighbor(images=x, size=[5, 7], align_corners=False, half_pixel_centers=False),
      f(1, 3, 4, 2)),
    C("non_max_suppression_v3", "NonMaxSuppressionV3", lambda bx, s: tf.image.non_max_suppression(bx, s, 4, 0.5),
      v(_BOXES), v(_SCORES)),
    C("non_max_suppression_v4", "NonMaxSuppressionV4",
      lambda bx, s: raw.NonMaxSuppressionV4(boxes=bx, scores=s, max_output_size=4, iou_threshold=0.5,
                                            score_threshold=0.4, pad_to_max_output_size=True),
      v(_BOXES), v(_SCORES)),
    C("non_max_suppression_v5", "NonMaxSuppressionV5",
      lambda bx, s: tf.image.non_max_suppression_with_scores(bx, s, 4, 0.5, soft_nms_sigma=0.0), v(_BOXES),
      v(_SCORES)),
    C("non_max_suppression_v5_soft", "NonMaxSuppressionV5",
      lambda bx, s: tf.image.non_max_suppression_with_scores(bx, s, 4, 0.5, soft_nms_sigma=0.5), v(_BOXES),
      v(_SCORES)),
    # ---------------------------------------------------------------- complex and FFT
    C("complex", "Complex", lambda x, y: tf.complex(x, y), f(2, 3), f(2, 3)),
    C("real", "Real", lambda z: tf.math.real(z) * 2.0, v(_COMPLEX)),
    C("imag", "Imag", lambda z: tf.math.imag(z) * 2.0, v(_COMPLEX)),
    C("complex_abs", "ComplexAbs", tf.abs, v(_COMPLEX)),
    C("fft", "FFT", lambda x: tf.abs(tf.signal.fft(tf.cast(x, tf.complex64))), f(2, 8)),
    C("rfft", "RFFT", lambda x: tf.abs(tf.signal.rfft(x)), f(2, 8)),
    C("rfft_length", "RFFT", lambda x: tf.math.real(tf.signal.rfft(x, [16])), f(2, 10)),
    C("rfft2d", "RFFT2D", lambda x: tf.abs(tf.signal.rfft2d(x)), f(2, 4, 8)),
    # ---------------------------------------------------------------- quantization ops
    C("fake_quant_args_zero_point", "FakeQuantWithMinMaxArgs",  # zero point 127.5, nudged to 128 by TF
      lambda x: tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.0), f(3, 8, lo=-1.5, hi=1.5)),
    C("fake_quant_args_asymmetric", "FakeQuantWithMinMaxArgs",
      lambda x: tf.quantization.fake_quant_with_min_max_args(x, -0.3, 1.7, num_bits=8), f(3, 8, lo=-1, hi=2)),
    C("fake_quant_args_positive_range", "FakeQuantWithMinMaxArgs",
      lambda x: tf.quantization.fake_quant_with_min_max_args(x, 0.2, 1.5), f(3, 8, lo=-0.5, hi=2)),
    C("fake_quant_args_4_bits", "FakeQuantWithMinMaxArgs",
      lambda x: tf.quantization.fake_quant_with_min_max_args(x, -0.7, 1.3, num_bits=4), f(3, 8, lo=-1, hi=2)),
    C("fake_quant_args_narrow_zero_point", "FakeQuantWithMinMaxArgs",
      lambda x: tf.quantization.fake_quant_with_min_max_args(x, -0.3, 1.7, narrow_range=True), f(3, 8, lo=-1, hi=2)),
    C("fake_quant_args_narrow", "FakeQuantWithMinMaxArgs",
      lambda x: tf.quantization.fake_quant_with_min_max_args(x, -2.0, 2.0, num_bits=8, narrow_range=True),
      f(3, 8, lo=-3, hi=3)),
    C("fake_quant_vars", "FakeQuantWithMinMaxVars",
      lambda x: tf.quantization.fake_quant_with_min_max_vars(x, -1.0, 3.0), f(3, 8, lo=-2, hi=4)),
    C("fake_quant_vars_per_channel", "FakeQuantWithMinMaxVarsPerChannel",
      lambda x: tf.quantization.fake_quant_with_min_max_vars_per_channel(x, [-1.0, -2.0, 0.0], [1.0, 2.0, 3.0]),
      f(4, 3, lo=-3, hi=4)),
    C("quantize_and_dequantize_v4", "QuantizeAndDequantizeV4",
      lambda x: tf.quantization.quantize_and_dequantize_v2(x, -1.0, 1.0, range_given=True),
      f(3, 8, lo=-1.5, hi=1.5)),
    # ---------------------------------------------------------------- random (distribution, not values)
    C("random_uniform", "RandomUniform", lambda: tf.random.uniform([2000]), judge="random",
      check=uniform_check(0.0, 1.0)),
    C("random_uniform_seeded", "RandomUniform", lambda: tf.random.uniform([40, 50], seed=7) * 4.0 - 2.0,
      judge="random", check=uniform_check(-2.0, 2.0)),
    C("random_standard_normal", "RandomStandardNormal", lambda: tf.random.normal([2000]), judge="random",
      check=normal_check(0.0, 1.0)),
    C("random_normal_scaled", "RandomStandardNormal", lambda: tf.random.normal([40, 50], 3.0, 2.0, seed=3),
      judge="random", check=normal_check(3.0, 2.0)),
    C("multinomial", "Multinomial", lambda lg: tf.random.categorical(lg, 2000), v(_LOGITS), judge="random",
      check=categorical_check(_PROBS)),
    C("empty", "Empty", lambda x: raw.Empty(shape=[2, 3], dtype=tf.float32, init=True) + x, f(2, 3),
      judge="shape", why="Empty's values are undefined: shape and dtype"),
    # ---------------------------------------------------------------- XLA
    C("xla_dynamic_update_slice", "XlaDynamicUpdateSlice",
      lambda x, u, k: _xla()[0].dynamic_update_slice(x, u, k), f(4, 5), f(2, 3), v([1, 2])),
    C("xla_gather", "XlaGather", _xla_gather, f(4, 3), v([[2], [0]])),
    C("xla_conv", "XlaConv", _xla_conv, f(1, 5, 5, 2)),
    # ---------------------------------------------------------------- ops that the import and canonicalization remove
    C("identity", "Identity", lambda x: tf.identity(x) * 2.0, f(2, 3)),
    C("identity_n", "IdentityN", lambda x, y: [t + 1.0 for t in tf.identity_n([x, y])], f(2, 3), f(3)),
    C("stop_gradient", "StopGradient", lambda x: tf.stop_gradient(x) + 1.0, f(2, 3)),
    C("prevent_gradient", "PreventGradient", lambda x: raw.PreventGradient(input=x) + 1.0, f(2, 3)),
    C("snapshot", "Snapshot", lambda x: raw.Snapshot(input=x) + 1.0, f(2, 3)),
    C("placeholder_with_default", "PlaceholderWithDefault",
      lambda x: x + tf.compat.v1.placeholder_with_default(np.float32([1.0, -2.0, 3.0]), [3]), f(2, 3)),
    C("ensure_shape", "EnsureShape", lambda x: tf.ensure_shape(x, [None, 3]) + 1.0, f(2, 3, spec=(None, 3))),
    C("check_numerics", "CheckNumerics", lambda x: tf.debugging.check_numerics(x, "bad") + 1.0, f(2, 3)),
    C("assert", "Assert", _asserted, f(2, 3)),
    C("partitioned_call", "PartitionedCall", None, f(2, 3), make=_call_case(False)),
    C("stateful_partitioned_call", "StatefulPartitionedCall", None, f(2, 3), make=_call_case(True)),
    # ---------------------------------------------------------------- control flow
    C("stateless_if", "StatelessIf", lambda x, p: tf.cond(p, lambda: x * 2.0, lambda: x - 1.0), f(2, 3),
      v(np.bool_(True))),
    C("stateless_if_false", "StatelessIf", lambda x, p: tf.cond(p, lambda: x * 2.0, lambda: x - 1.0), f(2, 3),
      v(np.bool_(False))),
    C("if_stateful", "If", None, f(2, 3), v(np.bool_(True)), make=_if_stateful),
    C("stateless_while", "StatelessWhile",
      lambda x: tf.while_loop(lambda k, a: k < 4, lambda k, a: (k + 1, a * 0.5 + 1.0), [tf.constant(0), x])[1],
      f(2, 3)),
    C("stateless_while_dynamic_count", "StatelessWhile",
      lambda x, n: tf.while_loop(lambda k, a: k < n, lambda k, a: (k + 1, tf.tanh(a) + x), [tf.constant(0), x])[1],
      f(2, 3), v(np.int32(3))),
    C("while_stateful", "While", None, f(2, 3), make=_while_stateful),
    # ---------------------------------------------------------------- variables
    C("read_variable", "ReadVariableOp", None, f(2, 3), make=_variable_case(lambda w, x: x * w, _w(30, 3))),
    C("assign_variable", "AssignVariableOp", None, f(3),
      make=_variable_case(lambda w, x: [w.assign(x * 2.0) + 1.0, w.read_value()], _w(31, 3))),
    C("var_handle", "VarHandleOp", None, f(3),
      make=_variable_case(lambda w, x: w.assign(w * 0.5 + x).read_value() * 1.0, _w(32, 3))),
    C("assign_add_variable", "AssignAddVariableOp", None, f(3),
      make=_variable_case(lambda w, x: w.assign_add(x).read_value() * 1.0, _w(33, 3))),
    C("assign_sub_variable", "AssignSubVariableOp", None, f(3),
      make=_variable_case(lambda w, x: w.assign_sub(x).read_value() * 1.0, _w(34, 3))),
    C("resource_gather", "ResourceGather", None, v([[3, 0], [1, 1]]),
      make=_variable_case(lambda w, k: tf.gather(w, k), _w(35, 5, 4))),
    # ---------------------------------------------------------------- hash tables
    C("hash_table_string_keys", "HashTableV2", None, v(np.array([b"cat", b"zebra", b"dog", b""], object)),
      make=_table_case(["cat", "dog", "emu"], np.array([3, 7, 11], np.int64), np.int64(-1),
                       lambda t, k: t.lookup(k))),
    C("lookup_table_find", "LookupTableFindV2", None, v(np.array([[5, 2], [9, 1]], np.int64)),
      make=_table_case(np.array([1, 2, 5], np.int64), np.array([10, 20, 50], np.int64), np.int64(0),
                       lambda t, k: t.lookup(k))),
    C("lookup_table_import_int_to_string", "LookupTableImportV2", None, v(np.array([2, 0, 7], np.int64)),
      make=_table_case(np.array([0, 1, 2], np.int64), ["zero", "one", "two"], "?", lambda t, k: t.lookup(k))),
    C("lookup_table_size", "LookupTableSizeV2", None, f(2),
      make=_table_case(["cat", "dog", "emu"], np.array([3, 7, 11], np.int64), np.int64(-1),
                       lambda t, x: [t.size(), x * 2.0])),
    # ---------------------------------------------------------------- tensor lists (tf.TensorArray in TF 2)
    C("tensor_list_reserve_set_stack", "TensorListReserve",
      lambda x, y: tf.TensorArray(tf.float32, size=2).write(0, x).write(1, y).stack(), f(3), f(3)),
    C("tensor_list_set_item", "TensorListSetItem",
      lambda x: tf.TensorArray(tf.float32, size=3, element_shape=[2]).write(2, x).write(0, -x).write(1, x * 3.0)
      .stack(), f(2)),
    C("tensor_list_from_tensor", "TensorListFromTensor",
      lambda x: tf.TensorArray(tf.float32, size=4).unstack(x).read(2) * 2.0, f(4, 3)),
    C("tensor_list_get_item", "TensorListGetItem",
      lambda x, k: tf.TensorArray(tf.float32, size=4, element_shape=[3]).unstack(x).read(k), f(4, 3),
      v(np.int32(1))),
    C("tensor_list_stack", "TensorListStack", _tensor_array_loop, f(4, 3)),
    C("tensor_list_length", "TensorListLength",
      lambda x: tf.TensorArray(tf.float32, size=0, dynamic_size=True).unstack(x).size(), f(4, 3, spec=(None, 3))),
    C("tensor_list_gather", "TensorListGather",
      lambda x: tf.TensorArray(tf.float32, size=4).unstack(x).gather([3, 1]), f(4, 3)),
    C("tensor_list_concat", "TensorListConcatV2",
      lambda x: tf.TensorArray(tf.float32, size=2, element_shape=[3]).unstack(x).concat(), f(2, 3)),
    C("tensor_list_push_back", "TensorListPushBack", _tensor_list_push_back, f(2, 3)),
    C("tensor_list_element_shape", "TensorListElementShape",
      lambda x: raw.TensorListElementShape(input_handle=raw.TensorListFromTensor(tensor=x, element_shape=[3]),
                                           shape_type=tf.int32), f(2, 3, spec=(None, 3))),
]

# the cases on which the official converter is known to give wrong numbers (fuselite must be right there)
OFFICIAL_WRONG = ("fake_quant_args_zero_point", "is_inf", "reverse_v2_two_axes", "lookup_table_size")

SOURCES: dict[str, str] = {}
for _src, _ops in {
    "LP": "Abs AddN AvgPool ArgMax ArgMin BroadcastTo Ceil Cos Elu ExpandDims FakeQuantWithMinMaxArgs Fill Floor "
          "LeakyRelu Log Log1p LogicalNot LogSoftmax MaxPool Maximum Minimum Neg OneHot Pow Range Relu6 Relu "
          "ReverseSequence Round Rsqrt Sqrt Square SegmentSum UnsortedSegmentSum UnsortedSegmentMax "
          "UnsortedSegmentMin UnsortedSegmentProd Select SelectV2 Shape Sigmoid Sin Slice Softmax Softplus Squeeze "
          "Tanh Transpose Where ZerosLike BroadcastArgs Less Greater LessEqual GreaterEqual Gather GatherNd GatherV2 "
          "FloorDiv NotEqual LogicalAnd LogicalOr Add AddV2 BiasAdd Sub Mul RealDiv Div BatchMatMulV3 "
          "BatchMatMulV2 BatchMatMul FakeQuantWithMinMaxVars QuantizeAndDequantizeV4 Rank SquaredDifference "
          "ReverseV2 Equal Pad Tile PadV2 Mean Sum TopKV2 ApproxTopK Min Max Prod Any All Cast BatchToSpaceND "
          "SpaceToBatchND SpaceToDepth DepthToSpace ResizeBilinear ResizeNearestNeighbor MirrorPad SparseToDense "
          "Unique FloorMod Exp LRN NonMaxSuppressionV4 NonMaxSuppressionV5 MatrixDiag Conv2DBackpropInput "
          "MatrixSetDiagV3 ScatterNd Cumsum Reshape StridedSlice RFFT2D Complex ComplexAbs Real Imag Bucketize "
          "RandomUniform RandomStandardNormal Multinomial XlaDynamicUpdateSlice Atan2 Sign Bitcast BitwiseXor "
          "RightShift SigmoidGrad",
    "LT": "ConcatV2 MatMul MatrixDiagV2 MatrixDiagV3 Pack Split SplitV Unpack Conv3D Conv3DBackpropInputV2 Assert",
    "LTD": "BiasAddGrad SoftmaxCrossEntropyWithLogits SparseSoftmaxCrossEntropyWithLogits DivNoNan MulNoNan "
           "TruncateDiv Empty Inv IsInf IsNan L2Loss Reciprocal Rint RsqrtGrad Size SqrtGrad TanhGrad OnesLike "
           "Xdivy Xlog1py Xlogy IsFinite TensorScatterUpdate Selu SeluGrad Expm1",
    "LTC": "DynamicStitch ParallelDynamicStitch InvertPermutation Lgamma Roll SparseMatMul",
    "PT": "Conv2D DepthwiseConv2dNative FusedBatchNorm FusedBatchNormV2 FusedBatchNormV3 Einsum RFFT "
          "FakeQuantWithMinMaxVarsPerChannel",
    "TL": "TensorListReserve TensorListSetItem TensorListFromTensor TensorListGetItem TensorListStack "
          "TensorListLength TensorListGather TensorListConcatV2 TensorListPushBack TensorListElementShape",
    "OBS": "Softsign MatrixBandPart TensorScatterAdd MatrixSetDiag MatrixSetDiagV2 Concat NonMaxSuppressionV3 FFT "
           "XlaGather XlaConv",
    "CF": "StatelessIf If StatelessWhile While",
    "VAR": "ReadVariableOp AssignVariableOp VarHandleOp",
    "DRO": "AssignAddVariableOp AssignSubVariableOp ResourceGather",
    "HT": "HashTableV2 LookupTableFindV2 LookupTableImportV2 LookupTableSizeV2",
    "CAN": "Identity IdentityN StopGradient PreventGradient Snapshot PlaceholderWithDefault EnsureShape "
           "CheckNumerics",
    "INL": "PartitionedCall StatefulPartitionedCall",
}.items():
    for _op in _ops.split():
        SOURCES[_op] = _src

OPS: list[str] = list(dict.fromkeys(c.op for c in CASES))
