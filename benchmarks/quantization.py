#!/usr/bin/env python
"""Quantization side by side: fuselite and the official converter in float16, dynamic-range, int8 and 16x8.

For every model (both Keras flavours), in one process, each converter makes its float model
and its quantized model in the same mode (the same ``tf.lite.TFLiteConverter`` settings:
``optimizations=[DEFAULT]``, plus ``supported_types=[float16]`` for float16, a
``representative_dataset`` for int8, and ``supported_ops=[EXPERIMENTAL_..._INT16_WEIGHTS_INT8]``
with it for 16x8). For each:

* size in bytes, and as a fraction of the same converter's float model;
* operator count of the main subgraph (LiteRT, no delegate) and the ops it runs;
* max abs error against the float Keras model on the same ``--samples`` held-out inputs, and
  that error as a share of the range (max - min) of Keras' output over those inputs;
* LiteRT latency, ``num_threads=1``, the two quantized models interleaved (median invoke).

Where the official converter fails, the row says how. Example (from the repository root)::

    .venv/bin/python benchmarks/quantization.py --out docs/quantization-benchmarks.md
    .venv/bin/python benchmarks/quantization.py --models lstm_64 gru --modes dynamic
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from cases import FLAVOURS, TF_ROUTE_NOTE, convert_tf, keras_module, reference_outputs
from measure import interleaved_latency, max_abs_error, op_names, prepared_interpreter, quiet
from report import command_line, emit, fuselite_revision, machine_description, versions
from results import short_error

MODELS = ["mlp", "cnn", "mobilenet_v2", "lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm",
          "simple_rnn", "gru", "text_lstm", "text_model", "stateful_lstm"]
MODES = ("float16", "dynamic", "int8", "int16x8")
CALIBRATED = ("int8", "int16x8")
CALIBRATION_SAMPLES = 100  # int8: representative dataset (seeds 2000...), the same for both converters


def calibration(model) -> list[list]:
    from fuselite.testing import models as zoo

    return [zoo.sample_inputs(model, seed=2000 + i) for i in range(CALIBRATION_SAMPLES)]


def configure(conv, mode: str, model) -> None:
    """The tf.lite.TFLiteConverter settings of ``mode``, the same values on both converters."""
    import tensorflow as tf

    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        conv.target_spec.supported_types = [tf.float16]
    if mode in CALIBRATED:
        samples = calibration(model)
        conv.representative_dataset = lambda: iter(samples)
    if mode == "int16x8":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]


@dataclass
class Result:
    float_size: int | None = None
    size: int | None = None
    ops: list[str] = field(default_factory=list)
    max_err: float | None = None
    span: float | None = None
    latency_us: float | None = None
    calibration_s: float | None = None  # fuselite int8: its calibrate pass
    error: str | None = None
    data: bytes | None = None

    @property
    def ratio(self) -> float | None:
        return self.size / self.float_size if self.size and self.float_size else None

    @property
    def share(self) -> float | None:
        return self.max_err / self.span if self.max_err is not None and self.span else None


def _fuselite(model, mode: str | None, flavour: str) -> tuple[bytes, dict]:
    import fuselite

    conv = fuselite.Converter.from_keras_model(model)
    if mode:
        configure(conv, mode, model)
    data = conv.convert()
    return data, {"calibration_s": conv.report.stage_seconds.get("calibrate")}


def _official(model, mode: str | None, flavour: str) -> tuple[bytes, dict]:
    if mode not in CALIBRATED:
        return convert_tf(model, (lambda c: configure(c, mode, model)) if mode else None)[0], {}
    # TF 2.21's int8 calibrator can crash the process (SIGSEGV in calibrator.py on Keras 3 RNNs): a child does it,
    # from_keras_model first and, for a recurrent model, a batch-1 concrete function if that fails
    import subprocess
    import tempfile

    from fuselite.testing.models import RNN_BUILDERS

    errors = []
    for route in ("keras", "concrete") if name_of(model) in RNN_BUILDERS else ("keras",):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "model.tflite")
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", flavour, name_of(model),
                                    route, mode, out], capture_output=True, text=True, timeout=900)
            if child.returncode == 0:
                with open(out, "rb") as f:
                    return f.read(), {}
            how = f"crashed (signal {-child.returncode})" if child.returncode < 0 else "failed"
            lines = [ln for ln in child.stderr.strip().splitlines() if ln and not ln.startswith(("I0000", "W0000"))]
            errors.append(f"{route}: {how}{': ' + lines[-1][:160] if lines else ''}")
    raise RuntimeError("official converter: " + "; ".join(errors))


def name_of(model) -> str:
    """The reference model's name in fuselite.testing.models (MobileNetV2 names itself otherwise)."""
    from fuselite.testing import models as zoo

    return next((k for k in (*zoo.BUILDERS, *zoo.RNN_BUILDERS, *zoo.STATEFUL_BUILDERS) if k == model.name or
                 (k == "mobilenet_v2" and model.name.startswith("mobilenetv2"))), model.name)


