"""On-device training helpers: ``save`` / ``restore`` signatures that hand weights out and take them back as tensors.

The official on-device-training guide checkpoints with ``tf.raw_ops.Save`` / ``Restore``, which are Flex ops
(stock LiteRT does not run them). With :func:`checkpoint_functions` the app keeps the weights itself: ``save``
returns each variable's current value, by name, and ``restore`` takes the same dict and assigns it back, with
builtins only (``READ_VARIABLE`` / ``ASSIGN_VARIABLE``). ``docs/training.md`` has the whole workflow.

Example::

    save, restore = fuselite.training.checkpoint_functions(model.trainable_variables)
    conv = fuselite.Converter.from_concrete_functions(
        {"train": train.get_concrete_function(), "infer": infer.get_concrete_function(),
         "save": save.get_concrete_function(), "restore": restore.get_concrete_function()}, model)
    ...
    weights = interpreter.get_signature_runner("save")()         # {name: np.ndarray}
    other.get_signature_runner("restore")(**weights)              # another interpreter, same model
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["checkpoint_functions", "checkpoint_names"]


def _base_name(variable: Any) -> str:
    name = getattr(variable, "path", None) or getattr(variable, "name", None) or "variable"
    return str(name).split(":")[0]


def checkpoint_names(variables: Iterable[Any] | Mapping[str, Any]) -> dict[str, Any]:
    """``{name: variable}``: the names :func:`checkpoint_functions` gives the variables, in order.

    A mapping keeps its keys (each must be a valid signature name: letters, digits and ``_``, not starting
    with a digit). A sequence is named after each variable's ``path`` (Keras 3) or ``name`` (``tf.Variable``,
    without ``:0``), every character other than a letter, a digit or ``_`` replaced by ``_``, and ``_1``,
    ``_2`` ... appended to repeats: ``sequential/dense/kernel`` is ``sequential_dense_kernel``. The names are
    the same in a SavedModel's signatures (TensorFlow sanitizes input names there the same way) and in
    ``from_concrete_functions``.

    >>> import tensorflow as tf
    >>> sorted(checkpoint_names([tf.Variable(1.0, name="a/b"), tf.Variable(2.0, name="a/b")]))
    ['a_b', 'a_b_1']
    """
    from fuselite.errors import InputError

    if isinstance(variables, Mapping):
        bad = [k for k in variables if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise InputError(f"checkpoint names are letters, digits and '_' (not first a digit), got {bad}")
        named = dict(variables)
    else:
        named = {}
        for variable in variables:
            base = re.sub(r"\W", "_", _base_name(variable), flags=re.ASCII)
            base = base if re.match(r"[A-Za-z_]", base) else f"v_{base}"
            name, i = base, 1
            while name in named:
                name, i = f"{base}_{i}", i + 1
            named[name] = variable
    if not named:
        raise InputError("checkpoint_functions needs at least one variable")
    return named


def checkpoint_functions(variables: Iterable[Any] | Mapping[str, Any]) -> tuple[Any, Any]:
    """``(save, restore)``: two ``tf.function``s with input signatures, for a ``save`` and a ``restore`` signature.

    ``save()`` returns ``{name: value}`` of every variable; ``restore(**{name: value})`` assigns each variable
    the tensor of its name (same shape and dtype) and returns nothing. Names as :func:`checkpoint_names` gives
    them, so ``restore(**save())`` round-trips, on TensorFlow and on LiteRT alike. ``variables``: ``tf.Variable``\\ s
    or Keras 3 variables (``model.trainable_variables``, ``optimizer.variables``), in a sequence or a mapping
    ``{name: variable}``.

    Every variable ``restore`` assigns is a mutable (resource) variable of the converted model: pass the
    variables training changes (a frozen base's weights, checkpointed too, would stop being constants).
    """
    import tensorflow as tf

    named = checkpoint_names(variables)
    specs = [tf.TensorSpec(v.shape, v.dtype, name=name) for name, v in named.items()]

    def save() -> dict:
        return {name: tf.convert_to_tensor(v) for name, v in named.items()}  # a ReadVariableOp each

    def restore(*values) -> dict:
        for v, value in zip(named.values(), values, strict=True):
            v.assign(value)
        return {}

    # named parameters, so that restore(**save()) works in TF too (tf.function reads the signature)
    restore.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in named])
    return (tf.function(save, input_signature=[], autograph=False),
            tf.function(restore, input_signature=specs, autograph=False))

