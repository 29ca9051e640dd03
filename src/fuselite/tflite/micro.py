"""TFLite Micro as a target: what its kernels and op resolver take, and the sources a firmware needs.

``RESOLVER`` maps each op ``MicroMutableOpResolver`` can register to its ``Add...`` method (each op's
``micro_op`` in ``ops/``: every ``Add...`` of ``tensorflow/lite/micro/micro_mutable_op_resolver.h`` in
tflite-micro at 90b983c, read, not guessed); :func:`micro_problems` lists each op of a model TFLM could not run, with why. Known
type limits of kernels it does have are checked too (docs/kernel-contracts.md §12, §14; the
kernels named below). It is a static check: the micro target also runs the model on TFLM's
interpreter (``runtime/micro.py``). :func:`micro_sources` writes what a firmware build needs
next to the model: the op resolver for exactly its ops, the model as a C array, the arena size.
"""

from __future__ import annotations

import re

from fuselite.ir.core import op_name
from fuselite.ops.catalog import MICRO_LIMITS, MICRO_RESOLVER

RESOLVER = MICRO_RESOLVER  # op -> the MicroMutableOpResolver method that registers it (each op's ops/ entry)
MICRO_BUILTINS = frozenset(RESOLVER)

def _type_limit(op) -> str | None:
    """A type or operand TFLite Micro's kernel for ``op`` does not take (its ops/ entry's ``micro_limits``)."""
    for condition, why in MICRO_LIMITS.get(op.kind, ()):
        if condition(op):
            return why(op) if callable(why) else why
    return None


def reset_witness(op) -> bool:
    """An op of fuselite's own reset witness (``passes/reset_witness.py`` marks them): added for LiteRT's
    ``reset_all_variables()`` on the LiteRT target only (TFLM's ``MicroInterpreter::Reset()`` resets resource
    variables itself, and target='micro' leaves the witness out), so it says nothing about the model."""
    return bool(op.attrs.get("_reset_witness"))


def micro_problems(module) -> list[str]:
    """Every op (kind, node, source line, why) TFLite Micro could not run; [] if none. (A dynamic batch is
    no problem: TFLM runs the written shape, batch 1; fuselite's reset witness is not counted: target='micro'
    does not add it.)"""
    problems = []
    for fn in module.functions.values():
        for op in fn.ops:
            if reset_witness(op):
                continue
            if op.kind == "CUSTOM":
                why = "a custom op: TFLite Micro has no kernel for it (you would register your own)"
            else:
                why = "no TFLite Micro kernel" if op.kind not in MICRO_BUILTINS else _type_limit(op)
            if why:
                problems.append(f"{op.kind} '{op_name(op)}'{' at ' + op.location if op.location else ''}: {why}")
    return problems


def dynamic_input_problems(module) -> list[str]:
    """Each signature input with a dimension besides the batch that is known only at run time: TFLite Micro runs
    the shapes written in the model (its kernels and arena plan are sized once)."""
    problems = []
    for fn in (module.functions[f] for f in dict.fromkeys(module.signatures.values())):
        for v in fn.inputs:
            if v.shape is None or None in v.shape[1:]:
                shape = "unknown" if v.shape is None else "[" + ", ".join("?" if d is None else str(d)
                                                                           for d in v.shape) + "]"
                sizes = [] if v.shape is None else \
                    ["None" if i == 0 and d is None else "<size>" if d is None else str(d) for i, d in enumerate(v.shape)]
                cli = ",".join("?" if s == "None" else s for s in sizes) or "..."
                problems.append(f"input '{v.name}' has a dynamic dimension (shape {shape}): TFLite Micro runs the "
                                "shapes written in the model only; give the input a static shape (in keras.Input, "
                                f"or convert with input_shapes={{'{v.name}': [{', '.join(sizes) or '...'}]}}, CLI "
                                f"--input-shape {v.name}:{cli}; the batch may stay dynamic: it runs as 1)")
    return problems


def _identifier(name: str) -> str:
    """``name`` as a C / C++ identifier (ASCII letters, digits and _; a file name may hold anything)."""
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name) or "model"
    ident = f"_{ident}" if ident[0].isdigit() else ident
    return f"{ident}_model" if ident in _CPP_KEYWORDS else ident


