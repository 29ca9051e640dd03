"""TF ops that tensorflow-text's TFLite kernels run: kept as ``CUSTOM`` ops of the same name, their attributes in
the flexbuffer TensorFlow's converter writes (``fuselite/ops/text_kernels.py`` lists them and their limits)."""

from __future__ import annotations

import numpy as np

from fuselite.lower.registry import lowering
from fuselite.ops.text_kernels import TEXT_KERNELS


def _type_name(dtype) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


@lowering(*(code for code, kernel in TEXT_KERNELS.items() if kernel.lowered))
def lower_text_kernel(ctx):
    kernel = TEXT_KERNELS[ctx.op.kind]
    for out in ctx.op.outputs:
        if kernel.values is not None and _type_name(out.dtype) not in kernel.values:
            ctx.fail(f"{kernel.what}: tensorflow-text's TFLite kernel gives {', '.join(kernel.values)} values, not "
                     f"{_type_name(out.dtype)} (make the values numbers first: a lookup table's ids, then the dense "
                     "tensor)")
    attrs = {k: v for k, v in ctx.op.attrs.items() if not k.startswith("_") and k != "device"}
    # written as TensorFlow's converter writes a custom op's attributes (tflite/flexbuffer.py: encode_tf_attrs)
    out = ctx.emit("CUSTOM", list(ctx.inputs), {"custom_code": ctx.op.kind, "custom_tf_attrs": attrs},
                   out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs])
    return out if isinstance(out, list) else [out]
