"""Operator versions: the lowest version of each builtin that expresses how it is used, by the rules of its
entry in ``ops/`` (``Facts.versions``, ``Facts.runtime``; the conditions in ``ops/conditions.py``).

Rules follow ``GetBuiltinOperatorVersion`` in ``tensorflow/lite/tools/versioning/op_version.cc``
(now ``tensorflow/compiler/mlir/lite/tools/versioning/op_version.cc``) and the runtime
table of ``runtime_version.cc``; they were cross-checked against the TF 2.21 converter.

Like ``GetOpSignature`` (``op_signature.cc``), a rule sees each tensor as this exporter
writes it: unknown dims are written as 1 in ``shape`` (so they never count as a
broadcast), an unknown rank is written as rank 0, a missing optional input (``None``,
written as -1) still counts as an input. Hybrid ops (int8 weights, float activations:
dynamic-range quantization) follow op_version.cc too, per-channel where op_signature.cc
says so (a weight with one scale per output channel). Full-integer forms are left out:
fuselite emits none yet. Ops not listed use version 1.
"""

from __future__ import annotations

from fuselite.ir import Module, Op
from fuselite.ops.catalog import RUNTIME_VERSIONS, VERSION_RULES


def op_version(op: Op) -> int:
    for cond, version in VERSION_RULES.get(op.kind, ()):
        if cond(op):
            return version
    return 1


def runtime_version(kind: str, version: int) -> str | None:
    """Earliest runtime for ``kind`` at ``version`` (None when the table has no entry)."""
    row = RUNTIME_VERSIONS.get(kind, ())
    return row[version - 1] if 0 < version <= len(row) else None


def _parse(v: str) -> tuple:
    return tuple(int(x) for x in v.split("."))


def min_runtime_version(module: Module) -> str:
    """Largest runtime version over all ops ("" if none is known, as LiteRT's tooling writes)."""
    best = ""
    for fn in module.functions.values():
        for op in fn.ops:
            rv = runtime_version(op.kind, op_version(op))
            if rv and (not best or _parse(rv) > _parse(best)):
                best = rv
    return best
