"""Mutability analysis: read-only variables become constants, assigned ones stay variables.

A captured ``tf.Variable`` that nothing in the program assigns (no
``AssignVariableOp`` / ``AssignAddVariableOp`` / ``AssignSubVariableOp`` anywhere in
the module: entry functions, loop bodies, branches, called functions) is *frozen*: each
``ReadVariableOp`` becomes a constant holding the variable's value at conversion time.

A variable that is assigned is *mutable*. It stays a variable in the output, as a
LiteRT resource variable:

- :func:`freeze_variables` keeps its ``ReadVariableOp`` / ``Assign*VariableOp`` as TF
  ops (in program order, which import already follows: TF orders reads and assigns of
  one variable through control dependencies), and the training updates of
  :data:`UPDATE_OPS` (optimizer kernels that write a variable and its slots, an
  Embedding's ``scatter_add`` / ``scatter_sub``: ``lower/training.py``). Any other resource
  op on a mutable variable is a :class:`~fuselite.errors.MutableVariableError` naming the
  op, the node and the variable (all such problems are reported together).
- :func:`materialize_variables` (run just before lowering) gives every function that
  uses a mutable variable its own ``VarHandleOp`` (container ``""``, a ``shared_name``
  unique per variable: its TF name), adds an init function that assigns each variable
  its value at conversion time, puts a ``CALL_ONCE`` of it first in every signature
  that uses variables, and adds a ``reset_variables`` signature that assigns the
  initial values again (see ``docs/variables.md``).

Example::

    frozen = freeze_variables(module)          # [{"name", "shape", "dtype"}, ...]
    ...                                         # fusion, folding
    mutable = materialize_variables(module)     # same format; module now has the init
    lower_module(module)                        # VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE
"""

from __future__ import annotations

import weakref

import numpy as np

from fuselite.errors import ConversionError, MutableVariableError
from fuselite.ir import Function, Module, Op, Value
from fuselite.passes.dce import writes_variable

ASSIGN_OPS = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}
READ_OPS = {"ReadVariableOp"}
# Optimizer updates (lower/training.py): they write every resource they take (the variable and its slots).
APPLY_OPS = {"ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyKerasMomentum",
             "ResourceApplyAdam", "ResourceApplyAdagrad", "ResourceApplyAdagradV2", "ResourceApplyRMSProp"}
# Sparse writes of rows of a variable (lower/training.py): they write their first operand.
SCATTER_OPS = {"ResourceScatterAdd", "ResourceScatterSub"}
UPDATE_OPS = APPLY_OPS | SCATTER_OPS
# Ops that only pass a resource on to another function (call sites, loops, branches).
_FORWARDING = {"While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall"}
_CALLEE_KEYS = ("f", "cond", "body", "then_branch", "else_branch")
RESET_SIGNATURE = "reset_variables"
INIT_FUNCTION = "fuselite_init_variables"


class ZeroInitialVariables:
    """The variables of one conversion that start from, and reset to, zeros.

    For state that the source framework resets to zeros whatever its current value,
    such as the state of a stateful Keras RNN (``reset_states()``). The frontend marks
    them while tracing; :func:`materialize_variables` reads the marks. One per
    conversion (it lives in the conversion context), so conversions do not share it.

    Example::

        zeros = ZeroInitialVariables()
        zeros.mark(layer.states[0])
        materialize_variables(module, zero_initial=zeros)
    """

    def __init__(self):
        self._refs: dict[int, weakref.ref] = {}  # id(handle) -> handle

    def mark(self, variable) -> None:
        handle = getattr(variable, "handle", None)
        if handle is None:
            handle = variable.value.handle  # a Keras 3 variable
        self._refs[id(handle)] = weakref.ref(handle)

    def __contains__(self, handle) -> bool:
        ref = self._refs.get(id(handle))
        return ref is not None and ref() is handle


def initial_value(handle, dtype, zero_initial: ZeroInitialVariables | None) -> np.ndarray:
    """The value a mutable variable starts from: its value at conversion time, or zeros if so marked."""
    value = _read_variable(handle, dtype)
    return np.zeros_like(value) if zero_initial is not None and handle in zero_initial else value


