#!/usr/bin/env python
"""16x8 LSTMs on LiteRT: LiteRT's 8x8->16 integer LSTM op (``rnn_form="fused"``) against the LSTM unrolled
into 16x8 builtins (the 16x8 default since issue 41): error against the float model on the calibration draws
(as the report measures it), latency on LiteRT (XNNPACK, one thread, the two files interleaved invoke by invoke,
``fuselite.verify.bench``) and file size. Example::

    .venv/bin/python benchmarks/lstm_16x8.py --out docs/lstm-16x8-benchmarks.md
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

MODELS = ("lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm")
SIXTEEN = "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per pair (default 3)")
    p.add_argument("--samples", type=int, default=20, help="calibration draws (default 20)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    with quiet():
        import fuselite
        from fuselite.testing import models as zoo
        from fuselite.verify import bench
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for name in MODELS:
        print(f"[lstm_16x8] {name} ...", file=sys.stderr, flush=True)
        with quiet():
            model = zoo.build(name, zoo.keras3())
            calibration = [zoo.sample_inputs(model, seed=200 + i) for i in range(args.samples)]
            cells, datas = [], []
            for form in ("fused", "default"):
                conv = fuselite.Converter.from_keras_model(model, rnn_form=form)
                conv.optimizations = ["DEFAULT"]
                conv.representative_dataset = lambda calibration=calibration: iter(calibration)
                conv.target_spec.supported_ops = [SIXTEEN]
                datas.append(conv.convert())
                error = max(o["relative_error"] for o in conv.report.quantization["outputs"])
                cells.append(error)
            times = bench(datas, seconds=args.seconds)
        (e_fused, e_unrolled), (t_fused, t_unrolled) = cells, [t["median_us"] for t in times]
        rows.append(f"| {name} | {100 * e_fused:.2f}% | {100 * e_unrolled:.2f}% | {e_fused / e_unrolled:.1f}x | "
                    f"{t_fused:.0f} | {t_unrolled:.0f} | {t_unrolled / t_fused:.2f} | {len(datas[0]):,} | "
                    f"{len(datas[1]):,} | {len(datas[1]) / len(datas[0]):.1f} |")
    text = "\n".join([
        "# 16x8 LSTMs on LiteRT: the 8x8->16 integer LSTM op against 16x8 builtins",
        "",
        f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}",
        f"- Keras 3 reference models (`fuselite.testing.models`), {args.samples} calibration draws, the 16x8 op set "
        "alone; *error*: max abs against the float model on LiteRT over the output's range, on the calibration "
        "draws (the report's measure); µs: LiteRT median per invoke, XNNPACK, one thread, the two files "
        "interleaved.",
        "",
        "| model | error, 8x8->16 op | error, 16x8 builtins | closer | µs, op | µs, builtins | time ratio | "
        "bytes, op | bytes, builtins | size ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows, ""])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
