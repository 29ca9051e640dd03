"""Grouped-query attention without repeating the keys and values.

keras-hub's Llama, Mistral and Qwen attention repeat each key-value head for its group of query heads
(``ops.repeat(key, groups, axis=2)``: EXPAND_DIMS, TILE, RESHAPE) and then multiply per query head: every call
copies the whole KV cache ``groups`` times. The same product, grouped:

    BATCH_MATMUL(A [B, heads * g, T, a], TRANSPOSE(repeat(x, g, axis=k), p))
      = RESHAPE(BATCH_MATMUL(RESHAPE(A, [B, heads, g * T, a]), TRANSPOSE(x, p)), [B, heads * g, T, b])

(query head ``u`` reads key-value head ``u // g``, as ``repeat`` lays them out, so the rows of a group are
consecutive). The cache is read once per key-value head; what reads ``TRANSPOSE(x, p)`` then folds as without
groups (``update_layout``, ``merge_transposes``, BATCH_MATMUL's ``adj_y``).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function


def grouped_matmuls(fn: Function) -> bool:
    """Rewrite one BATCH_MATMUL of a repeated operand (the first found); True if one was rewritten."""
    for op in fn.ops:
        found = _repeated_operand(op)
        if found is not None:
            _rewrite(fn, op, *found)
            return True
    return False


def _producer(v, kind: str):
    p = v.producer if v is not None else None
    return p if p is not None and p.type == f"tfl.{kind}" and not p.attrs.get("_pinned") else None


def _const(v) -> np.ndarray | None:
    return v.const.reshape(-1).astype(np.int64) if v is not None and v.is_const else None


def _repeated_operand(op):
    """(x, groups, perm) where ``op`` is BATCH_MATMUL(A, TRANSPOSE(repeat(x, groups, axis k), perm)) with ``perm``
    taking axis k to dimension 1 of a rank-4 product; else None."""
    if op.type != "tfl.BATCH_MATMUL" or op.attrs.get("adj_x") or op.attrs.get("_pinned"):
        return None
    a = op.inputs[0]
    transpose = _producer(op.inputs[1], "TRANSPOSE")
    reshape = transpose and _producer(transpose.inputs[0], "RESHAPE")
    tile = reshape and _producer(reshape.inputs[0], "TILE")
    expand = tile and _producer(tile.inputs[0], "EXPAND_DIMS")
    if expand is None:
        return None
    x, perm, multiples, axis = expand.inputs[0], _const(transpose.inputs[1]), _const(tile.inputs[1]), \
        _const(expand.inputs[1])
    shapes = [v.shape for v in (a, x, reshape.outputs[0], op.outputs[0])]
    if perm is None or multiples is None or axis is None or axis.size != 1 or any(
            s is None or None in s or len(s) != 4 for s in (shapes[0], shapes[1], shapes[2], shapes[3])):
        return None
    e = int(axis[0]) % 5  # the new axis, just after the repeated one (k = e - 1)
    k = e - 1
    groups = int(multiples[e]) if multiples.size == 5 else 0
    if k < 0 or groups < 2 or any(int(m) != 1 for i, m in enumerate(multiples) if i != e):
        return None
    want = list(x.shape)
    want[k] *= groups
    if list(shapes[2]) != want or list(perm[:2]) != [0, k] or shapes[0][1] != want[k]:
        return None
    return x, groups, perm


def _rewrite(fn: Function, op, x, groups: int, perm) -> None:
    a, out = op.inputs[0], op.outputs[0]
    heads = x.shape[int(perm[1])]
    batch, _, rows, inner = a.shape
    at = fn.ops.index(op)
    xt = fn.make_op("tfl.TRANSPOSE", [x, fn.const(perm.astype(np.int32), f"{op.name}/grouped/perm")],
                    [(x.dtype, tuple(x.shape[int(i)] for i in perm))], name=f"{op.name}/grouped/kv",
                    location=op.location)
    grouped_a = fn.make_op("tfl.RESHAPE", [a, fn.const(np.array([batch, heads, groups * rows, inner], np.int32),
                                                        f"{op.name}/grouped/shape")],
                           [(a.dtype, (batch, heads, groups * rows, inner))], name=f"{op.name}/grouped/rows",
                           location=op.location)
    product = fn.make_op("tfl.BATCH_MATMUL", [grouped_a.outputs[0], xt.outputs[0]],
                         [(out.dtype, (batch, heads, groups * rows, out.shape[3]))], dict(op.attrs),
                         name=f"{op.name}/grouped", location=op.location)
    op.type = "tfl.RESHAPE"
    op.attrs = {}
    op.inputs = [product.outputs[0], fn.const(np.array(out.shape, np.int32), f"{op.name}/grouped/out")]
    fn.ops[at:at] = [xt, grouped_a, product]