def _read_variable(handle, dtype) -> np.ndarray:
    import tensorflow as tf

    return np.asarray(tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.as_dtype(dtype)).numpy())


def _gather_node_def(op, params_dtype):
    """A GatherV2 NodeDef, so later shape inference and folding see the rewritten op."""
    import tensorflow as tf
    from tensorflow.core.framework import node_def_pb2

    nd = node_def_pb2.NodeDef(name=op.name or "gather", op="GatherV2")
    nd.attr["Tparams"].type = tf.as_dtype(params_dtype).as_datatype_enum
    nd.attr["Tindices"].type = tf.as_dtype(op.inputs[1].dtype).as_datatype_enum
    nd.attr["Taxis"].type = tf.int32.as_datatype_enum
    nd.attr["batch_dims"].i = int(op.attrs.get("batch_dims", 0))
    return nd


def read_variable_value(v, dtype) -> np.ndarray:
    """The current value of the captured variable behind resource value ``v``."""
    return _read_variable(v.meta["handle"], dtype)


def variable_dtype(v) -> np.dtype | None:
    """The dtype of the captured variable behind resource value ``v`` (from its handle's data), or None."""
    data = getattr(v.meta.get("handle"), "_handle_data", None)
    if data is None or not data.shape_and_type:
        return None
    import tensorflow as tf

    return np.dtype(tf.as_dtype(data.shape_and_type[0].dtype).as_numpy_dtype)


def is_var(v: Value | None) -> bool:
    return v is not None and v.dtype == "resource" and "handle" in v.meta


def var_key(v: Value) -> int:
    """Identity of the variable behind a captured resource (one handle per variable)."""
    return id(v.meta["handle"])


# -- analysis ---------------------------------------------------------------------------
def _callee_inputs(op: Op, module: Module) -> list[tuple[Value, Function]]:
    """(operand, callee) pairs: operands an op forwards into the inputs of other functions."""
    pairs = []
    for key in _CALLEE_KEYS:
        name = op.attrs.get(key)
        if not isinstance(name, str) or name not in module.functions:
            continue
        callee = module.functions[name]
        args = op.inputs[1:] if key in ("then_branch", "else_branch") else op.inputs
        pairs.extend((a, c) for a, c in zip(args, callee.inputs) if a is not None)
    return pairs


def propagate_handles(module: Module) -> None:
    """A function input bound (at every call site) to one captured variable becomes that variable.

    Loop bodies, branches and kept calls then see the variable itself, so that reads
    there freeze and assigns there are recognised.
    """
    changed = True
    while changed:
        changed = False
        bound: dict[int, list] = {}
        for fn in module.functions.values():
            for op in fn.ops:
                if op.kind in _FORWARDING:
                    for arg, inp in _callee_inputs(op, module):
                        bound.setdefault(inp.uid, [inp]).append(arg)
        for inp, *args in bound.values():
            if is_var(inp) or inp.dtype != "resource" or not all(is_var(a) for a in args):
                continue
            if len({var_key(a) for a in args}) == 1:
                inp.meta.update(handle=args[0].meta["handle"], variable=args[0].meta["variable"])
                changed = True


def assigned_variables(module: Module) -> dict[int, str]:
    """The mutability analysis: ``{variable key: name}`` of every variable the program assigns."""
    out = {}
    for fn in module.functions.values():
        for op in fn.ops:
            if writes_variable(op) and op.inputs:
                for v in op.inputs if op.kind in APPLY_OPS else op.inputs[:1]:
                    if is_var(v):
                        out[var_key(v)] = v.meta["variable"]
    return out


def _touching_functions(module: Module, mutable: dict[int, str]) -> set[str]:
    """Functions that read or write a mutable variable, directly or through their callees."""
    direct = {fn.name for fn in module.functions.values()
              if any(is_var(v) and var_key(v) in mutable for op in fn.ops for v in op.inputs)}
    calls = {fn.name: {op.attrs[k] for op in fn.ops for k in _CALLEE_KEYS if isinstance(op.attrs.get(k), str)}
             for fn in module.functions.values()}
    result, changed = set(direct), True
    while changed:
        changed = False
        for name, callees in calls.items():
            if name not in result and callees & result:
                result.add(name)
                changed = True
    return result


