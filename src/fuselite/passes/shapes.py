"""Shape refinement: re-run TensorFlow's shape inference over a whole function.

Functions imported from a SavedModel lose static shapes at call boundaries (a
``StatefulPartitionedCall`` output has no shape). After inlining, one graph import
of each function re-infers every ``tf.*`` op's output shapes from the now-known
inputs and constants. Shapes only ever get more specific.
"""

from __future__ import annotations

from fuselite.ir import Function, Module

_OPAQUE = {"While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall"}
_SMALL = 4096


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

    from fuselite.frontend.tf_graph import tf_dtype_for

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
    for op in fn.ops:
        if op.dialect != "tf" or op.kind in _OPAQUE or "_node_def" not in op.attrs:
            continue
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
        return 0
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(gdef, name="")
    except Exception:
        return 0  # shape inference is an optimisation; the op-by-op shapes stay as imported
    refined = 0
    for op, node_name in tracked:
        tf_op = graph.get_operation_by_name(node_name)
        for o, t in zip(op.outputs, tf_op.outputs):
            shape = None if t.shape.rank is None else tuple(t.shape.as_list())
            merged = _merge(o.shape, shape)
            if merged != o.shape:
                o.shape = merged
                refined += 1
    return refined


def refine_shapes(module: Module) -> int:
    return sum(refine_function(fn) for fn in module.functions.values())

