"""Writing the file: ops ordered, the schema-v3 flatbuffer written, memory handed back first for a large model.

Each pass body is ``(module, ctx)``; ``fuselite/pipeline.py`` declares where it runs."""

from __future__ import annotations

import gc
from collections import Counter

from fuselite.errors import ConversionError
from fuselite.tflite.flatbuffer import buffer_offsets_of, constant_bytes, return_freed_memory, write_flatbuffer
from fuselite.tflite.micro import micro_problems


def count_ops(module) -> dict[str, int]:
    """Op kinds -> how many, over every function (for the report)."""
    c: Counter = Counter()
    for fn in module.functions.values():
        c.update(op.kind for op in fn.ops)
    return dict(sorted(c.items()))


COLLECT_ABOVE = 4 << 20  # bytes of constants above which a write collects garbage first


def ordered_flatbuffer(module, tensor_names: dict | None = None, provenance=None,
                       buffer_offsets: bool | None = None, progress=None) -> bytes:
    """The module written (its ops ordered first). The ops the passes replaced reference their values and back
    (cycles): their constants (the weights before lowering or quantization replaced them) are freed only by the
    cycle collector, and the writer frees each constant as it copies it into the file only where nothing else
    holds it. For a large model they are collected first (a full collection costs ~0.1 s)."""
    for fn in module.functions.values():
        fn.topo_sort()
    if constant_bytes(module) > COLLECT_ABOVE:
        gc.collect()
        return_freed_memory()
    return write_flatbuffer(module, tensor_names, provenance, buffer_offsets, progress)


def export_flatbuffer(module, ctx) -> None:
    ctx.tensor_names = {}
    if ctx.buffer_offsets and ctx.on_micro:
        raise ConversionError(f"target={ctx.target!r}: TFLite Micro's loader reads constants inside the flatbuffer "
                              "only (no Buffer.offset): buffer_offsets=True is for LiteRT")
    ctx.output = ordered_flatbuffer(module, ctx.tensor_names, ctx.provenance, ctx.buffer_offsets,
                                    getattr(ctx, "progress", None))
    offsets = buffer_offsets_of(ctx.output)
    if ctx.on_micro and offsets:
        raise ConversionError(f"target={ctx.target!r}: the constants take {constant_bytes(module) / 2**30:.2f} GiB, "
                              "more than a flatbuffer holds, and TFLite Micro's loader reads them only inside one")
    if offsets:
        ctx.report.warn(("" if ctx.buffer_offsets else f"the constants take {constant_bytes(module) / 2**30:.2f} GiB, "
                         "more than a flatbuffer holds: ") + "written after the flatbuffer (Buffer.offset / size, "
                        "as LiteRT and the official converter's _experimental_use_buffer_offset read and write them)")
    ctx.report.ops_after = count_ops(module)
    problems = micro_problems(module)
    ctx.report.micro = {"target": ctx.target, "runs": not problems, "problems": problems}
    ctx.report.size_bytes = len(ctx.output)
    ctx.report.subgraphs = len(module.functions)
