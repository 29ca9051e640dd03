"""The buffers of a TFLite flatbuffer and the memory the file is written in: a 16-byte aligned buffer whose space
the builder reserves without writing it (or, outside the flatbuffer, placeholders for ``Buffer.offset`` / ``size``),
a builder over untouched anonymous memory, the file allocated once at its final size and filled without a temporary
copy, read-only views of it, and freed memory given back to the system. ``flatbuffer.FlatbufferWriter.write``
lays the file out with them."""

from __future__ import annotations

import ctypes
import mmap
import sys

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema


class AlignedBuffer(schema.BufferT):
    """A BufferT whose data vector is 16-byte aligned (LiteRT maps weights in place), its space reserved in the
    builder and its bytes written into the finished file itself (``FlatbufferWriter._fill``), or, ``outside``,
    written after the flatbuffer (``Buffer.offset`` / ``size``).

    ``data``: the bytes, as an array of any layout (a transposed weight stays a view until it is written).
    ``owners``: the constant values whose array ``data`` is; once written, each owner's array becomes a read-only
    view of the file, and the module's own copy is freed, one constant at a time.
    """

    def __init__(self, data: np.ndarray | None = None, owners=()):
        super().__init__()
        self.data = data
        self.owners = list(owners)
        self.from_end: int | None = None  # where its space was reserved: bytes from the builder's end

    outside = False  # written after the flatbuffer (Buffer.offset / size), placeholders 1 / 1 here

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else int(self.data.nbytes)

    def Pack(self, builder):
        if self.outside:  # nonzero placeholders: the fields exist in the file, patched once the layout is known
            schema.BufferStart(builder)
            schema.BufferAddOffset(builder, 1)
            schema.BufferAddSize(builder, 1)
            return schema.BufferEnd(builder)
        vector = None
        if self.nbytes:
            builder.StartVector(1, self.nbytes, 16)
            builder.head = builder.head - self.nbytes  # reserved (zeros): _fill writes the bytes into the file
            self.from_end = len(builder.Bytes) - builder.head
            vector = builder.EndVector(self.nbytes)
        schema.BufferStart(builder)
        if vector is not None:
            schema.BufferAddData(builder, vector)
        return schema.BufferEnd(builder)


def new_file(size: int) -> tuple[bytes, np.ndarray]:
    """A new zero-filled ``bytes`` of ``size`` and a writable array over its bytes. The file is written into it
    once, before anything else holds it, as C code fills a new bytes object (``PyBytes_FromStringAndSize(NULL,
    n)``): its constants need no second copy beside it. ``bytes(n)`` is calloc'd, so its pages are resident only
    as they are written."""
    data = bytes(size)
    if not size:
        return data, np.zeros(0, np.uint8)
    address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    return data, np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))


def put_bytes(out: np.ndarray, at: int, arr: np.ndarray) -> None:
    """``arr``'s bytes (row-major, whatever its layout) into ``out[at:]``, without a temporary copy."""
    dest = out[at : at + arr.nbytes]
    if arr.flags.c_contiguous:
        dest[:] = arr.reshape(-1).view(np.uint8)
    else:
        np.copyto(dest.view(arr.dtype).reshape(arr.shape), arr)


def reserved_builder(size: int) -> flatbuffers.Builder:
    """A builder over ``size`` bytes of anonymous memory: the space reserved for the constants is never touched
    (not resident), where a ``bytearray`` would be zero-filled."""
    builder = flatbuffers.Builder(0)
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    builder.Bytes = mmap.mmap(-1, size, flags=flags) if flags else mmap.mmap(-1, size)
    builder.head = size
    return builder


def return_freed_memory() -> None:
    """Give the memory just freed back to the system: glibc keeps freed blocks up to its mmap threshold (32 MiB
    at most) in its heap, resident, where the file being filled cannot reuse them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to do
        pass


def buffer_view(buffer, offset: int, like: np.ndarray) -> np.ndarray:
    """A read-only array over ``buffer[offset:]`` with ``like``'s dtype and shape (no copy)."""
    arr = np.frombuffer(buffer, like.dtype, like.size, offset).reshape(like.shape)
    arr.flags.writeable = False
    return arr
