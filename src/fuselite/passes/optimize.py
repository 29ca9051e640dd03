"""TFLite-level optimizations: fold weights transforms, fuse bias/batch-norm/activations.

The peepholes are declared rules (pattern, condition, replacement; see
``passes/rewrite.py``) in the rule sets ``merge_transposes``, ``drop_noops`` (identity reshapes and
transposes, x + 0, x * 1),
``merge_reshape_fc``, ``pad_into_conv``, ``fold_into_weighted``, ``fuse_activations`` and
``drop_zero_fc_bias``. :func:`optimize_function` runs them between the plain passes
(constant folding, DCE, static reshapes, CSE, bidirectional merging) until nothing changes.
Every rewrite here keeps numerics exact up to float rounding of folded constants.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.bidirectional import cancel_reverse_pairs, merge_bidirectional_pairs
from fuselite.passes.fold_tfl import is_pinned
from fuselite.passes.rewrite import TFL, Const, Match, OpPattern, RewriteCtx, Var, rewrite, rule

_WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}
# LiteRT's float kernels apply only these fused activations (TANH/SIGN_BIT are not honoured).
_ACTIVATIONS = {"RELU": "RELU", "RELU6": "RELU6", "RELU_N1_TO_1": "RELU_N1_TO_1"}
# Ops whose LiteRT kernels apply their fused_activation_function (each checked on LiteRT in
# tests/test_fused_activations.py). Not CONCATENATION: concatenation.cc's Prepare requires
# kTfLiteActNone (a NASNetMobile with it folded failed to prepare).
_ACT_HOSTS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV",
              "MAX_POOL_2D", "AVERAGE_POOL_2D", "TRANSPOSE_CONV"}


def _per_channel(v, channels: int) -> np.ndarray | None:
    """The constant as a [channels] vector if it broadcasts only along the last axis."""
    if v is None or not v.is_const:
        return None
    c = v.const
    if c.size == 1:
        return np.full(channels, c.reshape(()), dtype=c.dtype)
    if c.shape[-1:] == (channels,) and c.size == channels:
        return c.reshape(channels)
    return None


def _out_channels(op: Op) -> int:
    w = op.inputs[1].const
    return w.shape[_WEIGHTED[op.kind]]


def _bias_index(op: Op) -> int:
    return 3 if op.kind == "TRANSPOSE_CONV" else 2


def _bias(op: Op) -> Value | None:
    bi = _bias_index(op)
    return op.inputs[bi] if len(op.inputs) > bi else None


def _absorb(fn: Function, op: Op, kind: str, vec: np.ndarray) -> None:
    """Fold ``out <kind> vec`` (per output channel) into ``op``'s weights and (constant) bias."""
    ch = vec.shape[0]
    bi = _bias_index(op)
    bias_v = _bias(op)
    bias = bias_v.const if bias_v is not None else np.zeros(ch, vec.dtype)
    if kind == "MUL":
        w = op.inputs[1].const
        shape = [1] * w.ndim
        shape[_WEIGHTED[op.kind]] = ch
        op.inputs[1] = fn.const((w * vec.reshape(shape)).astype(w.dtype), op.inputs[1].name)
        bias = bias * vec
    else:
        bias = bias + vec if kind == "ADD" else bias - vec
    new_bias = fn.const(bias.astype(op.outputs[0].dtype), f"{op.name}/bias")
    if len(op.inputs) > bi:
        op.inputs[bi] = new_bias
    else:
        op.inputs.append(new_bias)


def _split_last_dim(reshape: Op, src) -> tuple[int, ...] | None:
    """(H, D) if ``reshape`` only splits the last dim of ``src`` into H x D."""
    a, b = src.shape, reshape.outputs[0].shape
    if a is None or b is None or len(b) < 2 or len(b) != len(a) + 1 or a[:-1] != b[:-2]:
        return None
    if None in b[-2:] or a[-1] != b[-2] * b[-1]:
        return None
    return tuple(b[-2:])


# -- bias, batch-norm and activation folding ---------------------------------------------------

def _no_activation(op: Op) -> bool:
    return op.attrs.get("fused_activation_function", "NONE") == "NONE"


LAYER = TFL[tuple(_WEIGHTED)](Var(), Const("w"), ..., name="layer", single_use=True, where=_no_activation)
HEADS = TFL.RESHAPE(LAYER, ..., name="reshape", single_use=True)


