"""``embedding_matmul`` / ``embedding_lookup`` composites -> EMBEDDING_LOOKUP.

Arguments as in TF's converter: ``(table, ids)`` — the table must be a constant
(a frozen variable), ids integer. LiteRT's kernel takes 1-D int32 ids, so other
ranks are flattened and the result reshaped back (static transforms).
"""

from __future__ import annotations

import numpy as np

from fuselite.fusion.registry import fusion


def _embedding(c):
    c.expect_args(2)
    c.expect_results(1)
    table, ids = c.args
    if table.const is None:
        c.decline("the embedding table (argument 0) must be a constant or a read-only variable")
    if table.rank is None or table.rank < 2:
        c.decline(f"the embedding table must have rank >= 2, got shape {table.shape}")
    if isinstance(ids.dtype, str) or np.dtype(ids.dtype).kind not in "iu":
        c.decline(f"ids (argument 1) must be integers, got {ids.dtype}")
    if ids.rank is None:
        c.decline("ids (argument 1) need a known rank")
    out = c.results[0]
    lookup = ids
    if np.dtype(ids.dtype) != np.int32:
        if ids.const is not None:
            lookup = ids.const.astype(np.int32)
        else:
            lookup = c.op("CAST", [ids], dtype=np.int32, shape=ids.shape)
    if ids.rank == 1:
        return c.op("EMBEDDING_LOOKUP", [lookup, table], like=out)
    if sum(d is None for d in ids.shape) > 1:
        c.decline(f"ids of rank {ids.rank} need a static shape (but for one dimension), got {ids.shape}")
    n = None if None in ids.shape else int(np.prod(ids.shape))
    flat = c.op("RESHAPE", [lookup, np.array([-1], np.int32)], dtype=np.int32, shape=(n,))
    rows = c.op("EMBEDDING_LOOKUP", [flat, table], dtype=out.dtype, shape=(n,) + tuple(table.shape[1:]))
    target = [-1 if d is None else d for d in ids.shape] + list(table.shape[1:])
    return c.op("RESHAPE", [rows, np.array(target, np.int32)], like=out)


@fusion("embedding_matmul")
def fuse_embedding_matmul(c):
    return _embedding(c)


@fusion("embedding_lookup")
def fuse_embedding_lookup(c):
    return _embedding(c)
