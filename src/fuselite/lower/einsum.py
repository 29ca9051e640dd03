"""Two-operand ``Einsum`` as transposes/reshapes around BATCH_MATMUL or FULLY_CONNECTED.

Letters are classified as batch (in both operands and the output), contracted (both
operands, not the output) or free (one operand and the output). Transposes and
reshapes of a constant operand fold away at conversion time. A reshape whose target has
more than one dynamic dimension (batch and sequence length both open, as in every
attention layer of a text backbone) takes its sizes at run time: ``SHAPE``, slices,
products, ``CONCATENATION`` into the shape operand.
"""

from __future__ import annotations

import numpy as np

from fuselite.lower.nn import fully_connected


def _prod(dims):
    if any(d is None for d in dims):
        return None
    return int(np.prod(dims)) if dims else 1


def _reshape_dims(dims):
    out = [-1 if d is None else int(d) for d in dims]
    if out.count(-1) > 1:
        return None
    return out


def expand_ellipsis(equation: str, ranks: list[int | None]) -> str | None:
    """``equation`` with each ``...`` spelled as letters of its own (RoFormer's ``'...,a->...a'`` -> ``'AB,a->ABa'``
    for a rank-2 first operand): an operand's ellipsis stands for its dims beyond its letters, aligned to the
    right across operands (as NumPy broadcasts them), the output's for the longest. None where a rank is unknown
    or the equation gives no output."""
    eq = equation.replace(" ", "")
    if "..." not in eq:
        return eq
    if "->" not in eq or any(r is None for r in ranks):
        return None
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        return None
    spans = [r - len(t.replace("...", "")) if "..." in t else 0 for t, r in zip(terms, ranks)]
    if min(spans) < 0:
        return None
    fresh = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq][:max(spans)]
    if len(fresh) < max(spans):
        return None

    def spelled(term: str, span: int) -> str:
        return term.replace("...", "".join(fresh[len(fresh) - span:]) if span else "")

    return ",".join(spelled(t, n) for t, n in zip(terms, spans)) + "->" + spelled(out, max(spans))


def lower_two_operand_einsum(ctx, equation: str, a, b):
    eq = expand_ellipsis(equation, [None if v.shape is None else len(v.shape) for v in (a, b)])
    if eq is None:
        ctx.fail(f"einsum '{equation}' with an ellipsis needs its operands' ranks")
    lhs, out = eq.split("->")
    ta, tb = lhs.split(",")
    if a.shape is None or b.shape is None:
        ctx.fail("einsum operands need a known rank")
    dim = {}
    for term, v in ((ta, a), (tb, b)):
        for letter, d in zip(term, v.shape):
            if dim.get(letter) is None:
                dim[letter] = d
    batch = [c for c in out if c in ta and c in tb]
    contract = [c for c in ta if c in tb and c not in out]
    a_free = [c for c in ta if c not in tb]
    b_free = [c for c in tb if c not in ta]
    if any(c not in out for c in a_free + b_free) or len(set(ta)) != len(ta) or len(set(tb)) != len(tb):
        ctx.fail(f"einsum '{equation}' sums over a single operand or repeats a letter; not supported")

    shapes: dict[int, object] = {}  # operand -> its SHAPE op (emitted once, only when a dim is dynamic)

    def runtime_dim(c):
        """Letter ``c``'s size as a [1] int32 tensor: a constant, or sliced from an operand's runtime shape."""
        if dim[c] is not None:
            return ctx.i32([dim[c]])
        term, v = (ta, a) if c in ta else (tb, b)
        if id(v) not in shapes:
            shapes[id(v)] = ctx.emit("SHAPE", [v], {"out_type": np.dtype(np.int32)}, dtype=np.int32,
                                     shape=(len(v.shape),))
        i = term.index(c)
        opts = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0,
                "offset": False}
        return ctx.emit("STRIDED_SLICE", [shapes[id(v)], ctx.i32([i]), ctx.i32([i + 1]), ctx.i32([1])], opts,
                        dtype=np.int32, shape=(1,))

    def dynamic_reshape(v, groups, target):
        """RESHAPE to ``groups`` (letters, or lists of letters multiplied) with the sizes taken at run time:
        for targets with more than one dynamic dimension (batch and sequence length both left open)."""
        pieces = []
        for g in groups:
            letters = g if isinstance(g, list) else [g]
            if _prod([dim[c] for c in letters]) is not None:
                pieces.append(ctx.i32([_prod([dim[c] for c in letters])]))
                continue
            size = runtime_dim(letters[0])
            for c in letters[1:]:
                size = ctx.emit("MUL", [size, runtime_dim(c)], {"fused_activation_function": "NONE"},
                                dtype=np.int32, shape=(1,))
            pieces.append(size)
        shape = ctx.emit("CONCATENATION", pieces, {"axis": 0, "fused_activation_function": "NONE"},
                         dtype=np.int32, shape=(len(pieces),))
        return ctx.emit("RESHAPE", [v, shape], dtype=v.dtype, shape=tuple(target))

    def arrange(v, term, order):
        perm = [term.index(c) for c in order]
        return v if perm == list(range(len(perm))) else ctx.transpose(v, perm)

    def group_reshape(v, groups):
        dims = [d for g in groups for d in ([dim[c] for c in g] if isinstance(g, list) else [dim[g]])]
        target = [(_prod([dim[c] for c in g]) if isinstance(g, list) else dim[g]) for g in groups]
        if list(v.shape) == target and len(dims) == len(target):
            return v
        t = _reshape_dims(target)
        return dynamic_reshape(v, groups, target) if t is None else ctx.reshape(v, t)

    M, K, N = _prod([dim[c] for c in a_free]), _prod([dim[c] for c in contract]), _prod([dim[c] for c in b_free])
    if not batch and b.is_const and a.dtype == np.float32 and K is not None and N is not None:
        # [a_free..., K] x [K, N] as FULLY_CONNECTED keeping the leading dims
        a2 = arrange(a, ta, a_free + contract)
        a2 = group_reshape(a2, a_free + [contract])
        w = arrange(b, tb, b_free + contract).const.reshape(N, K)
        y = fully_connected(ctx, a2, ctx.const(np.ascontiguousarray(w)), keep_num_dims=len(a_free) > 1,
                            out=None)
        y.shape = tuple(dim[c] for c in a_free) + (N,)
    else:
        a_order = batch + a_free + contract
        b_order = batch + b_free + contract  # adj_y: BATCH_MATMUL contracts the last dims
        a2 = group_reshape(arrange(a, ta, a_order), batch + [a_free, contract])
        b2 = group_reshape(arrange(b, tb, b_order), batch + [b_free, contract])
        shape = tuple(dim[c] for c in batch) + (M, N)
        y = ctx.emit("BATCH_MATMUL", [a2, b2], {"adj_x": False, "adj_y": True, "asymmetric_quantize_inputs": False},
                     dtype=a.dtype, shape=shape)
    produced = batch + a_free + b_free
    full = tuple(dim[c] for c in produced)
    if tuple(y.shape) != full:
        t = _reshape_dims(full)
        y = dynamic_reshape(y, produced, full) if t is None else ctx.reshape(y, t)
        y.shape = full
    return arrange(y, "".join(produced), list(out))
