#!/usr/bin/env python
"""What the TFLite Micro target costs on LiteRT, and what runs on TFLite Micro: fuselite's default and micro targets
and the official converter, side by side in one process.

For every model of the main benchmark (both Keras flavours):

* fuselite with the default target and with ``target="micro"``: ops (main subgraph, LiteRT, no
  delegate), size, LiteRT latency (``num_threads=1``, the two models interleaved in fresh
  interpreters per block; median of the block medians) and the ratio micro / default;
* the micro-target model on TFLite Micro's Python interpreter (``tflite-micro``, a subprocess):
  max abs error against Keras on the same input as LiteRT's, and the tensor arena fuselite
  measured there (``micro_sources``);
* the official converter's float model (``tf.lite.TFLiteConverter``, as in the main benchmark)
  on TFLite Micro: does it run, and its max abs error against Keras.

Example (from the repository root)::

    .venv/bin/python benchmarks/micro.py --out docs/micro-benchmarks.md
    .venv/bin/python benchmarks/micro.py --models lstm_64 gru --flavours keras3
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
from cases import FLAVOURS, TF_ROUTE_NOTE, convert_tf, keras_module, reference_outputs
from measure import (
    Settings,
    add_latency_arguments,
    blockwise_latency,
    latency_settings,
    max_abs_error,
    op_names,
    prepared_interpreter,
    quiet,
)
from report import command_line, emit, fuselite_revision, machine_description, versions
from results import Side, short_error

_TFLM = """
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
interp = runtime.Interpreter.from_bytes(open(sys.argv[1], "rb").read())
xs = np.load(sys.argv[2])
for i in range(len(xs.files)):
    interp.set_input(xs[f"i{i}"], i)
interp.invoke()
outs, o = {}, 0
while o < int(sys.argv[4]):
    outs[f"o{o}"] = interp.get_output(o)
    o += 1