def _mark_ordered(module: Module, mutable: dict[int, str]) -> None:
    """Control flow / calls whose callees touch mutable variables are side effects: never dropped or moved."""
    touching = _touching_functions(module, mutable)
    for fn in module.functions.values():
        for op in fn.ops:
            if any(op.attrs.get(k) in touching for k in _CALLEE_KEYS if isinstance(op.attrs.get(k), str)):
                op.attrs["_side_effect"] = True


# -- freezing -----------------------------------------------------------------------------
def freeze_variables(module: Module) -> list[dict]:
    """Replace reads of captured, never-assigned variables with constants.

    Reads and assigns of assigned (mutable) variables stay; any other resource op on a
    mutable variable raises :class:`MutableVariableError`, listing every such use.
    Returns ``[{"name":..., "shape":..., "dtype":...}, ...]`` of the frozen variables.
    """
    propagate_handles(module)
    mutable = assigned_variables(module)
    _check_mutable_uses(module, mutable)
    _mark_ordered(module, mutable)
    for fn in module.functions.values():  # fusion rules must not take these for constants
        for v in [*fn.inputs, *(x for op in fn.ops for x in op.inputs)]:
            if is_var(v) and var_key(v) in mutable:
                v.meta["mutable"] = True
    frozen: dict[str, dict] = {}
    cache: dict[int, np.ndarray] = {}

    def value_of(src: Value, dtype) -> np.ndarray:
        key = var_key(src)
        if key not in cache:
            cache[key] = _read_variable(src.meta["handle"], dtype)
        return cache[key]

    for fn in module.functions.values():
        kept = []
        for op in fn.ops:
            src = op.inputs[0] if op.inputs else None
            if not is_var(src):
                kept.append(op)
                continue
            is_mutable = var_key(src) in mutable
            name = src.meta["variable"]
            if op.kind == "ReadVariableOp" and is_mutable:
                if op.outputs[0].shape is None or not op.outputs[0].static_shape:
                    op.outputs[0].shape = tuple(value_of(src, op.outputs[0].dtype).shape)
            elif op.kind == "ReadVariableOp":
                arr = value_of(src, op.outputs[0].dtype)
                fn.replace_uses(op.outputs[0], fn.const(arr, name))
                frozen[name] = {"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name}
                continue
            elif op.kind == "ResourceGather" and is_mutable:
                # the variable's current value, then a plain gather (keeps program order)
                arr = value_of(src, op.attrs["dtype"])
                read = fn.make_op("tf.ReadVariableOp", [src], [(arr.dtype, tuple(arr.shape))],
                                  {"dtype": arr.dtype, "_stateful": True}, name=f"{op.name}/read",
                                  location=op.location)
                kept.append(read)
                _to_gather(fn, op, read.outputs[0], arr.dtype)
            elif op.kind == "ResourceGather":
                # tf-keras Embedding gathers straight from the variable
                arr = value_of(src, op.attrs["dtype"])
                frozen[name] = {"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name}
                _to_gather(fn, op, fn.const(arr, name), arr.dtype)
            elif op.kind in _FROZEN_READS and not is_mutable:
                # tf.gather_nd / tf.shape / is_initialized of a read-only tf.Variable: no copy of it is made
                gathers = op.kind == "ResourceGatherNd"  # (it stays, as a GatherNd of the constant)
                _freeze_read(fn, op, src, name, value_of, frozen)
                if not gathers:
                    continue
            kept.append(op)
        fn.ops = kept
    return sorted(frozen.values(), key=lambda d: d["name"])


def _to_gather(fn: Function, op: Op, params: Value, dtype) -> None:
    op.type = "tf.GatherV2"
    op.inputs = [params, op.inputs[1], fn.const(np.array(0, np.int32), "axis")]
    op.attrs = {"batch_dims": op.attrs.get("batch_dims", 0),
                "_node_def": _gather_node_def(op, dtype), "_stateful": False}


# Resource ops other than ReadVariableOp / ResourceGather that only read a variable: on a read-only one they
# become a GatherNd of the constant, the constant's shape, true.
_FROZEN_READS = {"ResourceGatherNd", "VariableShape", "VarIsInitializedOp"}


def _freeze_read(fn: Function, op: Op, src: Value, name: str, value_of, frozen: dict) -> None:
    """Rewrite one of :data:`_FROZEN_READS` on the read-only variable ``src`` (its ``name``) in place."""
    if op.kind == "VarIsInitializedOp":  # a captured variable has a value (freezing just read it)
        fn.replace_uses(op.outputs[0], fn.const(np.array(True), f"{name}/is_initialized"))
        return
    dtype = op.attrs["dtype"] if op.kind == "ResourceGatherNd" else variable_dtype(src)
    arr = value_of(src, dtype) if dtype is not None else read_variable_value(src, np.float32)
    if op.kind == "VariableShape":
        out_type = np.dtype(op.outputs[0].dtype)
        fn.replace_uses(op.outputs[0], fn.const(np.array(arr.shape, out_type), f"{name}/shape"))
        return
    frozen[name] = {"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name}
    _to_gather_nd(fn, op, fn.const(arr, name), arr.dtype)


def _to_gather_nd(fn: Function, op: Op, params: Value, dtype) -> None:
    import tensorflow as tf
    from tensorflow.core.framework import node_def_pb2

    nd = node_def_pb2.NodeDef(name=op.name or "gather_nd", op="GatherNd")
    nd.attr["Tparams"].type = tf.as_dtype(dtype).as_datatype_enum
    nd.attr["Tindices"].type = tf.as_dtype(op.inputs[1].dtype).as_datatype_enum
    op.type = "tf.GatherNd"
    op.inputs = [params, op.inputs[1]]
    op.attrs = {"_node_def": nd, "_stateful": False}


def _check_mutable_uses(module: Module, mutable: dict[int, str]) -> None:
    """Only reads, assigns (and gathers) of a mutable variable can become LiteRT resource ops."""
    problems = []
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind in READ_OPS | ASSIGN_OPS | UPDATE_OPS | _FORWARDING or op.kind == "ResourceGather":
                if op.kind in ASSIGN_OPS and op.inputs and op.inputs[0] is not None and not is_var(op.inputs[0]):
                    problems.append(f"{op.describe()} assigns a resource that is not a captured variable")
                continue
            for v in op.inputs:
                if is_var(v) and var_key(v) in mutable:
                    problems.append(f"{op.describe()} uses mutable variable '{v.meta['variable']}'; only "
                                    "reads, gathers, assign / assign_add / assign_sub, scatter_add / scatter_sub "
                                    "and the optimizer updates ResourceApply{"
                                    f"{', '.join(sorted(k.removeprefix('ResourceApply') for k in APPLY_OPS))}"
                                    "} of mutable variables convert")
    if problems:
        raise MutableVariableError("the program uses mutable variables in ways LiteRT resource variables "
                                   "cannot express:", sorted(set(problems)))


# -- resource variables in the output -------------------------------------------------------
def shared_names(module: Module, mutable: dict[int, str]) -> dict[int, str]:
    """A unique, stable ``shared_name`` per variable: its TF name (suffixed if two share a name)."""
    names: dict[int, str] = {}
    taken: set[str] = set()
    for key, name in sorted(mutable.items(), key=lambda kv: kv[1]):
        base = name or "variable"
        unique, i = base, 1
        while unique in taken:
            unique, i = f"{base}_{i}", i + 1
        taken.add(unique)
        names[key] = unique
    return names


def _var_handle(fn: Function, shared_name: str, info: dict) -> Op:
    return fn.make_op("tf.VarHandleOp", [], [("resource", ())],
                      {"container": "", "shared_name": shared_name, "dtype": info["array"].dtype,
                       "shape": tuple(info["array"].shape), "_pinned": True, "_stateful": True},
                      name=f"{shared_name}/handle")


def unique_function_name(module: Module, base: str) -> str:
    name, i = base, 1
    while name in module.functions:
        name, i = f"{base}_{i}", i + 1
    return name


def _assign_all(module: Module, name: str, infos: dict[int, dict]) -> Function:
    """A function with no inputs or outputs that assigns every variable its initial value."""
    fn = module.add(Function(unique_function_name(module, name)))
    for info in infos.values():
        handle = _var_handle(fn, info["shared_name"], info)
        fn.ops.append(handle)
        fn.add_op("tf.AssignVariableOp", [handle.outputs[0], fn.const(info["array"], info["shared_name"])], [],
                  {"dtype": info["array"].dtype, "_stateful": True}, name=f"{info['shared_name']}/init")
    return fn


def materialize_variables(module: Module, reset_signature: str = RESET_SIGNATURE,
                          zero_initial: ZeroInitialVariables | None = None) -> list[dict]:
    """Turn the mutable variables that remain into resource variables of the output.

    Every function using a variable gets a ``VarHandleOp`` of it (first in the function);
    an init function assigns the initial values and runs through a ``CALL_ONCE`` placed
    first in each signature that (directly or through loops and branches) uses
    variables; the ``reset_signature`` signature assigns the initial values again.
    Variables in ``zero_initial`` start from zeros, the others from their value now.
    Returns ``[{"name", "shape", "dtype"}, ...]`` for the report (``[]`` and no change
    when there are no mutable variables).
    """
    propagate_handles(module)
    mutable = assigned_variables(module)
    if not mutable:
        return []
    if reset_signature in module.signatures:
        raise ConversionError(
            f"the program has a signature named '{reset_signature}', which fuselite adds to models with "
            f"mutable variables (it resets them); rename that signature")
    shared = shared_names(module, mutable)
    infos: dict[int, dict] = {}
    for fn in module.functions.values():
        for op in fn.ops:
            for v in op.inputs if op.kind in UPDATE_OPS else op.inputs[:1]:
                dtype = op.attrs.get("dtype") if op.kind in READ_OPS | ASSIGN_OPS else variable_dtype(v)
                if (op.kind in READ_OPS | ASSIGN_OPS | UPDATE_OPS and is_var(v) and var_key(v) in mutable
                        and var_key(v) not in infos and dtype is not None):
                    array = initial_value(v.meta["handle"], dtype, zero_initial)
                    infos[var_key(v)] = {"shared_name": shared[var_key(v)], "array": array}
    touching = _touching_functions(module, mutable)
    for fn in list(module.functions.values()):
        handles: dict[int, Op] = {}
        for op in fn.ops:
            for v in op.inputs:
                if not is_var(v) or var_key(v) not in mutable:
                    continue
                key = var_key(v)
                if key not in infos:
                    raise MutableVariableError(f"cannot tell the dtype of variable '{mutable[key]}' "
                                               f"used by {op.describe()}")
                if key not in handles:
                    handles[key] = _var_handle(fn, shared[key], infos[key])
        for key, handle in handles.items():
            for op in fn.ops:
                op.inputs = [handle.outputs[0] if is_var(v) and var_key(v) == key else v for v in op.inputs]
        fn.ops[:0] = list(handles.values())
    init = _assign_all(module, INIT_FUNCTION, infos)
    for name in dict.fromkeys(module.signatures.values()):
        if name in touching:
            fn = module.functions[name]
            fn.ops.insert(0, fn.make_op("tfl.CALL_ONCE", [], [], {"init_subgraph_index": "@" + init.name,
                                                                  "_pinned": True}, name="init_variables"))
    reset = _assign_all(module, reset_signature, infos)
    module.signatures[reset_signature] = reset.name
    return sorted(({"name": i["shared_name"], "shape": list(i["array"].shape), "dtype": i["array"].dtype.name}
                   for i in infos.values()), key=lambda d: d["name"])
