"""Usage: python benchmarks/min_scale.py MODEL [int8|int16x8]  (a keras.applications name of benchmarks/coverage.py)

Issue 27, acceptance 2: full-integer MobileNetV2 / EfficientNetB0 / ResNet50 (keras.applications, weights=None):
both converters; smallest activation scale (non-constant int8/int16 tensors); runs on both kernel sets; error-share cost."""
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import coverage as cov  # noqa: E402


def scales(data):
    from ai_edge_litert import schema_py_generated as schema
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    out = []
    for g in m.subgraphs:
        for t in g.tensors:
            if t.type not in (schema.TensorType.INT8, schema.TensorType.INT16):
                continue
            if m.buffers[t.buffer].data is not None and len(m.buffers[t.buffer].data):
                continue
            q = t.quantization
            if q is not None and q.scale is not None and len(q.scale):
                out.append(float(min(q.scale)))
    return out

def main(name, quantize):
    import keras
    import tensorflow as tf

    import fuselite
    from fuselite.runtime import run
    keras.utils.set_random_seed(0)
    model = cov._cases()[name](keras)
    draws = [cov._inputs(model, np.random.default_rng(100 + i)) for i in range(cov.CALIBRATION_DRAWS)]
    res = {"name": name}
    for side, make in (("fuselite", fuselite.Converter.from_keras_model), ("tf", tf.lite.TFLiteConverter.from_keras_model)):
        conv = cov._quantized(make(model), quantize, draws)
        t0 = time.perf_counter()
        data = conv.convert()
        dt = time.perf_counter() - t0
        s = scales(data)
        r = {"seconds": round(dt, 1), "min_scale": min(s), "below_4.7e-9": sum(x < 4.7e-9 for x in s)}
        for builtin in (False, True):
            try:
                run(data, draws[0], builtin_kernels=builtin)
                r["builtin" if builtin else "xnnpack"] = "runs"
            except Exception as e:
                r["builtin" if builtin else "xnnpack"] = str(e)[:100]
        if side == "fuselite":
            rep = conv.report
            layers = rep.quantization.get("layers", {})
            r["shares_seconds"] = layers.get("seconds")
            r["time_limit"] = layers.get("time_limit_seconds")
            r["stages_total"] = round(sum(rep.stage_seconds.values()), 1)
            r["not_measured"] = layers.get("layers_not_measured")
            r["trials_not_run"] = len(layers.get("trials_not_run", []) or [])
        res[side] = r
    print(json.dumps(res))

main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "int8")
