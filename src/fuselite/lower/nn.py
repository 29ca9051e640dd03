"""Neural-network ops: matmul, convolutions, pooling, batch norm, resize, einsum."""

from __future__ import annotations

import numpy as np

from fuselite.lower.gradients import conv2d_backprop_input
from fuselite.lower.registry import lowering

NONE = {"fused_activation_function": "NONE"}


def _padding(ctx):
    pad = ctx.attr("padding", "VALID")
    if isinstance(pad, bytes):
        pad = pad.decode()
    if pad == "EXPLICIT" and ctx.op.kind in _EXPLICIT_PADDING:
        return "VALID"  # the input was padded by explicit_padded (a PAD before the op)
    if pad not in ("SAME", "VALID"):
        ctx.fail(f"padding '{pad}' is not supported (only SAME, VALID and, for Conv2D and DepthwiseConv2dNative, "
                 "EXPLICIT)")
    return pad


_EXPLICIT_PADDING = ("Conv2D", "DepthwiseConv2dNative")


def explicit_padded(ctx, x):
    """``x`` padded as a Conv2D's / DepthwiseConv2dNative's ``padding="EXPLICIT"`` says (``explicit_paddings``:
    before and after for each NHWC dim, zeros), the op then VALID: a PAD, as the official converter writes it."""
    pad = ctx.attr("padding", "VALID")
    if (pad.decode() if isinstance(pad, bytes) else pad) != "EXPLICIT":
        return x
    pads = [int(p) for p in ctx.attr("explicit_paddings", [])]
    if len(pads) != 8:
        ctx.fail(f"explicit_paddings {pads} (8 values: before and after for each of N, H, W, C)")
    if any(p < 0 for p in pads):
        ctx.fail(f"negative explicit_paddings {pads}")
    if not any(pads):
        return x
    shape = None
    if x.shape is not None:
        shape = tuple(None if d is None else d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x.shape))
    return ctx.emit("PAD", [x, ctx.i32(np.reshape(pads, (4, 2)))], dtype=x.dtype, shape=shape)


def _nhwc(ctx):
    if ctx.attr("data_format", "NHWC") != "NHWC":
        ctx.fail(f"data_format {ctx.attr('data_format')} is not supported (LiteRT is channels-last)")


def fully_connected(ctx, x, weights_nk, bias=None, keep_num_dims=False, out=None):
    """FULLY_CONNECTED with weights laid out [N, K]; bias optional (fused later)."""
    if bias is None:
        bias = ctx.const(np.zeros(weights_nk.shape[0], dtype=x.dtype))
    opts = {"fused_activation_function": "NONE", "weights_format": "DEFAULT",
            "keep_num_dims": keep_num_dims, "asymmetric_quantize_inputs": False}
    if out is None:
        return ctx.emit("FULLY_CONNECTED", [x, weights_nk, bias], opts)
    return ctx.emit("FULLY_CONNECTED", [x, weights_nk, bias], opts, like=out)


@lowering("MatMul")
def lower_matmul(ctx):
    a, b = ctx.input(0), ctx.input(1)
    ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
    if b.is_const and a.dtype == np.float32:
        if ta:
            a = ctx.transpose(a, [1, 0])
        w = b.const if tb else b.const.T  # a view: the writer copies it into the file row-major, once
        return [fully_connected(ctx, a, ctx.const(w))]
    return [ctx.emit("BATCH_MATMUL", [a, b], {"adj_x": ta, "adj_y": tb, "asymmetric_quantize_inputs": False})]


