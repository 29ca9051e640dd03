"""TensorFlow is the user's own install: a clear error when it is missing.

fuselite does not depend on one TensorFlow package, so that ``pip install fuselite`` next
to the ``tensorflow`` (GPU) build a user has does not pull ``tensorflow-cpu`` beside it.
The extras ``fuselite[cpu]`` and ``fuselite[tensorflow]`` install one. Supported versions:
:data:`SUPPORTED`, tested with ``scripts/test-tensorflow-versions.sh``
(docs/compatibility.md).

Example::

    tf = require_tensorflow()      # the module, or InputError saying what to install
"""

from __future__ import annotations

from fuselite.errors import InputError

SUPPORTED = ">=2.19,<2.22"


def require_tensorflow():
    """The ``tensorflow`` module; an :class:`InputError` naming what to install when it is missing."""
    try:
        import tensorflow as tf
    except ImportError as e:
        raise InputError(f"fuselite needs TensorFlow ({SUPPORTED}), and it cannot be imported ({e}): install "
                         "tensorflow or tensorflow-cpu, or pip install 'fuselite[cpu]'") from None
    return tf


def require_lm(module: str, purpose: str):
    """A module of the ``lm`` extra (``litert_lm_builder``, ``litert_lm``, ``sentencepiece``); an
    :class:`InputError` naming the install when it is missing. ``purpose`` says what needs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise InputError(f"{purpose} needs {module} ({e}): pip install 'fuselite[lm]'") from None
