"""Elementwise math, activations, comparisons and reductions (Fourier transforms and complex values: fft.py)."""

from __future__ import annotations

import numpy as np

from fuselite.lower.registry import lowering

_BINARY = {
    "Add": "ADD", "AddV2": "ADD", "BiasAdd": "ADD", "Sub": "SUB", "Mul": "MUL", "RealDiv": "DIV",
    "Div": "DIV", "FloorDiv": "FLOOR_DIV", "FloorMod": "FLOOR_MOD", "Maximum": "MAXIMUM",
    "Minimum": "MINIMUM", "Pow": "POW", "SquaredDifference": "SQUARED_DIFFERENCE",
    "Less": "LESS", "LessEqual": "LESS_EQUAL", "Greater": "GREATER", "GreaterEqual": "GREATER_EQUAL",
    "Equal": "EQUAL", "NotEqual": "NOT_EQUAL", "LogicalAnd": "LOGICAL_AND", "LogicalOr": "LOGICAL_OR",
}
_UNARY = {
    "Elu": "ELU", "Sigmoid": "LOGISTIC", "Tanh": "TANH",
    "Exp": "EXP", "Log": "LOG", "Sqrt": "SQRT", "Rsqrt": "RSQRT", "Neg": "NEG",
    "Floor": "FLOOR", "Ceil": "CEIL", "Round": "ROUND", "Sin": "SIN", "Cos": "COS",
    "LogicalNot": "LOGICAL_NOT", "ZerosLike": "ZEROS_LIKE", "LogSoftmax": "LOG_SOFTMAX",
}
_OPTIONS = {"ADD", "SUB", "MUL", "DIV"}  # ops that carry fused_activation_function


def _binary_rule(tfl: str):
    def rule(ctx):
        a, b = ctx.input(0), ctx.input(1)
        if ctx.op.kind == "BiasAdd" and ctx.attr("data_format", "NHWC") not in ("NHWC", "N...C"):
            ctx.fail("BiasAdd with data_format NCHW is not supported (LiteRT is channels-last)")
        opts = {"fused_activation_function": "NONE"} if tfl in _OPTIONS else {}
        return [ctx.emit(tfl, [a, b], opts)]

    rule.__name__ = f"lower_{tfl.lower()}"
    return rule


def _unary_rule(tfl: str):
    def rule(ctx):
        return [ctx.emit(tfl, [ctx.input(0)])]

    rule.__name__ = f"lower_{tfl.lower()}"
    return rule


for _tf, _tfl in _BINARY.items():
    lowering(_tf)(_binary_rule(_tfl))
for _tf, _tfl in _UNARY.items():
    lowering(_tf)(_unary_rule(_tfl))


@lowering("Relu", "Relu6")
def lower_relu(ctx):
    # LiteRT's RELU / RELU6 take float32, int8 and int16 (activations.cc): an integer Relu (int32, int64) is
    # MAXIMUM(x, 0) (and MINIMUM(.., 6)), exact, as the official converter writes it
    x = ctx.input(0)
    kind = "RELU" if ctx.op.kind == "Relu" else "RELU6"
    if x.dtype not in (np.int32, np.int64):
        return [ctx.emit(kind, [x])]
    y = ctx.emit("MAXIMUM", [x, ctx.const(np.zeros((), x.dtype))])
    return [y if kind == "RELU" else ctx.emit("MINIMUM", [y, ctx.const(np.full((), 6, x.dtype))])]


@lowering("Square")
def lower_square(ctx):
    # LiteRT's SQUARE takes float32 only (elementwise.cc): an int32 / int64 square is MUL(x, x), wrapping like
    # TF's (LiteRT's int8 / int16 MUL is a quantized kernel: not for plain integers)
    x = ctx.input(0)
    if x.dtype in (np.int32, np.int64):
        return [ctx.emit("MUL", [x, x], {"fused_activation_function": "NONE"})]
    return [ctx.emit("SQUARE", [x])]


@lowering("Abs")
def lower_abs(ctx):
    # LiteRT's ABS takes float32, int8, int16 and int32 (elementwise.cc; version 4 for int32): an int64 |x| (DeBERTa's
    # relative positions) is MAXIMUM(x, NEG(x)), exact (NEG and MAXIMUM take int64: neg.cc, maximum_minimum.cc)
    x = ctx.input(0)
    if x.dtype == np.int64:
        return [ctx.emit("MAXIMUM", [x, ctx.emit("NEG", [x])])]
    return [ctx.emit("ABS", [x])]


