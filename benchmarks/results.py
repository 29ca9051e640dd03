"""What was measured for one model in one Keras flavour, and how it is judged against the targets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from cases import targets_for


@dataclass
class Side:
    """What one converter produced for one model."""

    data: bytes | None = None
    error: str | None = None
    times: list[float] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    latency_us: float | None = None
    max_err: float | None = None

    @property
    def ok(self) -> bool:
        return self.data is not None and self.error is None

    @property
    def time_s(self) -> float | None:
        return statistics.median(self.times) if self.times else None


@dataclass
class Row:
    """One model in one Keras flavour."""

    flavour: str
    model: str
    fl: Side = field(default_factory=Side)
    tf: Side = field(default_factory=Side)
    fl_stages: dict[str, float] = field(default_factory=dict)
    latency_ratios: list[float] = field(default_factory=list)  # fl / TF, one per block
    control_ratios: list[float] = field(default_factory=list)  # TF / TF (A/A), one per block
    other_load: float | None = None  # share of CPU used by other processes meanwhile
    error: str | None = None  # building the model or running the reference failed

    def ratio(self, metric: str) -> float | None:
        """fuselite / TF for ``metric`` in TARGETS, or None when either side is missing."""
        if not (self.fl.ok and self.tf.ok):
            return None
        a, b = {
            "time": (self.fl.time_s, self.tf.time_s),
            "size": (len(self.fl.data), len(self.tf.data)),
            "ops": (len(self.fl.ops), len(self.tf.ops)),
            "latency": (self.fl.latency_us, self.tf.latency_us),
        }[metric]
        if a is None or not b:
            return None
        return a / b

    def misses(self) -> list[str]:
        """Targets fuselite misses on this row (a fuselite failure misses everything)."""
        if self.error or not self.fl.ok:
            return ["conversion"]
        out = []
        for metric, limit in targets_for(self.flavour, self.model).items():
            r = self.ratio(metric)
            if r is not None and round(r, 3) > limit:  # judged at the precision shown
                tie = metric == "latency" and self.latency_tie(limit)
                out.append(f"{metric} (within noise)" if tie else metric)
        return out

    def latency_tie(self, limit: float = 1.0) -> bool:
        """True when a latency ratio above ``limit`` is not a consistent miss.

        That is: some block's ratio met the limit, or the excess over the limit is no
        larger than the A/A control's own distance from 1.
        """
        r = self.ratio("latency")
        if r is None or not self.latency_ratios:
            return False
        noise = self.noise()
        return min(self.latency_ratios) <= limit or (noise is not None and r - limit <= noise)

    def noise(self) -> float | None:
        """How far from 1 the A/A latency ratio strayed (the noise floor of the latency ratio)."""
        if not self.control_ratios:
            return None
        return max(abs(r - 1) for r in self.control_ratios)


def short_error(e: BaseException, limit: int = 300) -> str:
    """``Type: first meaningful line`` of an exception, cut to ``limit`` characters."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
