"""Shape and data-movement ops: reshape, transpose, concat, split, slice, pad, gather..."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import lowering


@lowering("Reshape")
def lower_reshape(ctx):
    x, shape = ctx.input(0), ctx.int32_input(1)
    shape = ctx.cast(shape, np.int32)
    return [ctx.emit("RESHAPE", [x, shape])]


@lowering("Transpose")
def lower_transpose(ctx):
    return [ctx.emit("TRANSPOSE", [ctx.input(0), ctx.cast(ctx.input(1), np.int32)])]


@lowering("ConcatV2")
def lower_concat(ctx):
    *values, axis = ctx.inputs
    axis = int(ctx.const_input(len(ctx.inputs) - 1, "axis"))
    if len(values) == 1:
        return [values[0]]
    return [ctx.emit("CONCATENATION", values, {"axis": axis, "fused_activation_function": "NONE"})]


@lowering("Split")
def lower_split(ctx):
    n = int(ctx.attr("num_split"))
    outs = ctx.emit("SPLIT", [ctx.cast(ctx.input(0), np.int32), ctx.input(1)], {"num_splits": n},
                    out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return outs if isinstance(outs, list) else [outs]


@lowering("SplitV")
def lower_split_v(ctx):
    n = int(ctx.attr("num_split"))
    outs = ctx.emit("SPLIT_V", [ctx.input(0), ctx.cast(ctx.input(1), np.int32), ctx.cast(ctx.input(2), np.int32)],
                    {"num_splits": n}, out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return outs if isinstance(outs, list) else [outs]


@lowering("Slice")
def lower_slice(ctx):
    return [ctx.emit("SLICE", [ctx.input(0), ctx.int32_input(1), ctx.int32_input(2)])]


@lowering("XlaDynamicUpdateSlice")
def lower_xla_dynamic_update_slice(ctx):
    """XLA's DynamicUpdateSlice (keras-hub's cached attention writes its keys and values into the cache with it):
    LiteRT's DYNAMIC_UPDATE_SLICE follows XLA's semantics, each start index clamped to [0, dim - update dim]
    (dynamic_update_slice.cc: ``ClampStartIndices``); its start indices as int32 (int64 needs version 2)."""
    return [ctx.emit("DYNAMIC_UPDATE_SLICE", [ctx.input(0), ctx.input(1), ctx.int32_input(2)])]


@lowering("StridedSlice")
def lower_strided_slice(ctx):
    opts = {k: int(ctx.attr(k, 0)) for k in
            ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    opts["offset"] = False
    return [ctx.emit("STRIDED_SLICE", [ctx.input(0), ctx.int32_input(1), ctx.int32_input(2), ctx.int32_input(3)], opts)]


@lowering("Pad")
def lower_pad(ctx):
    return [ctx.emit("PAD", [ctx.input(0), ctx.int32_input(1)])]


@lowering("PadV2")
def lower_pad_v2(ctx):
    return [ctx.emit("PADV2", [ctx.input(0), ctx.int32_input(1), ctx.input(2)])]


@lowering("MirrorPad")
def lower_mirror_pad(ctx):
    mode = ctx.attr("mode", "REFLECT")
    return [ctx.emit("MIRROR_PAD", [ctx.input(0), ctx.int32_input(1)], {"mode": mode})]


@lowering("Squeeze")
def lower_squeeze(ctx):
    return [ctx.emit("SQUEEZE", [ctx.input(0)], {"squeeze_dims": [int(d) for d in ctx.attr("squeeze_dims", [])]})]


@lowering("ExpandDims")
def lower_expand_dims(ctx):
    return [ctx.emit("EXPAND_DIMS", [ctx.input(0), ctx.cast(ctx.input(1), np.int32)])]


@lowering("Pack")
def lower_pack(ctx):
    return [ctx.emit("PACK", list(ctx.inputs), {"values_count": len(ctx.inputs), "axis": int(ctx.attr("axis", 0))})]


@lowering("Unpack")
def lower_unpack(ctx):
    n = int(ctx.attr("num"))
    outs = ctx.emit("UNPACK", [ctx.input(0)], {"num": n, "axis": int(ctx.attr("axis", 0))},
                    out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return outs if isinstance(outs, list) else [outs]


@lowering("SpaceToBatchND")
def lower_space_to_batch_nd(ctx):
    # tf.nn.depthwise_conv2d / atrous convs wrap a dilated conv in SpaceToBatchND ... BatchToSpaceND
    return [ctx.emit("SPACE_TO_BATCH_ND", [ctx.input(0), ctx.cast(ctx.input(1), np.int32),
                                           ctx.cast(ctx.input(2), np.int32)])]


@lowering("BatchToSpaceND")
def lower_batch_to_space_nd(ctx):
    return [ctx.emit("BATCH_TO_SPACE_ND", [ctx.input(0), ctx.cast(ctx.input(1), np.int32),
                                           ctx.cast(ctx.input(2), np.int32)])]


@lowering("GatherV2", "Gather")
def lower_gather(ctx):
    params, indices = ctx.input(0), ctx.input(1)
    axis = int(ctx.const_input(2, "axis")) if len(ctx.inputs) > 2 else 0
    return [ctx.emit("GATHER", [params, ctx.int32_input(1) if indices.is_const else indices],
                     {"axis": axis, "batch_dims": int(ctx.attr("batch_dims", 0))})]


@lowering("GatherNd")
def lower_gather_nd(ctx):
    return [ctx.emit("GATHER_ND", [ctx.input(0), ctx.input(1)])]


@lowering("ScatterNd")
def lower_scatter_nd(ctx):
    # zeros of ``shape`` with ``updates`` added at ``indices`` (duplicates summed, as TensorFlow's): LiteRT's
    # SCATTER_ND takes int32 indices and shape only (scatter_nd.cc)
    indices, updates, shape = ctx.input(0), ctx.input(1), ctx.input(2)
    return [ctx.emit("SCATTER_ND", [ctx.cast(indices, np.int32), updates, ctx.cast(shape, np.int32)])]


@lowering("Where")
def lower_where(ctx):
    # tf.where(condition) alone: the coordinates of the true (non-zero) elements, int64 [count, rank]. LiteRT's
    # WHERE reads a bool condition only (where.cc: "Condition tensor must be of type bool"): a numeric one is
    # compared with zero first, as TensorFlow counts it
    cond = ctx.input(0)
    if cond.dtype != np.bool_:
        zero = ctx.const(np.zeros((), cond.dtype))
        cond = ctx.emit("NOT_EQUAL", [cond, zero], dtype=np.bool_, shape=cond.shape)
    return [ctx.emit("WHERE", [cond])]


@lowering("Cast")
def lower_cast(ctx):
    x = ctx.input(0)
    if np.dtype(x.dtype) == np.dtype(ctx.out(0).dtype):
        return [x]
    return [ctx.emit("CAST", [x])]


@lowering("Fill")
def lower_fill(ctx):
    return [ctx.emit("FILL", [ctx.cast(ctx.input(0), np.int32), ctx.input(1)])]


@lowering("Tile")
def lower_tile(ctx):
    return [ctx.emit("TILE", [ctx.input(0), ctx.cast(ctx.input(1), np.int32)])]


@lowering("Roll")
def lower_roll(ctx):
    # tf.roll (Swin's shifted windows): y[..., i, ...] = x[..., (i - shift) mod n, ...] along each axis, shifts
    # of one axis adding up. LiteRT has no roll: a static shift of a static axis is two SLICEs concatenated in
    # the other order (as the official converter writes it); a shift or a size known only at run time is a
    # GATHER at (RANGE(n) - shift) FLOOR_MOD n.
    x, shift, axis = ctx.input(0), ctx.input(1), ctx.input(2)
    if axis.const is None or x.shape is None:
        ctx.fail("the axes must be constants and the input's rank known")
    rank = len(x.shape)
    axes = [int(a) % rank for a in np.asarray(axis.const).reshape(-1)]
    if shift.const is not None:
        shifts = [int(s) for s in np.broadcast_to(np.asarray(shift.const).reshape(-1), (len(axes),))]
        totals: dict[int, int] = {}
        for a, s_ in zip(axes, shifts):
            totals[a] = totals.get(a, 0) + s_
        steps = [(a, totals[a], None) for a in sorted(totals)]
    else:
        shifts = ctx.cast(shift, np.int32)
        if shifts.shape not in ((), (1,), (len(axes),)):
            ctx.fail(f"shift of shape {shifts.shape} for {len(axes)} axes")
        if len(axes) != len(set(axes)):
            ctx.fail("a shift known at run time over an axis named twice")
        steps = [(a, None, shifts if len(axes) == 1 or shifts.shape == () else
                  ctx.emit("GATHER", [shifts, ctx.i32(k)], {"axis": 0, "batch_dims": 0}, dtype=np.int32, shape=()))
                 for k, a in enumerate(axes)]
    y = x
    for a, total, runtime in steps:
        n = x.shape[a]
        if total is not None and n is not None:
            total %= n
            if total == 0:
                continue
            begin = [0] * rank
            head = ctx.emit("SLICE", [y, ctx.i32([n - total if d == a else 0 for d in range(rank)]),
                                      ctx.i32([total if d == a else -1 for d in range(rank)])],
                            dtype=y.dtype, shape=tuple(total if d == a else s for d, s in enumerate(y.shape)))
            tail = ctx.emit("SLICE", [y, ctx.i32(begin), ctx.i32([n - total if d == a else -1 for d in range(rank)])],
                            dtype=y.dtype, shape=tuple(n - total if d == a else s for d, s in enumerate(y.shape)))
            y = ctx.emit("CONCATENATION", [head, tail], {"axis": a, "fused_activation_function": "NONE"},
                         dtype=y.dtype, shape=y.shape)
            continue
        dims = ctx.emit("SHAPE", [y], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(rank,))
        size = ctx.emit("GATHER", [dims, ctx.i32(a)], {"axis": 0, "batch_dims": 0}, dtype=np.int32, shape=())
        s_ = runtime if runtime is not None else ctx.i32(total)
        positions = ctx.emit("RANGE", [ctx.i32(0), size, ctx.i32(1)], dtype=np.int32, shape=(n,))
        moved = ctx.emit("SUB", [positions, ctx.emit("RESHAPE", [s_, ctx.i32([])], dtype=np.int32, shape=())],
                         {"fused_activation_function": "NONE"}, dtype=np.int32, shape=(n,))
        index = ctx.emit("FLOOR_MOD", [moved, size], dtype=np.int32, shape=(n,))
        y = ctx.emit("GATHER", [y, index], {"axis": a, "batch_dims": 0}, dtype=y.dtype, shape=y.shape)
    return [y]


@lowering("BroadcastTo")
def lower_broadcast_to(ctx):
    return [ctx.emit("BROADCAST_TO", [ctx.input(0), ctx.cast(ctx.input(1), np.int32)])]


@lowering("Range")
def lower_range(ctx):
    return [ctx.emit("RANGE", list(ctx.inputs))]


@lowering("Select")
def lower_select(ctx):
    return [ctx.emit("SELECT", list(ctx.inputs))]


@lowering("SelectV2")
def lower_select_v2(ctx):
    return [ctx.emit("SELECT_V2", list(ctx.inputs))]


@lowering("Shape")
def lower_shape(ctx):
    return [ctx.emit("SHAPE", [ctx.input(0)], {"out_type": ctx.out(0).dtype})]


@lowering("Rank")
def lower_rank(ctx):
    return [ctx.emit("RANK", [ctx.input(0)])]


@lowering("ReverseV2")
def lower_reverse(ctx):
    x, axes = ctx.input(0), ctx.int32_input(1)
    if not axes.is_const or axes.const.size <= 1 or x.rank is None:
        return [ctx.emit("REVERSE_V2", [x, axes])]
    # LiteRT's REVERSE_V2 only reverses contiguous axes: otherwise one op per axis
    ax = sorted({int(a) % x.rank for a in axes.const.reshape(-1)})
    if ax == list(range(ax[0], ax[0] + len(ax))):
        return [ctx.emit("REVERSE_V2", [x, ctx.i32(ax)])]
    for a in ax:
        x = ctx.emit("REVERSE_V2", [x, ctx.i32([a])])
    return [x]


@lowering("Size")
def lower_size(ctx):
    # the element count at run time (a static one is folded before lowering): SHAPE, then its product
    x, dtype = ctx.input(0), np.dtype(ctx.attr("out_type", np.int32))
    shape = ctx.emit("SHAPE", [x], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(len(x.shape),))
    count = ctx.emit("REDUCE_PROD", [shape, ctx.i32([0])], {"keep_dims": False}, dtype=np.int32, shape=())
    return [ctx.cast(count, dtype)]


@lowering("DenseBincount")
def lower_dense_bincount(ctx):
    # tf.math.bincount's dense form (Keras' CategoryEncoding count / multi_hot, and its weighted count): each id
    # one-hot over `size` (ONE_HOT: an id outside [0, size) is a row of zeros, as TensorFlow drops it), summed
    # over the ids of a row (SUM, or REDUCE_MAX for binary_output), times the weights where given
    ids, size, weights = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = np.dtype(ctx.out(0).dtype)
    if len(ids.shape or ()) not in (1, 2):
        ctx.fail(f"DenseBincount of rank-{len(ids.shape or ())} ids (TensorFlow takes rank 1 or 2)")
    if dtype not in (np.float32, np.int32, np.int64):
        ctx.fail(f"DenseBincount counting in {dtype.name}")
    depth = ctx.cast(size, np.int32)
    if depth.is_const:
        depth = ctx.const(np.asarray(depth.const, np.int32).reshape(()))
    counted = weights is not None and not (weights.is_const and weights.const.size == 0)
    binary = bool(ctx.attr("binary_output", False))
    hot = ctx.emit("ONE_HOT", [ctx.cast(ids, np.int32), depth, ctx.const(np.ones((), dtype)), ctx.const(np.zeros((), dtype))],
                   {"axis": -1}, dtype=dtype, shape=(*ids.shape, None if not depth.is_const else int(depth.const)))
    if counted and not binary:
        w = ctx.cast(weights, dtype)
        w = ctx.emit("EXPAND_DIMS", [w, ctx.i32(-1)], dtype=dtype, shape=(*w.shape, 1))
        hot = ctx.emit("MUL", [hot, w], dtype=dtype, shape=hot.shape)
    axis = len(ids.shape) - 1
    return [ctx.emit("REDUCE_MAX" if binary else "SUM", [hot, ctx.i32([axis])], {"keep_dims": False}, dtype=dtype)]


@lowering("OneHot")
def lower_one_hot(ctx):
    return [ctx.emit("ONE_HOT", list(ctx.inputs), {"axis": int(ctx.attr("axis", -1))})]


@lowering("TopKV2")
def lower_top_k(ctx):
    outs = ctx.emit("TOPK_V2", [ctx.input(0), ctx.cast(ctx.input(1), np.int32)],
                    out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return outs


@lowering("Einsum")
def lower_einsum(ctx):
    from fuselite.lower.einsum import lower_two_operand_einsum

    if len(ctx.inputs) != 2:
        ctx.fail("only two-operand einsum equations are supported")
    return [lower_two_operand_einsum(ctx, ctx.attr("equation"), ctx.input(0), ctx.input(1))]


@lowering("MatrixBandPart")
def lower_matrix_band_part(ctx):
    # tf.linalg.band_part (every causal attention mask; keras-hub's sliding windows compute the bounds from the
    # length): x where (num_lower < 0 or i - j <= num_lower) and (num_upper < 0 or j - i <= num_upper) over the
    # last two dims, else 0. LiteRT has no such op: i - j is a constant when those dims are static, else built
    # from RANGEs of the runtime shape; a bound known only at run time is compared at run time; then SELECT_V2.
    x, lower, upper = ctx.input(0), ctx.input(1), ctx.input(2)
    if x.shape is None or len(x.shape) < 2:
        ctx.fail("the input needs a known rank of at least 2")
    bounds = [None if b.const is None else int(np.asarray(b.const).reshape(())) for b in (lower, upper)]
    if all(b is not None and b < 0 for b in bounds):
        return [x]
    rows, cols = x.shape[-2], x.shape[-1]
    if rows is not None and cols is not None:
        d = np.arange(rows)[:, None] - np.arange(cols)[None, :]
        if None not in bounds:
            lo, up = bounds
            return [ctx.emit("SELECT_V2", [ctx.const(((lo < 0) | (d <= lo)) & ((up < 0) | (-d <= up))), x,
                                           ctx.const(np.zeros((), x.dtype))])]
        d = ctx.const(d.astype(np.int32))
    else:
        shape = ctx.emit("SHAPE", [x], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(len(x.shape),))
        ones = ctx.i32([1])
        opts = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 1,
                "offset": False}

        def arange(axis: int, dims) -> Value:
            n = ctx.emit("STRIDED_SLICE", [shape, ctx.i32([axis]), ctx.i32([axis + 1]), ones], opts,
                         dtype=np.int32, shape=())
            r = ctx.emit("RANGE", [ctx.i32(0), n, ctx.i32(1)], dtype=np.int32, shape=(None,))
            return ctx.emit("RESHAPE", [r, ctx.i32(dims)], dtype=np.int32, shape=tuple(None if d == -1 else d
                                                                                        for d in dims))

        i, j = arange(len(x.shape) - 2, [-1, 1]), arange(len(x.shape) - 1, [1, -1])
        d = ctx.emit("SUB", [i, j], {"fused_activation_function": "NONE"}, dtype=np.int32, shape=(rows, cols))
    conds = []
    for k, (bound, value) in enumerate(zip(bounds, (lower, upper))):
        if bound is not None and bound < 0:
            continue  # the whole side kept
        if bound is not None:
            conds.append(ctx.emit("LESS_EQUAL", [d, ctx.i32(bound)], dtype=np.bool_, shape=(rows, cols)) if k == 0
                         else ctx.emit("GREATER_EQUAL", [d, ctx.i32(-bound)], dtype=np.bool_, shape=(rows, cols)))
            continue
        b = ctx.cast(value, np.int32)  # a bound known at run time: a negative one keeps the side whole
        within = ctx.emit("LESS_EQUAL", [d, b], dtype=np.bool_, shape=(rows, cols)) if k == 0 else \
            ctx.emit("GREATER_EQUAL", [d, ctx.emit("NEG", [b], dtype=np.int32, shape=b.shape)], dtype=np.bool_,
                     shape=(rows, cols))
        whole = ctx.emit("LESS", [b, ctx.i32(0)], dtype=np.bool_, shape=b.shape)
        conds.append(ctx.emit("LOGICAL_OR", [within, whole], dtype=np.bool_, shape=(rows, cols)))
    mask = conds[0] if len(conds) == 1 else ctx.emit("LOGICAL_AND", conds, dtype=np.bool_, shape=(rows, cols))
    return [ctx.emit("SELECT_V2", [mask, x, ctx.const(np.zeros((), x.dtype))])]
