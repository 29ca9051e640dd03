"""What made a file, written into it (``Provenance``): the model's description and ``CONVERSION_METADATA``."""

from __future__ import annotations

from dataclasses import dataclass

import flatbuffers

from fuselite.ir import Module


@dataclass(frozen=True)
class Provenance:
    """What made the file, written into it: the model's description and the schema's ``CONVERSION_METADATA``
    (``conversion_metadata.fbs``: TensorFlow's version, the kind of source, the optimization modes; what
    ``tf.lite`` tools read back), so a file says which tool and options made it."""

    tool: str  # "fuselite 0.1.0"
    source: str  # "KERAS_MODEL", "TF_SAVED_MODEL" or "TF_CONCRETE_FUNCTIONS"
    options: tuple[tuple[str, str], ...]  # (name, value) of the options that shape the output
    quantization: str | None  # None or "float16", "dynamic", "int4", "int8", "int16x8"

    def description(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.tool} ({self.source.lower()}, quantization={self.quantization or 'none'}" + \
            (f", {opts})" if opts else ")")

    def conversion_metadata(self, module: Module) -> bytes:
        import tensorflow as tf
        from tensorflow.lite.python import conversion_metadata_schema_py_generated as cm

        env = cm.EnvironmentT()
        env.tensorflowVersion = tf.__version__
        env.apiVersion = 2
        env.modelType = getattr(cm.ModelType, self.source)
        options = cm.ConversionOptionsT()
        options.modelOptimizationModes = [_OPTIMIZATION_MODES[self.quantization]] if self.quantization else []
        options.allowCustomOps = any(op.kind == "CUSTOM" for fn in module.functions.values() for op in fn.ops)
        meta = cm.ConversionMetadataT()
        meta.environment, meta.options = env, options
        builder = flatbuffers.Builder(256)
        builder.Finish(meta.Pack(builder))
        return bytes(builder.Output())


# fuselite's quantization modes -> conversion_metadata.fbs' ModelOptimizationMode
_OPTIMIZATION_MODES = {"float16": 1001, "dynamic": 1002, "int4": 1002, "int8": 1003, "int16x8": 1004}  # int4: the schema's
# enum has no int4 mode; its activations are float, as dynamic range's
