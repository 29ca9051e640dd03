"""Tensor lists outside Keras' loops (EmptyTensorList, TensorListPushBack, TensorListConcatV2, TensorListResize ...)
as dense tensors where their sizes are known.

A list is a dense ``[length, *element]`` tensor. ``passes/tensor_lists.py`` (before lowering) makes every
``TensorListReserve`` / ``TensorListFromTensor`` dense, and the lists of loops (a reserved list that a ``While``
carries: Keras' RNN loops, a ``TensorArray`` of a known size); the rules here lower the list ops that remain, in
program order, so each sees its list operand dense already: a list built by straight-line code (a Python loop of
``push_back``s in a ``tf.function``), a ``TensorArray``'s ``concat`` / ``gather`` / ``scatter`` / ``split``, a
``resize``. An empty list (``EmptyTensorList``) is a constant of no rows, which its first ``push_back`` replaces by
the item itself (with a leading axis). A list whose size is not known when converting (a ``push_back`` in a loop
body: its length is the loop's trip count; a ``resize`` to a size computed at run time) has no dense form and is one
:class:`~fuselite.errors.ConversionError` that says why; so are elements of different shapes (TensorFlow's ragged
lists).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import LowerCtx, lowering

NONE = {"fused_activation_function": "NONE"}
_EMPTY = "empty_tensor_list"  # Value.meta key of an EmptyTensorList's no-row constant (its element shape or None)


def _dense(ctx: LowerCtx, i: int = 0) -> Value:
    """The list operand as its dense tensor, or the reason it has none."""
    lst = ctx.input(i)
    if lst.dtype == "variant":
        if lst.producer is not None:
            ctx.fail(f"the tensor list comes from {lst.producer.describe()}, which has no dense form (its own error "
                     "says why)")
        ctx.fail("the tensor list (a loop's or branch's argument) has no dense form: its number of elements is not "
                 "known when converting (a push_back or resize in a loop body grows it with every iteration, as "
                 "many times as the loop runs)")
    if lst.shape is None or len(lst.shape) < 1:
        ctx.fail(f"the tensor list's dense form has an unknown shape {lst.shape}")
    return lst


def _is_empty(lst: Value) -> bool:
    return lst.is_const and _EMPTY in lst.meta


def _element_shape(lst: Value) -> tuple | None:
    """The element shape of a dense list (None: not known)."""
    if _is_empty(lst):
        return lst.meta[_EMPTY]
    return tuple(lst.shape[1:])


def _declared_shape(ctx: LowerCtx, i: int) -> tuple | None:
    """An ``element_shape`` operand as a tuple with None for unknown dims; None for an unknown rank."""
    v = ctx.input(i)
    if v is None or not v.is_const:
        return None
    s = np.asarray(v.const)
    if s.ndim == 0:
        return None if int(s) == -1 else ()
    return tuple(None if int(d) < 0 else int(d) for d in s.reshape(-1))


def _check_item(ctx: LowerCtx, elem: tuple | None, shape: tuple | None) -> None:
    """An item of ``shape`` fits a list of elements of shape ``elem`` (None: unknown), or the error."""
    if elem is None or shape is None:
        return
    if len(elem) != len(shape) or any(a is not None and b is not None and a != b for a, b in zip(elem, shape)):
        ctx.fail(f"an element of shape {tuple(shape)} in a list of elements of shape {elem}: a list of elements of "
                 "different shapes has no dense form")


def _with_leading_axis(ctx: LowerCtx, item: Value) -> Value:
    shape = None if item.shape is None else (1, *item.shape)
    return ctx.emit("EXPAND_DIMS", [item, ctx.i32(0)], dtype=item.dtype, shape=shape)


def _length(ctx: LowerCtx, lst: Value) -> Value:
    """The list's number of elements as an int32 scalar (from its shape at run time when not known)."""
    if lst.shape[0] is not None:
        return ctx.const(np.int32(lst.shape[0]))
    i32 = np.dtype(np.int32)
    dims = ctx.emit("SHAPE", [lst], {"out_type": i32}, dtype=i32, shape=(len(lst.shape),))
    return ctx.emit("GATHER", [dims, ctx.i32(0)], {"axis": 0, "batch_dims": 0}, dtype=i32, shape=())


def _zeros(ctx: LowerCtx, n: int, elem: tuple | None, dtype, why: str) -> Value:
    if elem is None or None in elem:
        ctx.fail(f"{why}: the element shape {elem} is not fully known, so the new elements' zeros cannot be made")
    return ctx.const(np.zeros((n, *elem), dtype))


