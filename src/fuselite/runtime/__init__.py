"""Running converted models on the stock LiteRT interpreter (``ai-edge-litert``)."""

from __future__ import annotations

import numpy as np


def interpreter(model: bytes, num_threads: int = 1):
    """A stock LiteRT interpreter for ``model`` (bytes), tensors allocated."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model, num_threads=num_threads)
    interp.allocate_tensors()
    return interp


def run(model: bytes, inputs: dict | list, signature_key: str | None = None, num_threads: int = 1) -> dict:
    """Run one signature of ``model``; inputs by name (dict) or in signature order (list).

    Returns ``{output_name: array}``.
    """
    interp = interpreter(model, num_threads)
    sigs = interp.get_signature_list()
    key = signature_key or next(iter(sigs))
    runner = interp.get_signature_runner(key)
    if not isinstance(inputs, dict):
        names = sigs[key]["inputs"]
        inputs = dict(zip(names, inputs))
    return {k: np.asarray(v) for k, v in runner(**inputs).items()}