def _child(flavour: str, name: str, route: str, mode: str, out: str) -> int:
    """The official int8 (or 16x8) conversion of one model by one route, alone in this process."""
    from fuselite.testing import models as zoo

    model = zoo.build(name, keras_module(flavour))
    with quiet():
        data = convert_tf(model, lambda c: configure(c, mode, model), route)[0]
    with open(out, "wb") as f:
        f.write(data)
    return 0


def _reset(model):
    """A stateful model back to zero state (the error is measured per sample from a fresh interpreter)."""
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_states()
    return model


def _errors(data: bytes, samples, refs, names) -> float:
    worst = 0.0
    for xs, ref in zip(samples, refs):
        interp = prepared_interpreter(data, xs, names)
        interp.invoke()
        worst = max(worst, max_abs_error(interp, ref))
    return worst


def measure(model, flavour: str, mode: str, samples, refs, names, span: float, latency_s: float
            ) -> dict[str, Result]:
    results = {"fuselite": Result(), "tf": Result()}
    for side, convert in (("fuselite", _fuselite), ("tf", _official)):
        r = results[side]
        try:
            with quiet():
                r.float_size = len(convert(model, None, flavour)[0])
                r.data, info = convert(model, mode, flavour)
                r.calibration_s = info.get("calibration_s")
            r.size = len(r.data)
        except Exception as e:  # the official converter fails on some models: say how
            r.error = f"conversion: {short_error(e)}"
            continue
        try:
            with quiet():
                r.ops = op_names(r.data)
                r.max_err = _errors(r.data, samples, refs, names)
            r.span = span
        except Exception as e:
            r.error = f"LiteRT: {short_error(e)}"
    live = [r for r in results.values() if r.error is None]
    if live and latency_s > 0:
        with quiet():
            interps = [prepared_interpreter(r.data, samples[0], names) for r in live]
        for r, us in zip(live, interleaved_latency(interps, latency_s)):
            r.latency_us = us
    return results


def _ops(ops: list[str]) -> str:
    top = Counter(ops).most_common(3)
    return f"{len(ops)} ({', '.join(f'{k} {n}' for k, n in top)}{', ...' if len(set(ops)) > 3 else ''})"


def _cell(r: Result, what: str) -> str:
    if r.error:
        return "fails" if what == "size" else "—"
    if what == "size":
        return f"{r.size:,} ({r.ratio:.3f})"
    if what == "ops":
        return _ops(r.ops)
    if what == "err":
        return f"{r.max_err:.2e} ({100 * r.share:.3f}%)" if r.share is not None else f"{r.max_err:.2e}"
    return f"{r.latency_us:.3g}" if r.latency_us is not None else "—"


