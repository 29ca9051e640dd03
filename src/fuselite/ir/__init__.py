"""Graph IR used between every stage of the pipeline."""

from fuselite.ir.core import Function, Module, Op, Quantization, Shape, Value

__all__ = ["Function", "Module", "Op", "Quantization", "Shape", "Value"]
