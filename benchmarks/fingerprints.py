#!/usr/bin/env python
"""Fingerprints of the ``.tflite`` bytes fuselite writes, to check that a refactor changes nothing.

For every reference model of ``fuselite.testing.models`` in both Keras flavours, this
converts the model in this process and prints one JSON line per model with:

* ``sha256``: of the bytes as written;
* ``normalized``: of the same model with TensorFlow's trace counters taken out of tensor
  and subgraph names (``__inference_lstm_1341`` -> ``__inference_lstm_N``). The counters
  depend on what else the process traced before, so the normalized hash is the one to
  compare between runs that convert models in another order (or in test workers); the
  unique suffix TensorFlow gives a variable's name (``embedding/embeddings/6``) too;
* ``unnamed``: of the same model with every tensor and subgraph name left empty (equal
  when two models differ in their names only).

The test suite records the same two hashes for every model it converts when the
environment variable ``FUSELITE_FINGERPRINTS`` names a directory (see ``tests/conftest.py``).

Example (from the repository root)::

    .venv/bin/python benchmarks/fingerprints.py > /tmp/before.jsonl
    # ... refactor ...
    .venv/bin/python benchmarks/fingerprints.py > /tmp/after.jsonl
    diff /tmp/before.jsonl /tmp/after.jsonl

``--rnn-forms`` converts each model once per recurrent form (``rnn_form``: default, fused, unrolled,
loop), ``--quantize int8`` (full integer, 8 random calibration draws) and ``dynamic`` add quantized
conversions, and ``--saved-model`` converts each model's SavedModel too (Keras 3 ``model.export``: the
recognised loops; tf-keras ``tf.saved_model.save``: tf-keras' composites), so that every source, form and
mode of the recurrent package is covered::

    .venv/bin/python benchmarks/fingerprints.py --rnn-forms default fused unrolled loop \
        --quantize none int8 --saved-model > /tmp/before.jsonl

With ``--runs N`` each model is converted N times and the median conversion time is added
(``seconds``): run it with the old and the new tree (``PYTHONPATH=old/src``) to compare.

Every mode and target (issue 43's check that a restructuring changes no byte)::

    .venv/bin/python benchmarks/fingerprints.py --quantize none float16 dynamic int8 int16x8 \
        --targets litert micro ethos-u > /tmp/before.jsonl
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import hashlib
import json
import re
import statistics
import sys
import time

_COUNTER = re.compile(rb"(__inference_[A-Za-z0-9_.-]*?_)\d+")
_VARIABLE_UID = re.compile(rb"(/)\d+$")  # TF's unique suffix of a variable's name: 'embedding/embeddings/6'


def _strip_counters(name: bytes | None) -> bytes | None:
    return None if name is None else _VARIABLE_UID.sub(rb"\1N", _COUNTER.sub(rb"\1N", name))


def normalized_sha256(data: bytes, rename=_strip_counters) -> str:
    """sha256 of the model with TensorFlow trace counters removed from tensor and subgraph names."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    for sg in model.subgraphs or []:
        sg.name = rename(sg.name)
        for t in sg.tensors or []:
            t.name = rename(t.name)
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return hashlib.sha256(bytes(builder.Output())).hexdigest()


def fingerprint(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "normalized": normalized_sha256(data),
            "unnamed": normalized_sha256(data, rename=lambda name: b""), "size": len(data)}


def _save(model, path: str, flavour: str) -> None:
    import tensorflow as tf

    if flavour == "keras3":
        model.export(path, verbose=False)
    else:
        tf.saved_model.save(model, path)


QUANTIZE_MODES = ("none", "float16", "dynamic", "int8", "int16x8")


def _quantize(conv, mode: str, model) -> None:
    import tensorflow as tf

    from fuselite.testing.models import sample_inputs

    if mode == "none":
        return
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        conv.target_spec.supported_types = [tf.float16]
    if mode in ("int8", "int16x8"):
        draws = [sample_inputs(model, seed=100 + i) for i in range(8)]
        conv.representative_dataset = lambda: (list(d) for d in draws)
    if mode == "int16x8":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]


def _vela_split(report) -> dict:
    """What Vela made of an ethos-u conversion: the NPU / CPU split with each CPU op's reason (no timings)."""
    if not report.ethos_u:
        return {}
    split = {k: report.ethos_u.get(k) for k in ("npu_ops", "cpu_ops", "vela_operators", "cycles")}
    return {"vela": hashlib.sha256(json.dumps(split, sort_keys=True, default=str).encode()).hexdigest()[:16]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", help="model names (default: all)")
    parser.add_argument("--flavours", nargs="*", default=["keras3", "tf_keras"])
    parser.add_argument("--rnn-forms", nargs="*", default=["default"], help="rnn_form values to convert with")
    parser.add_argument("--quantize", nargs="*", default=["none"], choices=QUANTIZE_MODES,
                        help="quantization modes to convert with (int8, int16x8: 8 random calibration draws)")
    parser.add_argument("--targets", nargs="*", default=["litert"], choices=("litert", "micro", "ethos-u"),
                        help="targets to convert for (micro and ethos-u: int8 only, whatever --quantize says; "
                             "ethos-u adds Vela's NPU / CPU split as 'vela')")
    parser.add_argument("--saved-model", action="store_true",
                        help="also convert each model's SavedModel (model.export / tf.saved_model.save)")
    parser.add_argument("--runs", type=int, default=1,
                        help="convert each model this many times and add the median conversion time ('seconds')")
    args = parser.parse_args(argv)

    import tempfile

    import fuselite
    from fuselite.testing import models as zoo

    names = args.models or [*zoo.BUILDERS, *zoo.RNN_BUILDERS, *zoo.MASKED_BUILDERS, *zoo.STATEFUL_BUILDERS]
    for flavour in args.flavours:
        k = zoo.keras3() if flavour == "keras3" else zoo.tf_keras()
        for name in names:
            model = zoo.build(name, k)
            sources = [("keras", lambda model=model: fuselite.Converter.from_keras_model(model))]
            if args.saved_model:
                path = tempfile.mkdtemp(prefix="fingerprint_")
                try:
                    _save(model, path, flavour)
                    sources.append(("saved_model", lambda path=path: fuselite.Converter.from_saved_model(path)))
                except Exception as e:  # noqa: BLE001 - Keras cannot export every model (a stateful layer)
                    print(json.dumps({"model": f"{flavour}/{name}", "source": "saved_model",
                                      "error": f"saving: {type(e).__name__}"}), flush=True)
            runs = [(target, form, mode) for target in args.targets for form in args.rnn_forms
                    for mode in (args.quantize if target == "litert" else ["int8"])]
            for source, make in sources:
                for target, form, mode in dict.fromkeys(runs):
                    times, data = [], None
                    try:
                        for _ in range(max(1, args.runs)):
                            conv = make()
                            conv.rnn_form = form
                            if target != "litert":
                                conv.target = target
                            _quantize(conv, mode, model)
                            t0 = time.perf_counter()
                            data = conv.convert()
                            times.append(time.perf_counter() - t0)
                        result = {**fingerprint(data), **_vela_split(conv.report)}
                    except Exception as e:  # noqa: BLE001 - a refusal is a fingerprint too
                        result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
                    timing = {"seconds": round(statistics.median(times), 4)} if args.runs > 1 and times else {}
                    where = {} if target == "litert" else {"target": target}
                    print(json.dumps({"model": f"{flavour}/{name}", "source": source, "rnn_form": form,
                                      "quantize": mode, **where, **result, **timing}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
