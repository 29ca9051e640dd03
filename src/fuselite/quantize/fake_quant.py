"""Quantization-aware training: the ranges a model's FakeQuant ops were trained with.

TensorFlow's ``FakeQuantWithMinMaxVars`` / ``…Args`` / ``…PerChannel`` (what tfmot's
``quantize_model`` and ``tf.quantization.fake_quant_*`` put into a graph) round a tensor
to the grid of ``num_bits`` integers spanning ``[min, max]``, nudged so that zero is on the
grid (``fake_quant_ops_functor.h``: ``Nudge``). Lowering writes each one as a QUANTIZE /
DEQUANTIZE pair carrying those parameters (``lower/quant.py``) — the float model computes what
TensorFlow computes, as ``tf.lite.TFLiteConverter`` writes it. Full-integer quantization then
takes the pairs out (:func:`absorb_fake_quants`): the tensor each one guards gets its trained
parameters, so a QAT model needs no representative dataset.
"""

from __future__ import annotations

from fuselite.ir import Function, Module, Quantization

FAKE_QUANT_OPS = ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVarsPerChannel")


def is_fake_quant_pair(op) -> bool:
    """A QUANTIZE that lowering wrote for a FakeQuant op (its DEQUANTIZE follows)."""
    return op.kind == "QUANTIZE" and bool(op.attrs.get("_fake_quant"))


def absorb_fake_quants(module: Module, ranges: dict[int, tuple[float, float]],
                       fixed: dict[int, Quantization]) -> int:
    """Take each FakeQuant's QUANTIZE / DEQUANTIZE pair out of the signature functions: the value it
    guarded gets the trained range (in ``ranges``, replacing a calibrated one) and its exact int8
    parameters (in ``fixed``); what read the pair's output reads that value. Returns how many."""
    count = 0
    for fname in dict.fromkeys(module.signatures.values()):
        fn = module.functions[fname]
        count += _absorb(fn, ranges, fixed)
    return count


def _absorb(fn: Function, ranges: dict, fixed: dict) -> int:
    drop = []
    for q in fn.ops:
        if not is_fake_quant_pair(q):
            continue
        readers = fn.uses(q.outputs[0])
        if len(readers) != 1 or readers[0].kind != "DEQUANTIZE" or fn.is_output(q.outputs[0]):
            continue
        dq, x, quant = readers[0], q.inputs[0], q.outputs[0].quant  # per tensor (lower/quant.py)
        lo, hi = (float(quant.scale[0] * (b - quant.zero_point[0])) for b in q.attrs["_grid"])
        ranges[x.uid] = (lo, hi)
        fixed[x.uid] = quant
        fn.replace_uses(dq.outputs[0], x)
        drop += [q, dq]
    if drop:
        gone = {id(op) for op in drop}
        fn.ops = [op for op in fn.ops if id(op) not in gone]
    return len(drop) // 2
