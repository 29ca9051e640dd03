"""Index and array ops: diagonals, segments, scatters, stitches, Unique, SparseToDense, XLA's gather and sharding."""

from __future__ import annotations
