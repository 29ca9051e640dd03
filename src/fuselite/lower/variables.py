"""Resource variables: ``VarHandleOp`` / ``ReadVariableOp`` / ``Assign*VariableOp`` -> LiteRT.

Only mutable variables reach lowering (read-only ones were frozen to constants by
``passes/variables.py``). Every op emitted here is ``_pinned``: CSE, folding and the
other optimisations leave it alone, and ``topo_sort`` keeps reads and assigns in
program order. ``assign_add`` / ``assign_sub`` become a read, an ADD / SUB and an assign.
"""

from __future__ import annotations

from fuselite.lower.registry import lowering

_PIN = {"_pinned": True}


@lowering("VarHandleOp")
def lower_var_handle(ctx):
    opts = {"container": ctx.attr("container", "") or "", "shared_name": ctx.attr("shared_name"), **_PIN}
    return [ctx.emit("VAR_HANDLE", [], opts, out_specs=[("resource", ())])]


@lowering("ReadVariableOp")
def lower_read_variable(ctx):
    if ctx.input(0).dtype != "resource":
        ctx.fail("reads something that is not a resource variable")
    return [ctx.emit("READ_VARIABLE", [ctx.input(0)], dict(_PIN))]


@lowering("AssignVariableOp")
def lower_assign_variable(ctx):
    ctx.emit("ASSIGN_VARIABLE", [ctx.input(0), ctx.input(1)], dict(_PIN), out_specs=[])
    return []


@lowering("AssignAddVariableOp", "AssignSubVariableOp")
def lower_assign_update(ctx):
    handle, delta = ctx.input(0), ctx.input(1)
    spec = [(delta.dtype, delta.shape)]
    old = ctx.emit("READ_VARIABLE", [handle], dict(_PIN), out_specs=spec)
    kind = "ADD" if ctx.op.kind == "AssignAddVariableOp" else "SUB"
    new = ctx.emit(kind, [old, delta], {"fused_activation_function": "NONE", **_PIN}, out_specs=spec)
    ctx.emit("ASSIGN_VARIABLE", [handle, new], dict(_PIN), out_specs=[])
    return []
