"""What the benchmark compares: the reference models in each Keras flavour, the two converters,
and the targets fuselite is judged against (ratios fuselite / TF).
"""

from __future__ import annotations

import numpy as np

FLAVOURS = ("keras3", "tf_keras")

TF_ROUTE = "tf.lite.TFLiteConverter.from_keras_model(model)"

TF_ROUTE_NOTE = (
    f"`{TF_ROUTE}` for both flavours. In TF 2.21 it first "
    "writes a temporary SavedModel (Keras 3: `keras.export.ExportArchive` with a `training=False` "
    "endpoint; tf-keras: `tf.saved_model.save`) and converts that; this is included in its time. "
    "For the recurrent models, where that fails in TF 2.21 (TensorLists with a dynamic batch), the "
    "fallback is `TFLiteConverter.from_concrete_functions` on a batch-1 `tf.function` of the model "
    "(WHILE loops, or tf-keras' fused LSTM)."
)

# Acceptance targets for fuselite, as ratios fuselite / TF.
TARGETS = {"time": 0.5, "size": 1.0, "ops": 1.0, "latency": 1.0}

# Recurrent models (issue 4) are judged on latency only: Keras 3 <= 0.6x the official
# converter's WHILE loops, tf-keras <= 1.0x, GRU (no LiteRT builtin) <= 1.0x.
RNN_LATENCY_TARGETS = {"keras3": 0.6, "tf_keras": 1.0}


def targets_for(flavour: str, model: str) -> dict[str, float]:
    """The targets a row is judged against."""
    from fuselite.testing.models import RNN_BUILDERS

    if model not in RNN_BUILDERS:
        return TARGETS
    return {"latency": 1.0 if model == "gru" else RNN_LATENCY_TARGETS[flavour]}


def keras_module(flavour: str):
    """The Keras module for ``flavour`` ("keras3" or "tf_keras")."""
    from fuselite.testing import models

    return {"keras3": models.keras3, "tf_keras": models.tf_keras}[flavour]()


def reference_outputs(model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The Keras model's own outputs (inference mode), flattened."""
    import tensorflow as tf

    out = model(inputs[0] if len(inputs) == 1 else inputs, training=False)
    return [np.asarray(o) for o in tf.nest.flatten(out)]


def convert_fuselite(model) -> tuple[bytes, dict[str, float]]:
    """One fuselite conversion; returns the bytes and the per-stage seconds."""
    import fuselite

    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    return data, dict(conv.report.stage_seconds)


def convert_tf(model, configure=None, route: str | None = None) -> tuple[bytes, dict[str, float]]:
    """One conversion with the official converter (see TF_ROUTE_NOTE).

    In TF 2.21 ``from_keras_model`` fails on Keras 3 RNNs (their TensorLists have a
    dynamic batch). The documented way out is a concrete function with a fixed batch,
    which the official converter turns into WHILE loops: that is what recurrent rows
    compare against (batch 1, as fuselite's conversion). ``configure(converter)`` sets
    options (quantization) on each converter tried. ``route`` ("keras" or "concrete") tries
    only that one (a crash cannot fall back within one process).
    """
    import tensorflow as tf

    from fuselite.testing.models import RNN_BUILDERS

    def convert(conv) -> bytes:
        if configure is not None:
            configure(conv)
        return conv.convert()

    def concrete() -> bytes:
        specs = [tf.TensorSpec([1, *t.shape[1:]], t.dtype) for t in model.inputs]
        cf = tf.function(lambda *xs: model(xs[0] if len(xs) == 1 else list(xs), training=False)
                         ).get_concrete_function(*specs)
        return convert(tf.lite.TFLiteConverter.from_concrete_functions([cf]))

    if route == "concrete":
        return concrete(), {}
    if model.name in RNN_BUILDERS and route is None:
        try:
            return convert(tf.lite.TFLiteConverter.from_keras_model(model)), {}
        except Exception:
            return concrete(), {}
    return convert(tf.lite.TFLiteConverter.from_keras_model(model)), {}
