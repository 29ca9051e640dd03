"""Assigned variables as signature inputs and outputs (target="gpu"): the form LiteRT-LM's KV cache takes.

LiteRT's GPU accelerator runs no resource variable op (``VAR_HANDLE``, ``READ_VARIABLE``, ``ASSIGN_VARIABLE``,
``CALL_ONCE``: "Operation is not supported"), so a stateful model — a stateful Keras RNN, any ``tf.Variable``
the program assigns — keeps its state outside the model: each variable becomes an input of every signature that
reads it (named after the variable) and an output of every signature that assigns it (the same name), and the
app feeds each output back into the input of that name at the next call. The state starts from zeros (a stateful
Keras RNN's ``reset_states()``): the app feeds zeros first, and zeros again to reset it.

Run in place of ``materialize_variables`` (before lowering, on the TF ops): a read before any assign in a
function is the input; a read after an assign is the value assigned; the last value assigned is the output.
``AssignAddVariableOp`` / ``AssignSubVariableOp`` add to or subtract from the current value.

Example::

    state = variables_as_signature_io(module, zero_initial)   # [{"name", "shape", "dtype"}, ...]
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Module
from fuselite.passes.variables import (
    ASSIGN_OPS,
    READ_OPS,
    assigned_variables,
    initial_value,
    is_var,
    propagate_handles,
    shared_names,
    var_key,
)


def variables_as_signature_io(module: Module, zero_initial=None, why: str = "target='gpu'") -> list[dict]:
    """Every assigned variable as a signature input and output (see the module docstring); returns
    ``[{"name", "shape", "dtype"}, ...]`` for the report ([] and no change without assigned variables). A
    variable used inside a loop, a branch or a call, or one that starts from a value other than zeros, is a
    :class:`~fuselite.errors.ConversionError` naming it."""
    propagate_handles(module)
    mutable = assigned_variables(module)
    if not mutable:
        return []
    names = shared_names(module, mutable)
    taken = {n for f in module.signatures.values() for n in module.functions[f].input_names + module.functions[f].output_names}
    for key, name in names.items():  # a state's name is its own, beside the signatures' other inputs and outputs
        unique, i = name, 1
        while unique in taken:
            unique, i = f"{name}_{i}", i + 1
        names[key] = unique
    entries = {module.functions[n] for n in module.signatures.values()}
    for fn in module.functions.values():
        used = [op for op in fn.ops if any(is_var(v) and var_key(v) in mutable for v in op.inputs)
                and op.kind not in READ_OPS | ASSIGN_OPS]
        inner = [op for op in fn.ops if op.kind in READ_OPS | ASSIGN_OPS and is_var(op.inputs[0])
                 and var_key(op.inputs[0]) in mutable]
        if used or (inner and fn not in entries):
            where = (used or inner)[0]
            raise ConversionError(f"{why} passes variables as signature inputs and outputs, but variable "
                                  f"'{mutable[var_key(next(v for v in where.inputs if is_var(v)))]}' is used by "
                                  f"{where.describe()} inside a loop, a branch or a call (an unrolled form keeps "
                                  "it in the signature's own ops)")
    state: dict[int, dict] = {}
    for fn in entries:
        current: dict[int, object] = {}
        assigned: list[int] = []
        for op in list(fn.ops):
            if op.kind not in READ_OPS | ASSIGN_OPS or not is_var(op.inputs[0]) or var_key(op.inputs[0]) not in mutable:
                continue
            key = var_key(op.inputs[0])
            name = names[key]
            if op.kind in READ_OPS:
                out = op.outputs[0]
                if key not in current:
                    _check_zero_initial(op.inputs[0], out.dtype, zero_initial, mutable[key], why)
                    current[key] = fn.add_input(name, out.dtype, out.shape)
                    fn.input_names.append(name)
                    state.setdefault(key, {"name": name, "shape": list(out.shape or ()), "dtype": out.dtype.name})
                fn.replace_uses(out, current[key])
            else:
                value = op.inputs[1]
                if op.kind != "AssignVariableOp":
                    if key not in current:
                        _check_zero_initial(op.inputs[0], value.dtype, zero_initial, mutable[key], why)
                        current[key] = fn.add_input(name, value.dtype, value.shape)
                        fn.input_names.append(name)
                    tf_kind = "tf.AddV2" if op.kind == "AssignAddVariableOp" else "tf.Sub"
                    combined = fn.make_op(tf_kind, [current[key], value], [(value.dtype, value.shape)],
                                          {"T": value.dtype}, name=f"{name}/update")
                    fn.ops.insert(fn.ops.index(op), combined)
                    value = combined.outputs[0]
                current[key] = value
                if key not in assigned:
                    assigned.append(key)
                state.setdefault(key, {"name": name, "shape": list(value.shape or ()), "dtype": value.dtype.name})
            fn.ops.remove(op)
        for key in assigned:
            fn.outputs.append(current[key])
            fn.output_names.append(names[key])
    return sorted(state.values(), key=lambda d: d["name"])


def _check_zero_initial(resource, dtype, zero_initial, name: str, why: str) -> None:
    initial = initial_value(resource.meta["handle"], dtype, zero_initial)
    if np.any(initial):
        raise ConversionError(f"{why} passes variables as signature inputs and outputs that start from zeros, but "
                              f"variable '{name}' starts from other values (its value at conversion time)")
