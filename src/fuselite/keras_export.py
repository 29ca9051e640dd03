"""``fuselite.export``: Keras 3's own call for a LiteRT file, with fuselite converting.

Keras users write ``model.export("m.tflite", format="litert", input_signature=..., **converter attributes)``,
which runs ``tf.lite.TFLiteConverter`` with ``SELECT_TF_OPS`` (``keras/src/export/litert.py``); the same call
to fuselite is one word different::

    model.export("m.tflite", format="litert", optimizations=[tf.lite.Optimize.DEFAULT])   # Keras
    fuselite.export(model, "m.tflite", optimizations=[tf.lite.Optimize.DEFAULT])           # fuselite

It takes exactly Keras' arguments: the model, a path ending in ``.tflite``, ``input_signature`` (one structure
of specs per positional argument of the call; default: the model's inputs), ``verbose`` (print where the file
went, as Keras does; default True) and converter attributes as keywords, ``target_spec`` as a dict of its
attributes. fuselite's own options (``rnn_form``, ``target``, ``threads``, ...) are keywords too. The file is
written atomically; the conversion's report is returned.
"""

from __future__ import annotations

import os

from fuselite.errors import InputError

# tf.lite.TFLiteConverter attributes Keras users pass that name something fuselite does its own way: what the
# report says of each, and, for the value that asks fuselite to do without it, a check of the converted model
# (None: that value is refused, it asks for a tool fuselite is not)
_TFLITE_ATTRIBUTES = {
    "experimental_enable_resource_variables": (
        "assigned variables are always LiteRT resource variables",
        lambda report, ops: not report.mutable_variables, "the model assigns variables"),
    "allow_custom_ops": (
        "custom ops come only from fusion rules that ask for them (no TensorFlow op is left as a custom op)",
        lambda report, ops: "CUSTOM" not in ops, "the converted model has custom ops (from fusion rules)"),
    "experimental_new_converter": ("fuselite is its own converter", None, "there is no other converter in fuselite"),
    "experimental_new_quantizer": ("fuselite has one quantizer", None, "there is no other quantizer in fuselite"),
}


def export(model, filepath, input_signature=None, verbose=None, **kwargs):
    """Convert the Keras ``model`` and write it to ``filepath`` (a ``.tflite`` path, atomically), as Keras'
    ``model.export(filepath, format="litert", ...)`` does with ``tf.lite.TFLiteConverter``.

    ``input_signature``: as Keras takes it (a list with one ``tf.TensorSpec`` / ``keras.InputSpec`` structure per
    positional argument); ``verbose``: print the path written (default True, as Keras); ``kwargs``: converter
    attributes (``optimizations``, ``representative_dataset``, ``target_spec={"supported_ops": [...]}``,
    ``inference_input_type``, ...) and fuselite's own options (``rnn_form``, ``target``, ``threads``,
    ``input_shapes``, ...). An attribute fuselite does not have is an error naming those it has. Returns the
    conversion's report.

    Example::

        fuselite.export(model, "model.tflite", input_signature=[tf.TensorSpec([None, 20, 8], tf.float32)])
    """
    from fuselite.converter import Converter

    path = os.fspath(filepath)
    if not str(path).endswith(".tflite"):
        raise InputError(f"The LiteRT export requires the filepath to end with '.tflite'. Got: {path}")
    conv = Converter.from_keras_model(model, input_signature=input_signature)
    checks = []
    for name, value in kwargs.items():
        if name == "target_spec" and isinstance(value, dict):
            for key, setting in value.items():
                setattr(conv.target_spec, key, setting)  # an unknown key: QuantizationOptionError, listing them
        elif name in _TFLITE_ATTRIBUTES:
            why, holds, otherwise = _TFLITE_ATTRIBUTES[name]
            if not value and holds is None:
                raise InputError(f"{name}={value!r}: {otherwise} ({why})")
            checks.append((name, value, why, holds, otherwise))
        else:
            setattr(conv, name, value)  # an option the converter lacks: UnknownOptionError, listing them

    def check(converted) -> None:
        for name, value, why, holds, otherwise in checks:
            if not value and not holds(converted.report, converted.report.ops_after):
                raise InputError(f"{name}={value!r}, but {otherwise}: nothing written")
            converted.report.warn(f"{name}={value!r}: {why}")

    conv.convert_to(path, check)
    if verbose is None or verbose:
        print(f"Saved artifact at '{path}'.")
    return conv.report