@lowering("Sign")
def lower_sign(ctx):
    # LiteRT's SIGN takes float32, float64 and int32 (sign.cc): an int64 sign (DeBERTa's relative positions) is
    # CAST(x > 0) - CAST(x < 0), exact
    x = ctx.input(0)
    if x.dtype == np.int64:
        zero = ctx.const(np.zeros((), np.int64))
        up, down = (ctx.emit("CAST", [ctx.emit(kind, [x, zero], dtype=np.bool_, shape=x.shape)], dtype=x.dtype,
                             shape=x.shape) for kind in ("GREATER", "LESS"))
        return [ctx.emit("SUB", [up, down], {"fused_activation_function": "NONE"})]
    return [ctx.emit("SIGN", [x])]


@lowering("Atan2")
def lower_atan2(ctx):
    # TFLite ATAN2 does not broadcast (atan2.cc requires equal shapes); TF's Atan2 does
    y, x = ctx.input(0), ctx.input(1)
    if y.shape is None or y.shape != x.shape:
        out = ctx.out(0)
        if not out.static_shape:
            ctx.fail("broadcasting Atan2 needs static shapes")
        shape = ctx.i32(out.shape)
        y, x = (v if v.shape == out.shape else ctx.emit("BROADCAST_TO", [v, shape], dtype=v.dtype) for v in (y, x))
    return [ctx.emit("ATAN2", [y, x])]


@lowering("OnesLike")
def lower_ones_like(ctx):
    # there is no ONES_LIKE builtin: FILL(shape of x, 1), a constant when x's shape is static
    x = ctx.input(0)
    if x.static_shape:
        shape = ctx.i32(x.shape)
    else:
        shape = ctx.emit("SHAPE", [x], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(x.rank,))
    return [ctx.emit("FILL", [shape, ctx.const(np.ones((), x.dtype))])]


@lowering("Softmax")
def lower_softmax(ctx):
    return [ctx.emit("SOFTMAX", [ctx.input(0)], {"beta": 1.0})]


@lowering("LeakyRelu")
def lower_leaky_relu(ctx):
    return [ctx.emit("LEAKY_RELU", [ctx.input(0)], {"alpha": float(ctx.attr("alpha", 0.2))})]


@lowering("Softplus")
def lower_softplus(ctx):
    # softplus(x) = log(1 + exp(x)), in the form that neither overflows nor loses the small values:
    # relu(x) + log(1 + exp(-|x|)) (LiteRT has no softplus op; exp(x) alone overflows from x > 88)
    x = ctx.input(0)
    tail = ctx.emit("EXP", [ctx.emit("NEG", [ctx.emit("ABS", [x])])])
    tail = ctx.emit("LOG", [ctx.emit("ADD", [tail, ctx.const(np.ones((), x.dtype))],
                                     {"fused_activation_function": "NONE"})])
    return [ctx.emit("ADD", [ctx.emit("RELU", [x]), tail], {"fused_activation_function": "NONE"})]


@lowering("Softsign")
def lower_softsign(ctx):
    # softsign(x) = x / (1 + |x|), as TensorFlow's kernel computes it (LiteRT has no softsign op)
    x = ctx.input(0)
    den = ctx.emit("ADD", [ctx.emit("ABS", [x]), ctx.const(np.ones((), x.dtype))], {"fused_activation_function": "NONE"})
    return [ctx.emit("DIV", [x, den], {"fused_activation_function": "NONE"})]


@lowering("Selu")
def lower_selu(ctx):
    # selu(x) = scale * (relu(x) + alpha * elu(min(x, 0)))
    x = ctx.input(0)
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    zero = ctx.const(np.zeros((), x.dtype))
    neg = ctx.emit("ELU", [ctx.emit("MINIMUM", [x, zero])])
    neg = ctx.emit("MUL", [neg, ctx.const(np.array(alpha * scale, x.dtype))], {"fused_activation_function": "NONE"})
    pos = ctx.emit("MUL", [ctx.emit("RELU", [x]), ctx.const(np.array(scale, x.dtype))],
                   {"fused_activation_function": "NONE"})
    return [ctx.emit("ADD", [pos, neg], {"fused_activation_function": "NONE"})]


@lowering("Gelu")
def lower_gelu(ctx):
    return [ctx.emit("GELU", [ctx.input(0)], {"approximate": bool(ctx.attr("approximate", False))})]


