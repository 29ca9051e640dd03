"""Quantization-aware training: the ranges a model's FakeQuant ops were trained with.

TensorFlow's ``FakeQuantWithMinMaxVars`` / ``…Args`` / ``…PerChannel`` (what tfmot's
``quantize_model`` and ``tf.quantization.fake_quant_*`` put into a graph) round a tensor
to the grid of ``num_bits`` integers spanning ``[min, max]``, nudged so that zero is on the
grid (``fake_quant_ops_functor.h``: ``Nudge``). Lowering writes each one as a QUANTIZE /
DEQUANTIZE pair carrying those parameters (:func:`nudged`) — the float model computes what
TensorFlow computes, as ``tf.lite.TFLiteConverter`` writes it. Full-integer quantization then
takes the pairs out (:func:`absorb_fake_quants`): the tensor each one guards gets its trained
parameters, so a QAT model needs no representative dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuselite.ir import Function, Module, Quantization

FAKE_QUANT_OPS = ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVarsPerChannel")
INT8_MIN = -128  # the integer grid [quant_min, quant_max] of TF (0 or 1 .. 2^bits - 1) stored in int8: minus 128


@dataclass(frozen=True)
class FakeQuantGrid:
    """One FakeQuant op's grid, as TensorFlow nudges it: ``real = scale * (q - zero_point)`` for the
    int8 ``q`` in ``[q_min, q_max]`` (a sub-range of int8 for fewer bits or ``narrow_range``)."""

    scale: np.ndarray  # one per channel (the last axis) or one
    zero_point: np.ndarray  # int8 zero points
    q_min: int
    q_max: int

    @property
    def nudged_min(self) -> np.ndarray:
        return (self.q_min - self.zero_point) * self.scale

    @property
    def nudged_max(self) -> np.ndarray:
        return (self.q_max - self.zero_point) * self.scale

    @property
    def full_int8(self) -> bool:
        """The grid is all of int8: a QUANTIZE's own saturation is TensorFlow's clamp."""
        return self.q_min == -128 and self.q_max == 127

    def quantization(self, axis: int) -> Quantization:
        return Quantization(tuple(float(s) for s in self.scale), tuple(int(z) for z in self.zero_point), axis)


class FakeQuantError(ValueError):
    """A FakeQuant op whose range TensorFlow itself would reject (min >= max, num_bits outside 2..8)."""


def nudged(lo, hi, num_bits: int = 8, narrow_range: bool = False) -> FakeQuantGrid:
    """TensorFlow's ``Nudge`` (``fake_quant_ops_functor.h``) for each ``[lo, hi]``, in int8 terms.

    >>> g = nudged(-3.0, 3.0); float(g.scale[0]), int(g.zero_point[0])
    (0.023529411764705882, 0)
    """
    if not 2 <= int(num_bits) <= 8:
        raise FakeQuantError(f"num_bits={num_bits}: TensorFlow's FakeQuant takes 2 to 8 bits")
    lo, hi = np.atleast_1d(np.asarray(lo, np.float64)), np.atleast_1d(np.asarray(hi, np.float64))
    if np.any(~np.isfinite(lo)) or np.any(~np.isfinite(hi)) or np.any(lo >= hi):
        raise FakeQuantError(f"min {lo.tolist()} is not below max {hi.tolist()}")
    # TensorFlow computes in float32; the nudged grid is what its kernel rounds to
    lo, hi = lo.astype(np.float32), hi.astype(np.float32)
    quant_min = np.float32(1 if narrow_range else 0)
    quant_max = np.float32((1 << int(num_bits)) - 1)
    scale = (hi - lo) / (quant_max - quant_min)
    zero_from_min = quant_min - lo / scale
    zero = np.where(zero_from_min < quant_min, quant_min,
                    np.where(zero_from_min > quant_max, quant_max, np.round(zero_from_min)))
    return FakeQuantGrid(scale=scale.astype(np.float64), zero_point=zero.astype(np.int64) + INT8_MIN,
                         q_min=int(quant_min) + INT8_MIN, q_max=int(quant_max) + INT8_MIN)


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
        dq, x, quant = readers[0], q.inputs[0], q.outputs[0].quant
        if len(quant.scale) != 1:
            continue  # per-channel on an activation: no per-channel activations in LiteRT; it stays float
        lo, hi = (float(quant.scale[0] * (b - quant.zero_point[0])) for b in q.attrs["_grid"])
        ranges[x.uid] = (lo, hi)
        fixed[x.uid] = quant
        fn.replace_uses(dq.outputs[0], x)
        drop += [q, dq]
    if drop:
        gone = {id(op) for op in drop}
        fn.ops = [op for op in fn.ops if id(op) not in gone]
    return len(drop) // 2
