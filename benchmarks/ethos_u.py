#!/usr/bin/env python
"""Recurrent models for an Arm Ethos-U: ``target="ethos-u"`` in int8 and 16x8, both Keras flavours.

For every recurrent model of the benchmark (``benchmarks/rnn_forms.py``'s: 64 units over 50x32,
batch 1; the Embedding -> LSTM text model over 40 tokens), fuselite converts with
``target="ethos-u"`` (Vela 5.2, ``--accelerator-config`` as given, U55-128 by default), and gives:

* the ops Vela put on the NPU, of the model's own, and each op left on the CPU with Vela's reason;
* Vela's cycle estimate and SRAM use;
* the model before Vela on TFLite Micro's interpreter against the float Keras model, on
  ``--samples`` held-out inputs (calibration on 32 others): max abs error as a share of the range of
  Keras' outputs;
* for the LSTM models in 16x8, the same error for LiteRT's 16x8 form of the same conversion (the
  8x8->16 integer LSTM, int8 activations inside it) run on TFLite Micro too, and for a float Keras
  model whose LSTM weights are rounded to int8 as the converter rounds them (per tensor, each gate
  apart): the floor that int8 weights put under any 16x8 LSTM.

Example (from the repository root)::

    .venv/bin/python benchmarks/ethos_u.py --out docs/ethos-u-benchmarks.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import sys
import time

import numpy as np
from cases import FLAVOURS, keras_module
from measure import quiet
from report import command_line, emit, fuselite_revision, machine_description, versions

MODELS = ("lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm", "gru", "simple_rnn", "text_lstm")
SIXTEEN = "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"


def convert(model, target: str, mode: str, calibration, accelerator: str | None = None):
    import fuselite

    options = {"accelerator_config": accelerator} if target == "ethos-u" else {}
    conv = fuselite.Converter.from_keras_model(model, target=target, **options)
    conv.representative_dataset = lambda: iter(calibration)
    conv.optimizations = ["DEFAULT"]
    conv.target_spec.supported_ops = [SIXTEEN] if mode == "16x8" else ["TFLITE_BUILTINS_INT8"]
    conv.inference_input_type = conv.inference_output_type = "int16" if mode == "16x8" else "int8"
    return conv, conv.convert()


def tflm_cell(data: bytes, tests, want) -> str:
    """The error as a share of the range of Keras' outputs, and as an absolute."""
    share, absolute = tflm_error(data, tests, want, absolute=True)
    return f"{100 * share:.2f}% ({absolute:.2g})"


def tflm_error(data: bytes, tests, want, absolute: bool = False):
    """max |TFLM - Keras| over the held-out samples, over the range of Keras' outputs (and the max itself)."""
    from fuselite.runtime.micro import run_samples_on_micro
    from fuselite.runtime.quantization_error import real_output, tensor_quantization, to_input

    q_in, q_out = tensor_quantization(data)
    got = run_samples_on_micro(data, [[to_input(q_in[k], x) for k, x in enumerate(t)] for t in tests])
    err = max(float(np.abs(real_output(q_out[0], g[0]) - w).max()) for g, w in zip(got, want))
    share = err / (max(w.max() for w in want) - min(w.min() for w in want))
    return (share, err) if absolute else share


def litert_error(data: bytes, tests, want) -> float:
    """As :func:`tflm_error`, on LiteRT (for a model TFLite Micro cannot run)."""
    from fuselite.runtime import run
    from fuselite.runtime.quantization_error import real_output, tensor_quantization, to_input

    q_in, q_out = tensor_quantization(data)
    got = [next(iter(run(data, [to_input(q_in[k], x) for k, x in enumerate(t)]).values())) for t in tests]
    err = max(float(np.abs(real_output(q_out[0], g) - w).max()) for g, w in zip(got, want))
    return err / (max(w.max() for w in want) - min(w.min() for w in want))


def int8_weight_floor(model, tests, want) -> float:
    """The error of the float model with its LSTM kernels rounded to int8 per tensor and gate (as the
    integer LSTM holds them), as a share of the outputs' range."""
    saved = [(layer, layer.get_weights()) for layer in _lstm_layers(model)]
    try:
        for layer, weights in saved:
            layer.set_weights([_int8_per_gate(w) if w.ndim == 2 else w for w in weights])
        got = [np.asarray(model(t[0] if len(t) == 1 else t, training=False), np.float64) for t in tests]
    finally:
        for layer, weights in saved:
            layer.set_weights(weights)
    err = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
    return err / (max(w.max() for w in want) - min(w.min() for w in want))


def _lstm_layers(model):
    for layer in model.layers:
        inner = [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]
        yield from (x for x in inner if type(x).__name__ == "LSTM")