def _channel_op(below: OpPattern) -> OpPattern:
    """``below`` plus, times or minus a constant ``c`` (SUB only as ``below - c``), captured as ``op``."""
    return TFL["ADD", "MUL", "SUB"](below, Const("c"), commutative=("ADD", "MUL"), name="op",
                                    where=_no_activation)


def _foldable(ctx: RewriteCtx, m: Match) -> bool:
    """The layer's result is not an output and its bias (if any) a constant."""
    bias = _bias(m.layer)
    return not ctx.is_output(m.layer.outputs[0]) and (bias is None or bias.is_const)


def _channel_vector(m: Match) -> np.ndarray | None:
    """The constant as a [channels] vector, if it is one (or a scalar) of no higher rank than the layer."""
    c, out = m.c, m.layer.outputs[0]
    return _per_channel(c, _out_channels(m.layer)) if (c.rank or 0) <= (out.rank or 0) else None


@rule("fold_into_weighted", _channel_op(LAYER), anchor="layer",
      condition=lambda ctx, m: _foldable(ctx, m) and _channel_vector(m) is not None)
def fold_channel_op(ctx: RewriteCtx, m: Match) -> None:
    """A per-channel constant ADD/MUL/SUB after a conv/FC folds into its weights and bias."""
    _absorb(ctx.fn, m.layer, m.op.kind, _channel_vector(m))
    out = m.layer.outputs[0]
    out.shape = m.op.outputs[0].shape
    ctx.replace(m.op, out)


def _head_vector(m: Match) -> np.ndarray | None:
    """The constant as a vector over the layer's channels, if it broadcasts to [heads, depth]."""
    heads, c = _split_last_dim(m.reshape, m.layer.outputs[0]), m.c.const
    if heads is None or c.ndim > 2 or heads[0] * heads[1] != _out_channels(m.layer):
        return None
    if any(d not in (1, h) for d, h in zip(c.shape[::-1], heads[::-1])):
        return None
    return np.broadcast_to(c, heads).reshape(-1).astype(c.dtype)


@rule("fold_into_weighted", _channel_op(HEADS), anchor="layer",
      condition=lambda ctx, m: _foldable(ctx, m) and not ctx.is_output(m.reshape.outputs[0])
      and _head_vector(m) is not None)
def fold_channel_op_through_heads(ctx: RewriteCtx, m: Match) -> None:
    """``RESHAPE(FC(x)) + b[H, D]`` (attention heads) folds b.reshape(H*D) into the FC's bias."""
    _absorb(ctx.fn, m.layer, m.op.kind, _head_vector(m))
    ctx.replace(m.op, m.reshape.outputs[0])


def _empty_slot(op: Op) -> bool:
    return op.attrs.get("fused_activation_function") == "NONE"


def _float_host(ctx: RewriteCtx, m: Match) -> bool:
    """The host's result is no output, and it computes float32."""
    out = m.host.outputs[0]
    return not ctx.is_output(out) and (isinstance(out.dtype, str) or np.dtype(out.dtype) == np.float32)


HOST = TFL[tuple(_ACT_HOSTS)](..., name="host", single_use=True, where=_empty_slot)


@rule("fuse_activations", TFL[tuple(_ACTIVATIONS)](HOST, name="act"), condition=_float_host)
def fuse_activation(ctx: RewriteCtx, m: Match) -> None:
    """RELU / RELU6 / RELU_N1_TO_1 after an op with a fused-activation slot goes into the slot."""
    m.host.attrs["fused_activation_function"] = _ACTIVATIONS[m.act.kind]
    ctx.replace(m.act, m.host.outputs[0])


# -- shape plumbing --------------------------------------------------------------------------

def _reshapes_around_fc(ctx: RewriteCtx, m: Match) -> bool:
    """x [..., K] -> [M, K] -> FC -> [M, N] -> x.shape[:-1] + [N]."""
    x, r1, r2 = m.x, m.r1, m.r2
    if x.shape is None or x.rank < 3:
        return False
    n, k = m.w.shape
    if x.shape[-1] != k or r1.outputs[0].rank != 2 or r1.outputs[0].shape[-1] not in (k, None):
        return False
    return tuple(r2.outputs[0].shape or ()) == tuple(x.shape[:-1]) + (n,)


FLAT_FC = TFL.FULLY_CONNECTED(TFL.RESHAPE(Var("x"), ..., name="r1"), Var("w"), ..., name="fc", single_use=True,
                              where=lambda fc: not fc.attrs.get("keep_num_dims"))


