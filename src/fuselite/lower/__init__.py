"""TF -> TFLite lowering: a registry of small rules, one per TensorFlow op type."""

from fuselite.lower import (  # noqa: F401  (register rules)
    array,
    control_flow,
    fft,
    gradients,
    image,
    index,
    math,
    math_special,
    nn,
    quant,
    random,
    tensor_lists,
    text,
    training,
    variables,
)
from fuselite.lower.registry import LOWERINGS, LowerCtx, LowerError, lowering
from fuselite.lower.stage import lower_module

__all__ = ["LOWERINGS", "LowerCtx", "LowerError", "lower_module", "lowering"]
