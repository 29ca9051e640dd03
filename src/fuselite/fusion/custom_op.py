"""Attributed composites with ``tfl_fusable_op = true`` -> a CUSTOM op.

The custom code is the composite's ``name``; every other attribute (ints, floats,
bools, strings and lists of them) goes into the op's flexbuffer ``custom_options``.
All arguments become the op's inputs (constant arguments as constant tensors).
"""

from __future__ import annotations


def fuse_custom_op(c):
    options = {k: v for k, v in c.attrs.items() if k != "tfl_fusable_op"}
    return c.custom_op(c.interface, list(c.args), options)