@rule("merge_reshape_fc", TFL.RESHAPE(FLAT_FC, ..., name="r2"), anchor="fc", condition=_reshapes_around_fc)
def merge_reshape_fc(ctx: RewriteCtx, m: Match) -> None:
    """RESHAPE(x -> [M, K]) ; FULLY_CONNECTED ; RESHAPE(-> x.shape[:-1] + [N]) => FC keep_num_dims."""
    m.fc.inputs[0] = m.x
    m.fc.attrs["keep_num_dims"] = True
    m.fc.outputs[0].shape = m.r2.outputs[0].shape
    ctx.replace(m.r2, m.fc.outputs[0])


def _partial_values(fn: Function) -> dict[int, list]:
    """Element-wise known values of small int tensors computed from shapes (None = unknown).

    ``SHAPE(x)`` of a (None, 16, 32) tensor is [None, 16, 32]; GATHER, STRIDED_SLICE
    (plain 1-D), PACK, CONCATENATION and REDUCE_PROD propagate what is known.
    """
    vals: dict[int, list] = {}

    def get(v):
        if v is None:
            return None
        if v.is_const and v.const.dtype.kind in "iu" and v.const.ndim <= 1:
            return [int(x) for x in v.const.reshape(-1)]
        return vals.get(v.uid)

    for op in fn.ops:
        k, out = op.kind, op.outputs[0] if op.outputs else None
        res = None
        if k == "SHAPE" and op.inputs[0].shape is not None:
            res = list(op.inputs[0].shape)
        elif k == "GATHER" and op.attrs.get("axis", 0) == 0:
            src, idx = get(op.inputs[0]), get(op.inputs[1])
            if src is not None and idx is not None and all(-len(src) <= i < len(src) for i in idx):
                res = [src[i] for i in idx]
        elif k in ("PACK", "CONCATENATION") and op.attrs.get("axis", 0) == 0:
            parts = [get(v) for v in op.inputs]
            if all(p is not None for p in parts):
                res = [x for p in parts for x in p]
        elif k == "REDUCE_PROD":
            src = get(op.inputs[0])
            if src is not None and None not in src:
                res = [int(np.prod(src))]
        elif k == "STRIDED_SLICE" and not any(op.attrs.get(m) for m in ("ellipsis_mask", "new_axis_mask")):
            src, b, e, st = (get(v) for v in op.inputs)
            if src is not None and b is not None and e is not None and st is not None and len(b) == 1:
                begin = 0 if op.attrs.get("begin_mask") else b[0]
                end = len(src) if op.attrs.get("end_mask") else e[0]
                res = src[begin:end:st[0]] if not op.attrs.get("shrink_axis_mask") else [src[b[0]]]
        if res is not None and out is not None:
            vals[out.uid] = res
    return vals


def _static_reshapes(fn: Function) -> bool:
    """RESHAPE to a runtime-computed shape that is known but for one dim -> constant shape."""
    changed = False
    partial = None
    for op in fn.ops:
        if op.kind != "RESHAPE" or len(op.inputs) < 2 or op.inputs[1] is None or op.inputs[1].is_const:
            continue
        if is_pinned(op):
            continue
        out = op.outputs[0].shape
        if out is None or sum(d is None for d in out) > 1:
            if partial is None:
                partial = _partial_values(fn)
            known = partial.get(op.inputs[1].uid)
            if known is None:
                continue
            known = [None if d is None or d < 0 else d for d in known]  # -1 in a shape: inferred
            if sum(d is None for d in known) > 1:
                continue
            out = tuple(known)
        op.inputs[1] = fn.const(np.array([-1 if d is None else d for d in out], np.int32), f"{op.name}/shape")
        op.outputs[0].shape = tuple(out)
        changed = True
    return changed


def _unpinned(op: Op) -> bool:
    return not is_pinned(op)


@rule("merge_transposes", TFL.TRANSPOSE(TFL.TRANSPOSE(Var("x"), Const("p1"), name="inner"), Const("p2"),
                                     name="outer", where=_unpinned))
def merge_transposes(ctx: RewriteCtx, m: Match) -> None:
    """TRANSPOSE(TRANSPOSE(x, p1), p2) -> TRANSPOSE(x, p1[p2]) (often the identity)."""
    p1, p2 = m.p1.const.reshape(-1), m.p2.const.reshape(-1)
    m.outer.inputs = [m.x, ctx.const(p1[p2].astype(np.int32), f"{m.outer.name}/perm")]


def _swaps_last_two(ctx: RewriteCtx, m: Match) -> bool:
    """``m.t`` transposes only its last two dimensions, of a tensor computed at run time."""
    perm = [int(d) for d in m.perm.const.reshape(-1)]
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2] and not m.t.inputs[0].is_const


