"""Constant folding of TensorFlow ops, evaluated by TensorFlow itself.

Every stateless ``tf.*`` op whose inputs are all constants is evaluated; the whole
foldable region of a function is evaluated in one graph run, so folding is exact
(TensorFlow's own kernels) and cheap. Shape queries (``Shape``, ``Size``, ``Rank``)
fold from static shapes even when their input is not constant.

Folding runs no op that touches files, the network, the environment or the clock (``side_effects.py``): one whose
operands are all constants is an error naming it. And it allocates within a budget (``fold_memory_budget``; by
default :func:`default_fold_budget`): before a region runs, each result's size is computed from its static shape
(TensorFlow's shape inference on the constants where the IR's is unknown); a result past the budget is an error
naming the op, the size and the option. A result whose size is not known before running (a data-dependent shape,
a string an op makes longer than its operands' strings) is left unfolded, except for ops whose results never hold
more elements than their operands (:data:`BOUNDED_BY_OPERANDS`).
"""

from __future__ import annotations

import math

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Function, Module
from fuselite.passes.side_effects import outside_effect, side_effect_error

_NEVER_FOLD = {
    "Placeholder", "ReadVariableOp", "VarHandleOp", "While", "StatelessWhile", "If", "StatelessIf",
    "PartitionedCall", "StatefulPartitionedCall", "RandomUniform", "RandomStandardNormal",
    "TensorListReserve", "TensorListFromTensor", "EmptyTensorList", "TensorListStack",
    "TensorListSetItem", "TensorListGetItem",
}
MAX_FOLDED_ELEMENTS = 1 << 24
BUDGET_FLOOR = 256 << 20  # bytes: the default fold memory budget is at least this ...
BUDGET_PER_WEIGHT_BYTE = 4  # ... and at least this many times the bytes of the model's constants
STRING_ELEMENT = 24  # bytes a tf.string element takes besides its text (TensorFlow's tstring)
# ops whose results, of a shape known only when they run, hold no more elements than their operands together
BOUNDED_BY_OPERANDS = frozenset({
    "Where", "Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2", "ListDiff", "GatherV2", "GatherNd",
    "Gather", "Slice", "StridedSlice", "Reshape", "Squeeze", "ExpandDims", "Identity", "Cast", "ConcatV2", "Pack",
    "Unpack", "Split", "SplitV", "Transpose", "ReverseV2", "DynamicPartition", "StringSplit", "StringSplitV2",
    "UnicodeDecode", "UnicodeDecodeWithOffsets", "Substr", "DecodeRaw",
})
# string ops whose results' strings may be longer than their operands' (joined, repeated, padded, decompressed)
GROWS_STRINGS = frozenset({
    "ReduceJoin", "RegexReplace", "StaticRegexReplace", "StringFormat", "DecodeCompressed", "AsString",
    "StringNGrams", "EncodeBase64", "UnicodeEncode", "UnicodeTranscode", "SerializeTensor", "SerializeSparse",
    "SerializeManySparse", "EncodeProto", "EncodePng", "EncodeJpeg", "EncodeJpegVariableQuality", "EncodeWav",
})


class FoldBudgetError(ConversionError):
    """Folding a constant would allocate more than the fold memory budget (``fold_memory_budget``)."""


def constant_bytes(module: Module) -> int:
    """The bytes of the distinct constants the module's ops read (its weights, once variables are frozen)."""
    arrays = {id(v.const): v.const.nbytes for fn in module.functions.values() for op in fn.ops
              for v in op.inputs if v is not None and v.is_const}
    return sum(arrays.values())


def default_fold_budget(module: Module) -> int:
    """The bytes folding may allocate unless ``fold_memory_budget`` says: ``BUDGET_PER_WEIGHT_BYTE`` times the
    module's constants, at least ``BUDGET_FLOOR`` (256 MiB)."""
    return max(BUDGET_FLOOR, BUDGET_PER_WEIGHT_BYTE * constant_bytes(module))


