"""Import a traced TensorFlow graph (and its function library) into the fuselite IR.

Function boundaries survive: calls (``PartitionedCall``, ``While`` bodies, ``If``
branches...) keep referring to functions that are imported as separate
:class:`~fuselite.ir.Function` objects, with all their attributes (``_implements``,
``api_implements``...) in ``Function.attrs``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from fuselite.errors import ConversionError, InputError
from fuselite.ir import Function, Module, Value
from fuselite.tf_dtypes import tf_dtype_to_ir

_LIBRARY_MARKERS = (os.sep + "tensorflow" + os.sep, os.sep + "keras" + os.sep, os.sep + "tf_keras" + os.sep,
                    os.sep + "fuselite" + os.sep, "site-packages", "<frozen", os.sep + "absl" + os.sep)
_FUSELITE = os.sep + "fuselite" + os.sep
# what a LiteRT input tensor holds (complex64 too: LiteRT's REAL / IMAG / COMPLEX_ABS, MUL and RESHAPE read it)
_INPUT_DTYPES = {np.dtype(d) for d in (np.float32, np.float16, np.int8, np.uint8, np.int16, np.int32,
                                         np.int64, np.bool_, np.float64, np.complex64)}
_ALIAS_OPS = {"Identity", "StopGradient", "Snapshot", "PreventGradient", "EnsureShape", "CheckNumerics"}
_DROP_OPS = {"NoOp", "Assert", "Print", "PrintV2"}


def tf_shape_to_ir(shape) -> tuple | None:
    if shape.rank is None:
        return None
    return tuple(shape.as_list())


def user_location(tf_op) -> str | None:
    """The innermost frame of the op's creation traceback that is the user's own code."""
    if hasattr(tf_op, "_fuselite_location"):
        return tf_op._fuselite_location
    try:
        frames = tf_op.traceback
    except Exception:  # ops loaded from a SavedModel have no traceback
        return None
    if not frames:
        return None
    frames = list(frames)
    for k in range(len(frames) - 1, -1, -1):
        fname = frames[k].filename
        if not any(m in fname for m in _LIBRARY_MARKERS):
            if k + 1 < len(frames) and _FUSELITE in frames[k + 1].filename:
                return None  # the user's call into fuselite (convert()): no line of the model's own code
            return f"{fname}:{frames[k].lineno}"
    return None


def _decode_attr(tf_op, key: str, attr_value) -> Any:
    import tensorflow as tf
    from tensorflow.python.framework import tensor_util

    which = attr_value.WhichOneof("value")
    if which == "list":
        lst = attr_value.list
        if lst.type:
            return [tf_dtype_to_ir(tf.dtypes.as_dtype(t)) for t in lst.type]
        if lst.shape:
            return [tf_shape_to_ir(tf.TensorShape(s)) for s in lst.shape]
        if lst.func:
            return [f.name for f in lst.func]
        if lst.s:
            return [s.decode(errors="replace") for s in lst.s]
        if lst.i:
            return list(lst.i)
        if lst.f:
            return list(lst.f)
        if lst.b:
            return list(lst.b)
        return []
    if which == "type":
        return tf_dtype_to_ir(tf.dtypes.as_dtype(attr_value.type))
    if which == "shape":
        return tf_shape_to_ir(tf.TensorShape(attr_value.shape))
    if which == "func":
        return attr_value.func.name
    if which == "tensor":
        return tensor_util.MakeNdarray(attr_value.tensor)
    if which == "s":
        return attr_value.s.decode(errors="replace")
    if which in ("i", "f", "b"):
        return getattr(attr_value, which)
    return None


class FunctionAttr(str):
    """An attribute whose value names a function (a ``NameAttrList``): a string that says what it is."""

    is_function_attr = True


def _decode_nested(key: str, attr_value) -> Any:
    if attr_value.WhichOneof("value") == "func":  # kept recognisable: a rule must not take it for a string
        return FunctionAttr(attr_value.func.name)
    return _decode_attr(None, key, attr_value)


def decode_attrs(node_def, tf_op=None) -> dict[str, Any]:
    out = {}
    for k, v in node_def.attr.items():
        out[k] = _decode_attr(tf_op, k, v)
        if v.WhichOneof("value") == "func":
            out[k + "._attrs"] = {ak: _decode_nested(ak, av) for ak, av in v.func.attr.items()}
    return out


class GraphImporter:
    """Imports one top-level graph plus every function it reaches into a :class:`Module`."""

    def __init__(self, module: Module, library: dict[str, Any]):
        self.module = module
        self.library = library  # function name -> FunctionDef
        self._imported: dict[tuple, str] = {}

    # -- entry points ----------------------------------------------------------
    def import_concrete_function(self, cf, name: str, input_names=None, output_names=None,
                                 batch_size: int | None = None, input_shapes: dict | None = None) -> Function:
        """Import a ConcreteFunction as an entry function named ``name``.

        With ``batch_size``, unknown leading input dimensions are fixed to it; with ``input_shapes`` ({input
        name: shape, None for a dimension left as traced}), the named inputs' dimensions are fixed to those
        given. Either way the function is re-derived from its FunctionDef with those input shapes, so that the
        shapes they fix are static throughout.
        """
        graph = cf.graph
        fn = Function(self.module_unique(name))
        captures = {id(internal): external for external, internal in graph.captures}
        names = list(input_names) if input_names else None
        if batch_size is not None or input_shapes:
            graph, captures = _static_batch_graph(cf, batch_size, _shapes_by_position(cf, names, input_shapes or {}))
        var_names = {}
        for var in getattr(graph, "variables", []):
            try:
                var_names[id(var.handle)] = var.name.split(":")[0]
            except Exception:
                pass
        env: dict[str, Value] = {}
        user_inputs = []
        for t in graph.inputs:
            ext = captures.get(id(t))
            if ext is None:
                user_inputs.append(t)
                continue
            env[t.name] = self._capture_value(fn, t, ext, var_names)
        names = list(input_names) if input_names else [t.op.name for t in user_inputs]
        for t, nm in zip(user_inputs, names):
            dtype = tf_dtype_to_ir(t.dtype)
            if dtype in ("resource", "variant") or (not isinstance(dtype, str) and dtype not in _INPUT_DTYPES):
                raise InputError(f"input '{nm}' of '{name}' has dtype {t.dtype.name}, which LiteRT inputs "
                                 f"cannot hold (use one of: {', '.join(sorted(d.name for d in _INPUT_DTYPES))})")
            env[t.name] = fn.add_input(nm, dtype, tf_shape_to_ir(t.shape))
        fn.input_names = names
        self._import_ops(fn, graph.get_operations(), env)
        fn.outputs = [env[t.name] for t in graph.outputs]
        fn.output_names = list(output_names) if output_names else [f"output_{i}" for i in range(len(fn.outputs))]
        self.module.add(fn)
        return fn

    def module_unique(self, name: str) -> str:
        base, i = name, 1
        while name in self.module.functions:
            name = f"{base}_{i}"
            i += 1
        return name

    def function(self, fname: str, arg_shapes: list) -> str:
        """Import library function ``fname`` for the given argument shapes; return its IR name."""
        key = (fname, tuple(tuple(s) if s is not None else None for s in arg_shapes))
        if key in self._imported:
            return self._imported[key]
        fdef = self.library.get(fname)
        if fdef is None:
            raise ConversionError(f"function '{fname}' is referenced but not in the function library")
        graph = graph_from_function_def(fdef, arg_shapes)
        ir_name = self.module_unique(fname)
        self._imported[key] = ir_name
        fn = Function(ir_name)
        fn.attrs = decode_attrs(fdef)
        fn.attrs["_function_def"] = fdef  # the original TF function, e.g. to evaluate it
        fn.attrs["_library"] = self.library
        env: dict[str, Value] = {}
        for t, arg in zip(graph.inputs, fdef.signature.input_arg):
            env[t.name] = fn.add_input(arg.name, tf_dtype_to_ir(t.dtype), tf_shape_to_ir(t.shape))
        fn.input_names = [a.name for a in fdef.signature.input_arg]
        self.module.add(fn)  # before the body: recursion-safe
        self._import_ops(fn, graph.get_operations(), env)
        fn.outputs = [env[t.name] for t in graph.outputs]
        fn.output_names = [a.name for a in fdef.signature.output_arg]
        return ir_name

    # -- internals -------------------------------------------------------------
    def _capture_value(self, fn: Function, internal, external, var_names) -> Value:
        dtype = tf_dtype_to_ir(internal.dtype)
        if dtype == "resource":
            v = Value(fn.unique_name(internal.op.name), "resource", ())
            v.meta["handle"] = external
            v.meta["variable"] = var_names.get(id(external)) or _handle_name(external) or internal.op.name
            return v
        try:
            arr = np.asarray(external.numpy())
        except Exception as e:  # a symbolic capture we cannot evaluate
            raise ConversionError(f"captured tensor '{internal.op.name}' is not a constant: {e}") from None
        return fn.const(arr, internal.op.name)

    def _import_ops(self, fn: Function, tf_ops, env: dict[str, Value]) -> None:
        from tensorflow.python.framework import tensor_util

        for tf_op in program_order(tf_ops):
            t = tf_op.type
            if t == "Placeholder" and tf_op.outputs[0].name in env:
                continue
            if t == "Placeholder":
                raise InputError(f"unbound placeholder '{tf_op.name}' in function '{fn.name}'")
            if t == "Const":
                arr = tensor_util.MakeNdarray(tf_op.node_def.attr["value"].tensor)
                if arr.dtype == object:
                    arr = arr.astype(bytes)
                env[tf_op.outputs[0].name] = fn.const(arr, tf_op.name)
                continue
            if t in _DROP_OPS:
                continue
            inputs = [env[x.name] for x in tf_op.inputs]
            if t in _ALIAS_OPS:
                env[tf_op.outputs[0].name] = inputs[0]
                continue
            if t == "IdentityN":
                for o, v in zip(tf_op.outputs, inputs):
                    env[o.name] = v
                continue
            outs = [(tf_dtype_to_ir(o.dtype), tf_shape_to_ir(o.shape)) for o in tf_op.outputs]
            attrs = decode_attrs(tf_op.node_def, tf_op)
            attrs["_node_def"] = tf_op.node_def
            attrs["_stateful"] = tf_op.op_def.is_stateful
            op = fn.add_op("tf." + t, inputs, outs, attrs, name=tf_op.name, location=user_location(tf_op))
            for o, v in zip(tf_op.outputs, op.outputs):
                env[o.name] = v
            self._import_callees(op)

    def _import_callees(self, op) -> None:
        """Import the functions an op refers to; record their IR names in attrs."""
        kind = op.kind
        if kind in ("PartitionedCall", "StatefulPartitionedCall"):
            op.attrs["f"] = self.function(op.attrs["f"], [v.shape for v in op.inputs])
        elif kind in ("While", "StatelessWhile"):
            # Loop variables keep their entry shapes if the body preserves them (a fixpoint);
            # otherwise use the loop's declared shape invariants.
            shapes = [v.shape for v in op.inputs]
            body = self.module.functions[self.function(op.attrs["body"], shapes)]
            if [o.shape for o in body.outputs] != shapes:
                declared = op.attrs.get("output_shapes") or []
                shapes = declared if len(declared) == len(op.inputs) else [None] * len(op.inputs)
            op.attrs["cond"] = self.function(op.attrs["cond"], shapes)
            op.attrs["body"] = self.function(op.attrs["body"], shapes)
            for o, s in zip(op.outputs, shapes):
                o.shape = s
        elif kind in ("If", "StatelessIf"):
            shapes = [v.shape for v in op.inputs[1:]]
            op.attrs["then_branch"] = self.function(op.attrs["then_branch"], shapes)
            op.attrs["else_branch"] = self.function(op.attrs["else_branch"], shapes)


def program_order(tf_ops) -> list:
    """``tf_ops`` ordered so that every op follows its data *and control* inputs (stable).

    Control inputs are not imported as edges: the order of the imported op list is what
    keeps variable reads and assigns as TensorFlow runs them (``tf.function``'s automatic
    control dependencies chain the ops touching one variable in program order). Traced
    graphs list ops in creation order and imported FunctionDefs in a topological order,
    so this returns the list unchanged unless some op precedes one of its dependencies.
    """
    import heapq

    tf_ops = list(tf_ops)
    pos = {op.name: i for i, op in enumerate(tf_ops)}

    def deps(op):
        names = [t.op.name for t in op.inputs] + [c.name for c in op.control_inputs]
        return [pos[n] for n in names if n in pos]

    if all(d < i for i, op in enumerate(tf_ops) for d in deps(op)):
        return tf_ops
    waiting = [0] * len(tf_ops)
    users: dict[int, list[int]] = {}
    for i, op in enumerate(tf_ops):
        for d in set(deps(op)):
            waiting[i] += 1
            users.setdefault(d, []).append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(tf_ops[i])
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    return order if len(order) == len(tf_ops) else tf_ops  # a cycle (v1 loops): keep the graph's order


def graph_from_function_def(fdef, arg_shapes: list):
    """A FuncGraph for ``fdef`` whose arguments have ``arg_shapes`` (TF shape inference runs).

    The shapes recorded on the FunctionDef's arguments (``_output_shapes``) are
    replaced by the call site's, which are often more specific.
    """
    import tensorflow as tf
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    fdef_copy = type(fdef)()
    fdef_copy.CopyFrom(fdef)
    for i in range(len(fdef_copy.signature.input_arg)):
        if i in fdef_copy.arg_attr and "_output_shapes" in fdef_copy.arg_attr[i].attr:
            del fdef_copy.arg_attr[i].attr["_output_shapes"]
    shapes = [tf.TensorShape(list(s) if s is not None else None) for s in arg_shapes]
    # a resource argument (a captured variable) gets no shape, as TensorFlow's own loader gives it: a scalar shape
    # would make shape inference of its reads (ResourceGatherNd) fail for want of the handle's data
    for i, arg in enumerate(fdef_copy.signature.input_arg):
        if i < len(shapes) and arg.type == tf.resource.as_datatype_enum:
            shapes[i] = None
    return function_def_to_graph(fdef_copy, input_shapes=shapes)


def _shapes_by_position(cf, names: list | None, input_shapes: dict) -> dict[int, list]:
    """``input_shapes`` ({input name: shape}) by the position of the user's input in ``cf``'s inputs, each checked
    against the traced shape (its rank; a static dimension may only be given as itself or None)."""
    internal = {id(t) for t in cf.graph.internal_captures}
    user = [t for t in cf.graph.inputs if id(t) not in internal]
    names = names or [t.op.name for t in user]
    positions = {}
    for name, shape in input_shapes.items():
        if name not in names:
            continue  # another signature's input (import_concrete_functions checks each name is someone's)
        t = user[names.index(name)]
        traced = t.shape.as_list() if t.shape.rank is not None else None
        given = [None if d is None else int(d) for d in shape]
        if traced is not None and len(traced) != len(given):
            raise InputError(f"input_shapes: input '{name}' has rank {len(traced)} (shape "
                             f"{_shape_text(traced)}), got {len(given)} dimensions {_shape_text(given)}")
        if traced is not None:
            for i, (d, g) in enumerate(zip(traced, given)):
                if d is not None and g is not None and d != g:
                    raise InputError(f"input_shapes: input '{name}' has size {d} in dimension {i} (shape "
                                     f"{_shape_text(traced)}), got {g}: only unknown dimensions can be fixed")
            given = [d if g is None else g for d, g in zip(traced, given)]
        positions[next(i for i, u in enumerate(cf.graph.inputs) if u is t)] = given  # not ==: a tensor op
    return positions


def _shape_text(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _static_batch_graph(cf, batch_size: int | None, fixed: dict[int, list] | None = None):
    """``cf``'s FunctionDef as a graph whose unknown batch dimensions are ``batch_size`` (None: left unknown) and
    whose inputs at the positions of ``fixed`` have the shapes given there."""
    internal = {id(t) for t in cf.graph.internal_captures}
    shapes = []
    for k, t in enumerate(cf.graph.inputs):
        dims = t.shape.as_list() if t.shape.rank is not None else None
        if fixed and k in fixed:
            dims = list(fixed[k])
        if id(t) not in internal and dims and dims[0] is None and batch_size is not None:
            dims[0] = batch_size
        shapes.append(dims)
    graph = graph_from_function_def(cf.function_def, shapes)
    n_user = len(cf.graph.inputs) - len(cf.graph.internal_captures)
    captures = {id(t): ext for t, ext in zip(graph.inputs[n_user:], cf.captured_inputs)}
    locations = {op.name: user_location(op) for op in cf.graph.get_operations()}
    for op in graph.get_operations():
        op._fuselite_location = locations.get(op.name)
    return graph, captures


def _handle_name(handle) -> str | None:
    try:
        text = str(handle)
        start = text.index('name="') + 6
        return text[start : text.index('"', start)]
    except ValueError:
        return None


def library_of(graph) -> dict[str, Any]:
    """All FunctionDefs reachable from ``graph`` (GraphDef.library is flattened)."""
    gdef = graph.as_graph_def()
    return {f.signature.name: f for f in gdef.library.function}


def import_concrete_functions(entries, batch_size: int | None = None, input_shapes: dict | None = None) -> Module:
    """Import ``[(signature_key, concrete_function, input_names, output_names), ...]``; ``input_shapes``: {input
    name: shape} fixed in every signature that has that input (a name no signature has is an InputError)."""
    module = Module()
    library: dict[str, Any] = {}
    for _, cf, _, _ in entries:
        library.update(library_of(cf.graph))
    if input_shapes:
        known = {n for _, cf, names, _ in entries for n in (names or _user_input_names(cf))}
        unknown = sorted(set(input_shapes) - known)
        if unknown:
            raise InputError(f"input_shapes names {', '.join(map(repr, unknown))}, but the model's inputs are "
                             f"{', '.join(map(repr, sorted(known)))}")
    importer = GraphImporter(module, library)
    for key, cf, in_names, out_names in entries:
        fn = importer.import_concrete_function(cf, key, in_names, out_names, batch_size, input_shapes)
        module.signatures[key] = fn.name
    return module


def _user_input_names(cf) -> list[str]:
    internal = {id(t) for t in cf.graph.internal_captures}
    return [t.op.name for t in cf.graph.inputs if id(t) not in internal]
