"""TensorLists (TensorArrays in Keras 3 RNN loops) become dense ``[N, *element]`` tensors.

``Reserve`` becomes zeros, ``FromTensor``/``Stack`` are the tensor itself, ``GetItem``
is a GATHER and ``SetItem`` a DYNAMIC_UPDATE_SLICE (a dynamic-size list, reserved with 0 elements, is
padded up to the written index first). ``While`` loops that carry a list carry the dense tensor instead. A
list reserved with a number of elements known only at run time (a Keras loop over an input of unknown
length reserves the input's length) is zeros of that many rows, a ``FILL`` whose first dim is that number.
An element shape with an unknown (batch) dimension is read at run time where the loop writes a value it
also carries (a Keras loop writes its ``h``): the list is zeros of ``[N] + shape(that carry's initial
value)``, so the loop takes any batch. Other unknown element shapes: :class:`NeedsStaticBatch` asks the
converter to retrace with a fixed batch.
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.ir import Function, Module, Value

_WHILE = ("tf.While", "tf.StatelessWhile")


def _element_shape(op, arg: int) -> tuple | None:
    v = op.inputs[arg]
    if not v.is_const:
        return None
    s = np.asarray(v.const).reshape(-1)
    if v.const.ndim == 0 and int(v.const) == -1:
        return None  # unknown rank
    if any(int(d) < 0 for d in s):
        return None
    return tuple(int(d) for d in s)


def _carried_like(reserve: Value, fn: Function, module: Module):
    """(the WHILE, the value before it whose run-time shape is the list's element shape) for a list that only a
    WHILE takes and whose body writes a value it also carries (as the next step's state); else None."""
    users = [op for op in fn.ops if any(v is reserve for v in op.inputs)]
    if len(users) != 1 or users[0].type not in _WHILE:
        return None
    loop = users[0]
    i = [k for k, v in enumerate(loop.inputs) if v is reserve]
    body = module.functions.get(loop.attrs.get("body"))
    if len(i) != 1 or body is None:
        return None
    for bop in body.ops:
        if bop.kind == "TensorListSetItem" and bop.inputs[0] is body.inputs[i[0]]:
            item = bop.inputs[2]
            for j, out in enumerate(body.outputs):
                init = loop.inputs[j]
                if out is item and j != i[0] and init.dtype == item.dtype and init.shape is not None \
                        and item.shape is not None and len(init.shape) == len(item.shape):
                    return loop, init
    return None


def _run_time_length(n: Value) -> bool:
    """A list's number of elements known only at run time: an int32 scalar that is no constant."""
    return not n.is_const and n.dtype == np.int32 and n.shape == ()


def _dynamic_reserves(fn: Function, module: Module, dynamic_batch: bool) -> bool:
    """Lists of zeros written at run time, just before the WHILE that takes them (or in place of the reserve):
    a list whose element shape has an unknown dimension, where :func:`_carried_like` finds the value to read it
    from (``dynamic_batch`` only): zeros of ``[N] + SHAPE(value)``; and a list of a number of elements ``N``
    known only at run time: zeros of ``[N] + element shape`` (SHAPE, CONCATENATION, FILL). Returns True if
    anything changed."""
    before: dict[int, list] = {}
    dropped: set[int] = set()
    for op in fn.ops:
        if op.kind != "TensorListReserve" or op.dialect != "tf":
            continue
        n = op.inputs[1]
        run_time = _run_time_length(n)
        if not run_time and (not n.is_const or int(n.const) <= 0):
            continue
        elem = _element_shape(op, 0) or _infer_element_shape(fn, module, op.outputs[0])
        found = None if elem else _carried_like(op.outputs[0], fn, module) if dynamic_batch else None
        if (elem is None and found is None) or (elem is not None and not run_time):
            continue
        dtype, name, loc = np.dtype(op.attrs["element_dtype"]), op.name, op.location
        i32 = np.dtype(np.int32)
        new = []
        if run_time:
            length = fn.make_op("tfl.RESHAPE", [n, fn.const(np.array([1], np.int32), name + "/one")],
                                [(i32, (1,))], name=name + "/length", location=loc)
            new.append(length)
            length = length.outputs[0]
        else:
            length = fn.const(np.array([int(n.const)], np.int32), name + "/length")
        size = None if run_time else int(n.const)
        if found is not None:
            loop, like = found
            shape = fn.make_op("tfl.SHAPE", [like], [(i32, (len(like.shape),))], {"out_type": i32},
                               name=name + "/element_shape", location=loc)
            new.append(shape)
            element, elem = shape.outputs[0], tuple(like.shape)
        else:
            loop, element = op, fn.const(np.array(elem, np.int32), name + "/element_shape")
        dims = fn.make_op("tfl.CONCATENATION", [length, element], [(i32, (len(elem) + 1,))],
                          {"axis": 0, "fused_activation_function": "NONE"}, name=name + "/dims", location=loc)
        zeros = fn.make_op("tfl.FILL", [dims.outputs[0], fn.const(np.zeros((), dtype), name + "/zero")],
                           [(dtype, (size, *elem))], name=name, location=loc)
        fn.replace_uses(op.outputs[0], zeros.outputs[0])
        before.setdefault(id(loop), []).extend([*new, dims, zeros])
        dropped.add(id(op))
    if not before:
        return False
    fn.ops = [new for op in fn.ops for new in (*before.get(id(op), ()), op) if id(new) not in dropped]
    return True


def _rewrite_function(fn: Function, module: Module, dynamic_batch: bool = True) -> bool:
    """Rewrite list ops whose list operand is already dense (``dynamic_batch``: lists of a run-time element
    shape too). Returns True if anything changed."""
    changed = _dynamic_reserves(fn, module, dynamic_batch)
    new_ops = []
    for op in fn.ops:
        k = op.kind if op.dialect == "tf" else None
        out = op.outputs[0] if op.outputs else None
        if k == "TensorListReserve":
            elem = _element_shape(op, 0) or _infer_element_shape(fn, module, out)
            n = op.inputs[1]
            if elem is None or not n.is_const:
                new_ops.append(op)  # retried once the loop body's shapes are known
                continue
            size = int(n.const)
            dense = fn.const(np.zeros((max(size, 0),) + elem, dtype=op.attrs["element_dtype"]), op.name)
            if size <= 0:  # a dynamic-size TensorArray (size 0 or unknown): its writes grow it (see _grow)
                dense.meta["growable"] = True
            fn.replace_uses(out, dense)
            changed = True
            continue
        if k == "TensorListFromTensor":
            fn.replace_uses(out, op.inputs[0])
            changed = True
            continue
        if k in ("TensorListStack", "TensorListGetItem", "TensorListSetItem", "TensorListLength",
                 "TensorListElementShape") and op.inputs[0].dtype != "variant" and not _left_to_lowering(op):
            lst = op.inputs[0]
            if k == "TensorListStack":
                fn.replace_uses(out, lst)
            elif k == "TensorListLength":
                if lst.shape[0] is None:  # a length known at run time
                    i32 = np.dtype(np.int32)
                    dims = fn.make_op("tfl.SHAPE", [lst], [(i32, (len(lst.shape),))], {"out_type": i32},
                                      name=op.name + "/shape", location=op.location)
                    first = fn.make_op("tfl.GATHER", [dims.outputs[0], fn.const(np.array(0, np.int32), op.name)],
                                       [(i32, ())], {"axis": 0, "batch_dims": 0}, name=op.name, location=op.location)
                    new_ops += [dims, first]
                    fn.replace_uses(out, first.outputs[0])
                else:
                    fn.replace_uses(out, fn.const(np.array(lst.shape[0], np.int32), op.name))
            elif k == "TensorListElementShape":
                if None in lst.shape[1:]:
                    new_ops.append(op)  # not known here: left, the pass ends in NeedsStaticBatch
                    continue
                fn.replace_uses(out, fn.const(np.array(lst.shape[1:], out.dtype), op.name))
            elif k == "TensorListGetItem":
                g = fn.make_op("tfl.GATHER", [lst, op.inputs[1]], [(lst.dtype, lst.shape[1:])],
                               {"axis": 0, "batch_dims": 0}, name=op.name, location=op.location)
                new_ops.append(g)
                fn.replace_uses(out, g.outputs[0])
            else:  # SetItem
                idx, item = op.inputs[1], op.inputs[2]
                rank = len(lst.shape)
                if lst.meta.get("growable"):
                    grow_ops, lst = _grow(fn, op, lst, idx)
                    new_ops += grow_ops
                one = (1,) + tuple(lst.shape[1:])
                if None in one:  # an element dimension read at run time: the item with a leading axis
                    r = fn.make_op("tfl.EXPAND_DIMS", [item, fn.const(np.array(0, np.int32), op.name + "/axis")],
                                   [(lst.dtype, one)], name=op.name + "/reshape", location=op.location)
                else:
                    shape = fn.const(np.array(one, np.int32), op.name + "/shape")
                    r = fn.make_op("tfl.RESHAPE", [item, shape], [(lst.dtype, one)], name=op.name + "/reshape",
                                   location=op.location)
                zeros = [fn.const(np.array(0, np.int32), op.name + "/zero") for _ in range(rank - 1)]
                p = fn.make_op("tfl.PACK", [idx] + zeros, [(np.dtype(np.int32), (rank,))],
                               {"values_count": rank, "axis": 0}, name=op.name + "/start", location=op.location)
                u = fn.make_op("tfl.DYNAMIC_UPDATE_SLICE", [lst, r.outputs[0], p.outputs[0]],
                               [(lst.dtype, lst.shape)], name=op.name, location=op.location)
                new_ops += [r, p, u]
                if lst.meta.get("growable"):
                    u.outputs[0].meta["growable"] = True
                fn.replace_uses(out, u.outputs[0])
            changed = True
            continue
        if op.type in _WHILE:
            changed |= _propagate_into_loop(op, module)
        new_ops.append(op)
    fn.ops = new_ops
    return changed


def _left_to_lowering(op) -> bool:
    """A SetItem left to its lowering rule (``lower/tensor_lists.py``): one with ``resize_if_index_out_of_bounds``
    at a constant index past the end of a list of a known length (not a growable one), which adds the rows; and
    one of an item whose shape is not the list's element shape (a ragged list), which is an error there."""
    if op.kind != "TensorListSetItem":
        return False
    lst, idx, item = op.inputs[0], op.inputs[1], op.inputs[2]
    if lst.shape is None:
        return False
    if item.shape is not None and (len(item.shape) != len(lst.shape) - 1 or any(
            a is not None and b is not None and a != b for a, b in zip(item.shape, lst.shape[1:]))):
        return True
    return (bool(op.attrs.get("resize_if_index_out_of_bounds")) and not lst.meta.get("growable") and idx.is_const
            and lst.shape[0] is not None and int(idx.const) >= lst.shape[0])


def _propagate_into_loop(op, module: Module) -> bool:
    body, cond = module.functions[op.attrs["body"]], module.functions[op.attrs["cond"]]
    changed = False
    for i, v in enumerate(op.inputs):
        if v.dtype == "variant" or body.inputs[i].dtype != "variant":
            continue
        growable = bool(v.meta.get("growable"))
        shape = (None, *v.shape[1:]) if growable and v.shape is not None else v.shape
        for sub in (body, cond):
            sub.inputs[i].dtype, sub.inputs[i].shape = v.dtype, shape
            if growable:
                sub.inputs[i].meta["growable"] = True
        op.outputs[i].dtype, op.outputs[i].shape = v.dtype, shape
        if growable:
            op.outputs[i].meta["growable"] = True
        changed = True
    return changed


def _grow(fn: Function, op, lst: Value, idx: Value):
    """Ops that pad a dynamic-size list with zero rows up to ``idx + 1`` (no change when it is long enough):
    ``PAD(lst, [[0, max(idx + 1 - len, 0)], [0, 0], ...])``. Returns (ops, the padded list)."""
    i32 = np.dtype(np.int32)
    rank = len(lst.shape)
    name, loc = op.name + "/grow", op.location
    ops = []

    def emit(kind, inputs, shape, attrs=None, dtype=i32):
        o = fn.make_op(kind, inputs, [(dtype, shape)], attrs or {}, name=f"{name}/{kind.split('.')[1].lower()}",
                       location=loc)
        ops.append(o)
        return o.outputs[0]

    def const(arr):
        return fn.const(np.asarray(arr, np.int32), name + "/const")

    shape = emit("tfl.SHAPE", [lst], (rank,), {"out_type": i32})
    length = emit("tfl.STRIDED_SLICE", [shape, const([0]), const([1]), const([1])], (1,),
                  {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0,
                   "offset": False})
    wanted = emit("tfl.ADD", [emit("tfl.RESHAPE", [idx, const([1])], (1,)), const([1])], (1,),
                  {"fused_activation_function": "NONE"})
    missing = emit("tfl.MAXIMUM", [emit("tfl.SUB", [wanted, length], (1,), {"fused_activation_function": "NONE"}),
                                   const([0])], (1,))
    pads = emit("tfl.CONCATENATION", [const([0]), missing, const([0] * (2 * (rank - 1)))], (2 * rank,),
                {"axis": 0, "fused_activation_function": "NONE"})
    pads = emit("tfl.RESHAPE", [pads, const([rank, 2])], (rank, 2))
    grown = emit("tfl.PAD", [lst, pads], (None, *lst.shape[1:]), dtype=lst.dtype)
    grown.meta["growable"] = True
    return ops, grown


def _infer_element_shape(fn: Function, module: Module, lst: Value) -> tuple | None:
    """Element shape from the items a loop body stores into the list."""
    for op in fn.ops:
        if op.type in _WHILE and lst in op.inputs:
            i = op.inputs.index(lst)
            body = module.functions[op.attrs["body"]]
            for bop in body.ops:
                if bop.kind == "TensorListSetItem" and bop.inputs[0] is body.inputs[i]:
                    item = bop.inputs[2]
                    if item.static_shape:
                        return tuple(item.shape)
        if op.kind == "TensorListSetItem" and op.inputs[0] is lst and op.inputs[2].static_shape:
            return tuple(op.inputs[2].shape)
    return None


def has_tensor_lists(module: Module) -> bool:
    return any(op.kind.startswith("TensorList") for fn in module.functions.values() for op in fn.ops)


def lower_tensor_lists(module: Module, report=None, dynamic_batch: bool = True) -> None:
    """Every TensorList as a dense tensor, or :class:`NeedsStaticBatch`. ``dynamic_batch``: an element shape may
    be read at run time (not for TFLite Micro, whose FILL takes constant dims, nor integer quantization)."""
    from fuselite.passes.shapes import refine_shapes

    if not has_tensor_lists(module):
        return
    for _ in range(100):
        changed = False
        for fn in list(module.functions.values()):
            changed |= _rewrite_function(fn, module, dynamic_batch)
        if changed:
            refine_shapes(module)
        else:
            break
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind == "TensorListReserve":
                raise NeedsStaticBatch(f"tensor list {op.describe()} has an element shape with an unknown (batch) "
                                       "dimension that is not read at run time here")
