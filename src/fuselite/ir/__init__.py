"""Graph IR used between every stage of the pipeline."""

from fuselite.ir.core import BlockwiseQuantization, Function, Module, Op, Quantization, Shape, Value

__all__ = ["BlockwiseQuantization", "Function", "Module", "Op", "Quantization", "Shape", "Value"]
