"""The pass manager: runs a pipeline declared as data (see ``fuselite/pipeline.py``).

A pipeline is a list of entries:

* :class:`Pass` — a named function ``run(module, ctx)`` with a one-line doc. It returns
  something truthy when it changed the module (only fixed points look at it);
* :class:`FixedPoint` — passes run in turn, stopping at the first that changes nothing
  (each pass is idempotent, so running the others again would change nothing either),
  at most ``max_rounds`` rounds;
* :class:`Group` — a named sequence, for reading, optionally run only ``when`` a
  predicate of the module holds.

For every pass run, the manager adds its time to ``ctx.report.stage_seconds[name]``,
runs the IR verifier when ``ctx.verify_ir`` is on (the tests turn it on), and prints the
module's text form when the pass is named in ``ctx.print_after``.

Example::

    PIPELINE = [
        Pass("fold-constants", lambda m, ctx: fold_tf(m), "evaluate ops whose inputs are constants"),
        FixedPoint("fold-and-refine", [refine_shapes_pass, fold_pass], max_rounds=4),
    ]
    run_pipeline(PIPELINE, module, ctx)
    print(format_pipeline(PIPELINE))
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fuselite.ir import Module
from fuselite.ir.invariants import check
from fuselite.ir.text import format_module

PassFn = Callable[[Module, Any], Any]


@dataclass(frozen=True)
class Pass:
    """One pass: ``run(module, ctx)``; truthy result = the module changed."""

    name: str
    run: PassFn
    doc: str


@dataclass(frozen=True)
class FixedPoint:
    """Run ``passes`` in turn until one changes nothing (at most ``max_rounds`` rounds)."""

    name: str
    passes: Sequence[Pass]
    doc: str
    max_rounds: int = 4

    def __post_init__(self):
        if not all(isinstance(p, Pass) for p in self.passes):
            raise TypeError(f"fixed point '{self.name}' takes passes, not groups")


@dataclass(frozen=True)
class Group:
    """A named sequence of entries, run only if ``when(module, ctx)`` (when given) holds."""

    name: str
    entries: Sequence[Any]
    doc: str
    when: Callable[[Module, Any], bool] | None = field(default=None)


Entry = Pass | FixedPoint | Group


def iter_passes(pipeline: Sequence[Entry], conditional: bool = True) -> Iterator[Pass]:
    """Every :class:`Pass` of a pipeline, depth first, in the order they are declared.

    ``conditional=False`` leaves out the passes of groups that run only ``when`` asked.
    """
    for entry in pipeline:
        if isinstance(entry, Pass):
            yield entry
        elif isinstance(entry, FixedPoint):
            yield from entry.passes
        elif conditional or entry.when is None:
            yield from iter_passes(entry.entries, conditional)


def pass_names(pipeline: Sequence[Entry], conditional: bool = True) -> list[str]:
    """The names of the pipeline's passes, each once, in order (see :func:`iter_passes`)."""
    return list(dict.fromkeys(p.name for p in iter_passes(pipeline, conditional)))


def check_pipeline(pipeline: Sequence[Entry]) -> None:
    """A pass name means one function: the same name for two functions is a declaration error."""
    seen: dict[str, PassFn] = {}
    for p in iter_passes(pipeline):
        if seen.setdefault(p.name, p.run) is not p.run:
            raise ValueError(f"pass name '{p.name}' is declared for two different functions")


def run_pass(p: Pass, module: Module, ctx) -> Any:
    """Run one pass: timed into the report, verified and printed as ``ctx`` asks."""
    if getattr(ctx, "progress", None) is not None:
        ctx.progress(p.name)
    t0 = time.perf_counter()
    try:
        result = p.run(module, ctx)
    finally:
        seconds = ctx.report.stage_seconds
        seconds[p.name] = seconds.get(p.name, 0.0) + time.perf_counter() - t0
    if ctx.verify_ir:
        check(module, after=p.name)
    if p.name in ctx.print_after:
        stream = ctx.print_stream or sys.stderr
        stream.write(f"// ----- IR after {p.name} -----\n{format_module(module, elide=ctx.print_elide)}")
        stream.flush()
    return result


def run_pipeline(pipeline: Sequence[Entry], module: Module, ctx) -> bool:
    """Run every entry in order; True if any pass reported a change."""
    changed = False
    for entry in pipeline:
        if isinstance(entry, Pass):
            changed |= bool(run_pass(entry, module, ctx))
        elif isinstance(entry, FixedPoint):
            changed |= _run_fixed_point(entry, module, ctx)
        elif entry.when is None or entry.when(module, ctx):
            changed |= run_pipeline(entry.entries, module, ctx)
    return changed


def _run_fixed_point(fp: FixedPoint, module: Module, ctx) -> bool:
    changed = False
    for _ in range(fp.max_rounds):
        for p in fp.passes:
            if not run_pass(p, module, ctx):
                return changed
            changed = True
    return changed


def format_pipeline(pipeline: Sequence[Entry]) -> str:
    """The pipeline as text: one line per entry with its doc (``fuselite pipeline`` prints it)."""
    rows: list[tuple[str, str]] = []

    def walk(entries, indent: str) -> None:
        for entry in entries:
            rows.append((indent + _label(entry), entry.doc))
            if isinstance(entry, FixedPoint):
                walk(entry.passes, indent + "    ")
            elif isinstance(entry, Group):
                walk(entry.entries, indent + "    ")

    walk(pipeline, "")
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join(f"{label:<{width}}  {doc}" for label, doc in rows)


def _label(entry: Entry) -> str:
    if isinstance(entry, FixedPoint):
        return f"{entry.name}: (fixed point, at most {entry.max_rounds} rounds)"
    if isinstance(entry, Group):
        return f"{entry.name}:" + (" (when needed)" if entry.when else "")
    return entry.name
