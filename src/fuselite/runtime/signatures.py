"""A converted model's signatures: their inputs in the model's order and checked against what is fed, the
kernel set to run on, and the reset of its variables."""

from __future__ import annotations

import numpy as np


def fits(shape: tuple, signature: list[int]) -> bool:
    """``shape`` is one the signature takes (-1: a dynamic dimension, any size)."""
    return len(shape) == len(signature) and all(n < 0 or n == d for d, n in zip(shape, signature))


def check_input_shapes(details: dict, inputs: dict, key: str | None = None) -> None:
    """An :class:`~fuselite.errors.InputError` naming the input when its shape differs from the signature's
    where that has a static dimension (LiteRT's signature runner resizes any dimension, and the kernels fail
    deep inside when the model was written for one size: a static batch the report explains)."""
    from fuselite.errors import InputError

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


# files from this size run on the builtin kernels alone in fuselite's own checks and error measurements: XNNPACK
# packs its own copy of the float weights when it prepares (as much memory again as the file: measured on Dense
# stacks), which would be the conversion's peak
XNNPACK_BELOW = 64 << 20


def packs_too_much(model: bytes) -> bool:
    """Whether fuselite's own runs of ``model`` leave XNNPACK out (``XNNPACK_BELOW``)."""
    return len(model) >= XNNPACK_BELOW


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