@lowering("EmptyTensorList")
def lower_empty_tensor_list(ctx: LowerCtx) -> list[Value]:
    """An empty list: a constant of no rows (``max_num_elements`` is checked by the ops that grow it)."""
    dtype = np.dtype(ctx.attr("element_dtype"))
    elem = _declared_shape(ctx, 0)
    empty = ctx.const(np.zeros((0, *[0 if d is None else d for d in elem]) if elem is not None else (0,), dtype))
    empty.meta[_EMPTY] = elem
    limit = ctx.input(1)
    empty.meta["max_num_elements"] = int(limit.const) if limit.is_const else -1
    return [empty]


@lowering("TensorListPushBack")
def lower_tensor_list_push_back(ctx: LowerCtx) -> list[Value]:
    """``push_back``: the item with a leading axis, after the list's rows (CONCATENATION; the first push of an
    empty list is the item alone)."""
    lst, item = _dense(ctx), ctx.input(1)
    _check_item(ctx, _element_shape(lst), item.shape)
    n = 1 if _is_empty(lst) else None if lst.shape[0] is None else lst.shape[0] + 1
    limit = lst.meta.get("max_num_elements", -1)  # an EmptyTensorList's, carried by the pushes
    if limit >= 0 and n is not None and n > limit:
        ctx.fail(f"pushes element {n} onto a list of at most {limit} (its max_num_elements)")
    row = _with_leading_axis(ctx, item)
    out = row if _is_empty(lst) else ctx.emit("CONCATENATION", [lst, row], {"axis": 0, **NONE}, dtype=lst.dtype,
                                               shape=(n, *lst.shape[1:]))
    if limit >= 0:
        out.meta["max_num_elements"] = limit
    return [out]


@lowering("TensorListPopBack")
def lower_tensor_list_pop_back(ctx: LowerCtx) -> list[Value]:
    """``pop_back``: (the first ``n - 1`` rows, row ``n - 1``), for a list of a known length ``n >= 1``."""
    lst = _dense(ctx)
    n = lst.shape[0]
    if _is_empty(lst) or n == 0:
        ctx.fail("pops an element from an empty list")
    if n is None:
        ctx.fail("the list's length is known only at run time")
    rank, elem = len(lst.shape), tuple(lst.shape[1:])
    rest = ctx.emit("SLICE", [lst, ctx.i32([0] * rank), ctx.i32([n - 1] + [-1] * (rank - 1))], dtype=lst.dtype,
                    shape=(n - 1, *elem))
    last = ctx.emit("GATHER", [lst, ctx.i32(n - 1)], {"axis": 0, "batch_dims": 0}, dtype=lst.dtype, shape=elem)
    return [rest, last]


@lowering("TensorListResize")
def lower_tensor_list_resize(ctx: LowerCtx) -> list[Value]:
    """``resize(size)`` to a constant size: the first ``size`` rows (SLICE), or the rows and zeros after them."""
    lst = _dense(ctx)
    if not ctx.input(1).is_const:
        ctx.fail("the new size is known only at run time (a list's size must be known when converting)")
    size = int(ctx.const_input(1))
    if size < 0:
        ctx.fail(f"the new size must be >= 0, got {size}")
    elem, dtype = _element_shape(lst), lst.dtype
    if _is_empty(lst):
        return [_zeros(ctx, size, elem, dtype, "resizing an empty list")]
    n = lst.shape[0]
    if n is None:
        ctx.fail("the list's length is known only at run time")
    if size <= n:
        rank = len(lst.shape)
        return [ctx.emit("SLICE", [lst, ctx.i32([0] * rank), ctx.i32([size] + [-1] * (rank - 1))], dtype=dtype,
                         shape=(size, *elem))]
    pad = _zeros(ctx, size - n, elem, dtype, "growing a list")
    return [ctx.emit("CONCATENATION", [lst, pad], {"axis": 0, **NONE}, dtype=dtype, shape=(size, *elem))]


@lowering("TensorListStack")
def lower_tensor_list_stack(ctx: LowerCtx) -> list[Value]:
    """``stack``: the dense list itself."""
    lst = _dense(ctx)
    n = int(ctx.attr("num_elements", -1))
    if n >= 0 and lst.shape[0] is not None and lst.shape[0] != n:
        ctx.fail(f"stacks {lst.shape[0]} elements, num_elements says {n}")
    if _is_empty(lst) and (lst.meta[_EMPTY] is None or None in lst.meta[_EMPTY]):
        ctx.fail("stacks an empty list whose element shape is not known")
    return [lst]


