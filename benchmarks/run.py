#!/usr/bin/env python
"""Benchmark fuselite against the official TFLite converter on the reference models.

For every model of ``fuselite.testing.models`` in each Keras flavour (Keras 3 and tf-keras),
in one process, this compares ``fuselite.Converter.from_keras_model(model).convert()`` with
``tf.lite.TFLiteConverter.from_keras_model(model).convert()`` on:

1. conversion time: median of ``--runs`` conversions of the same in-memory model object,
   fuselite and TF alternating (tracing done by the converter itself is included);
2. ``.tflite`` size in bytes;
3. operator count of the main subgraph, read for both the same way (LiteRT interpreter
   ``_get_ops_details()`` without the default delegate, so XNNPACK adds no node);
4. LiteRT latency: ``Interpreter(num_threads=1)`` per model, same inputs, warm-up, then the
   median of many ``invoke()`` timings, the two models interleaved; done in several blocks,
   each with fresh interpreters, because one interpreter instance can be a few percent
   faster or slower than another instance of the very same model (memory placement); an
   A/A control (TF's model against a second instance of itself) shows that noise floor;
5. max abs error of each against the Keras model's own output.

Example (from the repository root)::

    .venv/bin/python benchmarks/run.py --out docs/benchmarks.md
    .venv/bin/python benchmarks/run.py --models mlp cnn --flavours keras3 --runs 3

This file is the command line; the work is done by its neighbours: ``cases.py`` (the models,
flavours, converters and targets), ``measure.py`` (timing, ops, accuracy, latency),
``results.py`` (a row of results and how it is judged) and ``report.py`` (the Markdown).
"""

from __future__ import annotations

import os

# Before TensorFlow is imported anywhere.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import sys
import time
import traceback

from cases import FLAVOURS
from measure import LoadMeter, Settings, benchmark_model, quiet, silence_python_logging
from report import fuselite_revision, markdown, write_atomic_text
from results import Row, short_error


def parse_args(argv=None):
    from fuselite.testing.models import BUILDERS, RNN_BUILDERS

    every = list(BUILDERS) + list(RNN_BUILDERS)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=every, default=every,
                   metavar="NAME", help=f"models to run (default: all of {', '.join(every)})")
    p.add_argument("--flavours", nargs="+", choices=FLAVOURS, default=list(FLAVOURS),
                   help="Keras flavours (default: both)")
    p.add_argument("--runs", type=int, default=5, help="conversions per converter and model (default 5)")
    p.add_argument("--latency-seconds", type=float, default=3.0,
                   help="time spent on timed invokes per model, both interpreters together (default 3)")
    p.add_argument("--latency-blocks", type=int, default=5,
                   help="latency blocks, each with fresh interpreters (default 5)")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="skip the A/A latency control (TF model against itself), which halves the latency time")
    p.add_argument("--out", help="write the Markdown report here (atomically)")
    p.add_argument("--verbose", action="store_true", help="do not silence TensorFlow's output")
    args = p.parse_args(argv)
    if args.runs < 1 or args.latency_blocks < 1 or args.latency_seconds <= 0:
        p.error("--runs and --latency-blocks must be at least 1, --latency-seconds positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    settings = Settings(args.runs, args.latency_seconds, args.latency_blocks, args.control,
                        silence=not args.verbose)
    with quiet(settings.silence):
        import tensorflow  # noqa: F401  (import once, with its start-up chatter hidden)
    if settings.silence:
        silence_python_logging()
    started = datetime.datetime.now(datetime.UTC)
    revision = fuselite_revision()  # at the start: others may commit while this runs
    t0 = time.perf_counter()
    whole_run = LoadMeter()
    rows = []
    for flavour in args.flavours:
        for name in args.models:
            print(f"[bench] {flavour} / {name} ...", file=sys.stderr, flush=True)
            t, meter = time.perf_counter(), LoadMeter()
            try:
                row = benchmark_model(flavour, name, settings)
            except Exception as e:  # keep going: one broken model must not lose the others
                traceback.print_exc()
                row = Row(flavour, name, error=f"benchmark crashed: {short_error(e)}")
            row.other_load = meter.other_share()
            rows.append(row)
            print(f"[bench]   done in {time.perf_counter() - t:.1f} s; missed: {', '.join(row.misses()) or 'none'}"
                  + ("" if row.other_load is None else f"; other load {row.other_load:.0%}"),
                  file=sys.stderr, flush=True)
    text = markdown(rows, settings, started, time.perf_counter() - t0, whole_run.other_share(), revision)
    print(text)
    if args.out:
        write_atomic_text(args.out, text)
        print(f"[bench] wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
