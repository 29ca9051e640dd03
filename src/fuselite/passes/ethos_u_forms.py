"""Forms of ops that an Arm Ethos-U NPU takes, for ``target="ethos-u"``.

Vela (5.2) maps ``REVERSE_V2`` to the NPU on the Ethos-U85 only: on the U55 and U65 any axis
fails its reverse-mask check ("Unsupported reverse mask.", regor's ``tflite_supported_operators_u55.cpp``)
and the op stays on the CPU, between two NPU regions. A bidirectional layer's backward direction
reverses its input and its output along time that way. Both the NPU and TFLite Micro take ``SPLIT``
and ``CONCATENATION`` (no rescaling: the same quantization in and out), so on those configurations a
reverse along one static axis becomes::

    REVERSE_V2(x, [a])  ->  CONCATENATION(reversed(SPLIT(x, axis=a, num_splits=x.shape[a])), axis=a)

(a tree of ``CONCATENATION`` ops of at most 10 inputs each: TFLite Micro's kernel takes no more), which moves the same values, exactly. What has no NPU form is left as it is and named in the report
with Vela's reason (a ``GATHER``: an embedding lookup has none on the U55 and U65).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module

MAX_CONCAT = 10  # inputs of one CONCATENATION in TFLite Micro (kernels/concatenation.cc: kMaxInputNum)
MAX_STEPS = 1024  # a longer axis stays a REVERSE_V2 (on the CPU): SPLIT would write that many tensors


def reverse_as_split_concat(module: Module) -> int:
    """Every ``REVERSE_V2`` along one static axis (of at most ``MAX_STEPS``) -> ``SPLIT`` + ``CONCATENATION``
    in the reverse order; how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "REVERSE_V2"]:
            x, axes = op.inputs
            if not axes.is_const or axes.const.size != 1 or x.shape is None:
                continue
            axis = int(axes.const.reshape(-1)[0]) % len(x.shape)
            steps = x.shape[axis]
            if steps is None or not 1 <= steps <= MAX_STEPS:
                continue
            piece = tuple(1 if d == axis else s for d, s in enumerate(x.shape))
            split = fn.make_op("tfl.SPLIT", [fn.const(np.array(axis, np.int32), "time_axis"), x],
                               [(x.dtype, piece)] * steps, {"num_splits": steps}, name=f"{op.name}/split",
                               location=op.location)
            pieces, new = list(reversed(split.outputs)), [split]
            while len(pieces) > 1:  # TFLite Micro's CONCATENATION takes at most 10 inputs: a tree of them
                groups = [pieces[i:i + MAX_CONCAT] for i in range(0, len(pieces), MAX_CONCAT)]
                pieces = []
                for group in groups:
                    if len(group) == 1:
                        pieces.append(group[0])
                        continue
                    shape = tuple(sum(v.shape[axis] for v in group) if d == axis else s
                                  for d, s in enumerate(x.shape))
                    cat = fn.make_op("tfl.CONCATENATION", group, [(x.dtype, shape)],
                                     {"axis": axis, "fused_activation_function": "NONE"},
                                     name=f"{op.name}/reversed", location=op.location)
                    new.append(cat)
                    pieces.append(cat.outputs[0])
            fn.replace_op(op, new, pieces)
            count += 1
    return count