np.savez(sys.argv[3], **outs)
"""


TFLM_TIMEOUT_S = 20  # the official converter's WHILE models of some Keras 3 RNNs never return on TFLM


def tflm_error(data: bytes, inputs: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float | None, str]:
    """Max abs error against ``reference`` of one invoke on TFLite Micro (a subprocess), or (None, why not)."""
    with tempfile.TemporaryDirectory() as tmp:
        model, xs, ys = (os.path.join(tmp, n) for n in ("m.tflite", "x.npz", "y.npz"))
        with open(model, "wb") as f:
            f.write(data)
        np.savez(xs, **{f"i{i}": x for i, x in enumerate(inputs)})
        try:
            out = subprocess.run([sys.executable, "-c", _TFLM, model, xs, ys, str(len(reference))],
                                 capture_output=True, text=True, timeout=TFLM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"one invoke did not finish in {TFLM_TIMEOUT_S} s"
        if out.returncode != 0:
            lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip() and "File " not in ln]
            return None, (lines[-1] if lines else f"exit {out.returncode}")[:160]
        got = list(np.load(ys).values())
    worst, pending = 0.0, list(reference)
    for g in got:
        j = next((j for j, r in enumerate(pending) if r.shape == g.shape), None)
        if j is None:
            return None, f"an output of shape {g.shape}, Keras has {[r.shape for r in pending]}"
        worst = max(worst, float(np.abs(g.astype(np.float64) - pending.pop(j)).max()))
    return worst, ""


@dataclass
class Row:
    flavour: str
    model: str
    default: Side = field(default_factory=Side)
    micro: Side = field(default_factory=Side)
    arena: int | None = None
    tflm_err: float | None = None
    tflm_why: str = ""
    tf_tflm_err: float | None = None
    tf_tflm_why: str = ""
    ratios: list[float] = field(default_factory=list)
    error: str | None = None


def convert(model, target: str, side: Side, sources: str | None) -> dict:
    import fuselite

    try:
        conv = fuselite.Converter.from_keras_model(model, target=target, micro_sources=sources)
        side.data = conv.convert()
        return conv.report.micro
    except Exception as e:
        side.error = short_error(e)
        return {}


def measure(flavour: str, name: str, settings: Settings) -> Row:
    from fuselite.testing import models

    row = Row(flavour, name)
    with quiet(settings.silence):
        model = models.build(name, keras_module(flavour))
        inputs = models.sample_inputs(model)
        reference = reference_outputs(model, inputs)
    names = [str(getattr(t, "name", "") or "").split(":")[0] for t in model.inputs]
    with tempfile.TemporaryDirectory() as sources, quiet(settings.silence):
        convert(model, "litert", row.default, None)
        micro = convert(model, "micro", row.micro, sources)
        row.arena = micro.get("arena_bytes")
        try:
            tf_data, _ = convert_tf(model)
        except Exception as e:
            tf_data, row.tf_tflm_why = None, f"official converter failed: {short_error(e)}"
    live = []
    for side in (row.default, row.micro):
        if side.ok:
            with quiet(settings.silence):
                side.ops = op_names(side.data)
                interp = prepared_interpreter(side.data, inputs, names)
                interp.invoke()
            side.max_err = max_abs_error(interp, reference)
            live.append(side)
    if len(live) == 2:
        blocks = blockwise_latency(live, inputs, names, settings)
        row.default.latency_us, row.micro.latency_us = (statistics.median(b[k] for b in blocks) for k in (0, 1))
        row.ratios = [b[1] / b[0] for b in blocks]
    if row.micro.ok:
        row.tflm_err, row.tflm_why = tflm_error(row.micro.data, inputs, reference)
    if tf_data is not None:
        row.tf_tflm_err, row.tf_tflm_why = tflm_error(tf_data, inputs, reference)
    return row


def _err(value: float | None, why: str) -> str:
    return f"{value:.1e}" if value is not None else f"fails: {why}".replace("|", "\\|")


def markdown(rows: list[Row], started: datetime.datetime, wall_s: float, settings: Settings) -> str:
    out = [
        "# The TFLite Micro target: what it costs on LiteRT, and what runs on TFLite Micro",
        "",
        f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {wall_s:.0f} s)",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}, tflite-micro {_tflm_version()}; fuselite sources at {fuselite_revision()}",
        "- default / micro: fuselite's `target=\"litert\"` (default) and `target=\"micro\"` models of the same "
        "Keras model. Latency: LiteRT `Interpreter(num_threads=1)` (default XNNPACK delegate), the two models "
        f"interleaved, {settings.latency_blocks} blocks of fresh interpreters, median of the block medians; "
        "*× lat* is micro / default (in brackets: the range over the blocks).",
        "- Errors are max abs differences from the Keras model's own output on the same input. *TFLM err* runs the "
        "micro-target model on TFLite Micro's Python interpreter; *arena* is the tensor arena fuselite measured "
        "there for `--micro-sources` (the smallest it ran in). *TF on TFLM* runs the official converter's float "
        f"model on TFLite Micro. {TF_ROUTE_NOTE}",
        "",
        "| flavour | model | ops (default / micro) | size B (default / micro) | latency µs (default / micro) | × lat "
        "| LiteRT err (micro) | TFLM err (micro) | arena B | TF on TFLM err |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.error or not (r.default.ok and r.micro.ok):
            why = r.error or r.micro.error or r.default.error
            out.append(f"| {r.flavour} | {r.model} | failed: {why} |  |  |  |  |  |  |  |")
            continue
        lat = (f"{statistics.median(r.ratios):.3f} ({min(r.ratios):.2f}–{max(r.ratios):.2f})" if r.ratios else "")
        out.append(f"| {r.flavour} | {r.model} | {len(r.default.ops)} / {len(r.micro.ops)} | "
                   f"{len(r.default.data):,} / {len(r.micro.data):,} | "
                   f"{r.default.latency_us:.2f} / {r.micro.latency_us:.2f} | {lat} | {r.micro.max_err:.1e} | "
                   f"{_err(r.tflm_err, r.tflm_why)} | {f'{r.arena:,}' if r.arena else ''} | {_err(r.tf_tflm_err, r.tf_tflm_why)} |")
    return "\n".join(out) + "\n"


def _tflm_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tflite-micro")
    except metadata.PackageNotFoundError:
        return "not installed"


def main(argv=None) -> int:
    from fuselite.testing.models import BUILDERS, RNN_BUILDERS

    every = [*BUILDERS, *RNN_BUILDERS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=every, default=every, metavar="NAME")
    p.add_argument("--flavours", nargs="+", choices=FLAVOURS, default=list(FLAVOURS))
    add_latency_arguments(p, seconds=2.0, blocks=3)
    args = p.parse_args(argv)
    settings = latency_settings(args)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for flavour in args.flavours:
        for name in args.models:
            print(f"[micro] {flavour} / {name} ...", file=sys.stderr, flush=True)
            try:
                rows.append(measure(flavour, name, settings))
            except Exception as e:  # one broken model must not lose the others
                rows.append(Row(flavour, name, error=short_error(e)))
    emit(markdown(rows, started, time.perf_counter() - t0, settings), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
