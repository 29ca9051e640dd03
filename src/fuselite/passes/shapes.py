"""Shape refinement: re-run TensorFlow's shape inference over a whole function.

Functions imported from a SavedModel lose static shapes at call boundaries (a
``StatefulPartitionedCall`` output has no shape). After inlining, one graph import
of each function re-infers every ``tf.*`` op's output shapes from the now-known
inputs and constants. Shapes only ever get more specific.
"""

from __future__ import annotations

from fuselite.ir import Function, Module
from fuselite.passes.side_effects import outside_effect

_OPAQUE = {"While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall"}
_SMALL = 4096
_KEY_SHAPED = {"LookupTableFindV2"}  # a find in a table of scalar values: its output has its keys' shape


def _merge(old, new):
    if new is None:
        return old
    if old is None or len(old) != len(new):
        return tuple(new) if old is None else old
    return tuple(o if o is not None else n for o, n in zip(old, new))


def refine_function(fn: Function) -> int:
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2
    from tensorflow.python.framework import tensor_util

    from fuselite.tf_dtypes import tf_dtype_for

    gdef = graph_pb2.GraphDef()
    names: dict[int, str] = {}

    def leaf(v) -> str | None:
        if v.uid in names:
            return names[v.uid]
        dt = tf_dtype_for(v.dtype)
        if dt is None:
            return None
        node = gdef.node.add(name=f"v{len(gdef.node)}")
        if v.is_const and (v.const.size <= _SMALL or v.const.dtype.kind in "iub"):
            node.op = "Const"
            proto = tensor_util.make_tensor_proto(v.const)
            node.attr["value"].CopyFrom(attr_value_pb2.AttrValue(tensor=proto))
            node.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=proto.dtype))
        else:
            node.op = "Placeholder"
            node.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=dt.as_datatype_enum))
            shape = tf.TensorShape(None if v.shape is None else list(v.shape))
            node.attr["shape"].CopyFrom(attr_value_pb2.AttrValue(shape=shape.as_proto()))
        names[v.uid] = node.name + ":0"
        return names[v.uid]

    tracked = []
    refined = 0
    for op in fn.ops:
        if op.kind in _KEY_SHAPED and len(op.inputs) > 1:
            # TensorFlow's shape function needs the table's handle data, which a placeholder lacks: a scalar-valued
            # table's find has its keys' shape (what later ops read as a placeholder of that shape)
            merged = _merge(op.outputs[0].shape, op.inputs[1].shape)
            if merged != op.outputs[0].shape:
                op.outputs[0].shape = merged
                refined += 1
            continue
        if op.dialect != "tf" or op.kind in _OPAQUE or "_node_def" not in op.attrs or outside_effect(op.kind):
            continue  # (an op touching files: not in the graph, whose shape inference may evaluate constants)
        ins = [leaf(v) if v.uid not in names else names[v.uid] for v in op.inputs]
        if any(i is None for i in ins):
            continue
        src = op.attrs["_node_def"]
        node = node_def_pb2.NodeDef(name=f"n{len(gdef.node)}", op=src.op)
        for key, val in src.attr.items():
            if key != "_output_shapes" and not (key.startswith("_") and key != "_class"):
                node.attr[key].CopyFrom(val)
        node.input.extend(ins)
        gdef.node.append(node)
        for o in op.outputs:
            names[o.uid] = f"{node.name}:{o.index}"
        tracked.append((op, node.name))
    if not tracked:
        return refined
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(gdef, name="")
    except Exception:
        return refined  # shape inference is an optimisation; the op-by-op shapes stay as imported
    for op, node_name in tracked:
        tf_op = graph.get_operation_by_name(node_name)
        for o, t in zip(op.outputs, tf_op.outputs):
            shape = None if t.shape.rank is None else tuple(t.shape.as_list())
            merged = _merge(o.shape, shape)
            if merged != o.shape:
                o.shape = merged
                refined += 1
    return refined


def _specialize_loop_shapes(module: Module, op) -> int:
    """Give a While body its entry shapes if the body then preserves them (a fixpoint)."""
    body, cond = module.functions[op.attrs["body"]], module.functions[op.attrs["cond"]]
    if len(body.inputs) != len(op.inputs):
        return 0
    new = [_merge(b.shape, v.shape) for b, v in zip(body.inputs, op.inputs)]
    if new == [b.shape for b in body.inputs]:
        return 0
    saved = {v.uid: (v, v.shape) for f in (body, cond) for v in f.inputs + [o for x in f.ops for o in x.outputs]}
    for f in (body, cond):
        for v, s in zip(f.inputs, new):
            v.shape = s
    refine_function(body)
    refine_function(cond)
    if [o.shape for o in body.outputs] != new:
        for v, s in saved.values():
            v.shape = s
        return 0
    for o, s in zip(op.outputs, new):
        o.shape = s
    return 1


def _specialize_call_shapes(module: Module, op, n_calls: dict) -> int:
    """Push a call site's shapes into a callee called from one place; pull its results back."""
    callee = module.functions.get(op.attrs.get("f"))
    if callee is None or n_calls.get(callee.name) != 1 or len(callee.inputs) != len(op.inputs):
        return 0
    changed = 0
    for arg, v in zip(callee.inputs, op.inputs):
        merged = _merge(arg.shape, v.shape)
        if merged != arg.shape:
            arg.shape = merged
            changed += 1
    if changed:
        refine_function(callee)
    for o, r in zip(op.outputs, callee.outputs):
        merged = _merge(o.shape, r.shape)
        if merged != o.shape:
            o.shape = merged
            changed += 1
    return changed


def refine_shapes(module: Module) -> int:
    """Refine every function, callers first, pushing shapes into loop bodies and callees."""
    n_calls: dict[str, int] = {}
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind in ("PartitionedCall", "StatefulPartitionedCall") and op.dialect == "tf":
                n_calls[op.attrs["f"]] = n_calls.get(op.attrs["f"], 0) + 1
    total = 0
    for fn in list(module.functions.values()):
        total += refine_function(fn)
        for op in fn.ops:
            if op.dialect != "tf":
                continue
            if op.kind in ("While", "StatelessWhile") and _specialize_loop_shapes(module, op):
                total += 1 + refine_function(fn)
            elif op.kind in ("PartitionedCall", "StatefulPartitionedCall") and \
                    _specialize_call_shapes(module, op, n_calls):
                total += 1 + refine_function(fn)
    return total

