"""The Markdown report of a benchmark run: how it was measured, on what, the results table and
the sections below it (noisy rows, op differences, fuselite's time by stage, failures).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import statistics
import sys
import tempfile
from collections import Counter
from importlib import metadata

from cases import TARGETS, TF_ROUTE_NOTE, targets_for
from measure import Settings
from results import Row, Side

# Share of the machine's CPU used by *other* processes above which a row is flagged as noisy.
BUSY_LIMIT = 0.10


def machine_description() -> str:
    """CPU model (from /proc/cpuinfo), core counts, OS and Python."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu}, {os.cpu_count()} logical cores ({usable} usable), "
            f"{platform.system()} {platform.machine()}, Python {platform.python_version()}")


def versions() -> str:
    """Versions of the packages that matter for the numbers."""
    parts = []
    for label, dist in [("TensorFlow", "tensorflow-cpu"), ("TensorFlow", "tensorflow"),
                        ("LiteRT (ai-edge-litert)", "ai-edge-litert"), ("Keras", "keras"),
                        ("tf-keras", "tf-keras"), ("fuselite", "fuselite"), ("NumPy", "numpy")]:
        if any(p.startswith(label + " ") for p in parts):
            continue
        with contextlib.suppress(metadata.PackageNotFoundError):
            parts.append(f"{label} {metadata.version(dist)}")
    return ", ".join(parts)


def fuselite_revision() -> str:
    """``git <short hash>`` of the fuselite sources, "+ local changes" when src/ differs from it."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown revision"
    return f"git {head}" + (" + local changes in src/" if dirty else "")


def command_line() -> str:
    """The command that is running, as typed from the current directory."""
    exe = sys.executable
    rel = os.path.relpath(exe)
    if not rel.startswith(".."):
        exe = rel
    return shlex.join([exe, *sys.argv])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def _us(x: float | None) -> str:
    """Microseconds, with two decimals below 100 µs."""
    return _num(x, ".2f" if x is not None and x < 100 else ".1f")


def _pair(row: Row, value, fmt, errors: bool = False) -> str:
    """``fuselite / TF`` for one metric (``fmt``: a format spec or a function).

    A failed side shows "failed", or with ``errors`` the start of its error text.
    """
    show = fmt if callable(fmt) else (lambda x: _num(x, fmt))

    def failed(side: Side) -> str:
        if not errors or not side.error:
            return "failed"
        text = side.error if len(side.error) <= 100 else side.error[:99] + "…"
        return f"failed: {_cell(text)}"

    return " / ".join(show(value(side)) if side.ok else failed(side) for side in (row.fl, row.tf))


def _ratio(row: Row, metric: str) -> str:
    """The ratio, ✗ when it misses its target; for latency also the range over the blocks."""
    r = row.ratio(metric)
    if r is None:
        return "–"
    limit = targets_for(row.flavour, row.model).get(metric)
    mark = " ✗" if limit is not None and round(r, 3) > limit else ""
    spread = ""
    if metric == "latency" and len(row.latency_ratios) > 1:
        spread = f" ({min(row.latency_ratios):.2f}–{max(row.latency_ratios):.2f})"
    return f"{r:.3f}{mark}{spread}"


def _control(row: Row) -> str:
    """Median A/A ratio and its range over the blocks."""
    c = row.control_ratios
    if not c:
        return "–"
    return f"{statistics.median(c):.3f} ({min(c):.2f}–{max(c):.2f})"


def results_table(rows: list[Row]) -> str:
    """The main Markdown table (fuselite / TF values and their ratio per metric)."""
    head = ["flavour", "model", "convert s (fl / TF)", "× time", "size B (fl / TF)", "× size",
            "ops (fl / TF)", "× ops", "latency µs (fl / TF)", "× lat", "A/A lat", "max abs err (fl / TF)", "missed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.error:
            cells = [r.flavour, r.model, _cell(r.error)] + ["–"] * (len(head) - 4) + ["not measured"]
        else:
            cells = [
                r.flavour, r.model,
                _pair(r, lambda s: s.time_s, ".3f", errors=True), _ratio(r, "time"),
                _pair(r, lambda s: len(s.data), ","), _ratio(r, "size"),
                _pair(r, lambda s: len(s.ops), "d"), _ratio(r, "ops"),
                _pair(r, lambda s: s.latency_us, _us), _ratio(r, "latency"), _control(r),
                _pair(r, lambda s: s.max_err, ".1e"),
                ", ".join(r.misses()) or ("none" if r.tf.ok else "n/a (TF failed)"),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures_section(rows: list[Row]) -> str:
    """Full error text of every failed conversion or run."""
    items = []
    for r in rows:
        for label, side in (("fuselite", r.fl), ("TF converter", r.tf)):
            if side.error:
                items.append(f"- {r.flavour} / {r.model}, {label}: `{_cell(side.error)}`")
    return "\n".join(items)


def op_diff_section(rows: list[Row]) -> str:
    """Per model whose op histograms differ: which ops only fuselite or only TF emits."""
    items = []
    for r in rows:
        if not (r.fl.ops and r.tf.ops):
            continue
        fl, tf = Counter(r.fl.ops), Counter(r.tf.ops)
        if fl == tf:
            continue
        more = ", ".join(f"{k} +{fl[k] - tf[k]}" for k in sorted(fl) if fl[k] > tf[k])
        less = ", ".join(f"{k} −{tf[k] - fl[k]}" for k in sorted(tf) if tf[k] > fl[k])
        items.append(f"- {r.flavour} / {r.model} ({len(r.fl.ops)} vs {len(r.tf.ops)}): "
                     f"fuselite more: {more or 'none'}; fuselite fewer: {less or 'none'}")
    return "\n".join(items)


def stage_section(rows: list[Row]) -> str:
    """fuselite's median per-stage conversion seconds."""
    stages: list[str] = []
    for r in rows:
        stages += [s for s in r.fl_stages if s not in stages]
    if not stages:
        return ""
    lines = ["| flavour | model | " + " | ".join(stages) + " |", "|" + "---|" * (len(stages) + 2)]
    for r in rows:
        if r.fl_stages:
            lines.append(f"| {r.flavour} | {r.model} | "
                         + " | ".join(_num(r.fl_stages.get(s), ".3f") for s in stages) + " |")
    return "\n".join(lines)


