"""The converter's quantization options, as ``tf.lite.TFLiteConverter`` spells them.

A user's quantization code works with only the class name changed::

    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_types = [tf.float16]

The same attributes take the same values as TensorFlow's (its enums and dtypes; plain
strings such as ``"default"``, ``"float16"``, ``"TFLITE_BUILTINS_INT8"`` too), and
:func:`resolve_mode` turns them into one mode, the way TensorFlow's converter does:

==========================================================  ===========================
settings                                                    mode
==========================================================  ===========================
no ``optimizations``                                        float (nothing quantized)
``DEFAULT`` + ``supported_types=[float16]``                 ``"float16"``
``DEFAULT`` + ``supported_types=["int4"]`` (fuselite's own)  ``"int4"`` (blockwise int4 FC weights, ``int4.py``)
``DEFAULT``                                                 ``"dynamic"`` (int8 weights)
``DEFAULT`` + ``representative_dataset``                    ``"int8"`` (full integer)
``DEFAULT`` + ``supported_ops=[EXPERIMENTAL_TFLITE_..._INT16_WEIGHTS_INT8]``   ``"int16x8"``
==========================================================  ===========================

A value fuselite does not know, or a combination it does not implement, is an error
(:class:`QuantizationOptionError`), never a silently different model.
"""

from __future__ import annotations

from fuselite.errors import InputError

MODES = ("float16", "dynamic", "int4", "int8", "int16x8")

_OPTIMIZE = {"DEFAULT", "OPTIMIZE_FOR_SIZE", "OPTIMIZE_FOR_LATENCY"}  # the latter two: TF's deprecated aliases
_OPS_SETS = {"TFLITE_BUILTINS", "TFLITE_BUILTINS_INT8", "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8",
             "SELECT_TF_OPS"}
_TYPES = {"float16", "float32", "int4", "int8", "uint8", "int16"}  # int4: fuselite's own


class QuantizationOptionError(InputError):
    """A quantization option has a value fuselite does not accept, or asks for a mode it lacks."""


def option_name(value) -> str:
    """``tf.lite.Optimize.DEFAULT`` -> "DEFAULT", ``tf.float16`` -> "float16", strings as written."""
    if isinstance(value, str):
        return value
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    import numpy as np

    try:
        return np.dtype(value).name
    except TypeError:
        return repr(value)


def _names(values, what: str, allowed: set[str], upper: bool) -> list[str]:
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise QuantizationOptionError(f"{what} must be a list (or set), got {values!r}")
    out = []
    for v in values:
        name = option_name(v)
        name = name.upper() if upper else name.lower()
        if name not in allowed:
            raise QuantizationOptionError(f"{what}: unknown value {v!r}; accepted: {', '.join(sorted(allowed))}")
        out.append(name)
    return out


class TargetSpec:
    """``conv.target_spec``: ``supported_types`` and ``supported_ops``, as in TensorFlow's converter."""

    _OPTIONS = ("supported_types", "supported_ops")

    def __init__(self):
        self.supported_types: list = []
        self.supported_ops: list = ["TFLITE_BUILTINS"]

    def __setattr__(self, key, value):
        if key not in self._OPTIONS:
            raise QuantizationOptionError(f"target_spec has no option '{key}'; its options: "
                                          f"{', '.join(self._OPTIONS)}")
        object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return f"TargetSpec(supported_types={self.supported_types!r}, supported_ops={self.supported_ops!r})"