@lowering("HardSwish")
def lower_hard_swish(ctx):
    # not a TensorFlow op: passes/patterns.py rewrites x * relu6(x + 3) / 6 to it
    return [ctx.emit("HARD_SWISH", [ctx.input(0)])]


@lowering("Reciprocal", "Inv")
def lower_reciprocal(ctx):
    x = ctx.input(0)
    return [ctx.emit("DIV", [ctx.const(np.ones((), x.dtype)), x], {"fused_activation_function": "NONE"})]


@lowering("AddN")
def lower_add_n(ctx):
    if len(ctx.inputs) == 1:
        return [ctx.input(0)]
    return [ctx.emit("ADD_N", list(ctx.inputs))]


@lowering("ClipByValue")
def lower_clip_by_value(ctx):
    x, lo, hi = ctx.inputs
    return [ctx.emit("MAXIMUM", [ctx.emit("MINIMUM", [x, hi]), lo])]


_REDUCE = {"Mean": "MEAN", "Sum": "SUM", "Max": "REDUCE_MAX", "Min": "REDUCE_MIN", "Prod": "REDUCE_PROD",
           "Any": "REDUCE_ANY", "All": "REDUCE_ALL"}


def _reduce_rule(tfl: str):
    def rule(ctx):
        axes = ctx.int32_input(1)
        return [ctx.emit(tfl, [ctx.input(0), axes], {"keep_dims": bool(ctx.attr("keep_dims", False))})]

    rule.__name__ = f"lower_{tfl.lower()}"
    return rule


for _tf, _tfl in _REDUCE.items():
    lowering(_tf)(_reduce_rule(_tfl))


@lowering("ArgMax", "ArgMin")
def lower_arg_max(ctx):
    kind = "ARG_MAX" if ctx.op.kind == "ArgMax" else "ARG_MIN"
    out_type = ctx.out(0).dtype
    return [ctx.emit(kind, [ctx.input(0), ctx.int32_input(1)], {"output_type": out_type})]


@lowering("Cumsum")
def lower_cumsum(ctx):
    return [ctx.emit("CUMSUM", [ctx.input(0), ctx.int32_input(1)],
                     {"exclusive": bool(ctx.attr("exclusive")), "reverse": bool(ctx.attr("reverse"))})]


@lowering("Bucketize")
def lower_bucketize(ctx):
    # Keras' Discretization, tf.raw_ops.Bucketize: LiteRT's BUCKETIZE (bucketize.cc) with the same boundaries,
    # which must be sorted (its Prepare checks it; TensorFlow's kernel too)
    x = ctx.input(0)
    if np.dtype(x.dtype) not in (np.float32, np.float64, np.int32, np.int64):
        ctx.fail(f"LiteRT's BUCKETIZE reads float32, float64, int32 or int64 values, not {np.dtype(x.dtype).name}")
    bounds = [float(b) for b in ctx.attr("boundaries") or []]
    if any(b < a for a, b in zip(bounds, bounds[1:])):
        ctx.fail("the boundaries are not sorted")
    return [ctx.emit("BUCKETIZE", [x], {"boundaries": bounds}, dtype=np.int32)]


@lowering("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")
def lower_unsorted_segment(ctx):
    # LiteRT's UNSORTED_SEGMENT_* (unsorted_segment.cc): float32 or int32 data, int32 segment ids whose shape is
    # a prefix of the data's, an int32 count; empty segments start at 0 / lowest / largest / 1 and negative ids
    # are skipped, as TensorFlow's kernels do
    kind = {"UnsortedSegmentSum": "UNSORTED_SEGMENT_SUM", "UnsortedSegmentMax": "UNSORTED_SEGMENT_MAX",
            "UnsortedSegmentMin": "UNSORTED_SEGMENT_MIN", "UnsortedSegmentProd": "UNSORTED_SEGMENT_PROD"}[ctx.op.kind]
    data = ctx.input(0)
    if data.dtype not in (np.float32, np.int32):
        ctx.fail(f"LiteRT's {kind} takes float32 and int32 data, not {np.dtype(data.dtype).name}")
    count = ctx.cast(ctx.input(2), np.int32)
    if count.is_const:
        count = ctx.const(np.asarray(count.const, np.int32).reshape(1))
    return [ctx.emit(kind, [data, ctx.cast(ctx.input(1), np.int32), count])]