def size_text(n: int) -> str:
    """``n`` bytes for a message: ``"37.3 GiB"``."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


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
        and outside_effect(op.kind, op.attrs["_node_def"]) is None
    )


def _outside_problems(ops) -> list[str]:
    """Each op of ``ops`` that touches files, the network, the environment or the clock, described."""
    found = ((op, outside_effect(op.kind, op.attrs.get("_node_def"))) for op in ops)
    return [f"{op.describe()}: {why}" for op, why in found if why is not None]


def evaluate_ops(ops: list) -> dict[int, np.ndarray]:
    """Run ``ops`` (whose inputs are constants or earlier ops' outputs) in one TF graph. An op that touches files,
    the network, the environment or the clock is a :class:`~fuselite.passes.side_effects.SideEffectError`
    (nothing runs)."""
    problems = _outside_problems(ops)
    if problems:
        raise side_effect_error(problems)
    return _run(*_graph_of(ops), ops)


def _graph_of(ops: list):
    """``ops`` in a TF graph, their constant operands as ``Const`` nodes: (the graph, {value uid: tensor name})."""
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
    return graph, names


def _run(graph, names: dict[int, str], ops: list) -> dict[int, np.ndarray]:
    import tensorflow as tf

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


def _extent(v, extents: dict) -> tuple[int, int]:
    """(elements, longest string) of a constant or of a result measured before (0: not a string)."""
    if v.uid in extents:
        return extents[v.uid]
    arr = v.const
    if arr.dtype.kind == "S":
        return arr.size, arr.itemsize
    if arr.dtype == object:
        return arr.size, max((len(x) for x in arr.reshape(-1)), default=0)
    return arr.size, 0


def _result_extents(op, inferred: dict, extents: dict) -> tuple[dict[int, tuple[int, int]], bool] | None:
    """({uid: (elements, longest string)} of ``op``'s results, known before it runs, and whether that is exact:
    from static shapes, or a bound by its operands for :data:`BOUNDED_BY_OPERANDS`); None where a size is not
    known before running."""
    operands = [_extent(v, extents) for v in op.inputs]
    strings = [m for (_, m), v in zip(operands, op.inputs) if v.dtype == "string"]
    out, exact = {}, True
    for o in op.outputs:
        shape = _merged(o.shape, inferred.get(o.uid))
        if shape is None:
            return None
        if all(d is not None for d in shape):
            elements = math.prod(int(d) for d in shape)  # (Python ints: a hostile shape does not wrap around)
        elif op.kind in BOUNDED_BY_OPERANDS:
            units = sum(n + n * m for n, m in operands)  # a string operand counts its bytes too (split into words)
            elements = units * math.prod(int(d) for d in shape if d is not None)
            exact = False
        else:
            return None
        longest = 0
        if o.dtype == "string":
            if op.kind in GROWS_STRINGS:
                return None
            node = op.attrs.get("_node_def")
            text_attrs = sum(len(a.s) for a in node.attr.values()) if node is not None else 0
            numeric = sum(n * np.dtype(v.dtype).itemsize for (n, _), v in zip(operands, op.inputs)
                          if not isinstance(v.dtype, str))
            longest = (sum(strings) if strings else numeric) + text_attrs  # joined, cut or copied from them
            exact = False
        out[o.uid] = (elements, longest)
    return out, exact


def _merged(shape, inferred):
    """The IR's shape, its unknown dims as TensorFlow inferred them."""
    if shape is None or inferred is None or len(inferred) != len(shape):
        return shape if shape is not None else inferred
    return tuple(d if d is not None else i for d, i in zip(shape, inferred))


def _inferred_shapes(region: list) -> tuple[dict, tuple]:
    """TensorFlow's shapes for the region's results, inferred on its constants as it imports the graph (nothing is
    fetched): ({uid: shape or None}, the graph and its names, to run as it is); ({}, None) where TensorFlow refuses
    the graph (the run falls back to op by op)."""
    try:
        graph, names = _graph_of(region)
    except Exception:  # noqa: BLE001 - the IR's shapes are all there is
        return {}, None
    shapes = {}
    for op in region:
        for o in op.outputs:
            t = graph.get_tensor_by_name(names[o.uid])
            shapes[o.uid] = None if t.shape.rank is None else tuple(t.shape.as_list())
    return shapes, (graph, names)


def _within_budget(region: list, budget: int) -> tuple[list, tuple | None]:
    """The region's ops whose results' sizes are known before running and, together, within ``budget`` bytes (the
    others, and ops reading them, are left: for a later region where they fit, else unfolded), and the region's
    graph where it was built for shape inference and all of it is kept. A result whose static shape alone takes
    more than ``budget`` is a :class:`FoldBudgetError` (a bound past it, of a string or of a shape known only when
    it runs, stays unfolded)."""
    inferred, prepared = ({}, None)
    if any(not o.static_shape for op in region for o in op.outputs):
        inferred, prepared = _inferred_shapes(region)
    extents: dict[int, tuple[int, int]] = {}
    kept, total = [], 0
    for op in region:
        if not all(v.is_const or v.uid in extents for v in op.inputs):
            continue  # reads a result whose size is not known before running
        measured = _result_extents(op, inferred, extents)
        if measured is None:
            continue
        sizes, exact = measured
        need = sum(n * (STRING_ELEMENT + m if o.dtype == "string" else np.dtype(o.dtype).itemsize)
                   for o in op.outputs for n, m in [sizes[o.uid]])
        if need > budget and exact:
            raise FoldBudgetError(_budget_message(op, need, budget, inferred))
        if total + need > budget:
            continue  # a bound past the budget stays unfolded; a result that fits alone runs in a later region
        total += need
        extents.update(sizes)
        kept.append(op)
    return kept, (prepared if len(kept) == len(region) else None)


def _budget_message(op, need: int, budget: int, inferred: dict) -> str:
    results = ", ".join(f"{o.dtype}{list(_merged(o.shape, inferred.get(o.uid)) or [])}" for o in op.outputs)
    raise_to = -(-need // (1 << 20)) << 20
    return (f"{op.describe()}: folding it would allocate {size_text(need)} for its result ({results}), "
            f"past the fold memory budget of {size_text(budget)} (by default {BUDGET_PER_WEIGHT_BYTE} times the "
            f"model's weights, at least {size_text(BUDGET_FLOOR)}); if the model means it, raise the budget: "
            f"fold_memory_budget={raise_to} (fuselite convert --fold-memory-budget {raise_to >> 20}M)")


def fold_function(fn: Function, memo: FoldMemo | None = None, budget: int | None = None) -> int:
    """Fold one function; returns how many ops were folded. ``memo``: results shared with the program's other
    functions (:class:`FoldMemo`). ``budget``: the bytes a fold may allocate (None: no limit; ``fold_tf`` gives
    one). An op that touches files, the network, the environment or the clock, with constant operands, is a
    :class:`~fuselite.passes.side_effects.SideEffectError`."""
    folded_total = 0
    while True:
        _fold_shape_queries(fn)
        region, region_out, outside = [], set(), []
        for op in fn.ops:
            if _foldable(op, region_out):
                region.append(op)
                region_out.update(o.uid for o in op.outputs)
            elif op.dialect == "tf" and all(v is not None and (v.is_const or v.uid in region_out) for v in op.inputs):
                outside += _outside_problems([op])
        if outside:
            raise side_effect_error(outside)
        prepared = None
        if budget is not None and region:
            region, prepared = _within_budget(region, budget)
        if not region:
            return folded_total
        known, keys = _recall(region, memo) if memo is not None else ({}, {})
        try:
            values = dict(known)
            rest = [op for op in region if not all(o.uid in known for o in op.outputs)]
            if rest and prepared is not None and len(rest) == len(region):
                values.update(_run(*prepared, rest))  # the graph shape inference imported, as it is
            elif rest:
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


def fold_tf(module: Module, budget: int | None = None) -> int:
    """Fold every function; functions of one program share a :class:`FoldMemo` (a single function has nothing
    to share: no keys computed for it). ``budget``: the bytes a fold may allocate (default
    :func:`default_fold_budget`)."""
    memo = FoldMemo() if len(module.functions) > 1 else None
    budget = default_fold_budget(module) if budget is None else budget
    return sum(fold_function(fn, memo, budget) for fn in module.functions.values())