@lowering("TensorListGetItem")
def lower_tensor_list_get_item(ctx: LowerCtx) -> list[Value]:
    """``get_item(i)``: GATHER of row ``i``."""
    lst, index = _dense(ctx), ctx.input(1)
    n = lst.shape[0]
    if index.is_const and n is not None and not 0 <= int(index.const) < n:
        ctx.fail(f"index {int(index.const)} is out of the list's {n} elements")
    return [ctx.emit("GATHER", [lst, index], {"axis": 0, "batch_dims": 0}, dtype=lst.dtype,
                     shape=tuple(lst.shape[1:]))]


@lowering("TensorListGather")
def lower_tensor_list_gather(ctx: LowerCtx) -> list[Value]:
    """``gather(indices)`` (a TensorArray's): GATHER of those rows."""
    lst, indices = _dense(ctx), ctx.input(1)
    shape = None if indices.shape is None else (*indices.shape, *lst.shape[1:])
    return [ctx.emit("GATHER", [lst, indices], {"axis": 0, "batch_dims": 0}, dtype=lst.dtype, shape=shape)]


@lowering("TensorListSetItem")
def lower_tensor_list_set_item(ctx: LowerCtx) -> list[Value]:
    """``set_item(i, item)``: DYNAMIC_UPDATE_SLICE at row ``i`` (``resize_if_index_out_of_bounds`` with a constant
    index past the end: zero rows first)."""
    lst, index, item = _dense(ctx), ctx.input(1), ctx.input(2)
    elem = _element_shape(lst)
    _check_item(ctx, elem, item.shape)
    if _is_empty(lst) or lst.shape[0] is None:
        ctx.fail("set_item on a list whose length is not known when converting")
    n, dtype = lst.shape[0], lst.dtype
    if index.is_const:
        i = int(index.const)
        if i >= n and ctx.attr("resize_if_index_out_of_bounds", False):
            lst = ctx.emit("CONCATENATION", [lst, _zeros(ctx, i + 1 - n, elem, dtype, "growing a list")],
                           {"axis": 0, **NONE}, dtype=dtype, shape=(i + 1, *elem))
            n = i + 1
        if not 0 <= i < n:
            ctx.fail(f"index {i} is out of the list's {n} elements")
    elif ctx.attr("resize_if_index_out_of_bounds", False):
        ctx.fail("resize_if_index_out_of_bounds with an index known only at run time")
    rank = len(lst.shape)
    start = ctx.emit("PACK", [ctx.cast(index, np.int32)] + [ctx.const(np.int32(0))] * (rank - 1),
                     {"values_count": rank, "axis": 0}, dtype=np.int32, shape=(rank,))
    return [ctx.emit("DYNAMIC_UPDATE_SLICE", [lst, _with_leading_axis(ctx, item), start], dtype=dtype,
                     shape=lst.shape)]


@lowering("TensorListLength")
def lower_tensor_list_length(ctx: LowerCtx) -> list[Value]:
    """The number of rows (a constant where it is known)."""
    lst = _dense(ctx)
    return [ctx.const(np.int32(0)) if _is_empty(lst) else _length(ctx, lst)]


@lowering("TensorListElementShape")
def lower_tensor_list_element_shape(ctx: LowerCtx) -> list[Value]:
    """The element shape, a constant (of the op's ``shape_type``)."""
    lst = _dense(ctx)
    elem = _element_shape(lst)
    if elem is None or None in elem:
        ctx.fail(f"the element shape {elem} is not known when converting")
    return [ctx.const(np.asarray(elem, np.dtype(ctx.attr("shape_type", np.int32))).reshape(len(elem)))]


@lowering("TensorListConcatV2")
def lower_tensor_list_concat(ctx: LowerCtx) -> list[Value]:
    """``concat`` (a TensorArray's): the elements [n, d0, *rest] joined on their first axis, [n * d0, *rest] (a
    RESHAPE), and each element's length d0 (int64) ; elements of different lengths have no dense form."""
    lst = _dense(ctx)
    if _is_empty(lst):
        ctx.fail("concatenates an empty list")
    if len(lst.shape) < 2:
        ctx.fail("concatenates scalar elements (they have no axis to join on)")
    n, d0, rest = lst.shape[0], lst.shape[1], tuple(lst.shape[2:])
    if None in rest or (n is None and d0 is None):
        ctx.fail(f"the elements' shape {tuple(lst.shape[1:])} is not known well enough")
    total = None if n is None or d0 is None else n * d0
    joined = ctx.emit("RESHAPE", [lst, ctx.i32([-1 if total is None else total, *rest])], dtype=lst.dtype,
                      shape=(total, *rest))
    lengths = ctx.op.outputs[1]
    if n is not None and d0 is not None:
        return [joined, ctx.const(np.full((n,), d0, np.int64))]
    if ctx.fn.uses(lengths) or any(o is lengths for o in ctx.fn.outputs):
        ctx.fail("the elements' lengths are known only at run time")
    return [joined, None]


