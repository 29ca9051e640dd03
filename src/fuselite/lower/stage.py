"""The lowering stage: replace every ``tf.*`` op by the ``tfl.*`` ops of its rule."""

from __future__ import annotations

from fuselite.errors import UnsupportedOpsError
from fuselite.ir import Module
from fuselite.lower.registry import LOWERINGS, LowerCtx, LowerError


def lower_module(module: Module) -> None:
    """Lower every function; all unsupported ops are reported together."""
    problems: list[str] = []
    for fn in module.functions.values():
        new_ops = []
        for op in fn.ops:
            if op.dialect != "tf":
                new_ops.append(op)
                continue
            rule = LOWERINGS.get(op.kind)
            if rule is None:
                problems.append(f"no lowering for TF op {op.describe()}")
                continue
            ctx = LowerCtx(fn, op, module)
            try:
                results = list(rule(ctx))
            except LowerError as e:
                problems.append(str(e))
                continue
            if op.attrs.get("_side_effect"):  # loops / branches that touch mutable variables
                for new in ctx.new_ops:
                    new.attrs["_side_effect"] = True
            new_ops.extend(ctx.new_ops)
            for old, new in zip(op.outputs, results):
                if new is not None and new is not old:
                    _rebind(fn, old, new)
        fn.ops = new_ops
    if problems:
        unique = list(dict.fromkeys(problems))
        raise UnsupportedOpsError(f"{len(unique)} op(s) cannot be converted to TFLite builtins:", unique)


def _rebind(fn, old, new):
    # Values flow forward: later ops (not yet visited) and the function outputs.
    for op in fn.ops:
        op.inputs = [new if v is old else v for v in op.inputs]
    fn.outputs = [new if v is old else v for v in fn.outputs]
