#!/usr/bin/env python
"""The recurrent forms (``rnn_form``) side by side with the official converter's model, on LiteRT, at each
thread count (issues 18, 30).

For each recurrent model of the benchmark (both Keras flavours): fuselite's ``rnn_form="fused"``
(LiteRT's sequence op; a GRU, which has none, unrolled), ``"unrolled"`` (builtins step by step, the input
projection hoisted) and ``"loop"`` (the input projection hoisted, the steps in a WHILE without TensorLists),
and the official converter's model of the same Keras model: for tf-keras its ``from_keras_model`` output (the
fused ops), with its concrete-function route besides; for Keras 3 ``from_concrete_functions`` on a batch-1
``tf.function`` (its ``from_keras_model`` fails on Keras 3 RNNs); plus a second instance of the official
model (*A/A*: its distance from 1 is the noise floor). Per thread count (``--threads``), LiteRT
``num_threads=N``, batch 1, all interleaved in fresh interpreters per block; ratios per block, the median (range
in brackets). The default form at that thread count (``rnn/forms/policy.py``: by each layer's size at 1 and 2
threads, read from a default conversion's report) is marked. The form ``rnn_form="auto", threads=N`` kept at conversion is given, and the form
its timing (``fuselite.verify.fastest_form``, LiteRT alone) chooses on the timing machine just before the forms
are timed; each against the best form with every form also timed alone (its own interpreter, as in an app).
Example::

    .venv/bin/python benchmarks/rnn_forms.py --threads 1 2 --out docs/rnn-forms-benchmarks.md

On a machine without TensorFlow (an idle many-core one), convert here with ``--export DIR`` (the
``.tflite`` files and inputs) and time there with LiteRT alone, one line::

    python benchmarks/rnn_forms.py --time DIR --threads 1 2 4 --out rnn-forms-other-machine.md
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
# the official converter's model ("tf", the one ratios are taken to), a second copy of it (A/A), and for tf-keras
# its concrete-function route besides ("tf_while": WHILE loops where from_keras_model writes the fused ops)
OFFICIAL = ("tf", "tf_twin", "tf_while")
MODELS = ("lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm", "simple_rnn", "gru", "text_lstm",
          "masked_text_lstm")
FAMILY = {"simple_rnn": "SimpleRNN", "gru": "GRU"}  # the others are LSTMs


def default_forms_of(model) -> dict[str, str]:
    """{threads: the form rnn_form="default" gives the model's recurrent layers} for 1, 2 and 3 threads (more: as
    3), read from a default conversion's report (by each layer's size at 1 and 2 threads); "mixed" where its
    layers got different forms (no one column is the default then)."""
    import fuselite

    forms = {}
    for n in (1, 2, 3):
        conv = fuselite.Converter.from_keras_model(model, threads=n)
        conv.convert()
        got = {r["form"].split(" ")[0] for r in conv.report.composites if r.get("form")}
        forms[n] = got.pop() if len(got) == 1 else "mixed"
    return {str(n): forms[min(n, 3)] for n in range(1, 65)}


def convert(flavour: str, name: str, threads: list[int], silence: bool):
    """{side: bytes}, the inputs, the input names, Keras' outputs and {threads: the form rnn_form="auto" kept} of
    one model, converted by both converters (needs TensorFlow). The official converter's model is its
    ``from_keras_model`` output for tf-keras (the fused ops; its concrete-function route as "tf_while") and its
    concrete-function route for Keras 3 (``from_keras_model`` fails on Keras 3 RNNs)."""
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
        auto = {}
        for n in threads:
            conv = fuselite.Converter.from_keras_model(model, rnn_form="auto", threads=n)
            conv.convert()
            chosen = conv.report.recurrent["auto"]
            timed = " / ".join(f"{f} {us:.0f}" for f, us in (chosen["fastest_block_us"] or {}).items())
            auto[n] = f"{chosen['chosen']}|{timed}"  # the form kept, and each form's fastest block as auto timed it
        defaults = default_forms_of(model)
        # the official converter last: its from_keras_model leaves a tf-keras model that fuselite can no longer
        # trace layer by layer in the same process ("Function composite has _implements=func ...")
        if flavour == "tf_keras":
            datas["tf"] = official_keras(model, k)
            datas["tf_while"] = convert_tf(model, route="concrete")[0]
        else:
            datas["tf"] = convert_tf(model, route="concrete")[0]
    datas["tf_twin"] = bytes(bytearray(datas["tf"]))
    return datas, inputs, [t.name for t in model.inputs], reference, auto, defaults


def official_keras(model, k) -> bytes:
    """The official converter's ``from_keras_model`` output of a tf-keras model; where it fails on the dynamic
    batch (a Bidirectional layer's TensorLists need a static element shape), of the same layers called on a
    batch-1 input, as a user fixes it."""
    import tensorflow as tf

    try:
        return tf.lite.TFLiteConverter.from_keras_model(model).convert()
    except Exception:  # ConverterError: "TensorListReserve ... element_shape to be static"
        inputs = [k.Input(batch_shape=(1, *t.shape[1:]), dtype=t.dtype) for t in model.inputs]
        fixed = k.Model(inputs, model(inputs[0] if len(inputs) == 1 else inputs))
        return tf.lite.TFLiteConverter.from_keras_model(fixed).convert()


def official_form(data: bytes) -> str:
    """What the official converter wrote for the recurrent layers: "fused ops", "WHILE" or "unrolled"."""
    from measure import op_names

    ops = set(op_names(data))
    if ops & {"UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN",
              "BIDIRECTIONAL_SEQUENCE_RNN"}:
        return "fused ops"
    return "WHILE" if "WHILE" in ops else "unrolled"


def measure(datas: dict, inputs, names, reference, settings) -> dict:
    """Latency blocks (at ``settings.threads``), errors and sizes of the sides of one model (LiteRT only)."""
    from measure import blockwise_latency, max_abs_error, prepared_interpreter, quiet
    from results import Side

    sides = [s for s in (*FORMS, *OFFICIAL) if s in datas]
    errors = {}
    for s in sides:
        if reference is not None:
            with quiet(settings.silence):
                interp = prepared_interpreter(datas[s], inputs, names)
                interp.invoke()
            errors[s] = max_abs_error(interp, reference)
    blocks = blockwise_latency([Side(data=datas[s]) for s in sides], inputs, names, settings)
    tf = sides.index("tf")
    return {"us": {s: statistics.median(b[n] for b in blocks) for n, s in enumerate(sides)},
            "fastest": {s: min(b[n] for b in blocks) for n, s in enumerate(sides)},
            "alone": {f: statistics.median(t) for f, t in alone(datas, inputs, names, settings).items()},
            "ratios": {s: [b[n] / b[tf] for b in blocks] for n, s in enumerate(sides)},
            "sizes": {s: len(datas[s]) for s in sides}, "errors": errors, "official": official_form(datas["tf"])}


def alone(datas: dict, inputs, names, settings) -> dict[str, list[float]]:
    """Each form's median invoke (µs) with no other model's interpreter between its invokes, as in an app that
    runs one model: per round a fresh interpreter for each form in turn (the order reversed every round),
    ``settings.latency_blocks`` rounds. The interleaved blocks above make the forms share the caches with six
    other models (the unrolled form's working set, several MB, suffers most); this is the yardstick for
    ``rnn_form="auto"``, which aims at the form fastest in an app."""
    from measure import interleaved_latency, prepared_interpreter, quiet

    times: dict[str, list[float]] = {f: [] for f in FORMS}
    seconds = settings.latency_seconds / settings.latency_blocks / len(FORMS)
    for r in range(settings.latency_blocks):
        for f in FORMS if r % 2 == 0 else reversed(FORMS):
            with quiet(settings.silence):
                interp = prepared_interpreter(datas[f], inputs, names, settings.threads)
            times[f].append(interleaved_latency([interp], seconds, burst=settings.burst)[0])
            del interp
    return times


def _ratio(r: list[float]) -> str:
    return f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"


def _over_best(form: str, m: dict) -> str:
    """``form``'s time over the best form's: each form alone (as in an app), by the median ratios to TF in the
    interleaved blocks, and by each form's fastest interleaved block."""
    ratios, fastest, by_itself = m["ratios"], m["fastest"], m["alone"]
    best = min(statistics.median(ratios[f]) for f in FORMS)
    return (f"alone {by_itself[form] / min(by_itself.values()):.2f}× best; median "
            f"{statistics.median(ratios[form]) / best:.2f}×; fastest blocks "
            f"{fastest[form] / min(fastest[f] for f in FORMS):.2f}×")


def row(flavour: str, name: str, m: dict, default: str, auto: str, here: dict) -> str:
    us, ratios, sizes, by_itself = m["us"], m["ratios"], m["sizes"], m["alone"]
    mark = {f: " **(default)**" if f == default else "" for f in FORMS}
    errs = " / ".join(f"{m['errors'][s]:.1e}" for s in FORMS) if m["errors"] else "—"
    size = " / ".join(f"{sizes[f] / sizes['tf']:.2f}" for f in FORMS)
    auto, _, timed = auto.partition("|")
    at_conversion = (f"{auto} ({_over_best(auto, m)}{'; timed ' + timed + ' µs' if timed else ''})"
                     if auto in FORMS else auto)
    timed_here = " / ".join(f"{f} {us:.0f}" for f, us in (here["fastest_block_us"] or {}).items())
    auto_here = f"{here['chosen']} ({_over_best(here['chosen'], m)}{'; timed ' + timed_here + ' µs' if timed_here else ''})"
    tf_while = _ratio(ratios["tf_while"]) if "tf_while" in ratios else "—"
    return (f"| {flavour} | {name} | {m['official']} | "
            f"{' / '.join(f'{us[s]:.1f}' for s in (*FORMS, 'tf'))} | "
            f"{' / '.join(f'{by_itself[f]:.1f}' for f in FORMS)} | "
            + " | ".join(f"{_ratio(ratios[f])}{mark[f]}" for f in FORMS)
            + f" | {f'{statistics.median(ratios[default]):.2f}' if default in FORMS else 'mixed'} | {at_conversion} | {auto_here} | {tf_while} | "
            f"{_ratio(ratios['tf_twin'])} | {size} | {errs} |")


def report(tables: dict[int, list[str]], started, seconds: float, settings, how: str, machine: str,
           versions: str) -> str:
    lines = [
        "# Recurrent forms against the official converter (LiteRT latency, by thread count)",
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
        "recurrent product and the cell, no TensorLists). *TF*: the official converter's model: for tf-keras its "
        "`from_keras_model` output (the fused ops where it writes them), for Keras 3 a batch-1 concrete function "
        "(its `from_keras_model` fails on Keras 3 RNNs; WHILE loops); *TF WHILE*: tf-keras through the concrete "
        "function too. *default*: the form `rnn_form=\"default\"` gives the model's layers at that thread count "
        "(**(default)**; by each layer's size at 1 and 2 threads; *mixed* where its layers got different forms); *auto (at conversion)*: the form `rnn_form=\"auto\", threads=N` kept (timed at "
        "conversion, on the converting machine); *auto (here)*: the form auto's timing (`fuselite.verify."
        "fastest_form`, LiteRT alone) chooses on this machine just before the forms are timed; for both, its time "
        "over the best form's here: *alone* (each form in its own interpreter with no other model between its "
        "invokes, as in an app, median of the rounds: the yardstick), by the median ratios of the interleaved "
        "blocks, and by each form's fastest block (load on the machine only adds time); and each form's time as "
        "auto measured it (its fastest block, which auto ranks by). LiteRT `num_threads=N`, the models (with a "
        f"second instance of TF's, *A/A*) interleaved in fresh interpreters, {settings.burst} invoke(s) of one "
        f"before the next, {settings.latency_blocks} blocks; ratios to TF per block, median (range).",
    ]
    for n, rows in tables.items():
        lines += [
            "",
            f"## {n} thread{'s' if n > 1 else ''}",
            "",
            "| flavour | model | TF's form | µs fused / unrolled / loop / TF | µs alone (fused / unrolled / loop) | "
            "× fused/TF | × unrolled/TF | × loop/TF | "
            "× default/TF | auto (at conversion) | auto (here) | × TF WHILE/TF | A/A | "
            "size × TF (fused / unrolled / loop) | max abs err vs Keras (fused / unrolled / loop) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavours", nargs="+", default=["keras3", "tf_keras"])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="LiteRT thread counts (default 1 2 4)")
    p.add_argument("--export", metavar="DIR", help="convert only: write the .tflite files and inputs to DIR")
    p.add_argument("--time", metavar="DIR", help="time the files --export wrote (LiteRT alone, no TensorFlow)")
    p.add_argument("--latency-seconds", type=float, default=3.0, help="per model and thread count (default 3)")
    p.add_argument("--latency-blocks", type=int, default=5)
    p.add_argument("--burst", type=int, default=10,
                   help="invokes of one model in a row when interleaving (default 10, as rnn_form='auto' times "
                        "them; 1: one invoke at a time, which lets the other models evict a large one's weights)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    from measure import Settings

    try:
        from fuselite.verify import fastest_form
    except ImportError:  # a machine with LiteRT alone (--time): the sources beside this script
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        from fuselite.verify import fastest_form

    settings = Settings(latency_seconds=args.latency_seconds, latency_blocks=args.latency_blocks, control=False,
                        burst=args.burst)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    tables: dict[int, list[str]] = {n: [] for n in args.threads}

    def time_case(flavour, name, datas, inputs, names, reference, defaults, auto):
        for n in args.threads:
            print(f"[rnn-forms] {flavour} / {name}: {n} thread(s) ...", file=sys.stderr, flush=True)
            settings.threads = n
            here = fastest_form({f: datas[f] for f in FORMS}, n)  # auto's choice made here, just before the timing
            m = measure(datas, inputs, names, reference, settings)
            tables[n].append(row(flavour, name, m, defaults[str(n)], auto.get(str(n), "—"), here))

    if args.time:  # LiteRT and NumPy only
        from importlib.metadata import version

        from report import emit, machine_description

        folder = Path(args.time)
        index = json.loads((folder / "index.json").read_text())
        for entry in index["cases"]:
            datas = {s: (folder / f"{entry['key']}.{s}.tflite").read_bytes() for s in entry["sides"]}
            with np.load(folder / f"{entry['key']}.inputs.npz") as saved:
                inputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
            time_case(entry["flavour"], entry["model"], datas, inputs, entry["names"], None, entry["defaults"],
                      entry["auto"])
        emit(report(tables, started, time.perf_counter() - t0, settings,
                    f"python benchmarks/rnn_forms.py --time {args.time} --threads {' '.join(map(str, args.threads))}",
                    machine_description(), f"LiteRT (ai-edge-litert) {version('ai-edge-litert')}, NumPy "
                    f"{np.__version__}; the files converted with {index['converted']}"), args.out)
        return 0

    from report import command_line, emit, fuselite_revision, machine_description, versions

    cases = []
    for flavour in args.flavours:
        for name in args.models:
            print(f"[rnn-forms] {flavour} / {name}: converting ...", file=sys.stderr, flush=True)
            datas, inputs, names, reference, auto, defaults = convert(flavour, name, args.threads, settings.silence)
            auto = {str(n): form for n, form in auto.items()}
            if args.export:
                folder = Path(args.export)
                folder.mkdir(parents=True, exist_ok=True)
                key = f"{flavour}.{name}"
                for s, data in datas.items():
                    (folder / f"{key}.{s}.tflite").write_bytes(data)
                np.savez(folder / f"{key}.inputs.npz", *inputs)
                cases.append({"key": key, "flavour": flavour, "model": name, "names": names, "sides": list(datas),
                              "auto": auto, "defaults": defaults})
                continue
            time_case(flavour, name, datas, inputs, names, reference, defaults, auto)
    if args.export:
        (Path(args.export) / "index.json").write_text(json.dumps(
            {"converted": f"{versions()}; fuselite {fuselite_revision()}", "cases": cases}, indent=1))
        print(f"wrote {len(cases)} cases to {args.export}; time them with: python benchmarks/rnn_forms.py --time "
              f"{args.export} --threads {' '.join(map(str, args.threads))}", file=sys.stderr)
        return 0
    emit(report(tables, started, time.perf_counter() - t0, settings, f"{command_line()} (from {os.getcwd()})",
                machine_description(), f"{versions()}; fuselite sources at {fuselite_revision()}"), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
