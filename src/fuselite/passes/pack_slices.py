"""A slice that takes one operand of a stack back is that operand (``tf.stack(xs, axis)[..., i, ...]`` is
``xs[i]``).

A keras-hub CausalLM keeps its cache as one stacked tensor ([batch, layers, 2, length, heads, head size]) and
takes each layer's key and value from it with ``cache[:, i, ...]``; LiteRT-LM gives one cache tensor per layer
and key or value. Assembled with ``tf.stack`` and taken apart with slices (``frontend.causal_lm``), the cache
would be copied twice over every signature call; with this rewrite no copy is left. The rule only takes a
``StridedSlice`` that picks one index on the stacked axis (a shrinking axis) and the whole of every other
dimension; a stack whose every use is such a slice is left with no use (and removed as dead code).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module


def slices_of_packs(module: Module) -> int:
    """Rewire every ``StridedSlice`` of a ``Pack`` that takes one of its operands whole to that operand; return how
    many were rewired. Example: ``tf.stack([k, v], axis=1)[:, 0, ...]`` reads ``k``."""
    return sum(_function(fn) for fn in module.functions.values())


def _function(fn: Function) -> int:
    rewired = 0
    for op in list(fn.ops):
        if op.type != "tf.StridedSlice":
            continue
        pack = op.inputs[0].producer
        if pack is None or pack.type != "tf.Pack":
            continue
        taken = _taken_operand(op, pack)
        if taken is not None and tuple(taken.shape or ()) == tuple(op.outputs[0].shape or ()):
            fn.replace_uses(op.outputs[0], taken)
            rewired += 1
    return rewired


def _taken_operand(op, pack):
    """The operand of ``pack`` that the slice ``op`` takes whole, or None."""
    parts = list(pack.inputs)
    rank = len(op.inputs[0].shape or ()) if op.inputs[0].shape is not None else None
    if rank is None or not all(v is not None and v.is_const for v in op.inputs[1:4]):
        return None
    dense = _dense_spec(op, rank)
    if dense is None:
        return None
    axis = pack.attrs.get("axis", 0)
    axis = axis + rank if axis < 0 else axis
    taken = None
    for dim, (begin, end, stride, whole, shrink) in enumerate(dense):
        size = op.inputs[0].shape[dim]
        if dim == axis:
            if not shrink:
                return None
            index = begin + len(parts) if begin < 0 else begin
            if not 0 <= index < len(parts):
                return None
            taken = parts[index]
        elif shrink or not (whole or (stride == 1 and begin == 0 and size is not None and end >= size)):
            return None
    return taken


def _dense_spec(op, rank: int):
    """Per input dimension (begin, end, stride, whole, shrink) of a StridedSlice, its ellipsis expanded; None
    where it adds axes."""
    begin, end, strides = (np.asarray(v.const).reshape(-1).tolist() for v in op.inputs[1:4])
    masks = {k: int(op.attrs.get(k, 0) or 0) for k in ("begin_mask", "end_mask", "ellipsis_mask",
                                                          "new_axis_mask", "shrink_axis_mask")}
    if masks["new_axis_mask"]:
        return None
    n = len(begin)
    dense = []
    for k in range(n):
        if masks["ellipsis_mask"] >> k & 1:
            covered = rank - (n - 1)
            dense += [(0, 0, 1, True, False)] * covered
            continue
        full = bool(masks["begin_mask"] >> k & 1 and masks["end_mask"] >> k & 1 and strides[k] == 1)
        dense.append((begin[k], end[k], strides[k], full, bool(masks["shrink_axis_mask"] >> k & 1)))
    dense += [(0, 0, 1, True, False)] * (rank - len(dense))
    return dense if len(dense) == rank else None