_CPP_KEYWORDS = frozenset(
    "alignas alignof and asm auto bool break case catch char class const constexpr continue decltype default delete "
    "do double else enum explicit export extern false float for friend goto if inline int long mutable namespace new "
    "noexcept not nullptr operator or private protected public register return short signed sizeof static struct "
    "switch template this throw true try typedef typename union unsigned using virtual void volatile while".split())


def _comment(name: str) -> str:
    """``name`` as text inside a ``//`` comment: no line break (or a backslash, which splices the next line into
    the comment), nothing but printable ASCII."""
    return re.sub(r"[^0-9A-Za-z_ .+-]", "_", name)


def resolver_source(kinds, name: str) -> str:
    """A C++ header registering exactly ``kinds`` (op names) with a ``MicroMutableOpResolver`` sized to them."""
    ns = _identifier(name)
    kinds = sorted(set(kinds))
    unknown = [k for k in kinds if k not in RESOLVER]
    if unknown:
        raise ValueError(f"no TFLite Micro resolver method for {', '.join(unknown)}")
    adds = "\n".join(f"  if (resolver.{RESOLVER[k]}() != kTfLiteOk) return kTfLiteError;" for k in kinds)
    guard = f"{ns.upper()}_OP_RESOLVER_H_"
    return f"""// The TFLite Micro op resolver for {_comment(name)}.tflite: exactly the {len(kinds)} op(s) it uses.
// Generated by fuselite. Use: {ns}::OpResolver resolver; {ns}::RegisterOps(resolver);
#ifndef {guard}
#define {guard}

#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"

namespace {ns} {{

constexpr int kOpCount = {len(kinds)};
using OpResolver = tflite::MicroMutableOpResolver<kOpCount>;

inline TfLiteStatus RegisterOps(OpResolver& resolver) {{
{adds}
  return kTfLiteOk;
}}

}}  // namespace {ns}

#endif  // {guard}
"""


_HEX = [f"0x{b:02x}," for b in range(256)]


def model_sources(data: bytes, name: str, arena_bytes: int) -> tuple[str, str]:
    """(header, source): the model as a 16-byte-aligned C array (what ``xxd -i`` gives) and the arena size."""
    ns = _identifier(name)
    guard = f"{ns.upper()}_MODEL_DATA_H_"
    header = f"""// {_comment(name)}.tflite as a C array, and the tensor arena TFLite Micro needs for it. Generated by fuselite.
#ifndef {guard}
#define {guard}

#include <cstddef>

namespace {ns} {{

extern const unsigned char kModel[];  // 16-byte aligned, as TFLite Micro reads it in place
extern const unsigned int kModelSize;
// Measured: the smallest arena TFLite Micro's interpreter allocated and ran this model in
// (its recording allocator; a firmware's plain allocator needs a little less).
constexpr size_t kTensorArenaSize = {arena_bytes};

}}  // namespace {ns}

#endif  // {guard}
"""
    rows = "\n".join("  " + " ".join(_HEX[b] for b in data[i:i + 16]) for i in range(0, len(data), 16))
    source = f"""// {_comment(name)}.tflite ({len(data)} bytes). Generated by fuselite.
#include "{ns}_model_data.h"

namespace {ns} {{

alignas(16) const unsigned char kModel[] = {{
{rows}
}};
const unsigned int kModelSize = {len(data)};

}}  // namespace {ns}
"""
    return header, source


def micro_source_names(name: str) -> list[str]:
    """The file names :func:`micro_sources` gives for a model named ``name`` (checked before converting)."""
    ns = _identifier(name)
    return [f"{ns}_op_resolver.h", f"{ns}_model_data.h", f"{ns}_model_data.cc"]


def micro_sources(data: bytes, kinds, name: str, arena_bytes: int) -> dict[str, str]:
    """File name -> text of the sources a firmware build needs next to the model."""
    header, source = model_sources(data, name, arena_bytes)
    return dict(zip(micro_source_names(name), (resolver_source(kinds, name), header, source)))
