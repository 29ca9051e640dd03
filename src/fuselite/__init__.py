"""fuselite: TensorFlow / Keras programs -> LiteRT flatbuffers, built around op fusion."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuselite.errors import ConversionError, InputError, MutableVariableError, UnsupportedOpsError
from fuselite.fusion import Composite, FusionDeclined, FusionError, fusion, implements

if TYPE_CHECKING:
    from fuselite.converter import Converter, write_atomic
    from fuselite.generative import generate, write_litertlm
    from fuselite.keras_export import export
    from fuselite.report import Report
    from fuselite.training import checkpoint_functions

__version__ = "0.1.0"
__all__ = ["Composite", "ConversionError", "Converter", "FusionDeclined", "FusionError", "InputError",
           "MutableVariableError", "Report", "UnsupportedOpsError", "checkpoint_functions", "export", "fusion",
           "generate", "implements", "write_atomic", "write_litertlm"]

# imported on first use, so that the command line's LiteRT-only verbs (inspect, bench) start without the
# converter's modules (the converter never imports TensorFlow at import time either)
_LAZY = {"Converter": "fuselite.converter", "write_atomic": "fuselite.converter", "Report": "fuselite.report",
         "export": "fuselite.keras_export", "write_litertlm": "fuselite.generative", "generate": "fuselite.generative",
         "checkpoint_functions": "fuselite.training"}


def __getattr__(name: str):
    """``fuselite.Converter``, ``write_atomic``, ``Report``, ``export`` (Keras' ``model.export(...,
    format="litert")`` call, converted by fuselite), ``write_litertlm`` and ``generate`` (LiteRT-LM bundles),
    ``checkpoint_functions`` (save / restore signatures for on-device training), imported when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'fuselite' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
