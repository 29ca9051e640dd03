#!/usr/bin/env python
"""Forms fuselite chose for compatibility, timed against the forms they replaced, on LiteRT.

Bidirectional LSTM and SimpleRNN: ``bidirectional="split"`` (the default since TensorFlow's flatbuffer
importer and Model Explorer crash on or reject LiteRT's bidirectional ops: two unidirectional ops and
reverses) against ``bidirectional="fused"`` (one ``BIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN``), for
every merge mode, full sequences and last steps, 50 steps of 32 features, 64 units, both Keras flavours.
LiteRT ``num_threads=1``, the two models interleaved in fresh interpreters per block, median of the
block medians; and the official converter's model of the same layer for reference (``from_concrete_functions``
on a batch-1 ``tf.function``: its ``from_keras_model`` fails on Keras 3 RNNs). Example::

    .venv/bin/python benchmarks/forms.py --out docs/forms-benchmarks.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import statistics
import sys
import time

import numpy as np
from cases import FLAVOURS, TF_ROUTE_NOTE, convert_tf, keras_module
from measure import (
    Settings,
    add_latency_arguments,
    blockwise_latency,
    latency_settings,
    max_abs_error,
    prepared_interpreter,
    quiet,
)
from report import command_line, emit, fuselite_revision, machine_description, versions
from results import Side, short_error

MERGE_MODES = ("concat", "sum", "ave", "mul", None)


def build(k, cell: str, merge_mode, sequences: bool):
    k.utils.set_random_seed(0)
    i = k.Input((50, 32), name="sequence")
    layer = k.layers.Bidirectional(getattr(k.layers, cell)(64, return_sequences=sequences), merge_mode=merge_mode)
    return k.Model(i, layer(i))


def measure(flavour: str, cell: str, merge_mode, sequences: bool, settings: Settings) -> str:
    import fuselite

    k = keras_module(flavour)
    with quiet(settings.silence):
        model = build(k, cell, merge_mode, sequences)
        x = np.random.default_rng(0).standard_normal((1, 50, 32)).astype(np.float32)
        import tensorflow as tf

        reference = [np.asarray(o) for o in tf.nest.flatten(model(x, training=False))]
        sides = {}
        for form in ("split", "fused", "tf"):
            side = Side()
            try:
                side.data = convert_tf(model, route="concrete")[0] if form == "tf" else \
                    fuselite.Converter.from_keras_model(model, bidirectional=form).convert()
                interp = prepared_interpreter(side.data, [x], ["sequence"])
                interp.invoke()
                side.max_err = max_abs_error(interp, reference)
            except Exception as e:
                side.error = short_error(e)
            sides[form] = side
    live = [sides[f] for f in ("split", "fused", "tf") if sides[f].ok]
    blocks = blockwise_latency(live, [x], ["sequence"], settings)
    for n, side in enumerate(live):
        side.latency_us = statistics.median(b[n] for b in blocks)
    split, fused, tf_side = sides["split"], sides["fused"], sides["tf"]
    ratios = [b[0] / b[1] for b in blocks] if split.ok and fused.ok else []
    ratio = f"{statistics.median(ratios):.3f} ({min(ratios):.2f}–{max(ratios):.2f})" if ratios else "—"

    def us(side: Side) -> str:
        return f"{side.latency_us:.1f}" if side.ok else f"fails: {side.error}".replace("|", "\\|")[:80]

    errs = " / ".join(f"{s.max_err:.1e}" if s.ok else "—" for s in (split, fused))
    return (f"| {flavour} | {cell} | {merge_mode} | {'sequence' if sequences else 'last step'} | {us(split)} | "
            f"{us(fused)} | {ratio} | {us(tf_side)} | {errs} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavours", nargs="+", choices=FLAVOURS, default=list(FLAVOURS))
    add_latency_arguments(p, seconds=2.0, blocks=5)
    args = p.parse_args(argv)
    settings = latency_settings(args)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for flavour in args.flavours:
        for cell in ("LSTM", "SimpleRNN"):
            for merge_mode in MERGE_MODES:
                for sequences in (True, False):
                    print(f"[forms] {flavour} / {cell} / {merge_mode} / {sequences} ...", file=sys.stderr, flush=True)
                    rows.append(measure(flavour, cell, merge_mode, sequences, settings))
    text = "\n".join([
        "# Compatibility forms: latency before and after",
        "",
        f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}",
        "- `Bidirectional(LSTM(64))` / `Bidirectional(SimpleRNN(64))` over 50×32, batch 1. *split*: the default "
        "(two unidirectional sequence ops and reverses: the form TensorFlow's flatbuffer importer, Model "
        "Explorer, LiteRT's integer kernels and TFLite Micro take); *fused*: `bidirectional=\"fused\"`, LiteRT's "
        "bidirectional op. LiteRT `Interpreter(num_threads=1)`, the models interleaved in fresh interpreters, "
        f"{settings.latency_blocks} blocks, median of the block medians; *× split/fused* per block (range in "
        f"brackets). *TF*: the official converter's model of the same layer, from a batch-1 concrete function ({TF_ROUTE_NOTE})",
        "",
        "| flavour | cell | merge | output | split µs | fused µs | × split/fused | TF µs | max abs err vs Keras "
        "(split / fused) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
