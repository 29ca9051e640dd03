"""Write a fuselite Module (lowered to ``tfl.*`` ops) as a TFLite schema-v3 flatbuffer.

Layout: buffer 0 is the empty sentinel; every constant gets a 16-byte aligned buffer
(identical constants share one); one subgraph per function, entry functions first in
signature order; signature defs carry the user's input/output names.

This module lays the file out and fills it (``FlatbufferWriter.write``: the constants inline, or after the
flatbuffer at ``Buffer.offset`` / ``size``), decides where the constants go (``needs_buffer_offsets``) and is the
entry point (``write_flatbuffer``). What it writes is built in ``model_builder`` (the ModelT: subgraphs, tensors,
operators, signatures, metadata), from ``tensors`` (tensor types, int4 and string bytes, quantization parameters),
``op_options`` (options tables, ``check_op``) and ``buffers`` (aligned buffers, the file's memory); their public
names are importable from here too.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from fuselite.errors import ConversionError
from fuselite.ir import Module
from fuselite.tflite.buffers import buffer_view, new_file, put_bytes, reserved_builder, return_freed_memory
from fuselite.tflite.model_builder import ModelBuilder
from fuselite.tflite.op_options import check_op, options_table  # noqa: F401  (importable from here, as before)
from fuselite.tflite.provenance import Provenance
from fuselite.tflite.tensors import pack_int4, tensor_type  # noqa: F401  (importable from here, as before)

PROGRESS_FROM = 64 << 20  # a file this large tells the progress line how much of it is written
PROGRESS_EVERY = 0.5  # seconds between those lines
_TRIM_ABOVE = 1 << 20  # a constant this large, freed as the file fills, is given back to the system at once


class FlatbufferWriter(ModelBuilder):
    """Lays out the ModelT that ``ModelBuilder`` builds and writes it into the file (``write``)."""

    def write(self, buffer_offsets: bool = False, progress: Callable[[str], None] | None = None) -> bytes:
        """The file. ``buffer_offsets``: every constant after the flatbuffer, found by ``Buffer.offset`` / ``size``
        (schema.fbs: from the start of the file, valid above 1), each 16-byte aligned, then 16 zero bytes (XNNPACK
        reads past a buffer's end), as the official converter lays such a file out (flatbuffer_export.cc); the
        metadata stays inline, with ``buffer_location`` = "outside flatbuffers" as it writes.

        Layout first, then one copy of the constants: the builder reserves each inline buffer's space without
        writing it, the file is allocated once at its final size, and each constant is copied into it and its
        value rebound to a view of the file (``_fill``), so the module's arrays are freed one by one as the file
        fills: the constants are held about once, not twice (the builder, then the file). ``progress``: told how
        much of a large file (from PROGRESS_FROM bytes) is written, as it is."""
        for name in self.order:
            self.model.subgraphs.append(self._subgraph(self.module.functions[name]))
        self._signatures()
        self._metadata()
        outside = []
        if buffer_offsets:
            self._add_metadata(BUFFER_LOCATION, b"outside flatbuffers")
            for index, buf in enumerate(self.model.buffers):
                if index not in self._metadata_buffers and buf.nbytes:
                    buf.outside = True
                    outside.append(index)
        inline = sum(b.nbytes + BUFFER_ALIGNMENT for b in self.model.buffers if not b.outside)
        builder = reserved_builder(inline + _GRAPH_ALLOWANCE)
        builder.Finish(self.model.Pack(builder), file_identifier=b"TFL3")
        self._digests.clear()  # (it holds the arrays: they go as the file fills)
        head, end = builder.Head(), len(builder.Bytes)
        flat = end - head
        places = {i: flat - b.from_end for i, b in enumerate(self.model.buffers) if b.from_end is not None}
        if outside and flat > MAX_FLATBUFFER_BYTES:
            raise ConversionError(f"the model's graph alone takes {flat / 2**30:.2f} GiB: a flatbuffer holds "
                                  "under 2 GiB even with its constants outside it")
        at = flat
        for index in outside:
            at += -at % BUFFER_ALIGNMENT
            places[index] = at
            at += self.model.buffers[index].nbytes
        size = at + (BUFFER_ALIGNMENT + (-at % BUFFER_ALIGNMENT) if outside else 0)  # read past the last one
        data, out = new_file(size)
        start = 0  # the flatbuffer's own bytes, between the reserved spaces (never read: they stay unresident)
        for place, n in sorted((places[i], self.model.buffers[i].nbytes) for i in places if places[i] < flat):
            out[start:place] = np.frombuffer(builder.Bytes, np.uint8, place - start, head + start)
            start = place + n
        out[start:flat] = np.frombuffer(builder.Bytes, np.uint8, flat - start, head + start)
        del builder  # (its anonymous memory unmapped)
        if outside:
            self._patch_offsets(out, outside, places)
        self._fill(data, out, places, progress if size >= PROGRESS_FROM else None)
        return data

    def _patch_offsets(self, out: np.ndarray, outside: list[int], places: dict[int, int]) -> None:
        """The outside buffers' ``offset`` / ``size`` placeholders (1 / 1) set to where they are."""
        model = schema.Model.GetRootAs(out, 0)
        for index in outside:
            table = model.Buffers(index)._tab
            for slot, value in ((_BUFFER_OFFSET_SLOT, places[index]),
                                (_BUFFER_SIZE_SLOT, self.model.buffers[index].nbytes)):
                field = table.Offset(slot)
                if not field:
                    raise ConversionError(f"buffer {index}: its offset placeholder is missing from the flatbuffer")
                struct.pack_into("<Q", out, table.Pos + field, value)

    def _fill(self, data: bytes, out: np.ndarray, places: dict[int, int],
              progress: Callable[[str], None] | None = None) -> None:
        """Each buffer's bytes into the file at its place; its constants then view the file, and the buffer lets
        go of its array (freed here where nothing else holds it)."""
        done, shown = 0, time.perf_counter()
        for index, place in places.items():
            buf = self.model.buffers[index]
            put_bytes(out, place, buf.data)
            for v in buf.owners:
                v.const = buffer_view(data, place, v.const)
            done += buf.nbytes
            if progress is not None and time.perf_counter() - shown > PROGRESS_EVERY:
                progress(f"export: {done / 2**20:,.0f} of {len(data) / 2**20:,.0f} MiB written")
                shown = time.perf_counter()
            large = buf.nbytes >= _TRIM_ABOVE
            buf.data, buf.owners = None, []
            if large:
                return_freed_memory()


MAX_FLATBUFFER_BYTES = 2**31 - 1  # a flatbuffer's offsets are 32-bit signed: one is under 2 GiB
_GRAPH_ALLOWANCE = 64 << 20  # room kept for the graph itself (tensors, ops, names)
BUFFER_ALIGNMENT = 16  # each constant after the flatbuffer starts at a multiple of this (flatbuffer_export.cc)
BUFFER_LOCATION = "buffer_location"  # the metadata the official converter writes in a file with buffer offsets
_BUFFER_OFFSET_SLOT, _BUFFER_SIZE_SLOT = 6, 8  # Buffer's fields 1 and 2 (data, offset, size): vtable slots


def constant_bytes(module: Module) -> int:
    """The bytes of the module's distinct constant arrays (what the file's buffers hold, before deduplication)."""
    seen, total = set(), 0
    for fn in module.functions.values():
        for op in fn.ops:
            for v in op.inputs:
                if v is not None and v.is_const and id(v.const) not in seen:
                    seen.add(id(v.const))
                    total += v.const.nbytes
    return total


def buffer_offsets_of(model: bytes) -> bool:
    """Whether a .tflite file keeps constants after its flatbuffer (a buffer with an offset above 1)."""
    m = schema.Model.GetRootAs(model, 0)
    return any(m.Buffers(i).Offset() > 1 for i in range(m.BuffersLength()))


def needs_buffer_offsets(module: Module, buffer_offsets: bool | None) -> bool:
    """Whether the file keeps its constants after the flatbuffer: as asked, or (None) where they would not fit
    in one; asked not to, a model that does not fit is a clear error before any byte is built."""
    if buffer_offsets:
        return True
    total = constant_bytes(module)
    if total + _GRAPH_ALLOWANCE <= MAX_FLATBUFFER_BYTES:
        return False
    if buffer_offsets is None:
        return True
    raise ConversionError(
        f"the model's constants take {total / 2**30:.2f} GiB: a flatbuffer holds under 2 GiB, and buffer_offsets="
        "False keeps them inside it (leave buffer_offsets unset, or True, to write them after it, as LiteRT reads "
        "them; or quantize the weights, optimizations=[tf.lite.Optimize.DEFAULT], 4x smaller)")


def write_flatbuffer(module: Module, tensor_names: dict[int, str] | None = None,
                     provenance: Provenance | None = None, buffer_offsets: bool | None = None,
                     progress: Callable[[str], None] | None = None) -> bytes:
    """Serialise a fully lowered module to ``.tflite`` bytes.

    ``tensor_names``, when given, is filled with the name each value was written under
    (``value.uid`` -> tensor name), so a tool can find a value's tensor in the file.
    ``provenance``: what made it (the description and ``CONVERSION_METADATA``).
    ``buffer_offsets``: the constants after the flatbuffer (``Buffer.offset`` / ``size``): True, False, or None
    (where they pass 2 GiB). ``progress``: a progress line's callable, told how much of a large file is written.
    """
    offsets = needs_buffer_offsets(module, buffer_offsets)
    writer = FlatbufferWriter(module, provenance)
    data = writer.write(offsets, progress)
    if tensor_names is not None:
        tensor_names.update(writer.tensor_names)
    return data
