"""Masked logits before a SOFTMAX: masks recognised (a constant of 0 and large negatives, ``is_mask_fill``; one
computed at run time from a 0 / 1 value, ``is_mask_term``) and the masked values' ranges taken from their unmasked
entries (``masked_logits``, ``masked_range``), so the mask's -1e9 does not leave every logit the same integer.
Importable from ``int8_forms`` too."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Op, Value
from fuselite.quantize.int8_kernels import INTEGER_KERNELS, LARGE_NEGATIVE, SOFTMAX_CUTOFF
from fuselite.quantize.int8_params import FLOAT32


def is_mask_fill(v: Value | None) -> bool:
    """A constant that masks: every entry either 0 or at most LARGE_NEGATIVE, at least one of them the latter
    (``-1e9`` where Keras 3 selects, ``(1 - mask) * -1e9`` where tf_keras adds, the causal mask folded)."""
    if v is None or not v.is_const or v.const.dtype != FLOAT32 or not v.const.size:
        return False
    c = v.const
    return float(c.min()) <= LARGE_NEGATIVE and bool(np.all((c == 0) | (c <= LARGE_NEGATIVE)))


def is_mask_term(v: Value | None, ranges: dict[int, tuple[float, float]]) -> bool:
    """A mask computed at run time: a 0 / 1 value made from integers (a CAST of a padding mask, ``1 - that``)
    times a large negative constant (T5Gemma's ``(1 - mask) * -1e9``), entries 0 or at most LARGE_NEGATIVE; or a
    sum of such masks (T5Gemma2's padding and sliding-window masks) or a concatenation (its merged attention's
    self and cross masks side by side)."""
    p = v.producer if v is not None else None
    if p is not None and (p.kind == "ADD" and len(p.inputs) == 2 or p.kind == "CONCATENATION"):
        return all(is_mask_fill(u) or is_mask_term(u, ranges) for u in p.inputs)
    if p is not None and _moves_one(p):  # sliced, reshaped, broadcast
        return is_mask_term(p.inputs[0], ranges)
    if p is None or p.kind != "MUL" or len(p.inputs) != 2:
        return False
    fill = [u for u in p.inputs if u is not None and u.is_const and u.const.dtype == FLOAT32 and u.const.size
            and float(u.const.max()) <= LARGE_NEGATIVE]
    ones = [u for u in p.inputs if u is not None and not u.is_const]
    return len(fill) == 1 and len(ones) == 1 and _zero_one(ones[0], ranges)


def _mask_parts(v: Value) -> list[Value]:
    """A computed mask and the computed masks it sums, concatenates or moves."""
    p = v.producer
    if p is not None and (p.kind in ("ADD", "CONCATENATION") or _moves_one(p)):
        return [v] + [part for u in p.inputs[:1 if _moves_one(p) else None] if not u.is_const
                      for part in _mask_parts(u)]
    return [v]


def _moves_one(op: Op) -> bool:
    """``op`` moves the values of its first operand (a slice, reshape, broadcast: its integer output keeps the
    input's parameters), its other operands shapes and indices."""
    kernel = INTEGER_KERNELS.get(op.kind)
    return kernel is not None and kernel.output == "same" and op.kind != "CONCATENATION" and bool(op.inputs) \
        and op.inputs[0] is not None and op.inputs[0].dtype == FLOAT32 \
        and all(u is None or u.dtype != FLOAT32 for u in op.inputs[1:])


def _zero_one(v: Value, ranges: dict[int, tuple[float, float]]) -> bool:
    """``v`` comes from integers (a CAST of an integer or bool tensor, then SUB / ADD / MUL with constants) and
    its calibrated values lie in [0, 1]."""
    while v.uid not in ranges and v.producer is not None and v.producer.kind == "QUANTIZE":  # its integer twin
        v = v.producer.inputs[0]
    lo, hi = ranges.get(v.uid, (-1.0, 2.0))
    if lo < 0 or hi > 1:
        return False
    p = v.producer
    while p is not None and p.kind in ("SUB", "ADD", "MUL", "QUANTIZE"):  # (QUANTIZE: once made integer)
        computed = [u for u in p.inputs if u is not None and not u.is_const]
        if len(computed) != 1:
            return False
        p = computed[0].producer
    return p is not None and p.kind == "CAST" and p.inputs[0].dtype.kind in "iub"


def masked_low(lo: float, hi: float) -> float:
    """The value a mask added to logits is quantized at, where the sum's range is [lo, hi]: low enough that any
    logit up to twice the calibrated largest plus it clamps to the sum's lowest code (a SOFTMAX weight of 0)."""
    return lo - 2.0 * max(hi, 0.0)


def masked_logits(fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int]) -> None:
    """A SOFTMAX input that masks logits with a large negative constant (``SELECT_V2(mask, logits, -1e9)``, as
    Keras 3's masked softmax writes it, or ``ADD(logits, (1 - mask) * -1e9)``, as tf_keras does): its range is the
    logits' own, down to the cutoff below their lowest, not the constant's -1e9 (which leaves every logit the
    same integer: attention uniform). Below the lowest, not the largest: a row's maximum can be as low as the
    lowest unmasked logit (a causal mask's first row has one), and a fill only the cutoff below the largest left
    that row's masked entries their weight (a causal block's first-token logits 11.8% of the range, the official
    converter 1.9%; now 2.3%: ``tests/test_int8_accuracy.py``). A mask computed at run time (``is_mask_term``) and added goes down to
    ``masked_low``. The masked entries clamp to the lowest code, where their weight rounds to 0;
    the constant is quantized at the output's parameters (``int8_engine.Int8Function.integer``). Likewise each value between
    the mask and the SOFTMAX (``masked_range``: GPT-OSS's two masks, its sink logits concatenated and the row's
    maximum subtracted)."""
    terms: dict[int, float] = {}  # a computed mask's uid -> the lowest sum it is added into
    for op in fn.ops:
        if op.kind != "SOFTMAX":
            continue
        chain: list[Value] = []
        if masked_range(op.inputs[0], ranges, chain) is None:
            continue
        for v in chain:  # each masked value: its unmasked entries' range, down to the cutoff below their lowest
            lo, hi = masked_range(v, ranges, [])
            cutoff = SOFTMAX_CUTOFF["int16" if v.uid in wide else "int8"]
            ranges[v.uid] = (lo - cutoff, hi)
            if v.producer.kind == "ADD":  # a computed mask: its -1e9 at masked_low, its 0 exact
                for u in v.producer.inputs:
                    if is_mask_term(u, ranges):
                        for part in _mask_parts(u):
                            terms[part.uid] = min(terms.get(part.uid, 0.0), masked_low(*ranges[v.uid]))
    ranges.update({uid: (low, 0.0) for uid, low in terms.items()})


def masked_range(v: Value, ranges: dict[int, tuple[float, float]], chain: list[Value]) -> tuple | None:
    """The range of ``v``'s entries that a mask did not fill, where ``v`` holds logits masked with a large
    negative constant (None where it does not): through the masking ``SELECT_V2`` / ``ADD`` (masks chained, as a
    sliding window's and a padding mask), a ``CONCATENATION`` with other logits (attention sinks) and a ``SUB`` of
    the row's ``REDUCE_MAX``. The masked values found are appended to ``chain``, ``v`` last."""
    p = v.producer
    if p is None or v.uid not in ranges:
        return None
    found = None
    if p.kind in ("SELECT_V2", "ADD"):
        operands = p.inputs[1:] if p.kind == "SELECT_V2" else p.inputs
        kept = [u for u in operands if not is_mask_fill(u) and not is_mask_term(u, ranges)]
        if len(kept) == 1 and len(kept) != len(operands) and kept[0].uid in ranges:
            inner = masked_range(kept[0], ranges, chain) or ranges[kept[0].uid]
            found = (inner[0], ranges[v.uid][1])
    elif p.kind == "CONCATENATION":
        parts = [masked_range(u, ranges, chain) for u in p.inputs]
        if any(r is not None for r in parts) and all(r is not None or u.uid in ranges for u, r in zip(p.inputs, parts)):
            found = (min((r or ranges[u.uid])[0] for u, r in zip(p.inputs, parts)), ranges[v.uid][1])
    elif p.kind == "SUB" and p.inputs[1] is not None and p.inputs[1].uid in ranges:
        peak = p.inputs[1].producer
        if peak is not None and peak.kind == "REDUCE_MAX" and peak.inputs[0] is p.inputs[0]:
            inner = masked_range(p.inputs[0], ranges, chain)
            if inner is not None:  # a - max(a) over a row: at least the unmasked low less the largest maximum
                found = (inner[0] - ranges[p.inputs[1].uid][1], ranges[v.uid][1])
    if found is not None and all(u is not v for u in chain):
        chain.append(v)
    return found
