"""Quantization: the converter's options (``options.py``) and the passes of each mode."""

from fuselite.quantize.float16 import quantize_float16
from fuselite.quantize.options import (
    IMPLEMENTED_MODES,
    MODES,
    QuantizationOptionError,
    TargetSpec,
    check_implemented,
    resolve_mode,
)

__all__ = ["IMPLEMENTED_MODES", "MODES", "QuantizationOptionError", "TargetSpec", "check_implemented",
           "quantize_float16", "resolve_mode"]
