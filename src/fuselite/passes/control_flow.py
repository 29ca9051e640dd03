"""Loop-invariant specialisation of ``While`` loops.

A loop variable that is a constant (or a captured variable) and that the body passes
through unchanged is bound inside the cond/body functions and dropped from the loop:
weights become constants of the body subgraph instead of loop state.
"""

from __future__ import annotations

from fuselite.ir import Module
from fuselite.passes.clone import copy_function

_WHILE = ("tf.While", "tf.StatelessWhile")


def _ref_counts(module: Module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for fn in module.functions.values():
        for op in fn.ops:
            for key in ("cond", "body", "then_branch", "else_branch", "f"):
                if key in op.attrs and isinstance(op.attrs[key], str):
                    counts[op.attrs[key]] = counts.get(op.attrs[key], 0) + 1
    return counts


def _own(module: Module, op, key: str, counts) -> object:
    name = op.attrs[key]
    if counts.get(name, 0) > 1:
        new = copy_function(module.functions[name], _unique(module, name))
        module.add(new)
        counts[name] -= 1
        counts[new.name] = 1
        op.attrs[key] = new.name
    return module.functions[op.attrs[key]]


def _unique(module, base):
    i = 1
    while f"{base}_{i}" in module.functions:
        i += 1
    return f"{base}_{i}"


def specialize_loop_invariants(module: Module) -> int:
    removed = 0
    counts = _ref_counts(module)
    for fn in list(module.functions.values()):
        for op in fn.ops:
            if op.type not in _WHILE:
                continue
            body = module.functions[op.attrs["body"]]
            keep = []
            for i, v in enumerate(op.inputs):
                invariant = v.is_const or "handle" in v.meta
                keep.append(not (invariant and body.outputs[i] is body.inputs[i]))
            if all(keep):
                continue
            body = _own(module, op, "body", counts)
            cond = _own(module, op, "cond", counts)
            for i in reversed(range(len(keep))):
                if keep[i]:
                    continue
                outer = op.inputs[i]
                for sub in (body, cond):
                    sub.replace_uses(sub.inputs[i], outer)
                    del sub.inputs[i]
                    if i < len(sub.input_names):
                        del sub.input_names[i]
                del body.outputs[i]
                if i < len(body.output_names):
                    del body.output_names[i]
                fn.replace_uses(op.outputs[i], outer)
                del op.inputs[i]
                del op.outputs[i]
                for attr in ("T", "output_shapes", "_output_shapes"):
                    if isinstance(op.attrs.get(attr), list) and len(op.attrs[attr]) > i:
                        del op.attrs[attr][i]
                removed += 1
            for k, o in enumerate(op.outputs):
                o.index = k
            op.attrs.pop("_node_def", None)
    return removed
