"""Selective quantization: which ops stay float (``Converter.keep_float``), and the per-op records.

``keep_float`` is a list of entries; an entry keeps an op in float when it is

* the op's LiteRT kind: ``"FULLY_CONNECTED"``, ``"UNIDIRECTIONAL_SEQUENCE_LSTM"``, ...;
* the op's node name, as the quantization report lists it
  (``conv.report.quantization["ops"][i]["op"]``), e.g. ``"mlp_1/dense_2_1/MatMul"``;
* a name scope of it: ``"text_lstm_1/lstm_1"`` keeps every op whose name starts with
  ``"text_lstm_1/lstm_1/"``.

An entry that matches no op in the model is an error (a typo would otherwise leave the
model quantized with no word).

Example::

    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.keep_float = ["DEPTHWISE_CONV_2D", "mlp_1/dense_2_1"]
"""

from __future__ import annotations

from fuselite.ir import BlockwiseQuantization, Op
from fuselite.ir.arrays import digest
from fuselite.ir.core import op_name
from fuselite.quantize.options import QuantizationOptionError


class KeepFloat:
    """The ``keep_float`` entries of one conversion; :meth:`match` per op, :meth:`check_used` at the end."""

    def __init__(self, entries=()):
        if isinstance(entries, (str, bytes)) or not hasattr(entries, "__iter__"):
            raise QuantizationOptionError(f"keep_float must be a list of op kinds or node names, got {entries!r}")
        self.entries = [str(e) for e in entries]
        bad = [e for e in self.entries if not e.strip()]
        if bad:
            raise QuantizationOptionError("keep_float: an entry is empty")
        self.used: set[str] = set()

    def match(self, op: Op) -> str | None:
        """The first entry that keeps ``op`` in float, or None."""
        for e in self.entries:
            if self._names(e, op):
                self.used.add(e)
                return e
        return None

    def check_used(self, module) -> None:
        """An entry that kept nothing must still name an op of the model (else it is a typo: an error)."""
        unused = [e for e in self.entries if e not in self.used]
        if not unused:
            return
        ops = [op for fn in module.functions.values() for op in fn.ops]
        names = {op_name(op) for op in ops}
        typos = [e for e in unused if not any(self._names(e, op) for op in ops)]
        if typos:
            shown = ", ".join(sorted(names)[:12]) + (", ..." if len(names) > 12 else "")
            raise QuantizationOptionError(
                f"keep_float: {', '.join(map(repr, typos))} matches no op of the model (an entry is an op kind "
                f"such as 'FULLY_CONNECTED', a node name or a name scope); its ops: {shown}")

    @staticmethod
    def _names(entry: str, op: Op) -> bool:
        name = op_name(op)
        return entry == op.kind or entry == name or entry == op.name or name.startswith(entry.rstrip("/") + "/")


def add_record(records: list[dict], outputs: dict[int, int] | None, op: Op, rec: dict) -> None:
    """Append ``rec``; note in ``outputs`` (record index -> value uid) the op's first output."""
    records.append(rec)
    if outputs is not None and op.outputs:
        outputs[len(records) - 1] = op.outputs[0].uid


def record(fn, op: Op, mode: str, before: int, after: int, reason: str | None = None, **extra) -> dict:
    """One row of the report's per-op table."""
    rec = {"function": fn.name, "op": op_name(op), "kind": op.kind, "mode": mode,
           "weight_bytes_before": int(before), "weight_bytes_after": int(after)}
    if reason:
        rec["reason"] = reason
    rec.update(extra)
    return rec


class WeightBytes:
    """Bytes of the weights an op reads, before and after quantizing it, each constant counted once.

    Weights are the float constants and the quantized ones (not shapes or indices). A constant read by several ops (the steps of an unrolled GRU) counts with the first,
    so the per-op figures add up to the model's. A quantized constant counts its
    quantization parameters too (a float32 scale and an int64 zero point per channel).
    """

    def __init__(self):
        self._before: set = set()
        self._after: set = set()

    def before(self, op: Op) -> int:
        return self._count(op, self._before)

    def after(self, op: Op) -> int:
        return self._count(op, self._after)

    @staticmethod
    def _count(op: Op, seen: set) -> int:
        total = 0
        for v in op.inputs:
            if v is not None and v.producer is not None and v.producer.kind == "DEQUANTIZE":
                v = v.producer.inputs[0]  # a weight stored quantized, dequantized at load
            if v is None or not v.is_const or not (v.const.dtype.kind == "f" or v.quant):
                continue
            key = content_key(v.const), v.quant
            if key not in seen:
                seen.add(key)
                total += stored_bytes(v)
        return total


def stored_bytes(v) -> int:
    """The bytes a constant takes in the file: int4 two values a byte, with its scales (float32 each, or float16
    per block)."""
    if v.const.dtype.name == "int4":
        data = (v.const.size + 1) // 2
    else:
        data = v.const.nbytes
    if v.quant is None:
        return data
    if isinstance(v.quant, BlockwiseQuantization):
        return data + v.quant.scales.nbytes
    return data + 4 * len(v.quant.scale)


def content_key(array) -> tuple:
    """A key equal for arrays of the same dtype, shape and bytes."""
    return array.dtype.str, array.shape, digest(array)
