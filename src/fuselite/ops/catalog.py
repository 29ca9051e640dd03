"""What the converter knows about each LiteRT op kind, one entry per op (``OPS``), in the modules of this
package by op family (``layers``, ``activations``, ``elementwise``, ``reductions``, ``moves``, ``program``).

An entry (:class:`Facts`) says, as read in the kernels' ``Prepare`` / ``Eval`` (LiteRT ``tflite/kernels/``,
TFLite Micro ``tensorflow/lite/micro/kernels/``; ``docs/kernel-contracts.md``):

* ``integer``: its int8 kernel and the scale rule it requires (:class:`IntegerKernel`: ``SAME``, the input's
  parameters; ``RANGE``, its own calibrated range; ``AS_OUTPUT``, every input at the output's parameters;
  a fixed output range; the weight, bias and their scales), or ``no_integer``: why it has none (it stays float
  between DEQUANTIZE and QUANTIZE in every mode);
* ``int16``: the kernel takes int16 activations (zero point 0) with int8 weights and int64 biases (16x8) in
  LiteRT and TFLite Micro (``micro="int8"``: not in TFLite Micro), ``no_16x8``: integer, but no 16x8 kernel in
  LiteRT (wider means float); ``micro="float"``: integer in LiteRT, float only in TFLite Micro;
* the numbers its integer kernel's scale rules need: the input past which a fixed-range output saturates
  (``saturates``), an ADD / SUB's left shift (``left_shift``), a clamp's largest limit (``clamp_limit``);
* ``hybrid``: its dynamic-range form, int8 weights with float activations (:class:`HybridKernel`);
* ``versions``: the op version that expresses how it is used (``op_version.cc``'s rules, conditions in
  ``conditions.py``; cross-checked against the TF 2.21 converter), ``runtime``: the earliest LiteRT runtime per
  version (``runtime_version.cc``);
* ``micro_op``: the ``MicroMutableOpResolver`` method that registers it in TFLite Micro (read in
  ``micro_mutable_op_resolver.h`` at tflite-micro 90b983c; none: TFLite Micro has no kernel for it), and
  ``micro_limits``: the types and operands its TFLite Micro kernel does not take, with why.

The quantizers, the writer's op versions and the TFLite Micro target read the tables derived here
(``INTEGER_KERNELS``, ``INT16_KINDS``, ``HYBRID_KERNELS``, ``VERSION_RULES``, ``MICRO_RESOLVER``, ...). Adding an
integer rule for an op is its entry, with a test of the op on both LiteRT kernel sets; a new family of ops is one
new module here (every module of the package is imported; ``docs/architecture.md``, "an integer rule for an op").
"""

from __future__ import annotations

from fuselite.ops.facts import AS_OUTPUT, FLOAT_WEIGHTS_BELOW, RANGE, SAME, Facts, HybridKernel, IntegerKernel

__all__ = ["AS_OUTPUT", "RANGE", "SAME", "FLOAT_WEIGHTS_BELOW", "Facts", "HybridKernel", "IntegerKernel", "OPS",
           "add_entries", "register_op"]

OPS: dict[str, Facts] = {}


def add_entries(entries: dict[str, Facts]) -> None:
    """A family module's entries (an op kind in two entries is an error: one home per op)."""
    twice = sorted(set(entries) & set(OPS))
    if twice:
        raise ValueError(f"ops with a catalog entry already: {', '.join(twice)}")
    OPS.update(entries)
    derive()


# -- the tables the converter reads, derived (filled in place: ``register_op`` keeps them current) -------------
INTEGER_KERNELS: dict[str, IntegerKernel] = {}
NO_INTEGER_KERNEL: dict[str, str] = {}
INT16_KINDS: set[str] = set()
NO_16X8: set[str] = set()
MICRO_INT8_ONLY: set[str] = set()
MICRO_FLOAT_ONLY: set[str] = set()
SATURATES: dict[tuple[str, str], float] = {}
LEFT_SHIFT: dict[tuple[str, str], int] = {}
CLAMP_LIMIT: dict[str, float] = {}
HYBRID_KERNELS: dict[str, HybridKernel] = {}
VERSION_RULES: dict[str, list] = {}
RUNTIME_VERSIONS: dict[str, tuple] = {}
MICRO_RESOLVER: dict[str, str] = {}
MICRO_LIMITS: dict[str, tuple] = {}
_TABLES = (INTEGER_KERNELS, NO_INTEGER_KERNEL, INT16_KINDS, NO_16X8, MICRO_INT8_ONLY, MICRO_FLOAT_ONLY, SATURATES,
           LEFT_SHIFT, CLAMP_LIMIT, HYBRID_KERNELS, VERSION_RULES, RUNTIME_VERSIONS, MICRO_RESOLVER, MICRO_LIMITS)


def derive() -> None:
    """Fill the tables from the entries."""
    for table in _TABLES:
        table.clear()
    for k, f in OPS.items():
        if f.integer is not None:
            INTEGER_KERNELS[k] = f.integer
        if f.no_integer is not None:
            NO_INTEGER_KERNEL[k] = f.no_integer
        for flag, table in ((f.int16, INT16_KINDS), (f.no_16x8, NO_16X8), (f.micro == "int8", MICRO_INT8_ONLY),
                            (f.micro == "float", MICRO_FLOAT_ONLY)):
            if flag:
                table.add(k)
        SATURATES.update({(k, dtype): x for dtype, x in f.saturates.items()})
        LEFT_SHIFT.update({(k, dtype): n for dtype, n in f.left_shift.items()})
        if f.clamp_limit is not None:
            CLAMP_LIMIT[k] = f.clamp_limit
        if f.hybrid is not None:
            HYBRID_KERNELS[k] = f.hybrid
        if f.versions:
            VERSION_RULES[k] = list(f.versions)
        if f.runtime:
            RUNTIME_VERSIONS[k] = tuple(f.runtime)
        if f.micro_op is not None:
            MICRO_RESOLVER[k] = f.micro_op
        if f.micro_limits:
            MICRO_LIMITS[k] = tuple(f.micro_limits)


def register_op(kind: str, facts: Facts | None) -> Facts | None:
    """Set ``kind``'s entry (None: remove it) and the derived tables; returns the entry it replaced. For a rule
    tried from outside the package (a test, a worked example): the catalog's own entries are in its modules."""
    before = OPS.pop(kind, None)
    if facts is not None:
        OPS[kind] = facts
    derive()
    return before
