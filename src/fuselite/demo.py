"""``make demo``: build a small Keras 3 model in-process, convert it, run it on LiteRT."""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> int:
    import numpy as np

    import fuselite
    from fuselite.runtime import run
    from fuselite.testing import models as zoo

    keras = zoo.keras3()
    print("Building a small Keras 3 CNN (Conv2D + BatchNorm + DepthwiseConv2D + Dense, random weights)...")
    model = zoo.build("cnn", keras)
    x = zoo.sample_inputs(model, batch=1)[0]
    t0 = time.perf_counter()
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    print(f"Converted in {time.perf_counter() - t0:.2f} s\n")
    print(conv.report)
    out = next(iter(run(data, [x]).values()))
    ref = np.asarray(model(x, training=False))
    err = float(np.abs(out - ref).max())
    print(f"\nRan on the stock LiteRT interpreter: output {out.shape}, max abs error vs TensorFlow {err:.2e}")
    return 0 if err <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
