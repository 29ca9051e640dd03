"""Constant folding of TensorFlow ops, evaluated by TensorFlow itself.

Every stateless ``tf.*`` op whose inputs are all constants is evaluated; the whole
foldable region of a function is evaluated in one graph run, so folding is exact
(TensorFlow's own kernels) and cheap. Shape queries (``Shape``, ``Size``, ``Rank``)
fold from static shapes even when their input is not constant.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module

_NEVER_FOLD = {
    "Placeholder", "ReadVariableOp", "VarHandleOp", "While", "StatelessWhile", "If", "StatelessIf",
    "PartitionedCall", "StatefulPartitionedCall", "RandomUniform", "RandomStandardNormal",
    "TensorListReserve", "TensorListFromTensor", "EmptyTensorList", "TensorListStack",
    "TensorListSetItem", "TensorListGetItem",
}
MAX_FOLDED_ELEMENTS = 1 << 24


def _fold_shape_queries(fn: Function) -> bool:
    changed = False
    kept = []
    for op in fn.ops:
        src = op.inputs[0] if op.inputs else None
        if op.kind in ("Shape", "Size", "Rank") and src is not None and src.shape is not None:
            dt = op.outputs[0].dtype
            val = None
            if op.kind == "Rank":
                val = np.array(len(src.shape), dt)
            elif src.static_shape:
                val = np.array(src.shape if op.kind == "Shape" else int(np.prod(src.shape)), dt)
            if val is not None:
                fn.replace_uses(op.outputs[0], fn.const(val, op.name))
                changed = True
                continue
        dims = _static_dims_sliced(op)
        if dims is not None:
            fn.replace_uses(op.outputs[0], fn.const(dims, op.name))
            changed = True
            continue
        kept.append(op)
    fn.ops = kept
    return changed


def _static_dims_sliced(op) -> np.ndarray | None:
    """``StridedSlice(Shape(x), ...)`` that picks only static dimensions of a partly known ``x`` (the number of
    steps of a [time, batch, features] input whose batch is unknown), as a constant; else None."""
    if op.kind != "StridedSlice" or op.dialect != "tf" or any(op.attrs.get(m, 0) for m in ("ellipsis_mask",
                                                                                          "new_axis_mask")):
        return None
    shape_op = op.inputs[0].producer
    if shape_op is None or shape_op.kind != "Shape" or shape_op.inputs[0].shape is None:
        return None
    if not all(v.is_const and v.const.shape == (1,) for v in op.inputs[1:4]):
        return None
    src = shape_op.inputs[0].shape
    begin, end, stride = (int(v.const[0]) for v in op.inputs[1:4])
    if stride == 0:
        return None
    picked = np.arange(len(src))[slice(None if op.attrs.get("begin_mask", 0) & 1 else begin,
                                       None if op.attrs.get("end_mask", 0) & 1 else end, stride)]
    if op.attrs.get("shrink_axis_mask", 0) & 1:
        if not -len(src) <= begin < len(src):
            return None
        picked = np.array(begin % len(src))
    dims = [src[i] for i in picked.reshape(-1)]
    if None in dims:
        return None
    return np.array(dims, op.outputs[0].dtype).reshape(picked.shape)


def _foldable(op, region_out: set) -> bool:
    return (
        op.dialect == "tf"
        and op.kind not in _NEVER_FOLD
        and not op.attrs.get("_stateful", True)
        and "_node_def" in op.attrs
        and all(v is not None and (v.is_const or v.uid in region_out) for v in op.inputs)
        and all(o.dtype not in ("resource", "variant") for o in op.outputs)
    )


def evaluate_ops(ops: list) -> dict[int, np.ndarray]:
    """Run ``ops`` (whose inputs are constants or earlier ops' outputs) in one TF graph."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2
    from tensorflow.python.framework import tensor_util

    gdef = graph_pb2.GraphDef()
    names: dict[int, str] = {}
    produced = {o.uid for op in ops for o in op.outputs}
    for k, op in enumerate(ops):
        for v in op.inputs:
            if v.uid in names or v.uid in produced:
                continue
            node = gdef.node.add(name=f"c{len(names)}", op="Const")
            proto = tensor_util.make_tensor_proto(v.const)
            node.attr["value"].CopyFrom(attr_value_pb2.AttrValue(tensor=proto))
            node.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=proto.dtype))
            names[v.uid] = node.name + ":0"
        src = op.attrs["_node_def"]
        node = node_def_pb2.NodeDef(name=f"n{k}", op=src.op)
        for key, val in src.attr.items():
            if not key.startswith("_"):
                node.attr[key].CopyFrom(val)
        node.input.extend(names[v.uid] for v in op.inputs)
        gdef.node.append(node)
        for o in op.outputs:
            names[o.uid] = f"n{k}:{o.index}"
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(gdef, name="")
    fetch_uids = [o.uid for op in ops for o in op.outputs]
    with tf.compat.v1.Session(graph=graph) as sess:
        results = sess.run([names[u] for u in fetch_uids])
    return {u: np.asarray(r) for u, r in zip(fetch_uids, results)}


