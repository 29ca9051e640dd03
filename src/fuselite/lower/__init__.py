"""TF -> TFLite lowering: a registry of small rules, one per TensorFlow op type."""

from fuselite.lower import array, control_flow, math, nn, quant, text, variables  # noqa: F401  (register rules)
from fuselite.lower.registry import LOWERINGS, LowerCtx, LowerError, lowering
from fuselite.lower.stage import lower_module

__all__ = ["LOWERINGS", "LowerCtx", "LowerError", "lower_module", "lowering"]
