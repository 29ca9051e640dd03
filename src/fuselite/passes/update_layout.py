"""A DYNAMIC_UPDATE_SLICE between a TRANSPOSE and its inverse is done in the outer layout.

``TRANSPOSE(DYNAMIC_UPDATE_SLICE(TRANSPOSE(x, p), u, s), q)`` with ``q`` undoing ``p`` is
``DYNAMIC_UPDATE_SLICE(x, TRANSPOSE(u, q), s[q])``: the update (a few tokens) is transposed instead of the
whole tensor (a KV cache) twice. This is how a keras-hub CausalLM's cache ([1, length, heads, size]) is
updated in LiteRT-LM's layout ([1, heads, length, size] keys, [1, heads, size, length] values) with no copy of
it: ``frontend.causal_lm`` transposes the cache into the model's layout and back, and this rule takes both
transposes away. Other readers of the updated tensor (the attention) read the new update transposed by ``p``,
which ``merge_transposes`` merges with their own transposes (often into nothing).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function


def updates_in_outer_layout(fn: Function) -> bool:
    """Apply the rule once where it matches; True if it changed ``fn`` (``optimize_function`` loops)."""
    for outer in fn.ops:
        update = _between_inverse_transposes(fn, outer)
        if update is not None:
            _rewrite(fn, outer, update)
            return True
    return False


def _perm(v) -> np.ndarray | None:
    return v.const.reshape(-1).astype(np.int64) if v is not None and v.is_const else None


def _between_inverse_transposes(fn: Function, outer):
    if outer.type != "tfl.TRANSPOSE" or outer.attrs.get("_pinned"):
        return None
    update = outer.inputs[0].producer
    if update is None or update.type != "tfl.DYNAMIC_UPDATE_SLICE":
        return None
    inner = update.inputs[0].producer
    if inner is None or inner.type != "tfl.TRANSPOSE" or inner.attrs.get("_pinned"):
        return None
    p, q = _perm(inner.inputs[1]), _perm(outer.inputs[1])
    if p is None or q is None or p.size != q.size or not np.array_equal(p[q], np.arange(p.size)):
        return None
    return update


def _rewrite(fn: Function, outer, update) -> None:
    """``outer`` becomes the update in the outer layout (its output, a function output maybe, stays); the old
    update's other readers read ``TRANSPOSE(outer, p)``."""
    inner = update.inputs[0].producer
    x, p, q = inner.inputs[0], inner.inputs[1], outer.inputs[1]
    values, starts = update.inputs[1], update.inputs[2]
    q_array = _perm(q)
    moved = fn.make_op("tfl.TRANSPOSE", [values, fn.const(q_array.astype(np.int32), f"{outer.name}/perm")],
                       [(values.dtype, tuple(values.shape[i] for i in q_array) if values.shape else None)],
                       name=f"{outer.name}/update", location=update.location)
    index = fn.const(q_array.astype(np.int32), f"{outer.name}/starts")
    gathered = fn.make_op("tfl.GATHER", [starts, index], [(starts.dtype, tuple(starts.shape or (q_array.size,)))],
                          {"axis": 0, "batch_dims": 0}, name=f"{outer.name}/starts", location=update.location)
    outer.type = "tfl.DYNAMIC_UPDATE_SLICE"
    outer.attrs = {}
    outer.location = update.location
    outer.inputs = [x, moved.outputs[0], gathered.outputs[0]]
    fn.ops.remove(outer)
    at = fn.ops.index(update)  # where the update was: its other readers may come before the outer transpose
    placed = [moved, gathered, outer]
    if [u for u in fn.uses(update.outputs[0]) if u is not outer] or fn.is_output(update.outputs[0]):
        back = fn.make_op("tfl.TRANSPOSE", [outer.outputs[0], p], [(update.outputs[0].dtype,
                                                                     update.outputs[0].shape)],
                          name=f"{update.name}/back", location=update.location)
        placed.append(back)
        fn.replace_uses(update.outputs[0], back.outputs[0])
    fn.ops[at:at] = placed
