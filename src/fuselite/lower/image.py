"""Image and nn ops: DepthToSpace, SpaceToDepth, LRN, L2Loss, non-max suppression, Conv3D transposed, SparseMatMul,
XLA convolutions.

The kernel contracts these rules follow (LiteRT ``tflite/kernels/``):

* ``depth_to_space.cc`` / ``space_to_depth.cc``: NHWC, rank 4, float32 / uint8 / int8 / int32 / int64 (int8 keeps
  the input's scale: a data move);
* ``local_response_norm.cc``: float32, ``input / (bias + alpha * sum(x^2 over [c - r, c + r])) ** beta``, TF's LRN;
* ``non_max_suppression.cc``: boxes [N, 4], scores [N], a scalar int32 ``max_output_size``, scalar thresholds;
  V4 writes ``max_output_size`` indices (padded with zeros) and the number selected. Its selection differs from
  TensorFlow's (IoU >= threshold, score ties in heap order, zero-area boxes selected repeatedly, soft-NMS still
  hard-suppressing): hard NMS is converted around it exactly, soft-NMS is refused (the comment above the NMS rules);
* ``conv3d_transpose.cc``: 0 the output shape (int32 [5]), 1 the filter [D, H, W, out, in] (TensorFlow's own
  layout), 2 the input, 3 the bias (optional); Conv3DOptions.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Value
from fuselite.lower.nn import lower_matmul
from fuselite.lower.registry import LowerCtx, lowering

NONE = {"fused_activation_function": "NONE"}
_MOVE_DTYPES = (np.float32, np.uint8, np.int8, np.int32, np.int64)


@lowering("DepthToSpace", "SpaceToDepth")
def lower_depth_space(ctx: LowerCtx) -> list[Value]:
    """``tf.nn.depth_to_space`` / ``space_to_depth`` -> ``DEPTH_TO_SPACE`` / ``SPACE_TO_DEPTH`` (NHWC only)."""
    kind = "DEPTH_TO_SPACE" if ctx.op.kind == "DepthToSpace" else "SPACE_TO_DEPTH"
    fmt = ctx.attr("data_format", "NHWC")
    if fmt != "NHWC":
        ctx.fail(f"data_format {fmt} is not supported (LiteRT's {kind} is NHWC only)")
    x = ctx.input(0)
    if x.rank is not None and x.rank != 4:
        ctx.fail(f"{kind} takes a rank-4 input, got rank {x.rank}")
    if np.dtype(x.dtype) not in [np.dtype(t) for t in _MOVE_DTYPES]:
        ctx.fail(f"LiteRT's {kind} takes float32, uint8, int8, int32 or int64, got {x.dtype}")
    block = int(ctx.attr("block_size"))
    if block < 2:
        ctx.fail(f"block_size must be at least 2, got {block}")
    return [ctx.emit(kind, [x], {"block_size": block})]


@lowering("LRN")
def lower_lrn(ctx: LowerCtx) -> list[Value]:
    """``tf.nn.local_response_normalization`` -> ``LOCAL_RESPONSE_NORMALIZATION`` (float32; the same formula)."""
    x = ctx.input(0)
    if x.dtype != np.float32:
        ctx.fail(f"LiteRT's LOCAL_RESPONSE_NORMALIZATION takes float32 only, got {x.dtype}")
    if x.rank is not None and x.rank != 4:
        ctx.fail(f"LRN takes a rank-4 input, got rank {x.rank}")
    opts = {"radius": int(ctx.attr("depth_radius", 5)), "bias": float(ctx.attr("bias", 1.0)),
            "alpha": float(ctx.attr("alpha", 1.0)), "beta": float(ctx.attr("beta", 0.5))}
    return [ctx.emit("LOCAL_RESPONSE_NORMALIZATION", [x], opts)]


@lowering("L2Loss")
def lower_l2_loss(ctx: LowerCtx) -> list[Value]:
    """``tf.nn.l2_loss(x)`` = ``sum(x ** 2) / 2``: MUL, SUM over every axis, MUL by 0.5 (as the official
    converter writes it)."""
    x = ctx.input(0)
    if x.dtype != np.float32:
        ctx.fail(f"only float32 is supported, got {x.dtype}")
    if x.rank is None:
        ctx.fail("the input's rank must be known")
    sq = ctx.emit("MUL", [x, x], dict(NONE), dtype=x.dtype, shape=x.shape)
    total = ctx.emit("SUM", [sq, ctx.i32(list(range(x.rank)))], {"keep_dims": False}, dtype=x.dtype, shape=())
    return [ctx.emit("MUL", [total, ctx.const(np.float32(0.5))], dict(NONE), dtype=x.dtype, shape=())]


# -- non-max suppression -------------------------------------------------------------------------------------------
#
# TensorFlow's kernel (core/kernels/image/non_max_suppression_op.cc, DoNonMaxSuppressionOp) pops candidates (score >
# score_threshold) by score, ties to the lower index, and suppresses one whose IoU with a selected box is > the
# threshold. LiteRT's (kernels/internal/reference/non_max_suppression.h) differs, measured on ai-edge-litert 2.3.0:
# it suppresses at IoU >= the threshold; its priority queue breaks score ties in heap order, not by index; after
# selecting a box it pushes it back and pops it again, where its IoU with itself suppresses it -- but a box of zero
# area has IoU 0 with itself and is selected again and again, as is every box when the threshold is 1; with soft-NMS
# (sigma > 0) it still hard-suppresses at IoU >= iou_threshold where TensorFlow only decays the score (TF ignores
# iou_threshold then). So the rules below give LiteRT's kernel only what it gets right: boxes of positive area,
# sorted by (score, -index) first, with distinct scores (their rank), a threshold of nextafter(iou_threshold) (IoU >=
# that is IoU > iou_threshold in float32); zero-area boxes (IoU 0 with every box in both kernels: never suppressed,
# never suppressing) are merged back in rank order. Soft-NMS is refused.

_SOFT_NMS_REFUSAL = (
    "soft-NMS (soft_nms_sigma {sigma} > 0) is not supported: LiteRT's NON_MAX_SUPPRESSION_V5 still drops every box "
    "whose IoU with a selected box is >= iou_threshold, where TensorFlow's soft-NMS ignores iou_threshold and only "
    "decays such a box's score by exp(-IoU^2 / (2 sigma)) (so it can still be selected, with the decayed score); "
    "its indices and scores would differ from TensorFlow's. Use soft_nms_sigma=0.0 (hard NMS, converted exactly), "
    "or run soft-NMS outside the model on its boxes and scores")


def _const_scalar(ctx: LowerCtx, i: int, what: str) -> float:
    """Input ``i`` (a float32 threshold or sigma) as a Python float; a ConversionError if it is not a constant."""
    v = ctx.input(i)
    if v.dtype != np.float32:
        ctx.fail(f"{what} must be float32, got {v.dtype}")
    if not v.is_const:
        ctx.fail(f"{what} must be a constant (it decides how the selection is converted: LiteRT's kernel compares "
                 f"IoU >= threshold where TensorFlow compares IoU > threshold, corrected at conversion)")
    return float(np.asarray(v.const, np.float32).reshape(()))


def _f32(ctx: LowerCtx, kind: str, inputs: list, shape, options: dict | None = None) -> Value:
    return ctx.emit(kind, inputs, options, dtype=np.float32, shape=shape)


def _flag(ctx: LowerCtx, kind: str, inputs: list, shape) -> Value:
    return ctx.emit(kind, inputs, {}, dtype=np.bool_, shape=shape)


def _hard_nms(ctx: LowerCtx) -> tuple[Value, Value, Value]:
    """TensorFlow's hard NMS on this op's boxes, scores, max_output_size, iou and score thresholds: the selected
    indices padded with zeros to max_output_size (length ``max_output_size``), the number selected, and the
    scores (float32) at the padded indices. See the comment above for why each step is there."""
    boxes, scores = ctx.input(0), ctx.input(1)
    for what, v in (("boxes", boxes), ("scores", scores)):
        if v.dtype != np.float32:
            ctx.fail(f"{what} must be float32 (LiteRT's float kernel), got {v.dtype}")
    if boxes.rank is not None and (boxes.rank != 2 or boxes.shape[1] not in (None, 4)):
        ctx.fail(f"boxes must be [num_boxes, 4] (LiteRT's kernel takes no batch), got {boxes.shape}")
    if scores.rank is not None and scores.rank != 1:
        ctx.fail(f"scores must be [num_boxes], got {scores.shape}")
    iou = _const_scalar(ctx, 3, "iou_threshold")
    if not 0.0 <= iou <= 1.0:
        ctx.fail(f"iou_threshold {iou} is outside [0, 1] (TensorFlow's kernel rejects it)")
    max_out = ctx.input(2)
    m: int | None = None
    if max_out.is_const:
        m = int(np.asarray(max_out.const).reshape(()))
        if m < 0:
            ctx.fail(f"max_output_size must be >= 0, got {m}")
        max_out = ctx.const(np.int32(m))
    elif max_out.dtype != np.int32:
        ctx.fail(f"max_output_size must be int32, got {max_out.dtype}")
    score_thr = ctx.input(4)
    if score_thr.dtype != np.float32:
        ctx.fail(f"score_threshold must be float32, got {score_thr.dtype}")
    if score_thr.is_const:
        score_thr = ctx.const(np.float32(np.asarray(score_thr.const).reshape(())))

    n = scores.shape[0] if scores.shape is not None and scores.shape[0] is not None else None
    if n is None and boxes.shape is not None:
        n = boxes.shape[0]
    i32 = np.dtype(np.int32)
    if n is not None:  # static: positions and descending ranks are constants
        count_v = ctx.i32(n)
        positions = ctx.i32(np.arange(n))
        ranks = ctx.const(np.arange(n, 0, -1, dtype=np.float32))
    else:
        dims = ctx.emit("SHAPE", [scores], {"out_type": i32}, dtype=np.int32, shape=(1,))
        count_v = ctx.emit("GATHER", [dims, ctx.i32(0)], {"axis": 0, "batch_dims": 0}, dtype=np.int32, shape=())
        positions = ctx.emit("RANGE", [ctx.i32(0), count_v, ctx.i32(1)], dtype=np.int32, shape=(None,))
        ranks = ctx.cast(ctx.emit("SUB", [count_v, positions], dict(NONE), dtype=np.int32, shape=(None,)), np.float32)
    vec = (n,)

    # candidates, sorted as TensorFlow's queue pops them: score descending, ties to the lower index (TOPK_V2 breaks
    # ties to the lower index); non-candidates (and NaN scores) become -inf so the order is total
    candidate = _flag(ctx, "GREATER", [scores, score_thr], vec)
    ranked = _f32(ctx, "SELECT_V2", [candidate, scores, ctx.const(np.float32(-np.inf))], vec)
    sorted_scores, order = ctx.emit("TOPK_V2", [ranked, count_v], out_specs=[(np.dtype(np.float32), vec), (i32, vec)])
    cand_sorted = _flag(ctx, "GREATER", [sorted_scores, ctx.const(np.float32(-np.inf))], vec)
    boxes_sorted = ctx.emit("GATHER", [boxes, order], {"axis": 0, "batch_dims": 0}, dtype=np.float32, shape=(n, 4))
    # each box's area as both kernels compute it: |y2 - y1| * |x2 - x1| (= max - min); <= 0 means IoU 0 with every box
    lo = _f32(ctx, "SLICE", [boxes_sorted, ctx.i32([0, 0]), ctx.i32([-1, 2])], (n, 2))
    hi = _f32(ctx, "SLICE", [boxes_sorted, ctx.i32([0, 2]), ctx.i32([-1, 2])], (n, 2))
    sides = _f32(ctx, "ABS", [_f32(ctx, "SUB", [hi, lo], (n, 2), dict(NONE))], (n, 2))
    area = _f32(ctx, "REDUCE_PROD", [sides, ctx.i32([1])], vec, {"keep_dims": False})
    positive = _flag(ctx, "GREATER", [area, ctx.const(np.float32(0.0))], vec)
    flat = _flag(ctx, "LOGICAL_AND", [cand_sorted, _flag(ctx, "LOGICAL_NOT", [positive], vec)], vec)
    solid = _flag(ctx, "LOGICAL_AND", [cand_sorted, positive], vec)

    if iou >= 1.0:  # TensorFlow suppresses nothing (no IoU is > 1): every candidate in order
        kept = cand_sorted
    else:
        keys = _f32(ctx, "SELECT_V2", [solid, ranks, ctx.const(np.float32(0.0))], vec)
        above = np.nextafter(np.float32(iou), np.float32(np.inf), dtype=np.float32)
        sel, valid = ctx.emit("NON_MAX_SUPPRESSION_V4", [boxes_sorted, keys, max_out, ctx.const(above),
                                                         ctx.const(np.float32(0.5))], {},
                              out_specs=[(i32, (m,)), (i32, ())])
        chosen = _valid_prefix(ctx, sel, valid)
        hits = _flag(ctx, "EQUAL", [ctx.reshape(chosen, [-1, 1]), ctx.reshape(positions, [1, -1])], (None, n))
        picked = ctx.emit("REDUCE_ANY", [hits, ctx.i32([0])], {"keep_dims": False}, dtype=np.bool_, shape=vec)
        kept = _flag(ctx, "LOGICAL_OR", [picked, flat], vec)

    # the kept boxes in rank order (TOPK_V2 of their ranks; the rest, at 0, follow), as original indices
    kept_ranks = _f32(ctx, "SELECT_V2", [kept, ranks, ctx.const(np.float32(0.0))], vec)
    _, where = ctx.emit("TOPK_V2", [kept_ranks, count_v], out_specs=[(np.dtype(np.float32), vec), (i32, vec)])
    picked_idx = ctx.emit("GATHER", [order, where], {"axis": 0, "batch_dims": 0}, dtype=np.int32, shape=vec)
    total = ctx.emit("SUM", [ctx.cast(kept, np.int32), ctx.i32([0])], {"keep_dims": False}, dtype=np.int32, shape=())
    valid = ctx.emit("MINIMUM", [total, max_out], dtype=np.int32, shape=())
    # padded to max_output_size: append max_output_size zeros, keep the first max_output_size, zero from `valid` on
    if m is not None:
        pads, size, slots = ctx.i32([[0, m]]), ctx.i32([m]), ctx.i32(np.arange(m))
    else:
        size = ctx.reshape(max_out, [1])
        pads = ctx.emit("CONCATENATION", [ctx.i32([0]), size], {"axis": 0, "fused_activation_function": "NONE"},
                        dtype=np.int32, shape=(2,))
        pads = ctx.reshape(pads, [1, 2])
        slots = ctx.emit("RANGE", [ctx.i32(0), max_out, ctx.i32(1)], dtype=np.int32, shape=(None,))
    longer = ctx.emit("PAD", [picked_idx, pads], dtype=np.int32, shape=(None,))
    first = ctx.emit("SLICE", [longer, ctx.i32([0]), size], dtype=np.int32, shape=(m,))
    in_use = _flag(ctx, "LESS", [slots, valid], (m,))
    indices = ctx.emit("SELECT_V2", [in_use, first, ctx.i32(0)], dtype=np.int32, shape=(m,))
    gathered = ctx.emit("GATHER", [scores, indices], {"axis": 0, "batch_dims": 0}, dtype=np.float32, shape=(m,))
    picked_scores = _f32(ctx, "SELECT_V2", [in_use, gathered, ctx.const(np.float32(0.0))], (m,))
    return indices, valid, picked_scores


def _valid_prefix(ctx: LowerCtx, v: Value, count: Value) -> Value:
    """``v[:count]``: the selected entries of a padded NMS output."""
    size = ctx.emit("RESHAPE", [count, ctx.i32([1])], dtype=np.int32, shape=(1,))
    return ctx.emit("SLICE", [v, ctx.i32([0]), size], dtype=v.dtype, shape=(None,))


@lowering("NonMaxSuppressionV3", "NonMaxSuppressionV4")
def lower_nms(ctx: LowerCtx) -> list[Value]:
    """``tf.image.non_max_suppression`` (V3: the selected indices) and V4 (the indices and how many are valid;
    ``pad_to_max_output_size``: padded with zeros to max_output_size) -> TensorFlow's hard NMS exactly: LiteRT's
    ``NON_MAX_SUPPRESSION_V4`` on the positive-area boxes sorted by score with a corrected threshold, merged with
    the zero-area ones (see :func:`_hard_nms`); a constant ``iou_threshold`` in [0, 1]."""
    indices, valid, _ = _hard_nms(ctx)
    pad = ctx.op.kind == "NonMaxSuppressionV4" and bool(ctx.attr("pad_to_max_output_size", False))
    if not pad:
        indices = _valid_prefix(ctx, indices, valid)
    return [indices] if ctx.op.kind == "NonMaxSuppressionV3" else [indices, valid]


@lowering("NonMaxSuppressionV5")
def lower_nms_v5(ctx: LowerCtx) -> list[Value]:
    """``tf.image.non_max_suppression_with_scores`` with ``soft_nms_sigma`` 0 (hard NMS: the indices, their scores
    -- unchanged by hard NMS -- and how many are valid; ``pad_to_max_output_size``) as :func:`lower_nms`. A
    ``soft_nms_sigma`` > 0 (soft-NMS), or one not constant, is refused: LiteRT's kernel gets it wrong (see
    ``_SOFT_NMS_REFUSAL``)."""
    sigma = ctx.input(5)
    if sigma.dtype != np.float32:
        ctx.fail(f"soft_nms_sigma must be float32, got {sigma.dtype}")
    if not sigma.is_const:
        ctx.fail("soft_nms_sigma must be a constant 0.0: soft-NMS (sigma > 0) is not supported, because LiteRT's "
                 "NON_MAX_SUPPRESSION_V5 drops boxes with IoU >= iou_threshold where TensorFlow's soft-NMS only "
                 "decays their scores")
    s = float(np.asarray(sigma.const, np.float32).reshape(()))
    if s < 0 or np.isnan(s):
        ctx.fail(f"soft_nms_sigma {s} is not >= 0 (TensorFlow's kernel rejects it)")
    if s > 0:
        ctx.fail(_SOFT_NMS_REFUSAL.format(sigma=s))
    indices, valid, scores = _hard_nms(ctx)
    if not bool(ctx.attr("pad_to_max_output_size", False)):
        indices, scores = _valid_prefix(ctx, indices, valid), _valid_prefix(ctx, scores, valid)
    return [indices, scores, valid]


# -- convolutions --------------------------------------------------------------------------------------------------


@lowering("Conv3DBackpropInputV2")
def lower_conv3d_transpose(ctx: LowerCtx) -> list[Value]:
    """``tf.nn.conv3d_transpose`` / Keras' ``Conv3DTranspose`` -> ``CONV_3D_TRANSPOSE`` (float32): the output
    shape as int32, the filter in TensorFlow's [D, H, W, out, in] layout, the input, no bias (a following ADD is
    folded by the optimizer where it can be)."""
    out_shape, w, x = ctx.input(0), ctx.input(1), ctx.input(2)
    fmt = ctx.attr("data_format", "NDHWC")
    if fmt != "NDHWC":
        ctx.fail(f"data_format {fmt} is not supported (LiteRT is channels-last)")
    if not w.is_const:
        ctx.fail("the filter must be constant (frozen weights)")
    if x.dtype != np.float32:
        ctx.fail(f"only float32 is supported, got {x.dtype}")
    pad = ctx.attr("padding", "VALID")
    if pad not in ("SAME", "VALID"):
        ctx.fail(f"padding '{pad}' is not supported (only SAME and VALID)")
    strides, dil = list(ctx.attr("strides", [1] * 5)), list(ctx.attr("dilations", [1] * 5))
    if strides[0] != 1 or strides[4] != 1:
        ctx.fail(f"strides over the batch or channel dimension are not supported: {strides}")
    if any(int(d) != 1 for d in dil):
        ctx.fail(f"dilations {dil} are not supported (TensorFlow's own CPU kernel runs none)")
    opts = {"padding": pad, "stride_d": int(strides[1]), "stride_h": int(strides[2]), "stride_w": int(strides[3]),
            "dilation_d_factor": 1, "dilation_h_factor": 1, "dilation_w_factor": 1, **NONE}
    return [ctx.emit("CONV_3D_TRANSPOSE", [ctx.cast(out_shape, np.int32), w, x], opts)]


@lowering("SparseMatMul")
def lower_sparse_matmul(ctx: LowerCtx) -> list[Value]:
    """``tf.raw_ops.SparseMatMul``: a MatMul whose ``a_is_sparse`` / ``b_is_sparse`` are hints for TensorFlow's
    kernel only (the product is the same), lowered as ``MatMul`` (FULLY_CONNECTED with a constant right-hand side,
    BATCH_MATMUL otherwise). float32 only (bfloat16 operands: refused)."""
    for i, name in ((0, "a"), (1, "b")):
        if ctx.input(i).dtype != np.float32:
            ctx.fail(f"{name} must be float32 (LiteRT has no bfloat16 kernels), got {ctx.input(i).dtype}")
    return lower_matmul(ctx)


# XLA's ConvolutionDimensionNumbers (xla_data.proto): field number -> name; the repeated fields are packed
_DIMENSION_FIELDS = {7: "input_batch", 8: "input_feature", 11: "input_spatial", 3: "kernel_input_feature",
                     4: "kernel_output_feature", 6: "kernel_spatial", 9: "output_batch", 10: "output_feature",
                     12: "output_spatial"}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


def parse_dimension_numbers(data: bytes | str) -> dict[str, int | list[int]]:
    """XLA's serialized ``ConvolutionDimensionNumbers`` (XlaConvV2's ``dimension_numbers``) as a dict of its
    fields without ``_dimension(s)``: ``{"input_batch": 0, "input_spatial": [1, 2], ...}`` (proto3 defaults: 0 and
    []). Example: ``parse_dimension_numbers(b"\\x18\\x02")["kernel_input_feature"] == 2``."""
    if isinstance(data, str):
        data = data.encode("latin-1")
    out: dict[str, int | list[int]] = {n: ([] if n.endswith("spatial") else 0) for n in _DIMENSION_FIELDS.values()}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        name = _DIMENSION_FIELDS.get(field)
        if wire == 0:
            value, i = _varint(data, i)
            if name is None:
                continue
            if name.endswith("spatial"):
                out[name].append(value)
            else:
                out[name] = value
        elif wire == 2:
            size, i = _varint(data, i)
            end, values = i + size, []
            while i < end:
                value, i = _varint(data, i)
                values.append(value)
            if name is not None:
                out[name] = values
        else:
            raise ValueError(f"unexpected wire type {wire} in ConvolutionDimensionNumbers")
    return out


def _same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's (and LiteRT's) SAME padding of one spatial dim."""
    eff = (k - 1) * dilation + 1
    total = max((-(-size // stride) - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def _conv_out(size: int | None, k: int, stride: int, dilation: int) -> int | None:
    return None if size is None else (size - (k - 1) * dilation - 1) // stride + 1


@lowering("XlaConvV2", "XlaConv")
def lower_xla_conv(ctx: LowerCtx) -> list[Value]:
    """XLA's general convolution (``tf2xla.python.xla.conv``: XlaConvV2, or XlaConv without its V2 attributes) in
    the forms the official converter maps: 1-D and 2-D convolutions -> ``CONV_2D`` (1-D through a unit height),
    grouped ones (``feature_group_count``) too; one group per input channel -> ``DEPTHWISE_CONV_2D``; 3-D ->
    ``CONV_3D``. Any dimension numbers (NCHW, OIHW kernels, ...) by TRANSPOSEs to channels-last and back (the
    kernel's folded); padding that is SAME's or zero is the op's, other (asymmetric) padding a ``PAD`` before a
    VALID convolution. Refused: input (lhs) dilation, batch groups, negative padding, grouped 3-D convolutions,
    non-float32 types. ``precision_config`` is a precision hint: LiteRT computes in float32."""
    x, w = ctx.input(0), ctx.input(1)
    if x.dtype != np.float32 or w.dtype != np.float32:
        ctx.fail(f"only float32 is supported, got {x.dtype} and {w.dtype}")
    pet = ctx.attr("preferred_element_type")
    if pet is not None and np.dtype(pet) != np.float32:
        ctx.fail(f"preferred_element_type {pet} is not supported (float32 only)")
    if not w.is_const:
        ctx.fail("the kernel (rhs) must be constant (frozen weights)")
    if int(ctx.attr("batch_group_count", 1)) != 1:
        ctx.fail(f"batch_group_count {ctx.attr('batch_group_count')} is not supported (only 1)")
    strides = [int(s) for s in ctx.const_input(2, "window_strides").reshape(-1)]
    pads = np.asarray(ctx.const_input(3, "padding"), np.int64).reshape(-1, 2)
    lhs_dil = [int(s) for s in ctx.const_input(4, "lhs_dilation").reshape(-1)]
    rhs_dil = [int(s) for s in ctx.const_input(5, "rhs_dilation").reshape(-1)]
    groups = int(ctx.const_input(6, "feature_group_count"))
    if any(d != 1 for d in lhs_dil):
        ctx.fail(f"lhs_dilation {lhs_dil} (a transposed convolution) is not supported")
    if (pads < 0).any():
        ctx.fail(f"negative padding {pads.tolist()} is not supported")
    try:
        dn = parse_dimension_numbers(ctx.attr("dimension_numbers", b""))
    except (ValueError, IndexError) as e:
        ctx.fail(f"its dimension_numbers cannot be read: {e}")
    s = len(dn["input_spatial"])
    if s not in (1, 2, 3) or x.rank != s + 2 or w.rank != s + 2:
        ctx.fail(f"{s} spatial dimensions (input rank {x.rank}) are not supported: 1, 2 or 3")
    # channels-last input and [spatial..., in, out] kernel
    x_perm = [dn["input_batch"], *dn["input_spatial"], dn["input_feature"]]
    if x_perm != list(range(s + 2)):
        x = ctx.transpose(x, x_perm)
    k = np.transpose(w.const, [*dn["kernel_spatial"], dn["kernel_input_feature"], dn["kernel_output_feature"]])
    channels, cin, cout = x.shape[-1], k.shape[-2], k.shape[-1]
    if channels is None or channels != cin * groups or cout % groups:
        ctx.fail(f"{channels} input channels, kernels of {cin} input and {cout} output features do not make "
                 f"{groups} group(s)")
    if s == 3 and groups != 1:
        ctx.fail("a grouped 3-D convolution: LiteRT's CONV_3D takes no groups")
    batch, spatial = x.shape[0], list(x.shape[1:-1])
    if s == 1:  # as a 2-D convolution of unit height
        x = ctx.emit("EXPAND_DIMS", [x, ctx.i32(1)], dtype=x.dtype, shape=(batch, 1, *spatial, channels))
        k, strides, rhs_dil, spatial = k[None], [1, *strides], [1, *rhs_dil], [1, *spatial]
        pads = np.concatenate([[[0, 0]], pads])
    ks = k.shape[:-2]
    same = [None if d is None else _same_pads(d, kk, st, dl) for d, kk, st, dl in zip(spatial, ks, strides, rhs_dil)]
    if not pads.any():
        padding = "VALID"
    elif all(p is not None and tuple(p) == tuple(q) for p, q in zip(same, pads.tolist())):
        padding = "SAME"
    else:
        padding = "VALID"
        full = [[0, 0], *pads.tolist(), [0, 0]]
        spatial = [None if d is None else d + int(a) + int(b) for d, (a, b) in zip(spatial, pads.tolist())]
        x = ctx.emit("PAD", [x, ctx.i32(full)], dtype=x.dtype, shape=(batch, *spatial, channels))
    if padding == "SAME":
        out_sp = [None if d is None else -(-d // st) for d, st in zip(spatial, strides)]
    else:
        out_sp = [_conv_out(d, kk, st, dl) for d, kk, st, dl in zip(spatial, ks, strides, rhs_dil)]
    out_shape = (batch, *out_sp, cout)
    bias = ctx.const(np.zeros(cout, np.float32))
    if s == 3:
        opts = {"padding": padding, "stride_d": strides[0], "stride_h": strides[1], "stride_w": strides[2],
                "dilation_d_factor": rhs_dil[0], "dilation_h_factor": rhs_dil[1], "dilation_w_factor": rhs_dil[2],
                **NONE}
        y = ctx.emit("CONV_3D", [x, ctx.const(k), bias], opts, dtype=np.float32, shape=out_shape)
    else:
        opts = {"padding": padding, "stride_h": strides[0], "stride_w": strides[1],
                "dilation_h_factor": rhs_dil[0], "dilation_w_factor": rhs_dil[1], **NONE}
        if groups > 1 and cin == 1:  # one group per input channel: depthwise, the outputs in the same order
            opts["depth_multiplier"] = cout // channels
            y = ctx.emit("DEPTHWISE_CONV_2D", [x, ctx.const(k.reshape(1, *ks, cout)), bias], opts,
                         dtype=np.float32, shape=out_shape)
        else:
            y = ctx.emit("CONV_2D", [x, ctx.const(np.transpose(k, [3, 0, 1, 2])), bias], opts, dtype=np.float32,
                         shape=out_shape)
        if s == 1:
            y = ctx.emit("SQUEEZE", [y], {"squeeze_dims": [1]}, dtype=np.float32, shape=(batch, out_sp[1], cout))
    # back to the output's dimension order: output axis j is the result's axis perm[j]
    perm = [0] * (s + 2)
    perm[dn["output_batch"]], perm[dn["output_feature"]] = 0, s + 1
    for i, axis in enumerate(dn["output_spatial"]):
        perm[axis] = 1 + i
    if perm != list(range(s + 2)):
        y = ctx.transpose(y, perm)
    return [y]
