"""The gradient ops of tf.GradientTape (ReluGrad, BiasAddGrad, the cross-entropies, the convolutions' filter gradients, ...), composed from builtins: on-device training.

Each rule writes the formula of TensorFlow's own CPU kernel (``relu_op_functor.h``, ``cwise_ops_gradients.h``,
``xent_op.h``, ``sparse_xent_op.h``, ``fused_batch_norm_op.cc``, ...) with LiteRT builtins, in the kernel's order of
operations, so that the results match TensorFlow's to float32 rounding on both of LiteRT's kernel sets:

* activations: ReluGrad, Relu6Grad, LeakyReluGrad, EluGrad, SeluGrad, SoftplusGrad, SoftsignGrad, SigmoidGrad,
  TanhGrad, RsqrtGrad, SqrtGrad, ReciprocalGrad / InvGrad (elementwise MUL / SELECT_V2 / DIV);
* BiasAddGrad (SUM), BroadcastGradientArgs, ShapeN and ConcatOffset for shapes known only at run time;
* SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits: loss and backprop, logits - max;
* Conv2DBackpropFilter (one CONV_2D with the batch as channels), DepthwiseConv2dNativeBackpropFilter / Input
  (grouped CONV_2D), Conv2DBackpropInput's forms TRANSPOSE_CONV lacks (lower/nn.py hands them here);
* MaxPoolGrad / V2, AvgPoolGrad (masks and TRANSPOSE_CONV), FusedBatchNormGrad / V2 / V3 (inference mode);
* StridedSliceGrad (PAD), ResizeBilinearGrad / ResizeNearestNeighborGrad (FULLY_CONNECTED with the transposed
  interpolation).

A weight that is not a constant (a resource variable ``train`` updates) is an operand like any other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import LowerCtx, lowering

NONE = {"fused_activation_function": "NONE"}
I32 = np.dtype(np.int32)


# --------------------------------------------------------------------------------------------
# small builders
# --------------------------------------------------------------------------------------------


def _float(ctx: LowerCtx, *values: Value) -> None:
    for v in values:
        if v is not None and np.dtype(v.dtype) != np.float32:
            ctx.fail(f"LiteRT's kernels for this composition take float32, got {np.dtype(v.dtype).name}")


def _scalar(ctx: LowerCtx, value: float, like: Value) -> Value:
    return ctx.const(np.asarray(value, like.dtype))


def _broadcast_shape(a: Value, b: Value):
    """The static broadcast of two shapes (None where unknown)."""
    if a.shape is None or b.shape is None:
        return None
    n = max(len(a.shape), len(b.shape))
    pa = (1,) * (n - len(a.shape)) + tuple(a.shape)
    pb = (1,) * (n - len(b.shape)) + tuple(b.shape)
    out = []
    for x, y in zip(pa, pb):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            out.append(x if x is not None else y)
    return tuple(out)


def _binary(ctx: LowerCtx, kind: str, a: Value, b: Value, dtype=None) -> Value:
    opts = dict(NONE) if kind in ("ADD", "SUB", "MUL", "DIV") else {}
    return ctx.emit(kind, [a, b], opts, dtype=dtype if dtype is not None else a.dtype, shape=_broadcast_shape(a, b))


def _unary(ctx: LowerCtx, kind: str, x: Value) -> Value:
    return ctx.emit(kind, [x], dtype=x.dtype, shape=x.shape)


def _mask(ctx: LowerCtx, kind: str, x: Value, bound: float) -> Value:
    """``x <kind> bound`` as a bool tensor (GREATER, LESS, ...)."""
    return ctx.emit(kind, [x, _scalar(ctx, bound, x)], dtype=np.bool_, shape=x.shape)


def _reduce(ctx: LowerCtx, kind: str, x: Value, axes: Sequence[int], keep_dims: bool) -> Value:
    rank = len(x.shape)
    axes = sorted(a % rank for a in axes)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep_dims else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return ctx.emit(kind, [x, ctx.i32(axes)], {"keep_dims": keep_dims}, dtype=x.dtype, shape=shape)


def _known_rank(ctx: LowerCtx, v: Value, what: str) -> int:
    if v.shape is None:
        ctx.fail(f"the rank of {what} must be known")
    return len(v.shape)


# --------------------------------------------------------------------------------------------
# activations' gradients: (upstream gradient, the forward op's input or output) -> gradient
# --------------------------------------------------------------------------------------------


@lowering("ReluGrad")
def lower_relu_grad(ctx: LowerCtx) -> list[Value]:
    """``gradients * (features > 0)`` (relu_op_functor.h: a product with the cast mask, so a NaN gradient stays
    NaN where the feature is not positive, as in TensorFlow)."""
    dy, x = ctx.input(0), ctx.input(1)
    _float(ctx, dy, x)
    keep = ctx.cast(_mask(ctx, "GREATER", x, 0.0), dy.dtype)
    return [_binary(ctx, "MUL", dy, keep)]


@lowering("Relu6Grad")
def lower_relu6_grad(ctx: LowerCtx) -> list[Value]:
    """``gradients * ((features > 0) & (features < 6))`` (relu_op_functor.h)."""
    dy, x = ctx.input(0), ctx.input(1)
    _float(ctx, dy, x)
    inside = ctx.emit("LOGICAL_AND", [_mask(ctx, "GREATER", x, 0.0), _mask(ctx, "LESS", x, 6.0)],
                      dtype=np.bool_, shape=x.shape)
    return [_binary(ctx, "MUL", dy, ctx.cast(inside, dy.dtype))]


@lowering("LeakyReluGrad")
def lower_leaky_relu_grad(ctx: LowerCtx) -> list[Value]:
    """``features > 0 ? gradients : gradients * alpha`` (relu_op_functor.h)."""
    dy, x = ctx.input(0), ctx.input(1)
    _float(ctx, dy, x)
    alpha = float(ctx.attr("alpha", 0.2))
    scaled = _binary(ctx, "MUL", dy, _scalar(ctx, alpha, dy))
    return [ctx.emit("SELECT_V2", [_mask(ctx, "GREATER", x, 0.0), dy, scaled])]


@lowering("EluGrad")
def lower_elu_grad(ctx: LowerCtx) -> list[Value]:
    """``activations < 0 ? (activations + 1) * gradients : gradients`` (relu_op_functor.h; the input is ELU's
    output)."""
    dy, y = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    neg = _binary(ctx, "MUL", _binary(ctx, "ADD", y, _scalar(ctx, 1.0, y)), dy)
    return [ctx.emit("SELECT_V2", [_mask(ctx, "LESS", y, 0.0), neg, dy])]


_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_SCALE_ALPHA = 1.7580993408473768599402175208123


@lowering("SeluGrad")
def lower_selu_grad(ctx: LowerCtx) -> list[Value]:
    """``outputs < 0 ? gradients * (outputs + scale * alpha) : gradients * scale`` (relu_op_functor.h; the input
    is SELU's output)."""
    dy, y = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    neg = _binary(ctx, "MUL", dy, _binary(ctx, "ADD", y, _scalar(ctx, _SELU_SCALE_ALPHA, y)))
    pos = _binary(ctx, "MUL", dy, _scalar(ctx, _SELU_SCALE, dy))
    return [ctx.emit("SELECT_V2", [_mask(ctx, "LESS", y, 0.0), neg, pos])]


@lowering("SoftplusGrad")
def lower_softplus_grad(ctx: LowerCtx) -> list[Value]:
    """``gradients / (exp(-features) + 1)`` (softplus_op.h)."""
    dy, x = ctx.input(0), ctx.input(1)
    _float(ctx, dy, x)
    den = _binary(ctx, "ADD", _unary(ctx, "EXP", _unary(ctx, "NEG", x)), _scalar(ctx, 1.0, x))
    return [_binary(ctx, "DIV", dy, den)]


@lowering("SoftsignGrad")
def lower_softsign_grad(ctx: LowerCtx) -> list[Value]:
    """``gradients / (|features| + 1)^2`` (softsign_op.h)."""
    dy, x = ctx.input(0), ctx.input(1)
    _float(ctx, dy, x)
    den = _binary(ctx, "ADD", _unary(ctx, "ABS", x), _scalar(ctx, 1.0, x))
    return [_binary(ctx, "DIV", dy, _binary(ctx, "MUL", den, den))]


# the *Grad(y, dy) ops of cwise_ops_gradients.h, whose first input is the forward op's output; each in the order
# of the functor's packet (vectorized) form, which TF's CPU kernel runs: bit-equal to TensorFlow where LiteRT's
# MUL / SUB / DIV round as IEEE float32 does


@lowering("SigmoidGrad")
def lower_sigmoid_grad(ctx: LowerCtx) -> list[Value]:
    """``dy * (y * (1 - y))`` (cwise_ops_gradients.h, the packet form of scalar_sigmoid_gradient_op, which TF's
    CPU kernel runs: bit-equal to it)."""
    y, dy = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    one_minus = _binary(ctx, "SUB", _scalar(ctx, 1.0, y), y)
    return [_binary(ctx, "MUL", dy, _binary(ctx, "MUL", y, one_minus))]


@lowering("TanhGrad")
def lower_tanh_grad(ctx: LowerCtx) -> list[Value]:
    """``dy * (1 - y * y)`` (cwise_ops_gradients.h, scalar_tanh_gradient_op)."""
    y, dy = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    return [_binary(ctx, "MUL", dy, _binary(ctx, "SUB", _scalar(ctx, 1.0, y), _binary(ctx, "MUL", y, y)))]


@lowering("RsqrtGrad")
def lower_rsqrt_grad(ctx: LowerCtx) -> list[Value]:
    """``-0.5 * (dy * y) * (y * y)`` (cwise_ops_gradients.h, scalar_rsqrt_gradient_op)."""
    y, dy = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    scaled = _binary(ctx, "MUL", _scalar(ctx, -0.5, y), _binary(ctx, "MUL", dy, y))
    return [_binary(ctx, "MUL", scaled, _binary(ctx, "MUL", y, y))]


@lowering("SqrtGrad")
def lower_sqrt_grad(ctx: LowerCtx) -> list[Value]:
    """``(0.5 / y) * dy`` (cwise_ops_gradients.h, the packet form of scalar_sqrt_gradient_op)."""
    y, dy = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    return [_binary(ctx, "MUL", _binary(ctx, "DIV", _scalar(ctx, 0.5, y), y), dy)]


@lowering("ReciprocalGrad", "InvGrad")
def lower_reciprocal_grad(ctx: LowerCtx) -> list[Value]:
    """``-(dy * (y * y))`` (cwise_ops_gradients.h, the packet form of scalar_inverse_gradient_op)."""
    y, dy = ctx.input(0), ctx.input(1)
    _float(ctx, dy, y)
    return [_unary(ctx, "NEG", _binary(ctx, "MUL", dy, _binary(ctx, "MUL", y, y)))]


# --------------------------------------------------------------------------------------------
# bias, broadcasting
# --------------------------------------------------------------------------------------------


@lowering("BiasAddGrad")
def lower_bias_add_grad(ctx: LowerCtx) -> list[Value]:
    """The sum of the upstream gradient over every axis but the channels' (the last one, or axis 1 in NCHW), as
    the official converter's lowering (lower_tf.td, ``LowerBiasAddGradOp``)."""
    dy = ctx.input(0)
    rank = _known_rank(ctx, dy, "the gradient")
    fmt = ctx.attr("data_format", "NHWC")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if rank < 2:
        ctx.fail(f"the gradient must have rank 2 or more, got rank {rank}")
    channel = 1 if fmt == "NCHW" else rank - 1
    if fmt not in ("NHWC", "NCHW", "N...C"):
        ctx.fail(f"data_format {fmt} is not supported")
    return [_reduce(ctx, "SUM", dy, [a for a in range(rank) if a != channel], keep_dims=False)]


@lowering("BroadcastGradientArgs")
def lower_broadcast_gradient_args(ctx: LowerCtx) -> list[Value]:
    """The axes each operand of a broadcasting op was broadcast along (a gradient sums over them), for shapes
    known only at run time (constant shapes fold before lowering).

    TensorFlow's ``BCast`` reduces an operand along every axis where its shape, padded with leading 1s to the
    common rank, is 1 (whether the other operand's is 1 too or not). The ranks must be known (the shapes' lengths):
    each padded shape is CONCATENATION(ones, shape), the axes WHERE(padded == 1).
    """
    s0, s1 = ctx.input(0), ctx.input(1)
    dtype = np.dtype(ctx.out(0).dtype)
    if s0.shape is None or s1.shape is None or None in s0.shape or None in s1.shape:
        ctx.fail("the ranks of both operands must be known")
    n0, n1 = int(s0.shape[0]), int(s1.shape[0])
    n = max(n0, n1)
    outs = []
    for s, k in ((s0, n0), (s1, n1)):
        s = ctx.cast(s, np.int32)
        if s.is_const:
            padded = ctx.const(np.concatenate([np.ones(n - k, np.int32), s.const.reshape(-1)]).astype(np.int32))
        elif k < n:
            padded = ctx.emit("CONCATENATION", [ctx.i32(np.ones(n - k)), s], {"axis": 0, **NONE}, dtype=I32,
                              shape=(n,))
        else:
            padded = s
        ones = ctx.emit("EQUAL", [padded, ctx.i32(1)], dtype=np.bool_, shape=(n,))
        where = ctx.emit("WHERE", [ones], dtype=np.int64, shape=(None, 1))
        axes = ctx.emit("RESHAPE", [where, ctx.i32([-1])], dtype=np.int64, shape=(None,))
        outs.append(ctx.cast(axes, dtype))
    return outs


# --------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------


def _log_softmax_parts(ctx: LowerCtx, logits: Value) -> tuple[Value, Value, Value]:
    """(logits - max, exp of it, its sum) along the classes, as xent_op.h computes them (keeping dims)."""
    shifted = _binary(ctx, "SUB", logits, _reduce(ctx, "REDUCE_MAX", logits, [-1], keep_dims=True))
    exp = _unary(ctx, "EXP", shifted)
    return shifted, exp, _reduce(ctx, "SUM", exp, [-1], keep_dims=True)


def _xent(ctx: LowerCtx, logits: Value, labels: Value) -> list[Value]:
    """loss = sum(labels * (log(sum exp) - shifted)), backprop = exp / sum exp - labels (xent_op.h)."""
    shifted, exp, total = _log_softmax_parts(ctx, logits)
    per_class = _binary(ctx, "MUL", labels, _binary(ctx, "SUB", _unary(ctx, "LOG", total), shifted))
    loss = _reduce(ctx, "SUM", per_class, [-1], keep_dims=False)
    backprop = _binary(ctx, "SUB", _binary(ctx, "DIV", exp, total), labels)
    return [loss, backprop]


@lowering("SoftmaxCrossEntropyWithLogits")
def lower_softmax_cross_entropy(ctx: LowerCtx) -> list[Value]:
    """Both outputs (the loss per example and its gradient w.r.t. the logits), stable as TensorFlow's kernel
    (logits - max); the logits and labels broadcast against each other as in TensorFlow."""
    logits, labels = ctx.input(0), ctx.input(1)
    _float(ctx, logits, labels)
    if _known_rank(ctx, logits, "the logits") != 2 or _known_rank(ctx, labels, "the labels") != 2:
        ctx.fail("logits and labels must be of rank 2 ([batch, classes])")
    return _xent(ctx, logits, labels)


@lowering("SparseSoftmaxCrossEntropyWithLogits")
def lower_sparse_softmax_cross_entropy(ctx: LowerCtx) -> list[Value]:
    """Both outputs, with the labels as ONE_HOT rows. A label outside [0, classes) gives NaN loss and gradient
    rows (TensorFlow's GPU kernel and the official converter's lowering do the same; its CPU kernel raises)."""
    logits, labels = ctx.input(0), ctx.input(1)
    _float(ctx, logits)
    if _known_rank(ctx, logits, "the logits") != 2 or _known_rank(ctx, labels, "the labels") != 1:
        ctx.fail("logits must be of rank 2 ([batch, classes]) and labels of rank 1")
    classes = logits.shape[1]
    labels = ctx.cast(labels, np.int32) if labels.is_const else labels
    if classes is None:
        dims = ctx.emit("SHAPE", [logits], {"out_type": I32}, dtype=I32, shape=(2,))
        depth = ctx.emit("GATHER", [dims, ctx.i32(1)], {"axis": 0, "batch_dims": 0}, dtype=I32, shape=())
    else:
        depth = ctx.i32(classes)
    depth_like = depth if np.dtype(labels.dtype) == I32 else ctx.cast(depth, labels.dtype)
    batch = labels.shape
    onehot = ctx.emit("ONE_HOT", [labels, depth, _scalar(ctx, 1.0, logits), _scalar(ctx, 0.0, logits)],
                      {"axis": -1}, dtype=logits.dtype, shape=(batch[0], classes))
    zero = ctx.const(np.zeros((), labels.dtype))
    valid = ctx.emit("LOGICAL_AND", [ctx.emit("GREATER_EQUAL", [labels, zero], dtype=np.bool_, shape=batch),
                                     ctx.emit("LESS", [labels, depth_like], dtype=np.bool_, shape=batch)],
                     dtype=np.bool_, shape=batch)
    nan = ctx.emit("SELECT_V2", [valid, _scalar(ctx, 0.0, logits), _scalar(ctx, np.nan, logits)],
                   dtype=logits.dtype, shape=batch)
    nan = ctx.emit("RESHAPE", [nan, ctx.i32([-1, 1])], dtype=logits.dtype, shape=(batch[0], 1))
    return _xent(ctx, logits, _binary(ctx, "ADD", onehot, nan))


# --------------------------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------------------------


@lowering("ShapeN")
def lower_shape_n(ctx: LowerCtx) -> list[Value]:
    """The shapes of several tensors (Conv2D's gradient asks for its input's and filter's): a constant for each
    static one, SHAPE for the others."""
    outs = []
    for x, out in zip(ctx.inputs, ctx.op.outputs, strict=True):
        dtype = np.dtype(out.dtype)
        if x.shape is not None and x.static_shape:
            outs.append(ctx.const(np.asarray(x.shape, dtype)))
        else:
            rank = None if x.shape is None else len(x.shape)
            outs.append(ctx.emit("SHAPE", [x], {"out_type": dtype}, dtype=dtype, shape=(rank,)))
    return outs


# --------------------------------------------------------------------------------------------
# convolutions and pooling: the geometry of a window, and the builders the gradients share
# --------------------------------------------------------------------------------------------


class Window:
    """One spatial axis of a convolution or pooling window, as TensorFlow computes it (``GetWindowedOutputSize``):
    input size, output size, kernel size, stride, dilation and the padding before and after."""

    def __init__(self, size: int, out: int, kernel: int, stride: int, dilation: int, before: int, after: int):
        self.size, self.out, self.kernel, self.stride, self.dilation = size, out, kernel, stride, dilation
        self.before, self.after = before, after

    @property
    def padded(self) -> int:
        return self.size + self.before + self.after

    @property
    def span(self) -> int:
        """The padded input length the windows read: (out - 1) * stride + effective kernel."""
        return (self.out - 1) * self.stride + (self.kernel - 1) * self.dilation + 1


def _check_nhwc(ctx: LowerCtx) -> None:
    fmt = ctx.attr("data_format", "NHWC")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if fmt != "NHWC":
        ctx.fail(f"data_format {fmt} is not supported (LiteRT is channels-last)")


def _windows(ctx: LowerCtx, in_hw: Sequence[int | None], out_hw: Sequence[int | None], k_hw: Sequence[int],
             strides: Sequence[int], dilations: Sequence[int]) -> list[Window]:
    """The two spatial windows of an NHWC op's attributes (padding SAME, VALID or EXPLICIT)."""
    _check_nhwc(ctx)
    if None in tuple(in_hw) + tuple(out_hw):
        ctx.fail("the spatial sizes of the input and of the gradient must be static")
    padding = ctx.attr("padding", "VALID")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    explicit = list(ctx.attr("explicit_paddings", []) or [])
    wins = []
    for axis in range(2):
        size, out, k, s, d = int(in_hw[axis]), int(out_hw[axis]), int(k_hw[axis]), int(strides[axis]), \
            int(dilations[axis])
        if padding == "VALID":
            before = after = 0
        elif padding == "SAME":
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            before, after = total // 2, total - total // 2
        elif padding == "EXPLICIT" and len(explicit) == 8:
            before, after = int(explicit[2 + 2 * axis]), int(explicit[3 + 2 * axis])
        else:
            ctx.fail(f"padding {padding} is not supported")
        win = Window(size, out, k, s, d, before, after)
        expected = -(-size // s) if padding == "SAME" else (win.padded - (k - 1) * d - 1) // s + 1
        if out != expected:
            ctx.fail(f"a gradient of {out} positions along spatial axis {axis} does not match an input of {size} "
                     f"(padding {padding}, kernel {k}, stride {s}, dilation {d}: {expected} positions)")
        wins.append(win)
    return wins


def _nhwc_attr(ctx: LowerCtx, key: str, default: Sequence[int]) -> tuple[int, int]:
    return _nhwc_list(ctx, key, ctx.attr(key, default) or default)


def _pad_or_crop(ctx: LowerCtx, x: Value, pads: Sequence[tuple[int, int]]) -> Value:
    """Pad (positive) or crop (negative) the spatial axes 1 and 2 of an NHWC tensor by (before, after) each."""
    shape = list(x.shape)
    grow = [(0, 0)] + [(max(a, 0), max(b, 0)) for a, b in pads] + [(0, 0)]
    if any(a or b for a, b in grow):
        shape = [None if d is None else d + a + b for d, (a, b) in zip(shape, grow)]
        x = ctx.emit("PAD", [x, ctx.i32(grow)], dtype=x.dtype, shape=tuple(shape))
    if any(a < 0 or b < 0 for a, b in pads):
        begin = [0] + [max(-a, 0) for a, _ in pads] + [0]
        size = [-1] + [shape[i + 1] - max(-a, 0) - max(-b, 0) for i, (a, b) in enumerate(pads)] + [-1]
        shape = [shape[0], *size[1:3], shape[3]]
        x = ctx.emit("SLICE", [x, ctx.i32(begin), ctx.i32(size)], dtype=x.dtype, shape=tuple(shape))
    return x


def _conv(ctx: LowerCtx, x: Value, filt: Value, out_shape: tuple, strides: Sequence[int],
          dilations: Sequence[int]) -> Value:
    """A VALID CONV_2D (filter [out, kh, kw, in]; a grouped one when x has more channels than the filter)."""
    bias = ctx.const(np.zeros(filt.shape[0], np.float32))
    opts = {"padding": "VALID", "stride_h": int(strides[0]), "stride_w": int(strides[1]),
            "dilation_h_factor": int(dilations[0]), "dilation_w_factor": int(dilations[1]), **NONE}
    return ctx.emit("CONV_2D", [x, filt, bias], opts, dtype=np.float32, shape=out_shape)


def _zero_stuffed(ctx: LowerCtx, dy: Value, strides: Sequence[int]) -> Value:
    """dy [N, Ho, Wo, C] with stride - 1 zeros after each row and column: [N, Ho * sh, Wo * sw, C]."""
    sh, sw = strides
    if sh == 1 and sw == 1:
        return dy
    n, ho, wo, c = dy.shape
    rows = ctx.reshape(dy, [-1, 1, wo, 1, c])
    rows = ctx.emit("PAD", [rows, ctx.i32([[0, 0], [0, sh - 1], [0, 0], [0, sw - 1], [0, 0]])], dtype=dy.dtype,
                    shape=(None, sh, wo, sw, c))
    out = ctx.reshape(rows, [-1, ho * sh, wo * sw, c])
    out.shape = (n, ho * sh, wo * sw, c)
    return out


def conv_backprop_input(ctx: LowerCtx, dy: Value, filt: Value, wins: Sequence[Window]) -> Value:
    """The gradient of a convolution w.r.t. its input, as a stride-1 VALID convolution of the zero-stuffed,
    padded gradient with the spatially flipped filter (dilation as the forward's).

    ``filt`` is TensorFlow's [kh, kw, in, out] or a depthwise [kh, kw, C, M] (then
    a grouped convolution of C groups of M channels). Any filter (constant or not), stride, dilation and padding.
    """
    stuffed = _zero_stuffed(ctx, dy, [w.stride for w in wins])
    pads = []
    for axis, w in enumerate(wins):
        front = (w.kernel - 1) * w.dilation - w.before
        total = w.size + (w.kernel - 1) * w.dilation
        pads.append((front, total - front - stuffed.shape[1 + axis]))
    padded = _pad_or_crop(ctx, stuffed, pads)
    # TF [kh, kw, a, b] -> LiteRT [a, kh, kw, b], flipped in space: regular a = in, b = out; depthwise a = C, b = M
    if filt.is_const:
        flipped = ctx.const(np.ascontiguousarray(np.transpose(filt.const[::-1, ::-1], [2, 0, 1, 3])))
    else:
        rev = ctx.emit("REVERSE_V2", [filt, ctx.i32([0, 1])], dtype=filt.dtype, shape=filt.shape)
        flipped = ctx.transpose(rev, [2, 0, 1, 3])
    n, _, _, _ = dy.shape
    channels = flipped.shape[0]
    return _conv(ctx, padded, flipped, (n, wins[0].size, wins[1].size, channels), (1, 1),
                 [w.dilation for w in wins])


def _pad_input(ctx: LowerCtx, x: Value, wins: Sequence[Window]) -> Value:
    """x padded as the forward op read it (zeros), cropped to what its windows read."""
    return _pad_or_crop(ctx, x, [(w.before, w.span - w.size - w.before) for w in wins])


@lowering("Conv2DBackpropFilter")
def lower_conv2d_backprop_filter(ctx: LowerCtx) -> list[Value]:
    """The filter gradient dW[i, j, c, o] = sum over n, y, x of xpad[n, y s + i d, x s + j d, c] dy[n, y, x, o]:
    one CONV_2D with the batch as the channels — input xpad as [C, H, W, N], filter dy as [O, Ho, Wo, N], stride
    the forward's dilation and dilation the forward's stride."""
    x, dy = ctx.input(0), ctx.input(2)
    _float(ctx, x, dy)
    _check_nhwc(ctx)
    out = ctx.out(0)
    if out.shape is None or not out.static_shape or x.shape is None or dy.shape is None:
        ctx.fail("the filter's shape and the ranks of the input and gradient must be known")
    kh, kw, cin, cout = out.shape
    if x.shape[3] is not None and x.shape[3] != cin:
        ctx.fail(f"grouped convolution ({x.shape[3]} input channels, filters of {cin}) is not supported")
    wins = _windows(ctx, x.shape[1:3], dy.shape[1:3], (kh, kw), _nhwc_attr(ctx, "strides", [1] * 4),
                    _nhwc_attr(ctx, "dilations", [1] * 4))
    xt = ctx.transpose(_pad_input(ctx, x, wins), [3, 1, 2, 0])
    ft = ctx.transpose(dy, [3, 1, 2, 0])
    res = _conv(ctx, xt, ft, (cin, kh, kw, cout), [w.dilation for w in wins], [w.stride for w in wins])
    return [ctx.transpose(res, [1, 2, 0, 3])]


@lowering("DepthwiseConv2dNativeBackpropFilter")
def lower_depthwise_backprop_filter(ctx: LowerCtx) -> list[Value]:
    """dW[i, j, c, m] = sum over n, y, x of xpad[n, y s + i d, x s + j d, c] dy[n, y, x, c M + m]: one grouped
    CONV_2D (C groups) of xpad as [1, H, W, C * N] with dy as the filter [C * M, Ho, Wo, N]."""
    x, dy = ctx.input(0), ctx.input(2)
    _float(ctx, x, dy)
    out = ctx.out(0)
    if out.shape is None or not out.static_shape or x.shape is None or dy.shape is None:
        ctx.fail("the filter's shape and the ranks of the input and gradient must be known")
    kh, kw, c, m = out.shape
    wins = _windows(ctx, x.shape[1:3], dy.shape[1:3], (kh, kw), _nhwc_attr(ctx, "strides", [1] * 4),
                    _nhwc_attr(ctx, "dilations", [1] * 4))
    xp = _pad_input(ctx, x, wins)
    n = x.shape[0]
    xt = ctx.reshape(ctx.transpose(xp, [1, 2, 3, 0]), [1, xp.shape[1], xp.shape[2], -1])
    xt.shape = (1, xp.shape[1], xp.shape[2], None if n is None else c * n)
    ft = ctx.transpose(dy, [3, 1, 2, 0])
    res = _conv(ctx, xt, ft, (1, kh, kw, c * m), [w.dilation for w in wins], [w.stride for w in wins])
    return [ctx.reshape(res, [kh, kw, c, m])]


@lowering("DepthwiseConv2dNativeBackpropInput")
def lower_depthwise_backprop_input(ctx: LowerCtx) -> list[Value]:
    """dx = a grouped stride-1 CONV_2D of the zero-stuffed, padded gradient with the flipped filter
    (:func:`conv_backprop_input`)."""
    filt, dy = ctx.input(1), ctx.input(2)
    _float(ctx, filt, dy)
    out = ctx.out(0)
    if out.shape is None or filt.shape is None or not filt.static_shape or dy.shape is None:
        ctx.fail("the shapes of the filter and the ranks of the input and gradient must be known")
    kh, kw, _, _ = filt.shape
    wins = _windows(ctx, out.shape[1:3], dy.shape[1:3], (kh, kw), _nhwc_attr(ctx, "strides", [1] * 4),
                    _nhwc_attr(ctx, "dilations", [1] * 4))
    return [conv_backprop_input(ctx, dy, filt, wins)]


def conv2d_backprop_input(ctx: LowerCtx) -> Value:
    """Conv2DBackpropInput (input_sizes, filter [kh, kw, in, out], out_backprop) as :func:`conv_backprop_input`:
    for the forms LiteRT's TRANSPOSE_CONV does not take (a filter that is not constant, dilations, EXPLICIT
    padding); ``lower/nn.py``'s rule hands them here."""
    filt, dy = ctx.input(1), ctx.input(2)
    _float(ctx, filt, dy)
    _check_nhwc(ctx)
    out = ctx.out(0)
    if out.shape is None or filt.shape is None or not filt.static_shape or dy.shape is None:
        ctx.fail("the shapes of the filter and the ranks of the input and gradient must be known")
    kh, kw, cin, _ = filt.shape
    if out.shape[3] is not None and out.shape[3] != cin:
        ctx.fail(f"grouped convolution ({out.shape[3]} input channels, filters of {cin}) is not supported")
    wins = _windows(ctx, out.shape[1:3], dy.shape[1:3], (kh, kw), _nhwc_attr(ctx, "strides", [1] * 4),
                    _nhwc_attr(ctx, "dilations", [1] * 4))
    return conv_backprop_input(ctx, dy, filt, wins)


def _pool_windows(ctx: LowerCtx, in_shape, out_shape, ksize, strides) -> list[Window]:
    if in_shape is None or out_shape is None or len(in_shape) != 4 or len(out_shape) != 4:
        ctx.fail("the input and the gradient must be of rank 4 (NHWC)")
    k = _nhwc_list(ctx, "ksize", ksize)
    s = _nhwc_list(ctx, "strides", strides)
    return _windows(ctx, in_shape[1:3], out_shape[1:3], k, s, (1, 1))


def _nhwc_list(ctx: LowerCtx, what: str, v) -> tuple[int, int]:
    v = [int(a) for a in np.asarray(v).reshape(-1)]
    if len(v) != 4 or v[0] != 1 or v[3] != 1:
        ctx.fail(f"{what} {v} over the batch or channel dimension are not supported")
    return v[1], v[2]


def _place_windows(ctx: LowerCtx, parts: Sequence[Value], wins: Sequence[Window], weights: np.ndarray) -> Value:
    """Scatter-add window values back onto the input: ``parts[k]`` [N, Ho, Wo, C] is what each window sends to its
    k-th position (k = i * kw + j); the result [N, H, W, C] sums, at each input position, what every window sends
    it. One TRANSPOSE_CONV with the channels as batch: [N * C, Ho, Wo, K] -> [N * C, span_h, span_w, 1] with the
    constant filter ``weights`` [1, kh, kw, K], then the forward's padding cropped off."""
    n, ho, wo, c = parts[0].shape
    kh, kw = wins[0].kernel, wins[1].kernel
    k = len(parts)
    if k == 1:
        stacked = ctx.reshape(ctx.transpose(parts[0], [0, 3, 1, 2]), [-1, ho, wo, 1])
    else:
        stacked = ctx.emit("PACK", list(parts), {"values_count": k, "axis": 4}, dtype=np.float32,
                           shape=(n, ho, wo, c, k))
        stacked = ctx.reshape(ctx.transpose(stacked, [0, 3, 1, 2, 4]), [-1, ho, wo, k])
    nc = None if n is None else n * c
    stacked.shape = (nc, ho, wo, k)
    span = (wins[0].span, wins[1].span)
    if n is None:
        dims = ctx.emit("SHAPE", [stacked], {"out_type": I32}, dtype=I32, shape=(4,))
        lead = ctx.emit("SLICE", [dims, ctx.i32([0]), ctx.i32([1])], dtype=I32, shape=(1,))
        out_shape = ctx.emit("CONCATENATION", [lead, ctx.i32([span[0], span[1], 1])], {"axis": 0, **NONE},
                             dtype=I32, shape=(4,))
    else:
        out_shape = ctx.i32([nc, span[0], span[1], 1])
    opts = {"padding": "VALID", "stride_h": wins[0].stride, "stride_w": wins[1].stride, **NONE}
    placed = ctx.emit("TRANSPOSE_CONV", [out_shape, ctx.const(weights.reshape(1, kh, kw, k).astype(np.float32)),
                                         stacked, None], opts, dtype=np.float32, shape=(nc, span[0], span[1], 1))
    placed = ctx.reshape(placed, [-1, c, span[0], span[1]])
    placed.shape = (n, c, span[0], span[1])
    placed = ctx.transpose(placed, [0, 2, 3, 1])
    return _pad_or_crop(ctx, placed, [(-w.before, w.size - (w.span - w.before)) for w in wins])


@lowering("MaxPoolGrad", "MaxPoolGradV2")
def lower_max_pool_grad(ctx: LowerCtx) -> list[Value]:
    """Each window's gradient goes to its maximum — the first one in the window's row-major order when several
    are equal, as TensorFlow's CPU kernel picks (``SpatialMaxPoolWithArgMaxHelper``): per window position a mask
    ``input == max and no earlier position was``, then :func:`_place_windows` adds them back onto the input."""
    x, y, dy = ctx.input(0), ctx.input(1), ctx.input(2)
    _float(ctx, x, y, dy)
    if ctx.op.kind == "MaxPoolGradV2":
        ksize, strides = ctx.const_input(3, "ksize"), ctx.const_input(4, "strides")
    else:
        ksize, strides = ctx.attr("ksize"), ctx.attr("strides")
    wins = _pool_windows(ctx, x.shape, dy.shape, ksize, strides)
    if dy.shape[3] is None:
        ctx.fail("the number of channels must be static")
    # padding reads as -inf: it is never a window's maximum
    grow = [(0, 0)] + [(w.before, max(w.span - w.size - w.before, 0)) for w in wins] + [(0, 0)]
    xp = x
    if any(a or b for a, b in grow):
        shape = tuple(None if d is None else d + a + b for d, (a, b) in zip(x.shape, grow))
        xp = ctx.emit("PADV2", [x, ctx.i32(grow), ctx.const(np.array(-np.inf, np.float32))], dtype=np.float32,
                      shape=shape)
    n, ho, wo, c = dy.shape
    taken = None
    parts = []
    for i in range(wins[0].kernel):
        for j in range(wins[1].kernel):
            begin = [0, i, j, 0]
            end = [0, i + (ho - 1) * wins[0].stride + 1, j + (wo - 1) * wins[1].stride + 1, 0]
            window = ctx.emit("STRIDED_SLICE", [xp, ctx.i32(begin), ctx.i32(end),
                                                ctx.i32([1, wins[0].stride, wins[1].stride, 1])],
                              {"begin_mask": 9, "end_mask": 9, "ellipsis_mask": 0, "new_axis_mask": 0,
                               "shrink_axis_mask": 0, "offset": False}, dtype=np.float32, shape=dy.shape)
            hit = ctx.emit("EQUAL", [window, y], dtype=np.bool_, shape=dy.shape)
            if taken is None:
                first, taken = hit, hit
            else:
                first = ctx.emit("LOGICAL_AND", [hit, ctx.emit("LOGICAL_NOT", [taken], dtype=np.bool_,
                                                                 shape=dy.shape)], dtype=np.bool_, shape=dy.shape)
                taken = ctx.emit("LOGICAL_OR", [taken, hit], dtype=np.bool_, shape=dy.shape)
            parts.append(ctx.emit("MUL", [dy, ctx.cast(first, np.float32)], dict(NONE), dtype=np.float32,
                                  shape=dy.shape))
    kk = len(parts)
    return [_place_windows(ctx, parts, wins, np.eye(kk, dtype=np.float32))]


@lowering("AvgPoolGrad")
def lower_avg_pool_grad(ctx: LowerCtx) -> list[Value]:
    """Each window's gradient, divided by the number of input positions it averaged (padding excluded, as
    TensorFlow's AvgPool), added back onto every position of the window (:func:`_place_windows`)."""
    dy = ctx.input(1)
    _float(ctx, dy)
    out = ctx.out(0)
    wins = _pool_windows(ctx, out.shape, dy.shape, ctx.attr("ksize"), ctx.attr("strides"))
    if dy.shape[3] is None:
        ctx.fail("the number of channels must be static")
    counts = []
    for w in wins:
        starts = np.arange(w.out) * w.stride - w.before
        counts.append(np.minimum(starts + w.kernel, w.size) - np.maximum(starts, 0))
    scale = (1.0 / np.outer(counts[0], counts[1])).astype(np.float32)[None, :, :, None]
    scaled = ctx.emit("MUL", [dy, ctx.const(scale)], dict(NONE), dtype=np.float32, shape=dy.shape)
    k = wins[0].kernel * wins[1].kernel
    return [_place_windows(ctx, [scaled], wins, np.ones(k, np.float32))]


@lowering("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
def lower_fused_batch_norm_grad(ctx: LowerCtx) -> list[Value]:
    """The gradients of an inference-mode batch normalization (``is_training=False``: the population mean and
    variance are the op's reserve_space_1 / 2), as fused_batch_norm_op.cc computes them, r = rsqrt(var + eps):
    x_backprop = dy * (scale * r), scale_backprop = sum(dy * (x - mean)) * r, offset_backprop = sum(dy)."""
    dy, x, scale, mean, var = ctx.inputs[:5]
    _float(ctx, dy, x, scale, mean, var)
    if ctx.attr("is_training", True):
        ctx.fail("the gradient of a training-mode batch normalization (batch statistics) is not supported; "
                 "call the BatchNormalization layer with training=False")
    if ctx.attr("data_format", "NHWC") not in ("NHWC", b"NHWC"):
        ctx.fail(f"data_format {ctx.attr('data_format')} is not supported (LiteRT is channels-last)")
    rank = _known_rank(ctx, x, "the input")
    eps = ctx.const(np.asarray(float(ctx.attr("epsilon", 1e-4)), np.float32))
    channels = (x.shape[-1],)
    r = ctx.emit("RSQRT", [ctx.emit("ADD", [var, eps], dict(NONE), dtype=np.float32, shape=channels)],
                 dtype=np.float32, shape=channels)
    coef = ctx.emit("MUL", [scale, r], dict(NONE), dtype=np.float32, shape=channels)
    x_backprop = ctx.emit("MUL", [dy, coef], dict(NONE), dtype=np.float32, shape=dy.shape)
    centered = ctx.emit("SUB", [x, mean], dict(NONE), dtype=np.float32, shape=x.shape)
    axes = list(range(rank - 1))
    moment = _reduce(ctx, "SUM", ctx.emit("MUL", [dy, centered], dict(NONE), dtype=np.float32, shape=dy.shape),
                     axes, keep_dims=False)
    scale_backprop = ctx.emit("MUL", [moment, r], dict(NONE), dtype=np.float32, shape=channels)
    offset_backprop = _reduce(ctx, "SUM", dy, axes, keep_dims=False)
    return [x_backprop, scale_backprop, offset_backprop] + [None] * (len(ctx.op.outputs) - 3)


@lowering("ConcatOffset")
def lower_concat_offset(ctx: LowerCtx) -> list[Value]:
    """Where each operand of a concatenation starts (the gradient of ConcatV2 slices it back out), for shapes
    known only at run time (constant shapes fold before lowering): offset i is 0 on every axis but the
    concatenation's, where it is the sum of the earlier operands' sizes — an exclusive CUMSUM of that column."""
    axis = int(np.asarray(ctx.const_input(0, "the concatenation axis")).reshape(()))
    shapes = [ctx.cast(s, np.int32) for s in ctx.inputs[1:]]
    if any(s.shape is None or s.shape[0] is None for s in shapes):
        ctx.fail("the operands' ranks must be known")
    rank = int(shapes[0].shape[0])
    axis %= rank
    n = len(shapes)
    table = ctx.emit("PACK", shapes, {"values_count": n, "axis": 0}, dtype=I32, shape=(n, rank))
    sizes = ctx.emit("GATHER", [table, ctx.i32(axis)], {"axis": 1, "batch_dims": 0}, dtype=I32, shape=(n,))
    starts = ctx.emit("CUMSUM", [sizes, ctx.i32(0)], {"exclusive": True, "reverse": False}, dtype=I32, shape=(n,))
    unit = ctx.i32(np.eye(rank, dtype=np.int32)[axis])
    outs = []
    for i, out in enumerate(ctx.op.outputs):
        start = ctx.emit("SLICE", [starts, ctx.i32([i]), ctx.i32([1])], dtype=I32, shape=(1,))
        outs.append(ctx.cast(_binary(ctx, "MUL", unit, start), out.dtype))
    return outs


# --------------------------------------------------------------------------------------------
# slicing
# --------------------------------------------------------------------------------------------


def _dense_slice_spec(ctx: LowerCtx, dims: Sequence[int | None]) -> list[tuple[int | None, list[int] | None, bool]]:
    """Per input dim of a StridedSlice: (its size, the indices the slice takes in order or None for all of a
    dynamic dim, whether the dim is shrunk away), from the op's begin / end / strides and masks as TensorFlow
    reads them (ellipsis, new axes, shrink)."""
    begin, end, strides = (np.asarray(ctx.const_input(i, n)).reshape(-1).astype(np.int64) for i, n in
                           ((1, "begin"), (2, "end"), (3, "strides")))
    masks = {k: int(ctx.attr(k, 0) or 0) for k in
             ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    rank = len(dims)
    real = sum(1 for i in range(len(begin)) if not (masks["new_axis_mask"] >> i) & 1
               and not (masks["ellipsis_mask"] >> i) & 1)
    spec: list = []
    for i in range(len(begin)):
        if (masks["ellipsis_mask"] >> i) & 1:  # the input dims no other entry names
            spec.extend(["full"] * (rank - real))
            continue
        if (masks["new_axis_mask"] >> i) & 1:
            continue
        spec.append((int(begin[i]), int(end[i]), int(strides[i]), (masks["begin_mask"] >> i) & 1,
                     (masks["end_mask"] >> i) & 1, (masks["shrink_axis_mask"] >> i) & 1))
    spec.extend(["full"] * (rank - len(spec)))
    if len(spec) != rank:
        ctx.fail(f"the slice names {len(spec)} dims of a rank-{rank} input")
    out = []
    for d, s in zip(dims, spec):
        if s == "full":
            out.append((d, None if d is None else list(range(d)), False))
            continue
        b, e, st, bm, em, shrink = s
        if st == 0:
            ctx.fail("a stride of 0")
        if d is None:
            full = not shrink and st == 1 and (bm or b == 0) and em
            if not full:
                ctx.fail("a dynamic dim must be taken whole (the batch)")
            out.append((None, None, False))
        elif shrink:
            out.append((d, [b % d if -d <= b < d else ctx.fail(f"index {b} out of range")], True))
        else:
            out.append((d, list(range(d))[slice(None if bm else b, None if em else e, st)], False))
    return out


@lowering("StridedSliceGrad")
def lower_strided_slice_grad(ctx: LowerCtx) -> list[Value]:
    """The gradient of a StridedSlice: the upstream gradient written back where the slice read, zeros elsewhere
    (x[:, 1:3], x[:, ::2], x[:, 0]). Shrunk and new axes undone by a RESHAPE, reversed axes by REVERSE_V2,
    strides by zero-stuffing, then one PAD; a dynamic dim (the batch) must be taken whole."""
    dy = ctx.input(4)
    _float(ctx, dy)
    out = ctx.out(0)
    if out.shape is None:
        ctx.fail("the rank of the sliced input must be known")
    spec = _dense_slice_spec(ctx, out.shape)
    if sum(d is None for d, _, _ in spec) > 1:
        ctx.fail("more than one dynamic dim")
    if any(idx is not None and not idx for _, idx, _ in spec):
        if not out.static_shape:
            ctx.fail("an empty slice of a dynamic input")
        return [ctx.const(np.zeros(out.shape, np.float32))]
    sizes = [None if idx is None else len(idx) for _, idx, _ in spec]
    g = ctx.reshape(dy, [-1 if n is None else n for n in sizes])
    g.shape = tuple(sizes)
    reverse = [a for a, (_, idx, _) in enumerate(spec) if idx is not None and len(idx) > 1 and idx[1] < idx[0]]
    if reverse:
        for a in reverse:  # (REVERSE_V2 reverses one axis at a time in LiteRT's kernel unless contiguous)
            g = ctx.emit("REVERSE_V2", [g, ctx.i32([a])], dtype=g.dtype, shape=g.shape)
    pads = []
    for a, (d, idx, _) in enumerate(spec):
        if idx is None:
            pads.append((0, 0))
            continue
        idx = sorted(idx)
        step = idx[1] - idx[0] if len(idx) > 1 else 1
        if step > 1:
            g = _stuff_axis(ctx, g, a, step)
        pads.append((idx[0], d - idx[0] - g.shape[a]))
    grow = [(max(b, 0), max(e, 0)) for b, e in pads]
    if any(b or e for b, e in grow):
        shape = tuple(None if n is None else n + b + e for n, (b, e) in zip(g.shape, grow))
        g = ctx.emit("PAD", [g, ctx.i32(grow)], dtype=g.dtype, shape=shape)
    if any(e < 0 for _, e in pads):
        size = [-1 if n is None else n - max(-e, 0) for n, (_, e) in zip(g.shape, pads)]
        g = ctx.emit("SLICE", [g, ctx.i32([0] * len(size)), ctx.i32(size)], dtype=g.dtype,
                     shape=tuple(None if n == -1 else n for n in size))
    return [g]


def _stuff_axis(ctx: LowerCtx, g: Value, axis: int, step: int) -> Value:
    """``step - 1`` zeros after each element along ``axis``: [.., n, ..] -> [.., n * step, ..] (as a rank-3
    [before, n, after] view, so any rank and one dynamic dim work)."""
    shape = list(g.shape)

    def prod(dims):
        return -1 if None in dims else int(np.prod(dims, dtype=np.int64))

    before, after = prod(shape[:axis]), prod(shape[axis + 1:])
    n = shape[axis]
    view = ctx.reshape(g, [before, n, 1, after])
    view = ctx.emit("PAD", [view, ctx.i32([[0, 0], [0, 0], [0, step - 1], [0, 0]])], dtype=g.dtype,
                    shape=(None if before == -1 else before, n, step, None if after == -1 else after))
    shape[axis] = n * step
    out = ctx.reshape(view, [-1 if d is None else d for d in shape])
    out.shape = tuple(shape)
    return out


# --------------------------------------------------------------------------------------------
# resizing (UpSampling2D): the transposed interpolation, one constant matrix per spatial axis
# --------------------------------------------------------------------------------------------


def _resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """image_resizer_state.h, CalculateResizeScale (float32, as TensorFlow)."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _bilinear_matrix(size: int, out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """[out, size]: the weights ResizeBilinear's output position y gives each input position (resize_bilinear_op.cc:
    top / bottom index and lerp, HalfPixelScaler or LegacyScaler)."""
    scale = _resize_scale(size, out, align_corners)
    m = np.zeros((out, size), np.float32)
    for y in range(out):
        pos = (np.float32(y) + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else np.float32(y) * scale
        lo, hi = max(int(np.floor(pos)), 0), min(int(np.ceil(pos)), size - 1)
        lerp = np.float32(pos - np.floor(pos))
        m[y, lo] += np.float32(1.0) - lerp
        m[y, hi] += lerp
    return m


def _nearest_matrix(size: int, out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """[out, size]: 1 where ResizeNearestNeighbor's output position y reads (resize_nearest_neighbor_op.cc:
    HalfPixelScalerForNN or LegacyScaler, rounded with align_corners, floored otherwise)."""
    scale = _resize_scale(size, out, align_corners)
    m = np.zeros((out, size), np.float32)
    for y in range(out):
        pos = (np.float32(y) + np.float32(0.5)) * scale if half_pixel else np.float32(y) * scale
        # (roundf: halves away from zero, not numpy's to even)
        i = min(int(np.floor(np.float64(pos) + 0.5)) if align_corners else int(np.floor(pos)), size - 1)
        m[y, max(i, 0) if half_pixel else i] = 1.0
    return m


def _fc(ctx: LowerCtx, x: Value, weights: np.ndarray) -> Value:
    """FULLY_CONNECTED of x [..., K] with constant weights [N, K] (dims kept)."""
    opts = {"fused_activation_function": "NONE", "weights_format": "DEFAULT", "keep_num_dims": True,
            "asymmetric_quantize_inputs": False}
    return ctx.emit("FULLY_CONNECTED", [x, ctx.const(np.ascontiguousarray(weights)),
                                        ctx.const(np.zeros(weights.shape[0], np.float32))], opts,
                    dtype=np.float32, shape=(*x.shape[:-1], weights.shape[0]))


def _resize_grad(ctx: LowerCtx, matrix) -> list[Value]:
    dy = ctx.input(0)
    _float(ctx, dy)
    out = ctx.out(0)
    if dy.shape is None or out.shape is None or None in tuple(dy.shape[1:3]) + tuple(out.shape[1:3]):
        ctx.fail("the spatial sizes of the gradient and of the resized input must be static")
    align, half = bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers"))
    (_, ho, wo, _), (_, h, w, _) = dy.shape, out.shape
    rows, cols = matrix(h, ho, align, half), matrix(w, wo, align, half)  # [Ho, H], [Wo, W]
    g = _fc(ctx, ctx.transpose(dy, [0, 1, 3, 2]), cols.T)  # [N, Ho, C, W]
    g = _fc(ctx, ctx.transpose(g, [0, 3, 2, 1]), rows.T)  # [N, W, C, H]
    return [ctx.transpose(g, [0, 3, 1, 2])]


@lowering("ResizeBilinearGrad")
def lower_resize_bilinear_grad(ctx: LowerCtx) -> list[Value]:
    """The gradient of ResizeBilinear (Keras' UpSampling2D(interpolation="bilinear")): the transposed
    interpolation, separable: a FULLY_CONNECTED with the constant [W, Wo] weights over the columns, then with the
    [H, Ho] ones over the rows (align_corners, half_pixel_centers as TensorFlow's kernel)."""
    return _resize_grad(ctx, _bilinear_matrix)


@lowering("ResizeNearestNeighborGrad")
def lower_resize_nearest_grad(ctx: LowerCtx) -> list[Value]:
    """The gradient of ResizeNearestNeighbor: each output position's gradient added to the input position it
    read, as :func:`lower_resize_bilinear_grad` with 0 / 1 matrices."""
    return _resize_grad(ctx, _nearest_matrix)