@lowering("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def lower_batch_matmul(ctx):
    a, b = ctx.input(0), ctx.input(1)
    adj_x, adj_y = bool(ctx.attr("adj_x")), bool(ctx.attr("adj_y"))
    if b.is_const and b.rank == 2 and not adj_x and a.rank is not None and a.rank >= 2 and a.dtype == np.float32:
        w = b.const if adj_y else b.const.T  # (a view, as above)
        return [fully_connected(ctx, a, ctx.const(w), keep_num_dims=a.rank > 2)]
    return [ctx.emit("BATCH_MATMUL", [a, b], {"adj_x": adj_x, "adj_y": adj_y, "asymmetric_quantize_inputs": False})]


def _conv_options(ctx, with_dilation=True):
    _nhwc(ctx)
    strides = ctx.attr("strides", [1, 1, 1, 1])
    opts = {"padding": _padding(ctx), "stride_h": int(strides[1]), "stride_w": int(strides[2]),
            "fused_activation_function": "NONE"}
    if with_dilation:
        dil = ctx.attr("dilations", [1, 1, 1, 1])
        opts.update(dilation_h_factor=int(dil[1]), dilation_w_factor=int(dil[2]))
    return opts


@lowering("Conv2D")
def lower_conv2d(ctx):
    x, w = ctx.input(0), ctx.input(1)
    opts = _conv_options(ctx)
    if w.shape is None or not w.static_shape:
        ctx.fail("the filter's shape must be static")
    kh, kw, cin, cout = w.shape  # a filter that is not constant (trained on device) is transposed at run time
    channels = x.shape[-1] if x.shape is not None else None
    if channels is not None and channels != cin:
        # grouped (Conv2D(groups=g), ConvNeXt's depthwise form): LiteRT's CONV_2D takes it as is, the groups
        # being input channels / filter input channels (conv.cc; XNNPACK too), op version 6
        if channels % cin or cout % (channels // cin):
            ctx.fail(f"grouped convolution: {channels} input channels and {cout} filters do not split into "
                     f"groups of {cin} input channels")
    filt = ctx.transpose(w, [3, 0, 1, 2])
    bias = ctx.const(np.zeros(cout, x.dtype))
    return [ctx.emit("CONV_2D", [explicit_padded(ctx, x), filt, bias], opts)]


@lowering("Conv3D")
def lower_conv3d(ctx):
    """A 3-D convolution (ConvLSTM3D's steps, Conv3D layers) -> ``CONV_3D``, its filter in TensorFlow's own
    [depth, height, width, in, out] layout (``conv3d.cc``: float32 only, the bias optional; LiteRT 2.5+)."""
    x, w = ctx.input(0), ctx.input(1)
    if ctx.attr("data_format", "NDHWC") != "NDHWC":
        ctx.fail(f"data_format {ctx.attr('data_format')} is not supported (LiteRT is channels-last)")
    if not w.is_const:
        ctx.fail("the filter must be constant (frozen weights)")
    if x.dtype != np.float32:
        ctx.fail(f"LiteRT's CONV_3D is float32 only, got {x.dtype}")
    if x.shape is not None and x.shape[-1] is not None and x.shape[-1] != w.const.shape[3]:
        ctx.fail(f"grouped 3-D convolution ({x.shape[-1]} input channels, filters of {w.const.shape[3]}): "
                 "LiteRT's CONV_3D takes no groups")
    strides, dil = ctx.attr("strides", [1] * 5), ctx.attr("dilations", [1] * 5)
    opts = {"padding": _padding(ctx), "stride_d": int(strides[1]), "stride_h": int(strides[2]),
            "stride_w": int(strides[3]), "dilation_d_factor": int(dil[1]), "dilation_h_factor": int(dil[2]),
            "dilation_w_factor": int(dil[3]), "fused_activation_function": "NONE"}
    bias = ctx.const(np.zeros(w.const.shape[4], x.dtype))
    return [ctx.emit("CONV_3D", [x, w, bias], opts)]


@lowering("DepthwiseConv2dNative")
def lower_depthwise_conv2d(ctx):
    x, w = ctx.input(0), ctx.input(1)
    opts = _conv_options(ctx)
    if w.shape is None or not w.static_shape:
        ctx.fail("the filter's shape must be static")
    kh, kw, cin, mult = w.shape  # a filter that is not constant (trained on device) is reshaped at run time
    filt = ctx.reshape(w, [1, kh, kw, cin * mult])
    opts["depth_multiplier"] = int(mult)
    bias = ctx.const(np.zeros(cin * mult, x.dtype))
    return [ctx.emit("DEPTHWISE_CONV_2D", [explicit_padded(ctx, x), filt, bias], opts)]


@lowering("Conv2DBackpropInput")
def lower_conv2d_transpose(ctx):
    out_shape, w, x = ctx.input(0), ctx.input(1), ctx.input(2)
    if not w.is_const or any(d != 1 for d in ctx.attr("dilations", [1, 1, 1, 1])) or \
            ctx.attr("padding") in ("EXPLICIT", b"EXPLICIT"):
        # a gradient w.r.t. a convolution's input (a trained filter, dilations, explicit padding): the flipped
        # filter over the zero-stuffed gradient (lower/gradients.py)
        return [conv2d_backprop_input(ctx)]
    opts = _conv_options(ctx, with_dilation=False)
    # TF filter [H, W, out, in] -> LiteRT [out, H, W, in]
    filt = ctx.transpose(w, [2, 0, 1, 3])
    return [ctx.emit("TRANSPOSE_CONV", [ctx.cast(out_shape, np.int32), filt, x, None], opts)]


def _pool(ctx, kind):
    _nhwc(ctx)
    k, s = ctx.attr("ksize"), ctx.attr("strides")
    if k[0] != 1 or k[3] != 1 or s[0] != 1 or s[3] != 1:
        ctx.fail("pooling over the batch or channel dimension is not supported")
    opts = {"padding": _padding(ctx), "stride_h": int(s[1]), "stride_w": int(s[2]),
            "filter_height": int(k[1]), "filter_width": int(k[2]), "fused_activation_function": "NONE"}
    return [ctx.emit(kind, [ctx.input(0)], opts)]


@lowering("MaxPool")
def lower_max_pool(ctx):
    return _pool(ctx, "MAX_POOL_2D")


@lowering("AvgPool")
def lower_avg_pool(ctx):
    return _pool(ctx, "AVERAGE_POOL_2D")


@lowering("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def lower_fused_batch_norm(ctx):
    """Inference batch norm as a per-channel MUL + ADD (folded into a conv later)."""
    _nhwc(ctx)
    if ctx.attr("is_training", False):
        ctx.fail("training-mode batch normalization cannot be converted")
    x = ctx.input(0)
    eps = float(ctx.attr("epsilon", 1e-3))
    if all(ctx.input(i).is_const for i in range(1, 5)):
        scale, offset, mean, var = (ctx.input(i).const for i in range(1, 5))
        mul = ctx.const((scale / np.sqrt(var + eps)).astype(x.dtype))
        add = ctx.const((offset - mean * mul.const).astype(x.dtype))
    else:  # a scale or offset trained on device (lower/gradients.py has the gradient): the same, at run time
        scale, offset, mean, var = ctx.inputs[1:5]
        c = (x.shape[-1],) if x.shape else None
        r = ctx.emit("RSQRT", [ctx.emit("ADD", [var, ctx.const(np.asarray(eps, x.dtype))], dict(NONE), shape=c)],
                     shape=c)
        mul = ctx.emit("MUL", [scale, r], dict(NONE), shape=c)
        add = ctx.emit("SUB", [offset, ctx.emit("MUL", [mean, mul], dict(NONE), shape=c)], dict(NONE), shape=c)
    y = ctx.emit("MUL", [x, mul], dict(NONE))
    y = ctx.emit("ADD", [y, add], dict(NONE))
    return [y] + [None] * (len(ctx.op.outputs) - 1)


def _resize(ctx, kind):
    size = ctx.cast(ctx.input(1), np.int32)
    opts = {"align_corners": bool(ctx.attr("align_corners")), "half_pixel_centers": bool(ctx.attr("half_pixel_centers"))}
    return [ctx.emit(kind, [ctx.input(0), size], opts)]


@lowering("ResizeBilinear")
def lower_resize_bilinear(ctx):
    return _resize(ctx, "RESIZE_BILINEAR")


@lowering("ResizeNearestNeighbor")
def lower_resize_nearest(ctx):
    return _resize(ctx, "RESIZE_NEAREST_NEIGHBOR")
