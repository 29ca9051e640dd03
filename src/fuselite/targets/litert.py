"""target="litert" (the default): the stock LiteRT interpreter, with XNNPACK or its builtin kernels."""

from __future__ import annotations

from typing import Any

from fuselite.targets.base import Target, register


class LiteRT(Target):
    name = "litert"
    help = "litert: the stock LiteRT interpreter (default)"
    what = "the stock LiteRT interpreter"

    def selects(self, group: str, ctx: Any) -> bool:
        if group == "reset-witness":  # LiteRT's reset_all_variables() resets resource variables too (the
            # Interpreter's: the witness is a variable tensor, which CompiledModel's loader refuses)
            return not ctx.integer_only and bool(ctx.report.mutable_variables) and not ctx.for_compiled_model
        if group == "on-micro":  # asked for TFLite Micro's sources: the model is run there for its arena
            return bool(ctx.micro_sources)
        return False


LITERT = register(LiteRT())