def _put_rows(ctx: LowerCtx, lst: Value, rows: Value, indices: np.ndarray) -> Value:
    """``lst`` with ``rows[k]`` at row ``indices[k]`` (a DYNAMIC_UPDATE_SLICE each, in order: a later index wins)."""
    rank, elem = len(lst.shape), tuple(lst.shape[1:])
    for k, i in enumerate(indices.tolist()):
        row = ctx.emit("SLICE", [rows, ctx.i32([k] + [0] * (rank - 1)), ctx.i32([1] + [-1] * (rank - 1))],
                       dtype=lst.dtype, shape=(1, *elem))
        lst = ctx.emit("DYNAMIC_UPDATE_SLICE", [lst, row, ctx.i32([i] + [0] * (rank - 1))], dtype=lst.dtype,
                       shape=lst.shape)
    return lst


def _scatter_indices(ctx: LowerCtx, i: int, rows: Value) -> np.ndarray:
    if not ctx.input(i).is_const:
        ctx.fail("the indices are known only at run time (scatter writes rows at constant indices here)")
    indices = np.asarray(ctx.const_input(i)).reshape(-1).astype(np.int64)
    if (indices < 0).any():
        ctx.fail(f"negative indices {indices.tolist()}")
    if rows.shape is None or rows.shape[0] != len(indices) or None in rows.shape[1:]:
        ctx.fail(f"the rows' shape {rows.shape} is not [{len(indices)}, *element] with a known element shape")
    return indices


@lowering("TensorListScatterIntoExistingList")
def lower_tensor_list_scatter_into(ctx: LowerCtx) -> list[Value]:
    """``scatter(indices, rows)`` of a TensorArray of a known size: each row written at its constant index."""
    lst, rows = _dense(ctx), ctx.input(1)
    indices = _scatter_indices(ctx, 2, rows)
    _check_item(ctx, _element_shape(lst), tuple(rows.shape[1:]))
    if _is_empty(lst) or lst.shape[0] is None:
        ctx.fail("scatter into a list whose length is not known when converting")
    if len(indices) and indices.max() >= lst.shape[0]:
        ctx.fail(f"index {int(indices.max())} is out of the list's {lst.shape[0]} elements")
    return [_put_rows(ctx, lst, rows, indices)]


@lowering("TensorListScatterV2")
def lower_tensor_list_scatter(ctx: LowerCtx) -> list[Value]:
    """A new list of ``rows`` at constant indices (zeros elsewhere), ``num_elements`` long, or up to the largest
    index."""
    rows = ctx.input(0)
    indices = _scatter_indices(ctx, 1, rows)
    if not ctx.input(3).is_const:
        ctx.fail("num_elements is known only at run time")
    n = max(int(ctx.const_input(3)), int(indices.max()) + 1 if len(indices) else 0)
    zeros = ctx.const(np.zeros((n, *rows.shape[1:]), rows.dtype))
    return [_put_rows(ctx, zeros, rows, indices)]


@lowering("TensorListSplit")
def lower_tensor_list_split(ctx: LowerCtx) -> list[Value]:
    """``split(tensor, lengths)`` (a TensorArray's) into elements of one constant length L: the tensor as
    [n, L, *rest] (a RESHAPE); elements of different lengths have no dense form."""
    t = ctx.input(0)
    if not ctx.input(2).is_const:
        ctx.fail("the lengths are known only at run time")
    lengths = np.asarray(ctx.const_input(2)).reshape(-1).astype(np.int64)
    if len(lengths) == 0:
        ctx.fail("splits into no elements")
    if (lengths != lengths[0]).any():
        ctx.fail(f"splits into elements of different lengths {lengths.tolist()}: a list of elements of different "
                 "shapes has no dense form")
    if t.shape is None or len(t.shape) < 1 or None in t.shape[1:]:
        ctx.fail(f"the tensor's shape {t.shape} is not known well enough")
    if t.shape[0] is not None and t.shape[0] != lengths.sum():
        ctx.fail(f"the lengths {lengths.tolist()} do not add up to the tensor's {t.shape[0]} rows")
    n, length, rest = len(lengths), int(lengths[0]), tuple(t.shape[1:])
    return [ctx.emit("RESHAPE", [t, ctx.i32([n, length, *rest])], dtype=t.dtype, shape=(n, length, *rest))]