def table(rows: list[tuple[str, str, str, dict[str, Result]]]) -> str:
    lines = ["| model | mode | size, bytes (× own float): fuselite | TF | max abs err vs Keras (% of range): "
             "fuselite | TF | latency µs: fuselite | TF | ops: fuselite | TF |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for flavour, name, mode, res in rows:
        fl, tf = res["fuselite"], res["tf"]
        lines.append(f"| {flavour}/{name} | {mode} | {_cell(fl, 'size')} | {_cell(tf, 'size')} | {_cell(fl, 'err')} | "
                     f"{_cell(tf, 'err')} | {_cell(fl, 'lat')} | {_cell(tf, 'lat')} | {_cell(fl, 'ops')} | "
                     f"{_cell(tf, 'ops')} |")
    timings = [f"{flavour}/{name} {res['fuselite'].calibration_s:.2f} s" for flavour, name, mode, res in rows
               if mode == "int8" and res["fuselite"].calibration_s is not None]  # (16x8 calibrates the same way)
    if timings:
        lines += ["", f"fuselite's calibration ({CALIBRATION_SAMPLES} samples, the `calibrate` pass): "
                  + ", ".join(timings) + "."]
    failures = [(f"{flavour}/{name} {mode} {side}", r.error) for flavour, name, mode, res in rows
                for side, r in res.items() if r.error]
    if failures:
        lines += ["", "Failures:", ""] + [f"- {what}: `{err}`" for what, err in failures]
    return "\n".join(lines)


def markdown(rows, args, started, wall_s: float) -> str:
    return "\n".join([
        "# Quantization benchmark: fuselite vs tf.lite.TFLiteConverter", "",
        f"Generated by `{command_line()}` on {started:%Y-%m-%d %H:%M} UTC in {wall_s / 60:.1f} min "
        f"(fuselite {fuselite_revision()}).", "",
        f"- Machine: {machine_description()}", f"- Versions: {versions()}",
        f"- Both converters get the same settings: `optimizations=[DEFAULT]` (dynamic), plus "
        f"`target_spec.supported_types=[float16]` (float16), or plus a `representative_dataset` of "
        f"{CALIBRATION_SAMPLES} random samples (int8; default op set, float inputs and outputs), plus "
        "`supported_ops=[EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]` (int16x8). Official "
        f"converter route: {TF_ROUTE_NOTE} Its int8 and 16x8 conversions run in a child process (its "
        "calibrator can crash the process).",
        f"- Error: max abs difference from the float Keras model over the same {args.samples} held-out inputs "
        "(random normal floats, token ids in [0, 1000)), and as a share of the range of Keras' outputs over "
        "them. Size ratio: against the same converter's float model.",
        f"- Latency: LiteRT `Interpreter(num_threads=1)`, median `invoke()`, the two quantized models "
        f"interleaved for {args.latency_seconds} s; one run on a shared VM, so read ratios under 1.2× as ties.",
        "", table(rows), ""])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    p.add_argument("--flavours", nargs="+", choices=FLAVOURS, default=list(FLAVOURS))
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--samples", type=int, default=20, help="held-out inputs for the error (default 20)")
    p.add_argument("--latency-seconds", type=float, default=1.0, help="timed invokes per model and mode")
    p.add_argument("--out", help="write the Markdown report here (atomically); default: stdout")
    p.add_argument("--child", nargs=5, metavar=("FLAVOUR", "MODEL", "ROUTE", "MODE", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(*args.child)
    from fuselite.testing import models as zoo

    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for flavour in args.flavours:
        k = keras_module(flavour)
        for name in args.models:
            model = zoo.build(name, k)
            samples = [zoo.sample_inputs(model, seed=1000 + i) for i in range(args.samples)]
            refs = [reference_outputs(_reset(model), xs) for xs in samples]  # each from zero state, as LiteRT's
            names = [t.name.split(":")[0] for t in model.inputs]
            span = float(max(r.max() for ref in refs for r in ref) - min(r.min() for ref in refs for r in ref))
            for mode in args.modes:
                res = measure(model, flavour, mode, samples, refs, names, span, args.latency_seconds)
                rows.append((flavour, name, mode, res))
                fl, tf = res["fuselite"], res["tf"]
                print(f"{flavour}/{name} {mode}: fuselite {_cell(fl, 'size')} {_cell(fl, 'err')} | "
                      f"tf {_cell(tf, 'size')} {_cell(tf, 'err')}", file=sys.stderr, flush=True)
    text = markdown(rows, args, started, time.perf_counter() - t0)
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
