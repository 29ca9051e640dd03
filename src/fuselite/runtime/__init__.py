"""Running converted models on the stock LiteRT interpreter (``ai-edge-litert``)."""

from __future__ import annotations

import numpy as np


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


def check_input_shapes(details: dict, inputs: dict, key: str | None = None) -> None:
    """An :class:`~fuselite.errors.InputError` naming the input when its shape differs from the signature's
    where that has a static dimension (LiteRT's signature runner resizes any dimension, and the kernels fail
    deep inside when the model was written for one size: a static batch the report explains)."""
    from fuselite.errors import InputError
    from fuselite.runtime.calibrate import fits

    for name, value in inputs.items():
        d = details.get(name)
        if d is None:
            continue
        sig = d.get("shape_signature")
        want = [int(x) for x in (sig if sig is not None and len(sig) else d["shape"])]
        if not fits(np.shape(value), want):
            where = f" of signature '{key}'" if key else ""
            raise InputError(f"input '{name}'{where} has shape {list(np.shape(value))}, the model takes "
                             f"{['?' if w == -1 else w for w in want]} ('?': any size; a fixed batch is said in "
                             f"the conversion report, and batch_size=N converts for another)")


def kernel_set(builtin: bool) -> dict:
    """Interpreter options for LiteRT's builtin kernels alone (``builtin``) or with XNNPACK (the default)."""
    if not builtin:
        return {}
    from ai_edge_litert.interpreter import OpResolverType

    return {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def signature_inputs(model: bytes, key: str) -> list[str] | None:
    """The input names of signature ``key`` in the model's own order (the function's arguments; LiteRT's
    ``get_signature_list()`` sorts them by name), or None if the model has no such signature."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.Model.GetRootAs(bytes(model), 0)
    for i in range(m.SignatureDefsLength()):
        sig = m.SignatureDefs(i)
        if sig.SignatureKey() is not None and sig.SignatureKey().decode() == key:
            return [sig.Inputs(j).Name().decode() for j in range(sig.InputsLength())]
    return None


RESET_SIGNATURE = "reset_variables"


def reset_variables(interp) -> None:
    """Put every variable of a converted model back to its initial value.

    fuselite adds a ``reset_variables`` signature to models with mutable variables that
    assigns each its value at conversion time; this calls LiteRT's
    ``reset_all_variables()`` (which, through fuselite's reset witness, resets them too
    except in integer-only models; see ``docs/variables.md``) and then runs that
    signature if the model has it. Any runtime can do the same: invoke the
    ``reset_variables`` signature.

    Example::

        interp = fuselite.runtime.interpreter(model)
        counter = interp.get_signature_runner("serving_default")
        counter(x=one); counter(x=one)
        fuselite.runtime.reset_variables(interp)   # back to the initial count
    """
    interp.reset_all_variables()
    if RESET_SIGNATURE in interp.get_signature_list():
        interp.get_signature_runner(RESET_SIGNATURE)()
