"""Image and nn ops: DepthToSpace, SpaceToDepth, LRN, L2Loss, non-max suppression, Conv3D transposed, XLA convolutions."""

from __future__ import annotations
