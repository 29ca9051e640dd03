"""Elementwise math, activations, comparisons and reductions."""

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
    "Relu": "RELU", "Relu6": "RELU6", "Elu": "ELU", "Sigmoid": "LOGISTIC", "Tanh": "TANH",
    "Exp": "EXP", "Log": "LOG", "Sqrt": "SQRT", "Rsqrt": "RSQRT", "Square": "SQUARE", "Neg": "NEG",
    "Abs": "ABS", "Floor": "FLOOR", "Ceil": "CEIL", "Round": "ROUND", "Sin": "SIN", "Cos": "COS",
    "Sign": "SIGN", "LogicalNot": "LOGICAL_NOT", "ZerosLike": "ZEROS_LIKE", "LogSoftmax": "LOG_SOFTMAX",
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


@lowering("RFFT")
def lower_rfft(ctx):
    # tf.signal.rfft over the last axis (stft, audio front ends). LiteRT has RFFT2D only (rfft2d.cc: rank >= 2,
    # both fft lengths powers of two): x [..., L] becomes [..., 1, L], RFFT2D with fft_length [1, L], then the
    # unit axis goes. The input is first cropped or zero-padded to L, as TF does.
    x, length = ctx.input(0), ctx.input(1)
    if length.const is None or x.shape is None or not x.shape:
        ctx.fail("fft_length must be constant and the input's rank known")
    n = int(np.asarray(length.const).reshape(-1)[0])
    if n <= 0 or n & (n - 1):
        ctx.fail(f"fft_length {n} is not a power of two (LiteRT's RFFT2D kernel takes powers of two only)")
    rank, last = len(x.shape), x.shape[-1]
    if last is None:
        ctx.fail("the transformed (last) axis must have a static size")
    if last > n:
        x = ctx.emit("SLICE", [x, ctx.i32([0] * rank), ctx.i32([-1] * (rank - 1) + [n])], dtype=x.dtype,
                     shape=(*x.shape[:-1], n))
    elif last < n:
        x = ctx.emit("PAD", [x, ctx.i32([[0, 0]] * (rank - 1) + [[0, n - last]])], dtype=x.dtype,
                     shape=(*x.shape[:-1], n))
    x2 = ctx.emit("EXPAND_DIMS", [x, ctx.i32(rank - 1)], dtype=x.dtype, shape=(*x.shape[:-1], 1, n))
    y = ctx.emit("RFFT2D", [x2, ctx.i32([1, n])], dtype=np.complex64, shape=(*x.shape[:-1], 1, n // 2 + 1))
    return [ctx.emit("SQUEEZE", [y], {"squeeze_dims": [rank - 1]}, dtype=np.complex64,
                     shape=(*x.shape[:-1], n // 2 + 1))]


@lowering("ComplexAbs")
def lower_complex_abs(ctx):
    return [ctx.emit("COMPLEX_ABS", [ctx.input(0)])]


@lowering("Real")
def lower_real(ctx):
    return [ctx.emit("REAL", [ctx.input(0)])]


@lowering("Imag")
def lower_imag(ctx):
    return [ctx.emit("IMAG", [ctx.input(0)])]
