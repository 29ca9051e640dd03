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
    opts = {"container": ctx.attr("container", "") or "", "shared_name": ctx.attr("shared_name"),
            "_shape": ctx.attr("shape"), **_PIN}  # _shape: for the rules that need the variable's shape
    return [ctx.emit("VAR_HANDLE", [], opts, out_specs=[("resource", ())])]


def held_shape(handle, fallback):
    """The shape of the variable behind ``handle`` (its VAR_HANDLE's ``_shape``), else ``fallback``.

    LiteRT's READ_VARIABLE copies the variable into its output as the output was sized: an output declared
    with an unknown dimension (``[4, -1]``, sized ``[4, 1]``) keeps that size (found with a SavedModel's train
    signature, whose ``assign_sub`` deltas had an unknown dimension), so reads take the variable's own shape.
    """
    shape = None if handle.producer is None else handle.producer.attrs.get("_shape")
    return fallback if shape is None else tuple(int(d) for d in shape)


@lowering("ReadVariableOp")
def lower_read_variable(ctx):
    if ctx.input(0).dtype != "resource":
        ctx.fail("reads something that is not a resource variable")
    return [ctx.emit("READ_VARIABLE", [ctx.input(0)], dict(_PIN), shape=held_shape(ctx.input(0), ctx.out(0).shape))]


@lowering("AssignVariableOp")
def lower_assign_variable(ctx):
    ctx.emit("ASSIGN_VARIABLE", [ctx.input(0), ctx.input(1)], dict(_PIN), out_specs=[])
    return []


@lowering("AssignAddVariableOp", "AssignSubVariableOp")
def lower_assign_update(ctx):
    handle, delta = ctx.input(0), ctx.input(1)
    spec = [(delta.dtype, held_shape(handle, delta.shape))]
    old = ctx.emit("READ_VARIABLE", [handle], dict(_PIN), out_specs=spec)
    kind = "ADD" if ctx.op.kind == "AssignAddVariableOp" else "SUB"
    new = ctx.emit(kind, [old, delta], {"fused_activation_function": "NONE", **_PIN}, out_specs=spec)
    ctx.emit("ASSIGN_VARIABLE", [handle, new], dict(_PIN), out_specs=[])
    return []
