#!/usr/bin/env python
"""float16 quantization on the reference models: size and error against the float Keras model.

For every model of ``fuselite.testing.models`` in both Keras flavours: fuselite's float model
and its float16 model (``optimizations=[DEFAULT]``, ``supported_types=[float16]``), the size
ratio, and the max abs error of each against the Keras model on ``--samples`` random inputs
(also as a share of the Keras output's range), on stock LiteRT.

Example::

    .venv/bin/python benchmarks/float16.py --samples 20
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import sys

import numpy as np


def _errors(data: bytes, model, samples) -> float:
    from fuselite.runtime import interpreter

    interp = interpreter(data)
    worst, span = 0.0, 0.0
    for xs in samples:
        for d, x in zip(interp.get_input_details(), xs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        got = interp.get_tensor(interp.get_output_details()[0]["index"])
        ref = np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False))
        worst = max(worst, float(np.abs(got - ref).max()))
        span = max(span, float(ref.max() - ref.min()))
    return worst, span


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--models", nargs="*")
    args = parser.parse_args(argv)
    import fuselite
    from fuselite.testing import models as zoo

    print("| model | float bytes | float16 bytes | ratio | float max abs err | float16 max abs err | "
          "float16 err / output range |")
    print("|---|---|---|---|---|---|---|")
    for flavour in ("keras3", "tf_keras"):
        k = zoo.keras3() if flavour == "keras3" else zoo.tf_keras()
        for name in args.models or [*zoo.BUILDERS, *zoo.RNN_BUILDERS]:
            model = zoo.build(name, k)
            samples = [zoo.sample_inputs(model, seed=1 + i) for i in range(args.samples)]
            plain = fuselite.Converter.from_keras_model(model).convert()
            conv = fuselite.Converter.from_keras_model(model)
            conv.optimizations = ["DEFAULT"]
            conv.target_spec.supported_types = ["float16"]
            half = conv.convert()
            e_float, _ = _errors(plain, model, samples)
            e_half, span = _errors(half, model, samples)
            share = f"{100 * e_half / span:.4f}%" if span > 0 else "n/a (constant output)"
            print(f"| {flavour}/{name} | {len(plain):,} | {len(half):,} | {len(half) / len(plain):.3f} | "
                  f"{e_float:.2e} | {e_half:.2e} | {share} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
