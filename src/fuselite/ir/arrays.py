"""Reading large constant arrays a few rows at a time: a hash of their bytes and the row ranges to work on, so a
pass over a model's weights holds at most a slice of one weight beyond the model's own."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np

CHUNK_BYTES = 16 << 20  # what one slice of a large array takes at most (one row where a row is larger)


def row_ranges(arr: np.ndarray, itemsize: int | None = None) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges over ``arr``'s first axis, each about CHUNK_BYTES (counted at ``itemsize`` bytes per
    element, default the array's own); one range for a 0-d or empty array."""
    if arr.ndim == 0 or arr.size == 0:
        yield 0, 0 if arr.ndim == 0 else arr.shape[0]
        return
    row = max(1, (arr.size // arr.shape[0]) * (itemsize or arr.itemsize))
    step = max(1, CHUNK_BYTES // row)
    for start in range(0, arr.shape[0], step):
        yield start, min(start + step, arr.shape[0])


def digest(arr: np.ndarray) -> bytes:
    """A 16-byte hash of ``arr``'s bytes in row-major order, whatever its layout (a transposed view is copied a
    slice at a time, never whole)."""
    h = hashlib.blake2b(digest_size=16)
    if arr.flags.c_contiguous or arr.ndim == 0:
        h.update(memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)))
        return h.digest()
    for start, stop in row_ranges(arr):
        h.update(memoryview(np.ascontiguousarray(arr[start:stop]).reshape(-1).view(np.uint8)))
    return h.digest()
