"""An integer function's edges and its ops in the report: the outputs as the options ask (float32, int8, uint8
or int16: ``output_edges``), how an integer op runs (``mode_of``: int8 or int16x8) and its operands' scales
(``operand_scales``). Importable from ``int8_forms`` too."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Op, Quantization, Value
from fuselite.quantize.int8_params import FLOAT32, INT8, INT16


def mode_of(op: Op) -> str:
    """How an integer op runs: int16x8 (int16 activations) or int8."""
    values = op.outputs or op.inputs[1:]  # ASSIGN_VARIABLE: the value assigned
    return "int16x8" if any(v is not None and v.dtype == INT16 for v in values) else "int8"


def operand_scales(op: Op) -> dict:
    """The quantization of an integer op's operands and results, for the report: [scale, zero point] per
    tensor; a per-channel weight as its smallest and largest scale."""
    def one(v: Value | None):
        if v is None or v.quant is None:
            return None
        if len(v.quant.scale) > 1:
            return {"per_channel": len(v.quant.scale), "min": min(v.quant.scale), "max": max(v.quant.scale)}
        return [v.quant.scale[0], v.quant.zero_point[0]]
    return {"inputs": [one(v) for v in op.inputs], "outputs": [one(v) for v in op.outputs]}


def output_edges(fn: Function, q, output_type: str) -> None:
    """The outputs as the options ask: float32 (DEQUANTIZE), int8 or uint8 (QUANTIZE); ``q``: the int8 engine
    quantizing ``fn`` (``int8_engine.Int8Function``)."""
    outs = []
    for v in fn.outputs:
        if v.dtype in (INT8, INT16) and output_type == "float32":
            d = fn.add_op("tfl.DEQUANTIZE", [v], [(FLOAT32, v.shape)], name=f"{v.name}_dequantize")
            v = d.outputs[0]
        elif v.dtype in (INT8, INT16, FLOAT32) and output_type == "uint8" and (v.quant is not None or v.uid in q.ranges):
            src = q.int8_input(v, None)
            base = src.quant
            r = fn.add_op("tfl.QUANTIZE", [src], [(np.dtype(np.uint8), v.shape)], name=f"{v.name}_uint8")
            r.outputs[0].quant = Quantization(base.scale, (base.zero_point[0] + 128,))
            v = r.outputs[0]
        elif v.dtype == FLOAT32 and output_type == "int8" and v.uid in q.ranges:
            r = fn.add_op("tfl.QUANTIZE", [v], [(INT8, v.shape)], name=f"{v.name}_int8")
            r.outputs[0].quant = q.params(v, INT8)
            v = r.outputs[0]
        elif v.dtype == INT16 and output_type == "int8":
            v = q.int8_input(v, None)
        elif v.dtype in (INT8, FLOAT32) and output_type == "int16" and (v.quant is not None or v.uid in q.ranges):
            v = q.integer_input(v, None, INT16)
        outs.append(v)
    fn.outputs = outs
