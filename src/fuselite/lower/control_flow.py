"""Functional control flow: ``While`` -> WHILE and ``If`` -> IF with subgraphs."""

from __future__ import annotations

from fuselite.lower.registry import lowering


@lowering("While", "StatelessWhile")
def lower_while(ctx):
    opts = {"cond_subgraph_index": "@" + ctx.attr("cond"), "body_subgraph_index": "@" + ctx.attr("body")}
    outs = ctx.emit("WHILE", list(ctx.inputs), opts, out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return outs if isinstance(outs, list) else [outs]


@lowering("If", "StatelessIf")
def lower_if(ctx):
    opts = {"then_subgraph_index": "@" + ctx.attr("then_branch"),
            "else_subgraph_index": "@" + ctx.attr("else_branch")}
    outs = ctx.emit("IF", list(ctx.inputs), opts, out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return outs if isinstance(outs, list) else [outs]