def resolve_mode(optimizations, target_spec: TargetSpec, representative_dataset, inference_input_type,
                 inference_output_type) -> tuple[str | None, list[str]]:
    """(mode or None for float, notes for the report) from TensorFlow-style settings.

    Raises :class:`QuantizationOptionError` for values fuselite does not accept.
    """
    opts = _names(optimizations, "optimizations", _OPTIMIZE | {"EXPERIMENTAL_SPARSITY"}, upper=True)
    if "EXPERIMENTAL_SPARSITY" in opts:
        raise QuantizationOptionError("optimizations: EXPERIMENTAL_SPARSITY is not supported by fuselite")
    types = _names(target_spec.supported_types, "target_spec.supported_types", _TYPES, upper=False)
    ops = _names(target_spec.supported_ops, "target_spec.supported_ops", _OPS_SETS, upper=True)
    notes = []
    if "SELECT_TF_OPS" in ops and len(set(ops)) == 1:
        raise QuantizationOptionError("target_spec.supported_ops: SELECT_TF_OPS (Flex) is not supported: fuselite "
                                      "emits TFLite builtins only")
    if "SELECT_TF_OPS" in ops:  # allowed besides the builtins (Keras' export asks for it): none is needed
        notes.append("target_spec.supported_ops allows SELECT_TF_OPS: fuselite writes TFLite builtins only, no Flex "
                     "op (which the stock LiteRT runtimes cannot run)")
    io_types = [option_name(t).lower() for t in (inference_input_type, inference_output_type) if t is not None]
    bad_io = [t for t in io_types if t not in ("float32", "int8", "uint8", "int16")]
    if bad_io:
        raise QuantizationOptionError(f"inference_input_type / inference_output_type: unknown type {bad_io[0]!r}; "
                                      "accepted: float32, int8, uint8, int16")
    if not opts:
        ignored = [n for n, on in (("target_spec.supported_types", types),
                                   ("representative_dataset", representative_dataset is not None),
                                   ("TFLITE_BUILTINS_INT8", "TFLITE_BUILTINS_INT8" in ops)) if on]
        if ignored:
            notes.append(f"{', '.join(ignored)} set without optimizations=[tf.lite.Optimize.DEFAULT]: the model is "
                         "not quantized (as with tf.lite.TFLiteConverter)")
        if any(t != "float32" for t in io_types):
            raise QuantizationOptionError("inference_input_type / inference_output_type other than float32 need "
                                          "full-integer quantization (optimizations and a representative_dataset)")
        return None, notes
    if "int4" in types:
        others = [t for t in types if t not in ("int4", "float32")] + [o for o in ops if o not in ("TFLITE_BUILTINS", "SELECT_TF_OPS")]
        if others or representative_dataset is not None:
            raise QuantizationOptionError(
                f"target_spec.supported_types int4 (blockwise int4 weights, float activations) goes with no "
                f"{'representative_dataset' if representative_dataset is not None else others[0]}: its activations "
                "stay float (no calibration, no integer ops)")
        mode = "int4"
    elif "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8" in ops:
        mode = "int16x8"
    elif representative_dataset is not None or "TFLITE_BUILTINS_INT8" in ops or "int8" in types:
        mode = "int8"
    elif types and set(types) <= {"float16", "float32"} and "float16" in types:
        mode = "float16"
    else:
        mode = "dynamic"
    # int8 / int16x8 without a representative_dataset: a quantization-aware-trained model has its ranges; the
    # pipeline checks (settle_quantization_mode) once it has imported the program
    if any(t != "float32" for t in io_types) and mode not in ("int8", "int16x8"):
        raise QuantizationOptionError(f"inference_input_type / inference_output_type {io_types} need full-integer "
                                      f"quantization, not {mode}")
    wrong = [t for t in io_types if t != "float32" and (t == "int16") != (mode == "int16x8")]
    if wrong:
        raise QuantizationOptionError(f"inference_input_type / inference_output_type {wrong[0]} with {mode} "
                                      f"quantization: use {'int16' if mode == 'int16x8' else 'int8 or uint8'} or "
                                      "float32 (as tf.lite.TFLiteConverter)")
    return mode, notes


def integer_only(target_spec: TargetSpec) -> bool:
    """``supported_ops=[TFLITE_BUILTINS_INT8]`` (or the 16x8 set) without ``TFLITE_BUILTINS``: an op that stays
    float is an error."""
    ops = _names(target_spec.supported_ops, "target_spec.supported_ops", _OPS_SETS, upper=True)
    integer = {"TFLITE_BUILTINS_INT8", "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"}
    return bool(integer.intersection(ops)) and "TFLITE_BUILTINS" not in ops


def io_type(value) -> str:
    """``inference_input_type`` / ``inference_output_type`` as a name (float32 when unset)."""
    return "float32" if value is None else option_name(value).lower()
