"""Running converted models on the stock LiteRT interpreter (``ai-edge-litert``): the names below are
handed on from ``interpreters.py`` and ``signatures.py``."""

from fuselite.runtime.interpreters import interpreter, run
from fuselite.runtime.signatures import (
           RESET_SIGNATURE,
           check_input_shapes,
           kernel_set,
           reset_variables,
           signature_inputs,
)

__all__ = ["RESET_SIGNATURE", "check_input_shapes", "interpreter", "kernel_set", "reset_variables", "run",
           "signature_inputs"]