@rule("merge_transposes", TFL.BATCH_MATMUL(Var("a"), TFL.TRANSPOSE(Var("b"), Const("perm"), name="t",
                                                                   where=_unpinned), name="mm", where=_unpinned),
      condition=_swaps_last_two)
def transpose_into_adj_y(ctx: RewriteCtx, m: Match) -> None:
    """BATCH_MATMUL(a, TRANSPOSE(b) of its last two dims) -> BATCH_MATMUL(a, b, adj_y flipped): no copy of ``b``
    (a KV cache's values laid out [heads, size, length], read as [heads, length, size])."""
    m.mm.inputs[1] = m.b
    m.mm.attrs["adj_y"] = not m.mm.attrs.get("adj_y", False)


@rule("merge_transposes", TFL.BATCH_MATMUL(TFL.TRANSPOSE(Var("a"), Const("perm"), name="t", where=_unpinned),
                                           Var("b"), name="mm", where=_unpinned),
      condition=_swaps_last_two)
def transpose_into_adj_x(ctx: RewriteCtx, m: Match) -> None:
    """BATCH_MATMUL(TRANSPOSE(a) of its last two dims, b) -> BATCH_MATMUL(a, b, adj_x flipped)."""
    m.mm.inputs[0] = m.a
    m.mm.attrs["adj_x"] = not m.mm.attrs.get("adj_x", False)


def _cse_key(op):
    if is_pinned(op) or op.kind in ("WHILE", "IF", "CUSTOM") or op.outputs and any(
            o.meta.get("is_variable") for o in op.outputs):
        return None
    ins = []
    for v in op.inputs:
        if v is None:
            ins.append(None)
        elif v.is_const and v.const.size <= 64:
            ins.append(("c", v.const.dtype.str, v.const.shape, v.const.tobytes()))
        else:
            ins.append(v.uid)
    attrs = tuple(sorted((k, repr(v)) for k, v in op.attrs.items() if not k.startswith("_")))
    return (op.kind, tuple(ins), attrs)


def _cse(fn: Function) -> bool:
    """Identical ops on identical inputs (e.g. two transposes of one tensor) are computed once."""
    seen: dict = {}
    changed = False
    for op in list(fn.ops):
        key = _cse_key(op)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = op
            continue
        for old, new in zip(op.outputs, first.outputs):
            fn.replace_uses(old, new)
        fn.ops.remove(op)
        changed = True
    return changed


def _not_output(ctx: RewriteCtx, m: Match) -> bool:
    return not ctx.is_output(m.op.outputs[0])


def _keeps_static_shape(op: Op) -> bool:
    x = op.inputs[0]
    return not is_pinned(op) and x is not None and x.static_shape and x.shape == op.outputs[0].shape


@rule("drop_noops", TFL.RESHAPE(Var("x"), ..., name="op", where=_keeps_static_shape), condition=_not_output)
def drop_noop_reshape(ctx: RewriteCtx, m: Match) -> None:
    """RESHAPE of a static shape to that same shape goes."""
    ctx.replace(m.op, m.x)


def _may_go(ctx: RewriteCtx, m: Match) -> bool:
    """``m.op`` may be dropped for its operand ``m.x``: it is no output, or its operand, an op's result that is no
    output itself, can take its place as one (a KV cache given back as its DYNAMIC_UPDATE_SLICE's result)."""
    return _not_output(ctx, m) or (m.x.producer is not None and not ctx.fn.is_output(m.x)
                                   and isinstance(ctx.keep, set))


@rule("drop_noops", TFL.TRANSPOSE(Var("x"), Const("perm"), name="op", where=_unpinned),
      condition=lambda ctx, m: _may_go(ctx, m) and list(m.perm.const) == list(range(m.perm.const.size)))
def drop_identity_transpose(ctx: RewriteCtx, m: Match) -> None:
    """TRANSPOSE by the identity permutation goes (an output's: its operand is the output)."""
    if ctx.is_output(m.op.outputs[0]):
        ctx.keep.add(m.x.uid)
    ctx.replace(m.op, m.x)


