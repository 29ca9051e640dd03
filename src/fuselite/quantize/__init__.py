"""Quantization: the converter's options (``options.py``) and the passes of each mode."""

from fuselite.quantize.dynamic import HYBRID_KERNELS, quantize_dynamic, symmetric_int8
from fuselite.quantize.float16 import quantize_float16
from fuselite.quantize.options import (
    MODES,
    QuantizationOptionError,
    TargetSpec,
    resolve_mode,
)
from fuselite.quantize.select import KeepFloat

__all__ = ["HYBRID_KERNELS", "MODES", "KeepFloat", "QuantizationOptionError", "TargetSpec",
           "quantize_dynamic", "quantize_float16", "resolve_mode", "symmetric_int8"]
