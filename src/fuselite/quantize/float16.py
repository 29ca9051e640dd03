"""float16 weights: every float32 constant an op reads is stored as float16 and dequantized.

As TensorFlow's converter does (``QuantizeWeightsFloat16`` in
``tensorflow/compiler/mlir/lite/quantization/lite/toco_legacy/quantize_weights.cc``):
each float32 constant input of an op becomes a float16 constant read by one
``DEQUANTIZE`` (to float32, op version 3 for a float16 input), placed before its first
reader; every reader then reads the ``DEQUANTIZE``'s output. This holds for every op
kind fuselite emits, the fused sequence ops, ``EMBEDDING_LOOKUP``, the unrolled GRU and
the initial values of resource variables included: LiteRT computes a ``DEQUANTIZE`` of a
constant on the first invoke and keeps it, so inference runs the same float kernels on
the rounded weights. (TF 2.21 itself takes an MLIR pass to the same result by default.)
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module

FLOAT32 = np.dtype(np.float32)


def quantize_float16(module: Module) -> list[dict]:
    """Store float32 constant operands as float16 + DEQUANTIZE; one record per op whose weights changed.

    A record is ``{"function", "op", "kind", "mode": "float16", "weight_bytes_before",
    "weight_bytes_after"}``; a constant read by several ops is counted with the first.
    """
    records: list[dict] = []
    for fn in module.functions.values():
        weights: dict[int, object] = {}
        first_reader: dict[int, object] = {}
        for op in fn.ops:
            if op.kind == "DEQUANTIZE":
                continue
            for v in op.inputs:
                if v is not None and v.is_const and v.const.dtype == FLOAT32 and v.uid not in weights:
                    weights[v.uid] = v
                    first_reader[v.uid] = op
        by_op: dict[int, dict] = {}
        for uid, v in weights.items():
            reader = first_reader[uid]
            half = fn.const(v.const.astype(np.float16), v.name)
            deq = fn.make_op("tfl.DEQUANTIZE", [half], [(FLOAT32, v.shape)], name=f"{v.name}_dequantize")
            fn.ops.insert(fn.ops.index(reader), deq)
            fn.replace_uses(v, deq.outputs[0])
            rec = by_op.setdefault(id(reader), {"function": fn.name, "op": reader.name, "kind": reader.kind,
                                                "mode": "float16", "weight_bytes_before": 0, "weight_bytes_after": 0})
            rec["weight_bytes_before"] += v.const.nbytes
            rec["weight_bytes_after"] += half.const.nbytes
        records += by_op.values()
    return records
