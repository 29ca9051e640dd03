"""TensorFlow Addons' ``MaxUnpooling2D`` and ``DenseImageWarp`` composites -> LiteRT's perception custom ops.

As the official converter's prepare-composites stage does (``ConvertMaxUnpoolingFunc`` in
``tflite/converter/utils/perception_ops_utils.cc``): a function with
``experimental_implements="addons:MaxUnpooling2D"`` and the attributes ``pool_size`` and
``strides`` (two ints each) and ``padding`` ("SAME" or "VALID"), two arguments (the pooled
values and their argmax indices, [batch, rows, cols, channels]) and one result becomes one
``CUSTOM`` op ``MaxUnpooling2D`` whose options are LiteRT's ``TfLitePoolParams`` struct as raw
bytes (``builtin_op_data.h``: padding, stride width, stride height, filter width, filter height,
activation, then the four computed padding values, ten little-endian int32s), as that converter
writes them. Its kernel is in LiteRT's perception ops (not in the stock Python interpreter's
resolver: register one, e.g. ``fuselite.runtime.run(model, inputs, kernels={"MaxUnpooling2D": ...})``).

A wrong signature or attribute stops the conversion with an error naming it (``Composite.refuse``):
the op computes what its attributes say, never silently something else. The body (TensorFlow
Addons' ``scatter_nd``) converts too, to ``SCATTER_ND``, where the rule is not registered.

``addons:DenseImageWarp`` (``ConvertDenseImageWarpFunc``, same file): two arguments, the image and the
flow, and one result, each a 4-D float32 tensor, become one ``CUSTOM`` op ``DenseImageWarp`` with empty
options. Another signature is declined (the official stage warns and keeps the body), and the body converts.
"""

from __future__ import annotations

import struct

import numpy as np

from fuselite.fusion.registry import fusion

CODE = "MaxUnpooling2D"
INTERFACE = "addons:MaxUnpooling2D"
_PADDING = {"SAME": 1, "VALID": 2}  # TfLitePadding: kTfLitePaddingSame, kTfLitePaddingValid


def pool_params(pool_size, strides, padding: str) -> bytes:
    """``TfLitePoolParams`` as the official converter writes it into the op's custom options."""
    return struct.pack("<10i", _PADDING[padding], strides[1], strides[0], pool_size[1], pool_size[0], 0, 0, 0, 0, 0)


def _pair(c, key):
    v = c.attrs.get(key)
    if not isinstance(v, (list, tuple)) or len(v) != 2 or not all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0 for x in v):
        c.refuse(f"{INTERFACE}: attribute '{key}' must be two positive integers, got {v!r}")
    return [int(x) for x in v]


@fusion(INTERFACE)
def fuse_max_unpooling(c):
    if len(c.args) != 2:
        c.refuse(f"{INTERFACE} takes 2 arguments (the pooled values and their argmax indices), got {len(c.args)}")
    if len(c.results) != 1:
        c.refuse(f"{INTERFACE} has 1 result, got {len(c.results)}")
    pool_size, strides = _pair(c, "pool_size"), _pair(c, "strides")
    padding = c.attrs.get("padding")
    if isinstance(padding, bytes):
        padding = padding.decode()
    if padding not in _PADDING:
        c.refuse(f"{INTERFACE}: attribute 'padding' must be 'SAME' or 'VALID', got {padding!r}")
    values, indices = c.args
    for v, what in ((values, "values"), (indices, "indices")):
        if v.shape is None or len(v.shape) != 4:
            c.refuse(f"{INTERFACE}: the {what} must be [batch, rows, cols, channels], got {v.shape}")
    (result,) = c.results
    return c.op("CUSTOM", [values, indices], {"custom_code": CODE, "custom_options": pool_params(pool_size, strides,
                                                                                                padding)},
                outs=[(result.dtype, result.shape)])


WARP_CODE = "DenseImageWarp"
WARP_INTERFACE = "addons:DenseImageWarp"


@fusion(WARP_INTERFACE)
def fuse_dense_image_warp(c):
    if len(c.args) != 2:
        c.decline(f"{WARP_INTERFACE} takes 2 arguments (the image and the flow), got {len(c.args)}")
    if len(c.results) != 1:
        c.decline(f"{WARP_INTERFACE} has 1 result, got {len(c.results)}")
    (result,) = c.results
    for v, what in ((c.args[0], "image"), (c.args[1], "flow"), (result, "output")):
        if v.dtype != np.float32 or v.shape is None or len(v.shape) != 4:
            c.decline(f"{WARP_INTERFACE}: the {what} must be a 4-D float32 tensor, got {v.dtype} {v.shape}")
    return c.op("CUSTOM", list(c.args), {"custom_code": WARP_CODE, "custom_options": b""},
                outs=[(result.dtype, result.shape)])
