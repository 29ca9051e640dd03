#!/usr/bin/env python
"""A 1B-parameter keras-hub decoder end to end (issue 46): built from a configuration with random weights (no
preset download), converted by fuselite in float32 (a file over 4 GiB: its constants after the flatbuffer),
float16 weights and dynamic-range int8, each run on stock LiteRT from the bytes and from the written file and
compared with Keras' logits.

The model is ``LlamaCausalLM`` over a ``LlamaBackbone`` of TinyLlama-1.1B's shape (22 layers, hidden 2048, 32
query and 4 key/value heads, MLP 5632, vocabulary 32000, untied output embedding: 1.10B parameters, 4.4 GB of
float32). Each mode runs in a fresh process: the peak resident memory of the conversion (``VmHWM``, reset
before it) over the resident memory before it, as a multiple of the float32 weights N; the conversion's time;
the file; the largest error of the logits over their range at batch 1 x 16 tokens (from the bytes, with
XNNPACK) and batch 2 x 7 tokens (from the file, on the builtin kernels). Example (from the repository root)::

    .venv/bin/python benchmarks/large_backbone.py --out docs/large-backbone.md
    .venv/bin/python benchmarks/large_backbone.py --layers 2 --modes float32   # a small smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CONFIG = {"vocabulary_size": 32000, "num_layers": 22, "num_query_heads": 32, "num_key_value_heads": 4,
          "hidden_dim": 2048, "intermediate_dim": 5632}
MODES = ("float32", "float16", "dynamic")

_CHILD = r"""
import gc, json, os, re, sys, time
import numpy as np
import keras
import keras_hub
import fuselite
from fuselite.runtime import run
from fuselite.tflite.flatbuffer import buffer_offsets_of, return_freed_memory

config, mode, path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
keras.utils.set_random_seed(0)
backbone = keras_hub.models.LlamaBackbone(**config)
model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
parameters = int(sum(np.prod(w.shape) for w in model.weights))
rng = np.random.default_rng(0)
cases = []
for batch, length in ((1, 16), (2, 7)):
    feeds = {"token_ids": rng.integers(0, config["vocabulary_size"], (batch, length)).astype(np.int32),
             "padding_mask": np.ones((batch, length), np.int32)}
    cases.append((feeds, np.asarray(model(feeds), np.float64)))


def status(field):
    return int(re.search(field + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024


conv = fuselite.Converter.from_keras_model(model)
if mode != "float32":
    conv.optimizations = ["DEFAULT"]
if mode == "float16":
    import tensorflow as tf
    conv.target_spec.supported_types = [tf.float16]
conv.progress = lambda stage: print("STAGE", stage, file=sys.stderr, flush=True)
gc.collect()
return_freed_memory()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
t0 = time.perf_counter()
data = conv.convert()
seconds = time.perf_counter() - t0
peak = status("VmHWM")
offsets = buffer_offsets_of(data)


def error(got, want):
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.ptp(want))


feeds, want = cases[0]
from_bytes = error(next(iter(run(data, feeds).values())), want)
with open(path, "wb") as f:
    f.write(data)
size = len(data)
del data
gc.collect()
from ai_edge_litert.interpreter import Interpreter, OpResolverType
interp = Interpreter(model_path=path, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
runner = interp.get_signature_runner()
feeds, want = cases[1]
from_path = error(next(iter(runner(**feeds).values())), want)
os.remove(path)
print("RESULT", json.dumps({"parameters": parameters, "weights": parameters * 4, "before": before, "peak": peak,
                            "seconds": seconds, "size": size, "offsets": bool(offsets), "from_bytes": from_bytes,
                            "from_path": from_path, "warnings": list(conv.report.warnings)}))
"""


def _one(config: dict, mode: str, timeout: float) -> dict:
    path = os.path.join(tempfile.gettempdir(), f"fuselite-large-{os.getpid()}.tflite")
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(config), mode, path], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"why": f"did not finish in {timeout:.0f} s"}
    finally:
        if os.path.exists(path):
            os.remove(path)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    lines = [line for line in out.stderr.strip().splitlines() if not line.startswith("STAGE ")]
    return {"why": f"exit {out.returncode}: {(lines or ['?'])[-1][:300]}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--layers", type=int, default=CONFIG["num_layers"], help="decoder layers (default 22: 1.1B)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per mode (default 1800)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from report import command_line, emit, fuselite_revision, machine_description, versions

    config = dict(CONFIG, num_layers=args.layers)
    lines = ["# A 1B-parameter keras-hub decoder, end to end", "",
             f"Generated by `{command_line()}` (fuselite {fuselite_revision()}).", "",
             f"- Machine: {machine_description()}", f"- Versions: {versions()}",
             f"- Model: `LlamaCausalLM(LlamaBackbone(**{config}), preprocessor=None)`, random weights (seed 0), "
             "converted with `fuselite.Converter.from_keras_model(model)` (batch and length dynamic); float16: "
             "`supported_types = [tf.float16]`; dynamic: `optimizations = [DEFAULT]`. Each mode in a fresh "
             "process. Peak: `VmHWM` reset just before `convert()`, over the resident memory then (the Keras "
             "model's own weights included in it), as a multiple of the float32 weights N.",
             "- Error: the largest |LiteRT - Keras| of the logits over their range; from the bytes at batch 1 x 16 "
             "tokens (XNNPACK), from the written file at batch 2 x 7 tokens (LiteRT's builtin kernels).", "",
             "| mode | parameters | file | layout | conversion | peak - before | error from bytes | error from file |",
             "|---|---|---|---|---|---|---|---|"]
    notes: list[str] = []
    for mode in args.modes:
        r = _one(config, mode, args.timeout)
        print(f"[large_backbone] {mode}: {r}", file=sys.stderr, flush=True)
        if "why" in r:
            lines.append(f"| {mode} | fails: {r['why']} | | | | | | |")
            continue
        lines.append(f"| {mode} | {r['parameters'] / 1e9:.2f} B | {r['size'] / 2**30:.2f} GiB | "
                     f"{'buffer offsets' if r['offsets'] else 'inline'} | {r['seconds']:.0f} s | "
                     f"{(r['peak'] - r['before']) / r['weights']:.2f} N | {r['from_bytes']:.1e} | "
                     f"{r['from_path']:.1e} |")
        notes += [f"- {mode}: {w}" for w in r["warnings"]]
    if notes:
        lines += ["", "The conversions' warnings (the report's):", "", *notes]
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