SHARED_FROM = 1 << 20  # bytes: a constant this large is keyed by identity in the memo, not by its bytes


class FoldMemo:
    """What folding computed, by op and operands: the functions of one program (a prefill and a decode signature
    traced from one model) fold the same weights the same way, and share one result instead of holding a copy
    each (a transposed weight of a 1B-parameter decoder is gigabytes). A large operand is keyed by its identity
    (frozen variables are one array for every function) and held here so that its identity stays its own."""

    def __init__(self):
        self._results: dict = {}
        self._held: list = []

    def key(self, op, operands: list) -> tuple | None:
        node = op.attrs.get("_node_def")
        if node is None:
            return None
        attrs = tuple(sorted((k, v.SerializeToString(deterministic=True)) for k, v in node.attr.items()
                             if not k.startswith("_")))
        return (node.op, attrs, tuple(operands))

    def operand(self, value, produced: dict) -> tuple | None:
        if value.uid in produced:
            return produced[value.uid]
        arr = value.const
        if arr is None:
            return None
        if arr.nbytes >= SHARED_FROM:
            self._held.append(arr)
            return ("id", id(arr))
        return ("bytes", arr.dtype.str, arr.shape, arr.tobytes())

    def get(self, key):
        return self._results.get(key)

    def put(self, key, arrays: list) -> None:
        if key is not None and any(a.nbytes >= SHARED_FROM for a in arrays):
            self._results[key] = arrays


def _recall(region: list, memo: FoldMemo) -> tuple[dict, dict]:
    """The region's results the memo holds ({uid: array}) and each op's key ({id(op): key}), in program order
    (an op's key names the keys of the region ops it reads)."""
    produced: dict[int, tuple] = {}
    known: dict[int, np.ndarray] = {}
    keys: dict[int, tuple] = {}
    for op in region:
        operands = [memo.operand(v, produced) for v in op.inputs]
        key = None if None in operands else memo.key(op, operands)
        if key is None:
            continue
        keys[id(op)] = key
        for o in op.outputs:
            produced[o.uid] = ("out", key, o.index)
        hit = memo.get(key)
        if hit is not None:
            known.update((o.uid, a) for o, a in zip(op.outputs, hit))
    return known, keys


def fold_function(fn: Function, memo: FoldMemo | None = None) -> int:
    """Fold one function; returns how many ops were folded. ``memo``: results shared with the program's other
    functions (:class:`FoldMemo`)."""
    folded_total = 0
    while True:
        _fold_shape_queries(fn)
        region, region_out = [], set()
        for op in fn.ops:
            if _foldable(op, region_out):
                region.append(op)
                region_out.update(o.uid for o in op.outputs)
        if not region:
            return folded_total
        known, keys = _recall(region, memo) if memo is not None else ({}, {})
        try:
            values = dict(known)
            rest = [op for op in region if not all(o.uid in known for o in op.outputs)]
            if rest:
                bound = [v for op in rest for v in op.inputs if v.uid in known and not v.is_const]
                for v in bound:  # results the memo gave, bound as constants just for the run
                    v.const = known[v.uid]
                try:
                    values.update(evaluate_ops(rest))
                finally:
                    for v in bound:
                        v.const = None
        except Exception:
            # fall back to op-by-op so that one odd op does not block the rest
            values = {}
            for op in region:
                pending = [v for v in op.inputs if not v.is_const]
                if not all(v.uid in values for v in pending):
                    continue
                for v in pending:  # inputs folded earlier in this region, bound just for the run
                    v.const = values[v.uid]
                try:
                    values.update(evaluate_ops([op]))
                except Exception:
                    continue
                finally:
                    for v in pending:
                        v.const = None
        done = set()
        for op in region:
            if not all(o.uid in values for o in op.outputs):
                continue
            if any(values[o.uid].size > MAX_FOLDED_ELEMENTS for o in op.outputs):
                continue
            if memo is not None and id(op) in keys:
                memo.put(keys[id(op)], [values[o.uid] for o in op.outputs])
            for o in op.outputs:
                arr = values[o.uid]
                if arr.dtype == object:
                    arr = arr.astype(bytes)
                o.const = arr
                o.shape = tuple(arr.shape)
            done.add(id(op))
        if not done:
            return folded_total
        # folded outputs became constants on their values; drop the producing ops
        for op in fn.ops:
            if id(op) in done:
                for o in op.outputs:
                    o.producer = None
        fn.ops = [op for op in fn.ops if id(op) not in done]
        folded_total += len(done)


def fold_tf(module: Module) -> int:
    """Fold every function; functions of one program share a :class:`FoldMemo` (a single function has nothing
    to share: no keys computed for it)."""
    memo = FoldMemo() if len(module.functions) > 1 else None
    return sum(fold_function(fn, memo) for fn in module.functions.values())
