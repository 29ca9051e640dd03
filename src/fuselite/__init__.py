"""fuselite: TensorFlow / Keras programs -> LiteRT flatbuffers, built around op fusion."""

from fuselite.converter import Converter, write_atomic
from fuselite.errors import ConversionError, InputError, MutableVariableError, UnsupportedOpsError
from fuselite.fusion import Composite, FusionDeclined, FusionError, fusion, implements
from fuselite.report import Report

__version__ = "0.1.0"
__all__ = ["Composite", "ConversionError", "Converter", "FusionDeclined", "FusionError", "InputError",
           "MutableVariableError", "Report", "UnsupportedOpsError", "fusion", "implements", "write_atomic"]
