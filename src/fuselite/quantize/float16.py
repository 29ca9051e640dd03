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
Ops named in ``keep_float`` go on reading the float32 constants, and so do constants of
fewer than :data:`MIN_ELEMENTS` elements (scalars, small biases): a ``DEQUANTIZE`` op and
its output tensor take about 150 bytes of the file, more than float16 saves on them
(2 bytes per element), and they keep their full precision.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module
from fuselite.quantize.select import KeepFloat, WeightBytes, content_key, record
from fuselite.quantize.select import add_record as _add

FLOAT32 = np.dtype(np.float32)
MIN_ELEMENTS = 32  # smaller float32 constants stay float32 (their DEQUANTIZE would cost more bytes)


def quantize_float16(module: Module, keep: KeepFloat | None = None,
                     outputs: dict[int, int] | None = None) -> list[dict]:
    """Store float32 constant operands as float16 + DEQUANTIZE; one record per op that read float weights.

    A record is ``{"function", "op", "kind", "mode", "weight_bytes_before",
    "weight_bytes_after"}`` (``mode`` "float16", or "float" with a ``reason``); a
    constant read by several ops is counted with the first, and equal constants share one
    ``DEQUANTIZE``.
    """
    keep = keep or KeepFloat()
    records: list[dict] = []
    for fn in module.functions.values():
        halves: dict[tuple, object] = {}  # float32 constant contents -> its DEQUANTIZE's output
        counter = WeightBytes()
        for op in list(fn.ops):
            slots = [i for i, v in enumerate(op.inputs)
                     if v is not None and v.is_const and v.const.dtype == FLOAT32 and v.const.size >= MIN_ELEMENTS]
            if op.kind == "DEQUANTIZE" or not slots:
                continue
            before = counter.before(op)
            entry = keep.match(op)
            if entry is not None:
                _add(records, outputs, op, record(fn, op, "float", before, counter.after(op), f"keep_float {entry!r}"))
                continue
            for i in slots:
                v = op.inputs[i]
                key = content_key(v.const)
                if key not in halves:
                    half = fn.const(v.const.astype(np.float16), v.name)
                    deq = fn.make_op("tfl.DEQUANTIZE", [half], [(FLOAT32, v.shape)], name=f"{v.name}_dequantize")
                    fn.ops.insert(fn.ops.index(op), deq)
                    halves[key] = deq.outputs[0]
                op.inputs[i] = halves[key]
            _add(records, outputs, op, record(fn, op, "float16", before, counter.after(op)))
    keep.check_used(module)
    return records
