#!/usr/bin/env python
"""What the reset witness costs: stateful models with and without it, timed on LiteRT.

fuselite gives every signature that uses variables a *reset witness* (``EQUAL``, ``IF``, ``CAST`` and a
one-unit ``UNIDIRECTIONAL_SEQUENCE_RNN``; see ``docs/variables.md``), so that LiteRT's
``interpreter.reset_all_variables()`` resets resource variables. The form without it is the same file
with those four ops removed (what fuselite wrote before). Stateful ``LSTM(64)`` / ``GRU(64)`` /
``SimpleRNN(64)`` over 50×32 steps (batch 1, both Keras flavours), and a ``tf.Variable`` counter (the
smallest model with a variable: the witness' worst case relative to the work). LiteRT
``num_threads=1``, the two models interleaved in fresh interpreters per block, median of the block
medians. Example::

    .venv/bin/python benchmarks/witness.py --out docs/witness-benchmarks.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import statistics
import sys
import time

import flatbuffers
import numpy as np
from cases import FLAVOURS, keras_module
from measure import Settings, add_latency_arguments, blockwise_latency, latency_settings, quiet
from report import command_line, emit, fuselite_revision, machine_description, versions
from results import Side, short_error

WITNESS = b"reset_witness"


def without_witness(data: bytes) -> bytes:
    """The model with the witness' ops taken out of every subgraph (their tensors stay, unused)."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    removed = 0

    def witness(sg, op) -> bool:  # touches the witness' state or flag (not a constant it may share)
        tensors = [sg.tensors[i] for i in [*op.inputs, *op.outputs] if i >= 0]
        return any(t.name.startswith(WITNESS) and m.buffers[t.buffer].data is None for t in tensors)

    for sg in m.subgraphs:
        kept = [op for op in sg.operators if not witness(sg, op)]
        removed += len(sg.operators) - len(kept)
        sg.operators = kept
    if removed == 0:
        raise ValueError("no reset witness in this model")
    b = flatbuffers.Builder(len(data) + 4096)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def stateful(k, cell: str):
    k.utils.set_random_seed(0)
    i = k.Input((50, 32), batch_size=1, name="sequence")
    return k.Model(i, getattr(k.layers, cell)(64, stateful=True)(i))


def counter():
    import tensorflow as tf

    v = tf.Variable(tf.zeros([64]))

    @tf.function(input_signature=[tf.TensorSpec([64], tf.float32, name="sequence")])
    def bump(x):
        v.assign_add(x)
        return v.read_value() * 2.0

    return bump.get_concrete_function(), v


def measure(flavour: str, name: str, settings: Settings) -> str:
    import fuselite

    sides = {"with": Side(), "without": Side()}
    with quiet(settings.silence):
        try:
            if name == "counter":
                fn, v = counter()
                data = fuselite.Converter.from_concrete_functions([fn], v).convert()
                x = np.ones(64, np.float32)
            else:
                data = fuselite.Converter.from_keras_model(stateful(keras_module(flavour), name)).convert()
                x = np.random.default_rng(0).standard_normal((1, 50, 32)).astype(np.float32)
            sides["with"].data, sides["without"].data = data, without_witness(data)
        except Exception as e:
            for side in sides.values():
                side.error = short_error(e)
    if not all(s.ok for s in sides.values()):
        return f"| {flavour} | {name} | fails: {sides['with'].error} | | | |"
    live = [sides["with"], sides["without"]]
    blocks = blockwise_latency(live, [x], ["sequence"], settings)
    for n, side in enumerate(live):
        side.latency_us = statistics.median(b[n] for b in blocks)
    ratios = [b[0] / b[1] for b in blocks]
    return (f"| {flavour} | {name} | {live[0].latency_us:.2f} | {live[1].latency_us:.2f} | "
            f"{statistics.median(ratios):.3f} ({min(ratios):.2f}–{max(ratios):.2f}) | "
            f"{len(live[0].data) - len(live[1].data):+,} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavours", nargs="+", choices=FLAVOURS, default=list(FLAVOURS))
    add_latency_arguments(p, seconds=2.0, blocks=5)
    args = p.parse_args(argv)
    settings = latency_settings(args)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for flavour in args.flavours:
        for name in ("LSTM", "GRU", "SimpleRNN"):
            print(f"[witness] {flavour} / {name} ...", file=sys.stderr, flush=True)
            rows.append(measure(flavour, name, settings))
    rows.append(measure("tf.function", "counter", settings))
    text = "\n".join([
        "# The reset witness: latency with and without it",
        "",
        f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}",
        "- *with*: fuselite's model (the witness lets `interpreter.reset_all_variables()` reset resource "
        "variables, see [variables.md](variables.md#reset)); *without*: the same file with the witness' four "
        "ops removed. Stateful Keras layers of 64 units over 50×32 steps, batch 1; *counter*: a `tf.function` "
        "adding a [64] input to a `tf.Variable`. LiteRT `Interpreter(num_threads=1)`, the two models "
        f"interleaved in fresh interpreters, {settings.latency_blocks} blocks, median of the block medians; "
        "*× with/without* per block (range in brackets); *Δ size*: bytes the witness adds.",
        "",
        "| source | model | with µs | without µs | × with/without | Δ size B |",
        "|---|---|---|---|---|---|",
        *rows,
    ]) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
