"""Load a converted model in stock LiteRT before it is written: prepare every op, invoke once on zeros.

A model LiteRT's kernels reject (a float64 ``MUL``, an int64 ``BATCH_MATMUL``) should never reach
the user as a file that fails at run time. :func:`litert_problem` says what LiteRT said and on
which node; the pipeline turns it into a conversion error naming the op and its source line.
"""

from __future__ import annotations

import re

import numpy as np

INVOKE_BELOW = 64 << 20  # bytes: larger models are prepared but not invoked (an invoke may take long)
_NODE = re.compile(r"Node number (\d+) \((\w+)\) failed to (prepare|invoke)")


def litert_problem(model: bytes, builtin: bool = False, shapes: dict[str, tuple] | None = None
                   ) -> tuple[str, int | None, str | None] | None:
    """None if LiteRT prepares the model and, run once on zeros (when it is small), no kernel says it does not
    support what it got; else (LiteRT's message, the failing node's index in the first subgraph or None,
    its op kind or None). Other failures on zeros (a division by zero) are the data's, not the model's.
    ``builtin``: on LiteRT's builtin kernels alone (no XNNPACK delegate, which takes some ops and checks less).
    ``shapes``: the first signature's inputs by name, resized to these shapes first (a dynamic dimension at a
    size the user's data has: a model may not prepare at the size written in the file).

    Custom ops without a kernel here are not a problem of the model (the user registers them):
    ``MissingKernelError`` propagates for the caller to note.
    """
    from fuselite.runtime.interpreters import interpreter
    from fuselite.runtime.kernel_errors import MissingKernelError
    from fuselite.runtime.signatures import kernel_set

    try:
        interp = interpreter(model, allocate=False, **kernel_set(builtin))
        if shapes:
            sigs = interp.get_signature_list()
            index = interp.get_signature_runner(next(iter(sigs))).get_input_details() if sigs else {}
            for name, shape in shapes.items():
                if name in index and tuple(index[name]["shape"]) != tuple(shape):
                    interp.resize_tensor_input(index[name]["index"], list(shape))
        interp.allocate_tensors()
    except MissingKernelError:
        raise
    except (RuntimeError, ValueError) as e:  # an op LiteRT cannot prepare: always the model's problem
        return _problem(e)
    if len(model) >= INVOKE_BELOW or any(np.dtype(d["dtype"]).kind not in "biuf" for d in interp.get_input_details()):
        return None
    try:
        for d in interp.get_input_details():
            interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        interp.invoke()
    except (RuntimeError, ValueError) as e:
        # Zeros are not valid inputs of every model (a division, a shape read from an input): an invoke
        # failure counts when the kernel says it does not support what it got (a dtype, a combination).
        problem = _problem(e)
        return problem if _UNSUPPORTED.search(problem[0]) else None
    return None


_UNSUPPORTED = re.compile(r"support", re.IGNORECASE)


def _problem(e: Exception) -> tuple[str, int | None, str | None]:
    text = " ".join(str(e).split())
    m = _NODE.search(text)
    return text, (int(m.group(1)) if m else None), (m.group(2) if m else None)
