"""Running a TensorFlow ``FunctionDef`` once, as it is, on NumPy arguments (no Grappler): what fusion rules
use to check a composite's body against the computation they write (``fusion/check.py``; the tf-keras
recurrent composites, whose flags are baked into the body).

Example::

    outputs = evaluate_function(fdef, library, [x, h0, c0, kernel, recurrent_kernel, bias])
"""

from __future__ import annotations

import numpy as np

from fuselite.passes.side_effects import graph_state_only, outside_effect, side_effect_error


def _callees(fdef, library) -> list:
    """``fdef`` and every library function it reaches (bodies of loops, conditionals, calls)."""
    seen, order, todo = set(), [], [fdef.signature.name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        f = fdef if name == fdef.signature.name else library.get(name)
        if f is None:
            continue
        order.append(f)
        for node in f.node_def:
            if node.op in library:
                todo.append(node.op)
            for v in node.attr.values():
                if v.HasField("func"):
                    todo.append(v.func.name)
                elif v.HasField("list"):
                    todo.extend(fn.name for fn in v.list.func)
    return order


def impure_nodes(fdef, library: dict) -> list[str]:
    """The nodes of ``fdef`` and of every function it reaches that may change something outside the run (files,
    the network, the environment, the clock, Python; a stateful op not known to keep its state in the run, an op
    TensorFlow does not know), each as ``"ReadFile 'name' in function 'f': reads a file"``. Empty: the body is
    pure, and :func:`evaluate_function` may run it."""
    from tensorflow.python.framework import op_def_registry

    found = []
    for f in _callees(fdef, library):
        for node in f.node_def:
            if node.op in library:
                continue  # a call: the callee's own nodes are checked
            op_def = op_def_registry.get(node.op)
            why = outside_effect(node.op, node)
            if why is None and op_def is None:
                why = "an op TensorFlow does not know"
            elif why is None and not graph_state_only(node.op, op_def.is_stateful):
                why = "a stateful op (TensorFlow's registry) not known to keep its state inside the run"
            if why is not None:
                found.append(f"{node.op} '{node.name}' in function '{f.signature.name}': {why}")
    return found


def evaluate_function(fdef, library: dict, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``fdef`` (with the functions it calls from ``library``) once on ``args``, without Grappler.
    A resource argument (a variable passed to the function) is given a variable holding its array.
    A body that is not pure (:func:`impure_nodes`) is a
    :class:`~fuselite.passes.side_effects.SideEffectError`, and nothing runs."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import config_pb2

    impure = impure_nodes(fdef, library)
    if impure:
        raise side_effect_error(impure, "the function's body has them, or stateful ops not known to keep their "
                                        "state inside the run")
    sig = fdef.signature
    if len(args) != len(sig.input_arg):
        raise ValueError(f"{len(args)} argument(s) for {len(sig.input_arg)} input(s)")
    gd = graph_pb2.GraphDef()
    gd.versions.producer = tf.version.GRAPH_DEF_VERSION
    gd.library.function.extend(_callees(fdef, library))
    feeds, inits = {}, []
    for i, (arg, value) in enumerate(zip(sig.input_arg, args)):
        if arg.type == tf.resource.as_datatype_enum:  # a variable's handle: a variable holding the value
            dtype = tf.as_dtype(value.dtype).as_datatype_enum
            node = gd.node.add(name=f"arg{i}", op="VarHandleOp")
            node.attr["dtype"].type = dtype
            node.attr["shape"].shape.CopyFrom(tf.TensorShape(value.shape).as_proto())
            node.attr["shared_name"].s = f"fuselite_evaluate_{i}".encode()
            const = gd.node.add(name=f"value{i}", op="Const")
            const.attr["dtype"].type = dtype
            const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            assign = gd.node.add(name=f"init{i}", op="AssignVariableOp", input=[f"arg{i}", f"value{i}"])
            assign.attr["dtype"].type = dtype
            inits.append(f"init{i}")
            continue
        node = gd.node.add(name=f"arg{i}", op="Placeholder")
        node.attr["dtype"].type = arg.type
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(value.shape).as_proto())
        feeds[f"arg{i}:0"] = value
    call = gd.node.add(name="call", op="StatefulPartitionedCall")
    call.input.extend(f"arg{i}" for i in range(len(args)))
    call.attr["Tin"].list.type.extend(a.type for a in sig.input_arg)
    call.attr["Tout"].list.type.extend(a.type for a in sig.output_arg)
    call.attr["f"].func.name = sig.name
    config = config_pb2.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
    config.graph_options.rewrite_options.disable_meta_optimizer = True  # no implementation swapping
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        if inits:
            sess.run(inits)
        outs = sess.run([f"call:{i}" for i in range(len(sig.output_arg))], feeds)
    return [np.asarray(o) for o in outs]