def _identity_operand(ctx: RewriteCtx, m: Match) -> bool:
    """``op(x, c)`` is ``x``: ``c`` is all 0 (ADD, SUB) or all 1 (MUL), the op has no fused activation, ``x`` is
    float32, and broadcasting ``c`` against it cannot make the result larger (each of ``c``'s dims is 1 or
    ``x``'s known size there)."""
    op, x, c = m.op, m.x, m.c.const
    if is_pinned(op) or ctx.is_output(op.outputs[0]) or op.attrs.get("fused_activation_function", "NONE") != "NONE":
        return False
    if x.dtype != np.float32 or x.quant is not None or x.shape is None or c.ndim > len(x.shape):
        return False
    if any(cd != 1 and cd != xd for cd, xd in zip(reversed(c.shape), reversed(x.shape))):
        return False
    return c.size > 0 and bool(np.all(c == (1.0 if op.kind == "MUL" else 0.0)))


@rule("drop_noops", TFL["ADD", "SUB", "MUL"](Var("x"), Const("c"), name="op"), condition=_identity_operand)
def drop_identity_operand(ctx: RewriteCtx, m: Match) -> None:
    """x + 0, x - 0 and x * 1 go (a batch norm's offset with zero beta and mean, as in freshly initialised
    models)."""
    ctx.replace(m.op, m.x)


@rule("drop_noops", TFL["ADD", "MUL"](Const("c"), Var("x"), name="op"), condition=_identity_operand)
def drop_identity_first_operand(ctx: RewriteCtx, m: Match) -> None:
    """0 + x and 1 * x go."""
    ctx.replace(m.op, m.x)


def _same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _pads_as_same(ctx: RewriteCtx, m: Match) -> bool:
    """Zero pads of H and W exactly as SAME would add them for this conv."""
    x, p, conv = m.x, m.pads.const, m.conv
    if x.shape is None or len(x.shape) != 4 or None in x.shape[1:3]:
        return False
    if p.shape != (4, 2) or p[0].any() or p[3].any():
        return False
    kh, kw = m.w.const.shape[1:3]
    want_h = _same_pads(x.shape[1], kh, conv.attrs["stride_h"], conv.attrs.get("dilation_h_factor", 1))
    want_w = _same_pads(x.shape[2], kw, conv.attrs["stride_w"], conv.attrs.get("dilation_w_factor", 1))
    return tuple(p[1]) == want_h and tuple(p[2]) == want_w


PADDED = TFL.PAD(Var("x"), Const("pads"), name="pad", single_use=True)


@rule("pad_into_conv", TFL["CONV_2D", "DEPTHWISE_CONV_2D"](PADDED, Const("w"), ..., name="conv",
                                                           where=lambda conv: conv.attrs.get("padding") == "VALID"),
      condition=_pads_as_same)
def fold_same_pad_into_conv(ctx: RewriteCtx, m: Match) -> None:
    """PAD with zeros exactly as SAME would, then a VALID conv => the conv with SAME padding."""
    m.conv.inputs[0] = m.x
    m.conv.attrs["padding"] = "SAME"
    ctx.remove(m.pad)


def optimize_function(fn: Function) -> None:
    """Rounds of folding, DCE and the first pass or rule set that changes something, until none does."""
    from fuselite.passes.dce import dce_function
    from fuselite.passes.fold_tfl import fold_tfl_function
    from fuselite.passes.grouped_attention import grouped_matmuls
    from fuselite.passes.update_layout import updates_in_outer_layout

    outs = {v.uid for v in fn.outputs}
    for _ in range(1000):
        fold_tfl_function(fn)
        dce_function(fn)
        if _static_reshapes(fn) or grouped_matmuls(fn) or updates_in_outer_layout(fn) \
                or rewrite(fn, "merge_transposes", first_only=True) \
                or rewrite(fn, "drop_noops", keep=outs):
            continue
        if _cse(fn) or merge_bidirectional_pairs(fn) or cancel_reverse_pairs(fn):
            continue
        if rewrite(fn, "merge_reshape_fc", first_only=True):
            dce_function(fn)
            continue
        if rewrite(fn, "pad_into_conv", first_only=True) \
                or rewrite(fn, "fold_into_weighted", keep=outs, first_only=True):
            continue
        if rewrite(fn, "fuse_activations", keep=outs):
            continue
        break


@rule("drop_zero_fc_bias", TFL.FULLY_CONNECTED(Var(), Var(), Const("bias"), ..., name="fc"),
      condition=lambda ctx, m: not m.bias.const.any())
def drop_zero_fc_bias(ctx: RewriteCtx, m: Match) -> None:
    """FULLY_CONNECTED's bias is optional: an all-zero one is left out (smaller, same numbers)."""
    m.fc.inputs[2] = None


def optimize(module: Module) -> None:
    for fn in module.functions.values():
        optimize_function(fn)
        rewrite(fn, "drop_zero_fc_bias")
