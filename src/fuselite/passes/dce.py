"""Dead-code elimination and removal of functions nothing refers to."""

from __future__ import annotations

from fuselite.ir import Function, Module

# Ops that must stay even when their results are unused (see also ``Op.has_side_effects``).
_SIDE_EFFECTS = {"tf.AssignVariableOp", "tf.AssignAddVariableOp", "tf.AssignSubVariableOp",
                 "tfl.ASSIGN_VARIABLE", "tfl.CALL_ONCE", "tfl.HASHTABLE_IMPORT"}


def dce_function(fn: Function) -> int:
    """Drop ops whose results nothing uses; assigns, CALL_ONCE and loops/branches/calls
    that touch mutable variables (``_side_effect``) always stay."""
    live = {v.uid for v in fn.outputs}
    kept = []
    for op in reversed(fn.ops):
        if (writes_variable(op) or op.attrs.get("_side_effect")
                or any(o.uid in live for o in op.outputs)):
            kept.append(op)
            live.update(v.uid for v in op.inputs if v is not None)
    removed = len(fn.ops) - len(kept)
    fn.ops = kept[::-1]
    return removed


def referenced_functions(fn: Function) -> set[str]:
    names = set()
    for op in fn.ops:
        names |= referenced_functions_of(op)
    return names


# TF ops that take a resource variable without changing it; every other TF op taking one
# (assigns, sliced assigns, scatters, optimizer updates, CountUpTo, ...) counts as a write.
_READS_RESOURCE = {"tf.ReadVariableOp", "tf.ResourceGather", "tf.ResourceGatherNd", "tf.VariableShape",
                   "tf.VarIsInitializedOp", "tf.VarHandleOp", "tf.While", "tf.StatelessWhile", "tf.If",
                   "tf.StatelessIf", "tf.PartitionedCall", "tf.StatefulPartitionedCall", "tf.Identity",
                   "tf.LookupTableFindV2", "tf.LookupTableSizeV2"}


def writes_variable(op) -> bool:
    """True for ops that (may) write a resource variable: kept by DCE, and what makes it mutable."""
    if op.type in _SIDE_EFFECTS:
        return True
    return (op.type.startswith("tf.") and op.type not in _READS_RESOURCE
            and any(v is not None and v.dtype == "resource" for v in op.inputs))


def mark_side_effects(module: Module) -> None:
    """Mark calls, loops and branches whose functions (transitively) write variables ``_side_effect``.

    Such an op stays even when nothing uses its results (a ``while`` loop that only
    ``assign_add``s), and keeps its place among the program's reads and writes.
    """
    effects = {fn.name for fn in module.functions.values()
               if any(writes_variable(op) or op.attrs.get("_side_effect")
                      for op in fn.ops)}
    changed = True
    while changed:
        changed = False
        for fn in module.functions.values():
            for op in fn.ops:
                if not op.attrs.get("_side_effect") and referenced_functions_of(op) & effects:
                    op.attrs["_side_effect"] = True
                    changed = True
                    effects.add(fn.name)


def referenced_functions_of(op) -> set[str]:
    names = set()
    for key, val in op.attrs.items():
        if key in ("f", "cond", "body", "then_branch", "else_branch") and isinstance(val, str):
            names.add(val)
        elif key.endswith("_subgraph_index") and isinstance(val, str):
            names.add(val.lstrip("@"))
    return names


def dce(module: Module) -> int:
    """Remove dead ops everywhere, then functions unreachable from the signatures."""
    mark_side_effects(module)
    removed = sum(dce_function(fn) for fn in module.functions.values())
    reachable, stack = set(), list(module.signatures.values())
    while stack:
        name = stack.pop()
        if name in reachable:
            continue
        reachable.add(name)
        stack.extend(referenced_functions(module.functions[name]))
    for name in list(module.functions):
        if name not in reachable:
            del module.functions[name]
    return removed
