"""The passes other stages run again (``fuse-composites`` refines shapes, ``fuse-recognised-loops``
settles): declared here, below both the stages and ``fuselite/pipeline.py``, so nothing imports upward."""

from __future__ import annotations

from fuselite.passes.control_flow import specialize_loop_invariants
from fuselite.passes.dce import dce
from fuselite.passes.fold_tf import default_fold_budget, fold_tf
from fuselite.passes.manager import FixedPoint, Group, Pass
from fuselite.passes.shapes import refine_shapes

DCE = Pass("dce", lambda m, ctx: dce(m), "drop ops nothing uses and functions nothing calls")
FOLD = Pass("fold-constants", lambda m, ctx: fold_tf(m, fold_budget(m, ctx)),
            "evaluate TF ops whose inputs are all constants")


def fold_budget(module, ctx) -> int:
    """The bytes constant folding may allocate: ``fold_memory_budget``, else measured on the weights at the
    conversion's first fold (once: folded constants do not raise it)."""
    if ctx.fold_memory_budget is not None:
        return ctx.fold_memory_budget
    if ctx.fold_budget is None:
        ctx.fold_budget = default_fold_budget(module)
    return ctx.fold_budget


REFINE = Pass("refine-shapes", lambda m, ctx: refine_shapes(m),
              "re-run TensorFlow's shape inference with what is now known")
SPECIALIZE = Pass("specialize-loop-invariants", lambda m, ctx: specialize_loop_invariants(m),
                  "bind constants that loops and branches pass through unchanged into their bodies")
SETTLE = Group("settle", [
    FOLD,
    FixedPoint("fold-and-refine", [REFINE, FOLD], "shapes and folded constants feed each other", max_rounds=4),
    SPECIALIZE,
], "fold constants and shapes to a fixed point, then bind loop invariants")