def _int8_per_gate(w: np.ndarray) -> np.ndarray:
    parts = []
    for p in np.split(w, 4, axis=-1):
        scale = np.abs(p).max() / 127 or 1.0
        parts.append(np.round(p / scale) * scale)
    return np.concatenate(parts, axis=-1)


def run(flavours, models, accelerator: str, samples: int, calibrate: int, silence: bool) -> list[str]:
    from fuselite.testing import models as zoo

    rows = []
    for flavour in flavours:
        k = keras_module(flavour)
        for name in models:
            print(f"[ethos-u] {flavour} / {name} ...", file=sys.stderr, flush=True)
            with quiet(silence):
                model = zoo.build(name, k)
                calibration = [zoo.sample_inputs(model, seed=s) for s in range(calibrate)]
                tests = [zoo.sample_inputs(model, seed=1000 + s) for s in range(samples)]
                want = [np.asarray(model(t[0] if len(t) == 1 else t, training=False), np.float64) for t in tests]
                cells = []
                for mode in ("int8", "16x8"):
                    try:
                        conv, data = convert(model, "ethos-u", mode, calibration, accelerator)
                    except Exception as e:  # a row says how it failed; the others go on
                        cells.append((mode, f"failed: {type(e).__name__}: {str(e)[:120]}", "", "", "", ""))
                        continue
                    e = conv.report.ethos_u
                    cpu = "; ".join(f"{c['op']}: {c['reason']}" for c in e["cpu_ops"]) or "—"
                    cells.append((mode, f"{e['npu_ops']} / {e['ops']} ({100 * e['npu_ops'] / e['ops']:.0f}%)", cpu,
                                  f"{e['cycles']:,}", f"{e['sram_kib']:.1f}", tflm_cell(data, tests, want)))
                floor = ""
                if any(True for _ in _lstm_layers(model)):
                    _, narrow = convert(model, "litert", "16x8", calibration)
                    try:
                        wide8 = f"{100 * tflm_error(narrow, tests, want):.2f}%"
                    except RuntimeError:  # LiteRT's form with ops TFLM has not (an int32 SELECT_V2): on LiteRT
                        wide8 = f"{100 * litert_error(narrow, tests, want):.2f}% (LiteRT)"
                    floor = (f"{wide8} / "
                             f"{100 * int8_weight_floor(model, tests, want):.2f}%")
            for mode, npu, cpu, cycles, sram, err in cells:
                extra = floor if mode == "16x8" else ""
                rows.append(f"| {flavour} | {name} | {mode} | {npu} | {cpu} | {cycles} | {sram} | {err} | {extra} |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--flavours", nargs="+", default=list(FLAVOURS), choices=FLAVOURS)
    p.add_argument("--accelerator", default="ethos-u55-128", help="Vela's --accelerator-config (default ethos-u55-128)")
    p.add_argument("--samples", type=int, default=8, help="held-out inputs the errors are measured on (default 8)")
    p.add_argument("--calibrate", type=int, default=128, help="random calibration inputs (default 128)")
    p.add_argument("--out", help="write the markdown report here (default: stdout)")
    p.add_argument("--verbose", action="store_true", help="keep TensorFlow's and the converters' logs")
    args = p.parse_args(argv)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = run(args.flavours, args.models, args.accelerator, args.samples, args.calibrate, not args.verbose)
    text = "\n".join([
        "# Recurrent models for an Arm Ethos-U (Vela)", "",
        f"- Command: `{command_line()}`",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
        f"- Machine: {machine_description()}", f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}",
        f"- `target=\"ethos-u\"`, `accelerator_config=\"{args.accelerator}\"`, Vela's default system configuration "
        f"and memory mode for it; calibration on {args.calibrate} random inputs, errors on "
        f"{args.samples} others. *NPU ops*: the model's own ops Vela put on the NPU, of all; *CPU ops*: each "
        "one left on the CPU with Vela's reason; *cycles*, *SRAM*: Vela's estimates; *error*: the model before "
        "Vela on TFLite Micro's interpreter against the float Keras model, max abs over the range of Keras' "
        "outputs (and the max abs error itself); *16x8: 8x8->16 / int8-weight floor*: the same error for LiteRT's 16x8 form of the conversion "
        "(the integer LSTM with int8 activations inside, run on TFLite Micro too), and for the float Keras model "
        "with its LSTM weights rounded to int8 as the integer LSTM holds them.", "",
        "| flavour | model | mode | NPU ops | CPU ops (Vela's reason) | cycles | SRAM KiB | error | "
        "16x8: 8x8->16 / int8-weight floor |",
        "|---|---|---|---|---|---|---|---|---|", *rows, ""])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
