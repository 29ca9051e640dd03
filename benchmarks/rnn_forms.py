#!/usr/bin/env python
"""The recurrent forms (``rnn_form``) side by side with the official converter's model, on LiteRT (issue 18).

For each recurrent model of the benchmark (both Keras flavours): fuselite's ``rnn_form="fused"``
(LiteRT's sequence op; a GRU, which has none, unrolled), ``"unrolled"`` (builtins step by step, the input
projection hoisted) and ``"loop"`` (the input projection hoisted, the steps in a WHILE without TensorLists),
and the official converter's model of the same Keras model (``from_concrete_functions`` on a batch-1
``tf.function``: its ``from_keras_model`` fails on Keras 3 RNNs), plus a second instance of the official
model (*A/A*: its distance from 1 is the noise floor). LiteRT ``num_threads=1``, batch 1, all five
interleaved in fresh interpreters per block; ratios per block, the median (range in brackets). The
default form of each family (``rnn/forms/policy.py``, ``DEFAULT_FORMS``) is marked. Example::

    .venv/bin/python benchmarks/rnn_forms.py --out docs/rnn-forms-benchmarks.md

On a machine without TensorFlow (an idle many-core one), convert here with ``--export DIR`` (the
``.tflite`` files and inputs) and time there with LiteRT alone, one line::

    python benchmarks/rnn_forms.py --time DIR --out rnn-forms-other-machine.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

FORMS = ("fused", "unrolled", "loop")
SIDES = (*FORMS, "tf", "tf_twin")
TF = SIDES.index("tf")
MODELS = ("lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm", "simple_rnn", "gru", "text_lstm",
          "masked_text_lstm")
FAMILY = {"simple_rnn": "SimpleRNN", "gru": "GRU"}  # the others are LSTMs


def convert(flavour: str, name: str, silence: bool):
    """{side: bytes} and the inputs of one model, converted by both converters (needs TensorFlow)."""
    from cases import convert_tf, keras_module
    from measure import quiet

    import fuselite
    from fuselite.testing import models as zoo

    k = keras_module(flavour)
    with quiet(silence):
        model = zoo.build(name, k)
        inputs = zoo.sample_inputs(model, seed=0)
        reference = [np.asarray(o) for o in __import__("tensorflow").nest.flatten(model(
            inputs[0] if len(inputs) == 1 else inputs, training=False))]
        datas = {form: fuselite.Converter.from_keras_model(model, rnn_form=form).convert()
                 for form in FORMS}
        datas["tf"] = convert_tf(model, route="concrete")[0]
    datas["tf_twin"] = bytes(bytearray(datas["tf"]))
    return datas, inputs, [t.name for t in model.inputs], reference


def measure(datas: dict, inputs, names, reference, settings) -> dict:
    """Latency blocks, errors and sizes of the five sides of one model (LiteRT only)."""
    from measure import blockwise_latency, max_abs_error, prepared_interpreter, quiet
    from results import Side

    sides = [Side(data=datas[s]) for s in SIDES]
    errors = {}
    for s, side in zip(SIDES, sides):
        if reference is not None:
            with quiet(settings.silence):
                interp = prepared_interpreter(side.data, inputs, names)
                interp.invoke()
            errors[s] = max_abs_error(interp, reference)
    blocks = blockwise_latency(sides, inputs, names, settings)
    return {"us": {s: statistics.median(b[n] for b in blocks) for n, s in enumerate(SIDES)},
            "ratios": {s: [b[n] / b[TF] for b in blocks] for n, s in enumerate(SIDES)},
            "sizes": {s: len(datas[s]) for s in SIDES}, "errors": errors}


def _ratio(r: list[float]) -> str:
    return f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"


def row(flavour: str, name: str, m: dict, default: str) -> str:
    us, ratios, sizes = m["us"], m["ratios"], m["sizes"]
    mark = {f: " **(default)**" if f == default else "" for f in FORMS}
    errs = " / ".join(f"{m['errors'][s]:.1e}" for s in FORMS) if m["errors"] else "—"
    size = " / ".join(f"{sizes[f] / sizes['tf']:.2f}" for f in FORMS)
    return (f"| {flavour} | {name} | {' / '.join(f'{us[s]:.1f}' for s in SIDES[:TF + 1])} | "
            + " | ".join(f"{_ratio(ratios[f])}{mark[f]}" for f in FORMS)
            + f" | {_ratio(ratios['tf_twin'])} | {size} | "
            f"{errs} |")


def report(rows: list[str], started, seconds: float, settings, how: str, machine: str, versions: str) -> str:
    return "\n".join([
        "# Recurrent forms against the official converter (LiteRT latency)",
        "",
        f"- Command: `{how}`",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {seconds:.0f} s)",
        f"- Machine: {machine}",
        f"- Versions: {versions}",
        "- Models: the benchmark's recurrent models (64 units over 50×32, batch 1; text_lstm: Embedding → "
        "LSTM → Dense over 40 tokens; masked_text_lstm: the same with `mask_zero=True`, the last quarter of the "
        "tokens padding; bidirectional_lstm in the default split form). *fused*: "
        "`rnn_form=\"fused\"` (LiteRT's sequence op; a GRU has none, and a masked layer cannot take it: both "
        "unrolled); *unrolled*: "
        "`rnn_form=\"unrolled\"` (one FULLY_CONNECTED for every step's input, then the recurrent product and the "
        "cell per step); *loop*: `rnn_form=\"loop\"` (the same input projection, then a WHILE whose body does the "
        "recurrent product and the cell, no TensorLists); *TF*: the official converter's model (a batch-1 "
        "concrete function; WHILE loops). LiteRT `num_threads=1`, the five models (with a second instance of "
        f"TF's, *A/A*) interleaved in fresh interpreters, {settings.latency_blocks} blocks; ratios to TF per "
        "block, median (range). **(default)** marks each family's default form.",
        "",
        "| flavour | model | µs fused / unrolled / loop / TF | × fused/TF | × unrolled/TF | × loop/TF | A/A | "
        "size × TF (fused / unrolled / loop) | max abs err vs Keras (fused / unrolled / loop) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavours", nargs="+", default=["keras3", "tf_keras"])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--export", metavar="DIR", help="convert only: write the .tflite files and inputs to DIR")
    p.add_argument("--time", metavar="DIR", help="time the files --export wrote (LiteRT alone, no TensorFlow)")
    p.add_argument("--latency-seconds", type=float, default=3.0)
    p.add_argument("--latency-blocks", type=int, default=5)
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    from measure import Settings

    settings = Settings(latency_seconds=args.latency_seconds, latency_blocks=args.latency_blocks, control=False)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    if args.time:  # LiteRT and NumPy only
        from importlib.metadata import version

        from report import emit, machine_description

        folder = Path(args.time)
        index = json.loads((folder / "index.json").read_text())
        for entry in index["cases"]:
            datas = {s: (folder / f"{entry['key']}.{s}.tflite").read_bytes() for s in SIDES}
            with np.load(folder / f"{entry['key']}.inputs.npz") as saved:
                inputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
            m = measure(datas, inputs, entry["names"], None, settings)
            rows.append(row(entry["flavour"], entry["model"], m, entry["default"]))
        emit(report(rows, started, time.perf_counter() - t0, settings, f"python benchmarks/rnn_forms.py --time {args.time}",
                    machine_description(), f"LiteRT (ai-edge-litert) {version('ai-edge-litert')}, NumPy "
                    f"{np.__version__}; the files converted with {index['converted']}"), args.out)
        return 0

    from report import command_line, emit, fuselite_revision, machine_description, versions

    from fuselite.rnn.forms.policy import DEFAULT_FORMS

    cases = []
    for flavour in args.flavours:
        for name in args.models:
            print(f"[rnn-forms] {flavour} / {name} ...", file=sys.stderr, flush=True)
            datas, inputs, names, reference = convert(flavour, name, settings.silence)
            default = DEFAULT_FORMS[FAMILY.get(name, "LSTM")]
            if args.export:
                folder = Path(args.export)
                folder.mkdir(parents=True, exist_ok=True)
                key = f"{flavour}.{name}"
                for s in SIDES:
                    (folder / f"{key}.{s}.tflite").write_bytes(datas[s])
                np.savez(folder / f"{key}.inputs.npz", *inputs)
                cases.append({"key": key, "flavour": flavour, "model": name, "names": names, "default": default})
                continue
            rows.append(row(flavour, name, measure(datas, inputs, names, reference, settings), default))
    if args.export:
        (Path(args.export) / "index.json").write_text(json.dumps(
            {"converted": f"{versions()}; fuselite {fuselite_revision()}", "cases": cases}, indent=1))
        print(f"wrote {len(cases)} cases to {args.export}; time them with: python benchmarks/rnn_forms.py --time "
              f"{args.export}", file=sys.stderr)
        return 0
    emit(report(rows, started, time.perf_counter() - t0, settings, f"{command_line()} (from {os.getcwd()})",
                machine_description(), f"{versions()}; fuselite sources at {fuselite_revision()}"), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
