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
    error: float | None  # end-to-end relative error with every layer integer as asked (None: it did not run)
    budget: float | None
    shares: dict[str, float] = field(default_factory=dict)  # layer -> error without its int8 (measured)
    steps: list[tuple[str, float]] = field(default_factory=list)  # (layer made wider, error after)
    promoted: list[str] = field(default_factory=list)
    skipped: int = 0  # layers not measured one by one (more than MAX_LAYERS, or past the time limit)
    failed: dict[str, str] = field(default_factory=dict)  # layer -> why its trial could not run
    seconds: float = 0.0
    time_limit: float | None = None

    @property
    def final_error(self) -> float | None:
        return self.steps[-1][1] if self.steps else self.error

    def report(self) -> dict:
        error = self.error or 0.0
        share = {k: (error - e) / error if error > 0 else 0.0 for k, e in self.shares.items()}
        out = {"end_to_end_error": self.error,
               "layers": [{"layer": k, "error_without_int8": e, "share": share[k]}
                          for k, e in sorted(self.shares.items(), key=lambda kv: kv[1])],
               "layers_not_measured": self.skipped, "seconds": round(self.seconds, 3)}
        if self.failed:
            out["trials_not_run"] = [{"layer": k, "reason": why} for k, why in self.failed.items()]
        if self.time_limit is not None:
            out["time_limit_seconds"] = round(self.time_limit, 3)
        if self.budget is not None:
            final = self.final_error
            out.update(max_relative_error=self.budget, met=final is not None and final <= self.budget,
                       final_error=final, promoted=list(self.promoted),
                       steps=[{"layer": k, "error": e} for k, e in self.steps])
        return out


def _trial(measure: Callable[[tuple[str, ...]], float], promoted: tuple[str, ...]) -> tuple[float | None, str]:
    """One measured trial; a trial that cannot be built or run gives (None, why), never an exception."""
    try:
        return measure(promoted), ""
    except Exception as e:  # a trial's model LiteRT rejects (a kernel's prepare check): reported, not raised
        return None, f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def plan_layers(layers: list[str], measure: Callable[[tuple[str, ...]], float], budget: float | None = None,
                progress: Callable[[str], None] | None = None, time_limit: float | None = None) -> Plan:
    """Measure each layer's share (``measure(promoted)`` is the end-to-end error with the ``promoted`` layers
    wider); with a ``budget``, make layers wider, the largest share first, until the error is within it.

    A trial that raises is reported (``Plan.failed``), not raised. ``time_limit`` (seconds): the shares stop
    being measured past it (the rest count as not measured); the budget's steps, which the user asked for, are
    measured whatever the time."""
    t0 = time.perf_counter()
    error, why = _trial(measure, ())
    plan = Plan(error=error, budget=budget, time_limit=time_limit)
    if error is None:
        plan.failed["(every layer as asked)"] = why
        plan.skipped = len(layers)
        plan.seconds = time.perf_counter() - t0
        return plan
    measured = []
    for i, layer in enumerate(layers[:MAX_LAYERS]):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        if progress is not None:
            progress(f"layer {i + 1}/{min(len(layers), MAX_LAYERS)}: {layer}")
        measured.append(layer)
        share, why = _trial(measure, (layer,))
        if share is None:
            plan.failed[layer] = why
        else:
            plan.shares[layer] = share
    plan.skipped = len(layers) - len(measured)
    if budget is not None and plan.error > budget:
        rest = [k for k in layers if k not in plan.shares]
        order = sorted(plan.shares, key=lambda k: plan.shares[k]) + rest
        for layer in order:
            plan.promoted.append(layer)
            if len(plan.promoted) == 1 and layer in plan.shares:
                error = plan.shares[layer]
            else:
                error, why = _trial(measure, tuple(plan.promoted))
            if error is None:  # this layer wider does not run: leave it as it was
                plan.promoted.pop()
                plan.failed.setdefault(layer, why)
                continue
            plan.steps.append((layer, error))
            if error <= budget:
                break
    plan.seconds = time.perf_counter() - t0
    return plan
