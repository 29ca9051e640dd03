"""The stock LiteRT interpreter for a converted model (with custom-op kernels where it has any), and one
signature run on it."""

from __future__ import annotations

import numpy as np

from fuselite.runtime.signatures import check_input_shapes, kernel_set, signature_inputs


def interpreter(model: bytes, num_threads: int = 1, kernels: dict | None = None, allocate: bool = True, **options):
    """A stock LiteRT interpreter for ``model`` (bytes), tensors allocated (unless ``allocate`` is False: a
    model with a dynamic dimension may prepare only once its inputs are resized).

    ``kernels`` maps custom-op codes to kernels (see ``fuselite.runtime.custom_ops``);
    a model whose custom op has no kernel raises ``MissingKernelError`` naming it.
    ``options`` go to ``ai_edge_litert``'s ``Interpreter`` (``experimental_preserve_all_tensors``).
    """
    from fuselite.runtime import custom_ops
    from fuselite.runtime.kernel_errors import BridgeUnavailableError

    try:
        return custom_ops.interpreter(model, kernels, num_threads, allocate=allocate, **options)
    except BridgeUnavailableError:
        if kernels:
            raise
        from ai_edge_litert.interpreter import Interpreter  # plain stock interpreter

        interp = Interpreter(model_content=model, num_threads=num_threads, **options)
        if allocate:
            interp.allocate_tensors()
        return interp


def run(model: bytes, inputs: dict | list, signature_key: str | None = None, num_threads: int = 1,
        kernels: dict | None = None, builtin_kernels: bool = False) -> dict:
    """Run one signature of ``model``; inputs by name (dict) or in signature order (list).
    ``builtin_kernels``: LiteRT's builtin kernels alone (no XNNPACK delegate).

    Returns ``{output_name: array}``. An unknown signature, inputs that are not the signature's, or a shape the
    model does not take is an :class:`~fuselite.errors.InputError` naming them.
    """
    # allocated by the signature runner, after it resizes a dynamic dimension to the input's
    interp = interpreter(model, num_threads, kernels, allocate=False, **kernel_set(builtin_kernels))
    from fuselite.errors import InputError

    sigs = interp.get_signature_list()
    if not sigs:
        raise InputError("the model has no signatures (fuselite and the official converter always write them)")
    key = signature_key or next(iter(sigs))
    if key not in sigs:
        raise InputError(f"no signature '{key}' in the model (it has: {', '.join(sigs)})")
    runner = interp.get_signature_runner(key)
    names = signature_inputs(model, key) or sigs[key]["inputs"]
    if not isinstance(inputs, dict):
        if len(inputs) != len(names):
            raise InputError(f"signature '{key}' takes {len(names)} input(s) ({', '.join(names)}), got {len(inputs)}")
        inputs = dict(zip(names, inputs))
    wrong = sorted(set(inputs) ^ set(names))
    if wrong:
        raise InputError(f"signature '{key}' takes the inputs {', '.join(names)}; given {', '.join(inputs) or 'none'}")
    check_input_shapes(runner.get_input_details(), inputs, key)
    return {k: np.asarray(v) for k, v in runner(**inputs).items()}
