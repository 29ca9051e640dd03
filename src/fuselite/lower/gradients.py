"""The gradient ops of tf.GradientTape (ReluGrad, BiasAddGrad, the cross-entropies, the convolutions' filter gradients, ...), composed from builtins: on-device training."""

from __future__ import annotations
