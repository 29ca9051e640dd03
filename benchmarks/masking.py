#!/usr/bin/env python
"""What masking costs: an Embedding -> RNN(64) -> Dense text model over 20 tokens with and without
``mask_zero=True``, converted by fuselite (unmasked: the default loop form; masked: the default loop form,
its body ending in SELECT_V2s, rnn/forms/loop.py, and the unrolled form, SELECT_V2s per step,
rnn/forms/unrolled.py), timed on LiteRT with one thread, interleaved invoke by invoke
(``fuselite.verify.bench``, 3 s), inputs drawn as token ids in [0, 10) (about one in ten masked). Example::

    .venv/bin/python benchmarks/masking.py --out docs/masking-benchmarks.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import sys
import time

from measure import quiet
from report import command_line, emit, fuselite_revision, machine_description, versions


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per pair (default 3)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    with quiet():
        import keras

        import fuselite
        from fuselite.verify import bench
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for layer in ("LSTM", "GRU", "SimpleRNN"):
        print(f"[masking] {layer} ...", file=sys.stderr, flush=True)
        datas = []
        with quiet():
            for mask, form in ((False, "default"), (True, "default"), (True, "unrolled")):
                keras.utils.set_random_seed(0)
                i = keras.Input((20,), dtype="int32", batch_size=1)
                y = getattr(keras.layers, layer)(64)(keras.layers.Embedding(1000, 32, mask_zero=mask)(i))
                datas.append(fuselite.Converter.from_keras_model(keras.Model(i, keras.layers.Dense(2)(y)),
                                                                 rnn_form=form).convert())
            times = bench(datas, seconds=args.seconds)
        plain = times[0]["median_us"]
        cells = [f"{t['median_us']:.1f} ({t['p10_us']:.1f}–{t['p90_us']:.1f})" for t in times]
        rows.append(f"| {layer}(64) | {' | '.join(cells)} | {times[1]['median_us'] / plain:.2f} / "
                    f"{times[2]['median_us'] / plain:.2f} | {' / '.join(f'{len(d):,}' for d in datas)} |")
    text = "\n".join([
        "# Masked recurrent layers: latency against the unmasked form",
        "",
        f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}",
        "- Embedding(1000, 32) -> layer(64) -> Dense(2) over 20 tokens, batch 1, all three models converted by "
        "fuselite (unmasked and masked in the default loop form, masked also with `rnn_form=\"unrolled\"`); "
        "LiteRT `Interpreter(num_threads=1)`, interleaved invoke by invoke; median µs (p10–p90).",
        "",
        "| layer | unmasked µs (loop) | masked µs (loop) | masked µs (unrolled) | × masked/unmasked (loop / "
        "unrolled) | size B (unmasked / masked loop / masked unrolled) |",
        "|---|---|---|---|---|---|",
        *rows,
    ]) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
