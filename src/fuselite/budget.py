"""Each layer's share of the quantization error, and an error budget met with the fewest wider layers.

A *layer* is a name scope of the model (``model/layer``, the first two parts of an op's
node name): the ops one Keras layer became. For a full-integer model:

* **share**: the model is quantized again with one layer's ops at 16x8 (int16 activations;
  float for a layer with no 16x8 kernel, the LSTM, when float is allowed) and its error is
  measured on LiteRT against the float model; the layer's share is how much of the
  end-to-end error went away (``(E - E_without) / E``). The shares are measured, not
  estimated, so they need not add up to one (errors of layers interact).
* **budget** (``Converter.max_quantization_error``): if the end-to-end error is above it,
  layers are made wider one by one, the largest share first, until it is met (or every
  candidate is wide: the report says it was not met). Every step is measured.

Example::

    plan = plan_layers(layers, measure, budget=0.01)
    plan.promoted        # ['model/gru'] : the layers made wider
    plan.report()        # what goes in the conversion report
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_LAYERS = 32  # layers measured one by one; beyond that only the budget's greedy steps are measured


def layer_of(name: str) -> str:
    """``model/layer`` of a node name (``mlp_1/dense_1/MatMul`` -> ``mlp_1/dense_1``)."""
    return "/".join(name.split("/")[:2])


@dataclass
class Plan:
    error: float  # end-to-end relative error with every layer integer as asked
    budget: float | None
    shares: dict[str, float] = field(default_factory=dict)  # layer -> error without its int8 (measured)
    steps: list[tuple[str, float]] = field(default_factory=list)  # (layer made wider, error after)
    promoted: list[str] = field(default_factory=list)
    skipped: int = 0  # layers not measured one by one (more than MAX_LAYERS)
    seconds: float = 0.0

    @property
    def final_error(self) -> float:
        return self.steps[-1][1] if self.steps else self.error

    def report(self) -> dict:
        share = {k: (self.error - e) / self.error if self.error > 0 else 0.0 for k, e in self.shares.items()}
        out = {"end_to_end_error": self.error,
               "layers": [{"layer": k, "error_without_int8": e, "share": share[k]}
                          for k, e in sorted(self.shares.items(), key=lambda kv: kv[1])],
               "layers_not_measured": self.skipped, "seconds": round(self.seconds, 3)}
        if self.budget is not None:
            out.update(max_relative_error=self.budget, met=self.final_error <= self.budget,
                       final_error=self.final_error, promoted=list(self.promoted),
                       steps=[{"layer": k, "error": e} for k, e in self.steps])
        return out


def plan_layers(layers: list[str], measure: Callable[[tuple[str, ...]], float], budget: float | None = None,
                progress: Callable[[str], None] | None = None) -> Plan:
    """Measure each layer's share (``measure(promoted)`` is the end-to-end error with the ``promoted`` layers
    wider); with a ``budget``, make layers wider, the largest share first, until the error is within it."""
    t0 = time.perf_counter()
    plan = Plan(error=measure(()), budget=budget)
    measured = layers[:MAX_LAYERS]
    plan.skipped = len(layers) - len(measured)
    for i, layer in enumerate(measured):
        if progress is not None:
            progress(f"layer {i + 1}/{len(measured)}: {layer}")
        plan.shares[layer] = measure((layer,))
    if budget is not None and plan.error > budget:
        order = sorted(measured, key=lambda k: plan.shares[k]) + layers[MAX_LAYERS:]
        for layer in order:
            plan.promoted.append(layer)
            error = plan.shares[layer] if len(plan.promoted) == 1 else measure(tuple(plan.promoted))
            plan.steps.append((layer, error))
            if error <= budget:
                break
    plan.seconds = time.perf_counter() - t0
    return plan