def notes_section(rows: list[Row]) -> str:
    """Rows measured while other processes kept the CPU busy (their timings are less reliable)."""
    busy = [r for r in rows if r.other_load is not None and r.other_load > BUSY_LIMIT]
    if not busy:
        return ""
    listed = ", ".join(f"{r.flavour} / {r.model} ({r.other_load:.0%})" for r in busy)
    return (f"- Other processes used more than {BUSY_LIMIT:.0%} of the CPU while measuring: {listed}. "
            "Their times and latencies are less reliable; rerun on an idle machine.")


def markdown(rows: list[Row], settings: Settings, started: datetime.datetime, wall_s: float,
             other_load: float | None, revision: str) -> str:
    """The whole report."""
    targets = ", ".join(f"{k} ≤ {v:g}×" for k, v in TARGETS.items())
    load = "" if other_load is None else f"; other processes used {other_load:.0%} of the CPU meanwhile"
    parts = [
        "# fuselite vs. the official TFLite converter",
        "",
        f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')} (took {wall_s:.0f} s{load})",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {revision}",
        f"- Official converter: {TF_ROUTE_NOTE}",
        f"- Conversion time: median of {settings.runs} runs per converter on the same in-memory model, "
        "fuselite and TF alternating (which goes first alternates too).",
        "- Ops: operators in the main subgraph (LiteRT `_get_ops_details()`, no delegate).",
        "- Latency: LiteRT `Interpreter(num_threads=1)` (default XNNPACK delegate), same inputs; "
        f"{settings.latency_blocks} blocks, each with fresh interpreters, 10 warm-up invokes and "
        f"~{settings.latency_seconds / settings.latency_blocks:g} s of `invoke()` calls, the two models "
        "interleaved; the median of the block medians. In brackets: the range of the per-block ratios. "
        "*A/A lat* times TF's model against a second instance of itself the same way: its distance "
        "from 1 is the noise floor. A latency miss is marked *within noise* when its excess over the target "
        "is no larger than that, or when in some block the ratio met the target.",
        "- Max abs err: against the Keras model's own output (`training=False`), same inputs.",
        f"- Ratios are fuselite / TF; targets: {targets}; recurrent models (lstm_64 ... text_lstm) are "
        "judged on latency only: Keras 3 ≤ 0.6×, tf-keras ≤ 1.0×, GRU ≤ 1.0×; ✗ marks a miss.",
        "- The recurrent forms (`rnn_form`: fused, unrolled, loop) against the official converter's model: "
        "[rnn-forms-benchmarks.md](rnn-forms-benchmarks.md), from `benchmarks/rnn_forms.py`.",
        "- Peak memory of a conversion against the size of the weights: [memory-benchmark.md]"
        "(memory-benchmark.md), from `benchmarks/memory.py`.",
        "- Coverage over many more architectures (converts, runs, matches Keras; side by side with the "
        "official converter): [coverage.md](coverage.md), from `benchmarks/coverage.py` (`make coverage`).",
        "- Op coverage: every TF op `tf.lite.TFLiteConverter` lowers to a builtin, one small `tf.function` per op "
        "and attribute variant, both converters, both LiteRT kernel sets: [op-coverage.md](op-coverage.md), from "
        "`benchmarks/op_coverage.py` (`make op-coverage`).",
        "- Every keras-hub backbone built from a configuration, float, int8 and 16x8, beside the official "
        "converter and Keras' export: [keras-hub-benchmarks.md](keras-hub-benchmarks.md), from "
        "`benchmarks/keras_hub_catalog.py`.",
        "",
        results_table(rows),
    ]
    for title, body in (("Notes", notes_section(rows)),
                        ("Op differences (fuselite vs TF)", op_diff_section(rows)),
                        ("fuselite conversion time by stage (median s)", stage_section(rows)),
                        ("Failures", failures_section(rows))):
        if body:
            parts += ["", f"## {title}", "", body]
    return "\n".join(parts) + "\n"


def write_atomic_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".benchmarks-", suffix=".tmp", dir=directory)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def emit(text: str, out: str | None) -> None:
    """The report to ``out`` (atomically) when given, else to stdout."""
    if out:
        write_atomic_text(out, text)
    else:
        print(text)
