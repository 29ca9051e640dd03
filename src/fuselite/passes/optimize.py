"""TFLite-level optimizations: fold weights transforms, fuse bias/batch-norm/activations.

Every rewrite here keeps numerics exact up to float rounding of folded constants.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module, Op
from fuselite.passes.bidirectional import cancel_reverse_pairs, merge_bidirectional_pairs
from fuselite.passes.fold_tfl import is_pinned

_WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}
# LiteRT's float kernels apply only these fused activations (TANH/SIGN_BIT are not honoured).
_ACTIVATIONS = {"RELU": "RELU", "RELU6": "RELU6", "RELU_N1_TO_1": "RELU_N1_TO_1"}
_ACT_HOSTS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV",
              "CONCATENATION", "MAX_POOL_2D", "AVERAGE_POOL_2D", "TRANSPOSE_CONV"}


def _single_user(users, v) -> Op | None:
    us = users.get(v.uid, [])
    return us[0] if len(us) == 1 else None


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


def _absorb(fn: Function, op: Op, kind: str, vec: np.ndarray) -> bool:
    """Fold ``out <kind> vec`` (per output channel) into ``op``'s weights and bias."""
    ch = vec.shape[0]
    bi = _bias_index(op)
    bias_v = op.inputs[bi] if len(op.inputs) > bi else None
    if bias_v is not None and not bias_v.is_const:
        return False
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
    return True


def _channel_operand(nxt: Op, v) -> object | None:
    """The other operand of a foldable ADD/MUL/SUB consuming ``v`` (None if not foldable)."""
    if nxt is None or nxt.kind not in ("ADD", "MUL", "SUB") or len(nxt.inputs) != 2:
        return None
    if nxt.attrs.get("fused_activation_function", "NONE") != "NONE":
        return None
    if nxt.kind == "SUB" and nxt.inputs[0] is not v:
        return None
    other = nxt.inputs[1] if nxt.inputs[0] is v else nxt.inputs[0]
    return None if other is v else other


def _split_last_dim(reshape: Op, src) -> tuple[int, ...] | None:
    """(H, D) if ``reshape`` only splits the last dim of ``src`` into H x D."""
    a, b = src.shape, reshape.outputs[0].shape
    if a is None or b is None or len(b) < 2 or len(b) != len(a) + 1 or a[:-1] != b[:-2]:
        return None
    if None in b[-2:] or a[-1] != b[-2] * b[-1]:
        return None
    return tuple(b[-2:])


def _fold_into_weighted(fn: Function, module_outputs: set) -> bool:
    """MUL/ADD/SUB by a per-channel constant after a conv/FC folds into its weights/bias.

    Also through a RESHAPE that splits the output channels (attention heads):
    ``RESHAPE(FC(x)) + b[H, D]`` becomes ``RESHAPE(FC(x) with bias b.reshape(H*D))``.
    """
    users = fn.users()
    for op in fn.ops:
        if op.kind not in _WEIGHTED or op.attrs.get("fused_activation_function", "NONE") != "NONE":
            continue
        if not op.inputs[1].is_const or op.outputs[0].uid in module_outputs:
            continue
        out = op.outputs[0]
        ch = _out_channels(op)
        nxt = _single_user(users, out)
        other = _channel_operand(nxt, out)
        if other is not None and (other.rank or 0) <= (out.rank or 0):
            vec = _per_channel(other, ch)
            if vec is not None and _absorb(fn, op, nxt.kind, vec):
                out.shape = nxt.outputs[0].shape
                fn.replace_uses(nxt.outputs[0], out)
                fn.ops.remove(nxt)
                return True
        if nxt is None or nxt.kind != "RESHAPE" or nxt.outputs[0].uid in module_outputs:
            continue
        heads = _split_last_dim(nxt, out)
        after = _single_user(users, nxt.outputs[0])
        other = _channel_operand(after, nxt.outputs[0])
        if heads is None or other is None or not other.is_const or other.rank > 2:
            continue
        try:
            vec = np.broadcast_to(other.const, heads).reshape(ch)
        except ValueError:
            continue
        if _absorb(fn, op, after.kind, vec.astype(other.const.dtype)):
            fn.replace_uses(after.outputs[0], nxt.outputs[0])
            fn.ops.remove(after)
            return True
    return False


def _fuse_activations(fn: Function, module_outputs: set) -> bool:
    users = fn.users()
    changed = False
    for op in list(fn.ops):
        act = _ACTIVATIONS.get(op.kind)
        if act is None:
            continue
        src = op.inputs[0].producer
        if src is None or src not in fn.ops or src.kind not in _ACT_HOSTS:
            continue
        if src.attrs.get("fused_activation_function", "NONE") != "NONE" or "fused_activation_function" not in src.attrs:
            continue
        if _single_user(users, src.outputs[0]) is not op or src.outputs[0].uid in module_outputs:
            continue
        if not isinstance(src.outputs[0].dtype, str) and np.dtype(src.outputs[0].dtype) != np.float32:
            continue
        src.attrs["fused_activation_function"] = act
        fn.replace_uses(op.outputs[0], src.outputs[0])
        fn.ops.remove(op)
        changed = True
        users = fn.users()
    return changed


