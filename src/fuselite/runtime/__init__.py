"""Running converted models on the stock LiteRT interpreter (``ai-edge-litert``)."""

from __future__ import annotations

import numpy as np


def interpreter(model: bytes, num_threads: int = 1, kernels: dict | None = None):
    """A stock LiteRT interpreter for ``model`` (bytes), tensors allocated.

    ``kernels`` maps custom-op codes to kernels (see ``fuselite.runtime.custom_ops``);
    a model whose custom op has no kernel raises ``MissingKernelError`` naming it.
    """
    from fuselite.runtime import custom_ops

    try:
        return custom_ops.interpreter(model, kernels, num_threads)
    except custom_ops.BridgeUnavailableError:
        if kernels:
            raise
        from ai_edge_litert.interpreter import Interpreter  # plain stock interpreter

        interp = Interpreter(model_content=model, num_threads=num_threads)
        interp.allocate_tensors()
        return interp


def run(model: bytes, inputs: dict | list, signature_key: str | None = None, num_threads: int = 1,
        kernels: dict | None = None) -> dict:
    """Run one signature of ``model``; inputs by name (dict) or in signature order (list).

    Returns ``{output_name: array}``.
    """
    interp = interpreter(model, num_threads, kernels)
    sigs = interp.get_signature_list()
    key = signature_key or next(iter(sigs))
    runner = interp.get_signature_runner(key)
    if not isinstance(inputs, dict):
        names = sigs[key]["inputs"]
        inputs = dict(zip(names, inputs))
    return {k: np.asarray(v) for k, v in runner(**inputs).items()}