def _merge_reshape_fc(fn: Function) -> bool:
    """RESHAPE(x -> [M, K]) ; FULLY_CONNECTED ; RESHAPE(-> x.shape[:-1] + [N]) => FC keep_num_dims."""
    users = fn.users()
    for fc in fn.ops:
        if fc.kind != "FULLY_CONNECTED" or fc.attrs.get("keep_num_dims"):
            continue
        r1 = fc.inputs[0].producer
        if r1 is None or r1.kind != "RESHAPE" or r1 not in fn.ops:
            continue
        x = r1.inputs[0]
        r2 = _single_user(users, fc.outputs[0])
        if r2 is None or r2.kind != "RESHAPE" or x.shape is None or x.rank < 3:
            continue
        n, k = fc.inputs[1].shape
        if x.shape[-1] != k or r1.outputs[0].rank != 2 or r1.outputs[0].shape[-1] not in (k, None):
            continue
        if tuple(r2.outputs[0].shape or ()) != tuple(x.shape[:-1]) + (n,):
            continue
        fc.inputs[0] = x
        fc.attrs["keep_num_dims"] = True
        fc.outputs[0].shape = r2.outputs[0].shape
        fn.replace_uses(r2.outputs[0], fc.outputs[0])
        fn.ops.remove(r2)
        return True
    return False


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


def _merge_transposes(fn: Function) -> bool:
    """TRANSPOSE(TRANSPOSE(x, p1), p2) -> TRANSPOSE(x, p1[p2]) (often the identity)."""
    for op in fn.ops:
        if op.kind != "TRANSPOSE" or not op.inputs[1].is_const or is_pinned(op):
            continue
        inner = op.inputs[0].producer
        if inner is None or inner.kind != "TRANSPOSE" or inner not in fn.ops or not inner.inputs[1].is_const:
            continue
        p1, p2 = inner.inputs[1].const.reshape(-1), op.inputs[1].const.reshape(-1)
        op.inputs = [inner.inputs[0], fn.const(p1[p2].astype(np.int32), f"{op.name}/perm")]
        return True
    return False


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


def _drop_noops(fn: Function, module_outputs: set) -> bool:
    changed = False
    for op in list(fn.ops):
        x = op.inputs[0] if op.inputs else None
        if is_pinned(op):
            continue
        noop = False
        if op.kind == "RESHAPE" and x is not None and x.static_shape and x.shape == op.outputs[0].shape:
            noop = True
        elif op.kind == "TRANSPOSE" and op.inputs[1].is_const and list(op.inputs[1].const) == list(
                range(op.inputs[1].const.size)):
            noop = True
        if noop and op.outputs[0].uid not in module_outputs:
            fn.replace_uses(op.outputs[0], x)
            fn.ops.remove(op)
            changed = True
    return changed


def _same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _fuse_pad_into_conv(fn: Function) -> bool:
    """PAD with zeros exactly as SAME would, then a VALID conv => the conv with SAME padding."""
    users = fn.users()
    for conv in fn.ops:
        if conv.kind not in ("CONV_2D", "DEPTHWISE_CONV_2D") or conv.attrs.get("padding") != "VALID":
            continue
        pad = conv.inputs[0].producer
        if pad is None or pad.kind != "PAD" or pad not in fn.ops or not pad.inputs[1].is_const:
            continue
        if len(users.get(pad.outputs[0].uid, [])) != 1:
            continue
        x = pad.inputs[0]
        p = pad.inputs[1].const
        if x.shape is None or len(x.shape) != 4 or x.shape[1] is None or x.shape[2] is None:
            continue
        if p.shape != (4, 2) or p[0].any() or p[3].any():
            continue
        kh, kw = conv.inputs[1].const.shape[1:3] if conv.inputs[1].is_const else (None, None)
        if kh is None:
            continue
        want_h = _same_pads(x.shape[1], kh, conv.attrs["stride_h"], conv.attrs.get("dilation_h_factor", 1))
        want_w = _same_pads(x.shape[2], kw, conv.attrs["stride_w"], conv.attrs.get("dilation_w_factor", 1))
        if tuple(p[1]) != want_h or tuple(p[2]) != want_w:
            continue
        conv.inputs[0] = x
        conv.attrs["padding"] = "SAME"
        fn.ops.remove(pad)
        return True
    return False


def optimize_function(fn: Function) -> None:
    from fuselite.passes.dce import dce_function
    from fuselite.passes.fold_tfl import fold_tfl_function

    outs = {v.uid for v in fn.outputs}
    for _ in range(1000):
        fold_tfl_function(fn)
        dce_function(fn)
        if _static_reshapes(fn) or _merge_transposes(fn) or _drop_noops(fn, outs):
            continue
        if _cse(fn) or merge_bidirectional_pairs(fn) or cancel_reverse_pairs(fn):
            continue
        if _merge_reshape_fc(fn):
            dce_function(fn)
            continue
        if _fuse_pad_into_conv(fn) or _fold_into_weighted(fn, outs):
            continue
        if _fuse_activations(fn, outs):
            continue
        break


def _drop_zero_fc_bias(fn: Function) -> None:
    """FULLY_CONNECTED's bias is optional: an all-zero one is left out (smaller, same numbers)."""
    for op in fn.ops:
        if op.kind == "FULLY_CONNECTED" and len(op.inputs) > 2:
            b = op.inputs[2]
            if b is not None and b.is_const and not b.const.any():
                op.inputs[2] = None


def optimize(module: Module) -> None:
    for fn in module.functions.values():
        optimize_function(fn)
        _drop_zero_fc_bias(fn)
