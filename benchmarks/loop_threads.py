#!/usr/bin/env python
"""Where a recurrent loop's time goes as LiteRT's thread count grows (issue 30).

Small models that take a loop-form LSTM step apart, each timed at every thread count on XNNPACK (LiteRT's
default delegate) and on LiteRT's builtin kernels alone:

* ``while_empty``: a ``WHILE`` of T steps whose body adds 1 to a [1, 64] state: the loop's own work per step;
* ``while_fc``: the same loop, the body one 64 → 256 ``FULLY_CONNECTED`` of the state (the recurrent product);
* ``while_step``: the body a whole LSTM step (the product, the gates, the cell), as the loop form writes it;
* ``while_step_w_in_loop``: the same with the weights a loop variable (a FULLY_CONNECTED whose filter is not a
  constant, which XNNPACK leaves to the builtin kernel);
* ``fc_chain``: T of those FULLY_CONNECTEDs one after another, no loop;
* ``fc_once``: one, for the cost of a single op;
* ``fused_lstm``: LiteRT's sequence op (``UNIDIRECTIONAL_SEQUENCE_LSTM``) over the same T steps;

and, apart, what LiteRT does when an app leaves ``num_threads`` unset: a large FULLY_CONNECTED timed with it
unset, 1 and 2, and the threads the process has before and after.

Per step: (model − ``fc_once``'s fixed cost) / T is not exact, so the table gives each model's µs and µs per
step (the whole / T); the differences between rows say where the time goes. Example::

    .venv/bin/python benchmarks/loop_threads.py --threads 1 2 --out docs/loop-threads.md

With ``--export DIR`` the files are written for a machine without TensorFlow, timed there with
``--time DIR`` (LiteRT alone).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

STEPS, UNITS = 50, 64
MODELS = ("while_empty", "while_fc", "while_step", "while_step_w_in_loop", "fc_chain", "fc_once", "fused_lstm")


def build() -> dict[str, bytes]:
    """{model: .tflite bytes} (needs TensorFlow; the fused LSTM through fuselite, the rest through TF)."""
    import tensorflow as tf

    import fuselite

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((UNITS, 4 * UNITS)) * 0.1).astype(np.float32)
    back = (rng.standard_normal((4 * UNITS, UNITS)) * 0.1).astype(np.float32)
    spec = [tf.TensorSpec([1, UNITS], tf.float32)]

    def loop(body):
        @tf.function(input_signature=spec)
        def f(h):
            return tf.while_loop(lambda i, h: i < STEPS, lambda i, h: (i + 1, body(h)), (tf.constant(0), h))[1]
        return f

    def lstm_step(h):
        z = tf.matmul(h, w)
        i, f, c, o = tf.split(z, 4, axis=1)
        cell = tf.sigmoid(f) * h + tf.sigmoid(i) * tf.tanh(c)
        return tf.sigmoid(o) * tf.tanh(cell)

    @tf.function(input_signature=spec)
    def step_w_in_loop(h):  # the weights a loop variable: the body's FULLY_CONNECTED has a non-constant filter
        def body(i, h, w_):
            z = tf.matmul(h, w_)
            i_, f, c, o = tf.split(z, 4, axis=1)
            cell = tf.sigmoid(f) * h + tf.sigmoid(i_) * tf.tanh(c)
            return i + 1, tf.sigmoid(o) * tf.tanh(cell), w_
        return tf.while_loop(lambda i, h, w_: i < STEPS, body, (tf.constant(0), h, tf.constant(w)))[1]

    @tf.function(input_signature=spec)
    def chain(h):
        for _ in range(STEPS):
            h = tf.matmul(tf.matmul(h, w), back)  # 64 -> 256 -> 64, so the next step has the state's shape
        return h

    functions = {
        "while_empty": loop(lambda h: h + 1.0),
        "while_fc": loop(lambda h: tf.matmul(tf.matmul(h, w), back)),
        "while_step": loop(lstm_step),
        "while_step_w_in_loop": step_w_in_loop,
        "fc_chain": chain,
        "fc_once": tf.function(lambda h: tf.matmul(tf.matmul(h, w), back), input_signature=spec),
    }
    out = {name: tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()]).convert()
           for name, f in functions.items()}
    import keras

    keras.utils.set_random_seed(0)
    i = keras.Input((STEPS, UNITS), batch_size=1)
    out["fused_lstm"] = fuselite.Converter.from_keras_model(keras.Model(i, keras.layers.LSTM(UNITS)(i)),
                                                            rnn_form="fused").convert()
    return out


def unset_threads(data: bytes, seconds: float) -> list[str]:
    """What LiteRT does when ``num_threads`` is left unset: rows of (setting, OS threads of the process before and
    after the interpreter ran, median µs) for a FULLY_CONNECTED large enough that threads pay off."""
    from ai_edge_litert.interpreter import Interpreter
    from measure import interleaved_latency, quiet

    x = np.ones((64, 2048), np.float32)
    rows = []
    for label, options in (("unset", {}), ("1", {"num_threads": 1}), ("2", {"num_threads": 2})):
        before = len(os.listdir("/proc/self/task"))
        with quiet(True):
            it = Interpreter(model_content=data, **options)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        (us,) = interleaved_latency([it], seconds, min_iters=20)
        rows.append(f"| {label} | {before} → {len(os.listdir('/proc/self/task'))} | {us:.0f} |")
        del it
    return rows


def big_fc() -> bytes:
    import tensorflow as tf

    w = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    f = tf.function(lambda x: tf.matmul(x, w), input_signature=[tf.TensorSpec([64, 2048], tf.float32)])
    return tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()]).convert()


def inputs_of(name: str) -> list[np.ndarray]:
    shape = (1, STEPS, UNITS) if name == "fused_lstm" else (1, UNITS)
    return [np.random.default_rng(1).standard_normal(shape).astype(np.float32)]


def time_all(datas: dict[str, bytes], threads: list[int], seconds: float, blocks: int) -> dict:
    """{(model, kernels, threads): median µs}: per block and thread count, the models in fresh interpreters,
    timed interleaved; the median over blocks."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from measure import interleaved_latency, quiet

    kernels = {"XNNPACK": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    results: dict = {}
    for n in threads:
        for label, resolver in kernels.items():
            per_block = []
            for _ in range(blocks):
                interps = []
                with quiet(True):
                    for name, data in datas.items():
                        it = Interpreter(model_content=data, num_threads=n, experimental_op_resolver_type=resolver)
                        it.allocate_tensors()
                        it.set_tensor(it.get_input_details()[0]["index"], inputs_of(name)[0])
                        interps.append(it)
                per_block.append(interleaved_latency(interps, seconds / blocks))
            for k, name in enumerate(datas):
                results[(name, label, n)] = statistics.median(b[k] for b in per_block)
    return results


def report(results: dict, threads: list[int], how: str, machine: str, versions: str, started, took: float,
           unset: list[str]) -> str:
    rows = []
    for kernels in ("XNNPACK", "builtin"):
        for name in MODELS:
            us = [results[(name, kernels, n)] for n in threads]
            per_step = " / ".join(f"{u / STEPS:.2f}" for u in us) if name != "fc_once" else "—"
            rows.append(f"| {kernels} | {name} | " + " / ".join(f"{u:.1f}" for u in us) + f" | {per_step} | "
                        f"{us[-1] / us[0]:.2f} |")
    n = " / ".join(map(str, threads))
    return "\n".join([
        "# A recurrent loop's time against LiteRT's thread count",
        "",
        f"- Command: `{how}`",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {took:.0f} s)",
        f"- Machine: {machine}",
        f"- Versions: {versions}",
        f"- Models ({STEPS} steps, state [1, {UNITS}]): see `benchmarks/loop_threads.py`. Each thread count and "
        "kernel set: the models in fresh interpreters, interleaved, median of the block medians.",
        "",
        f"| kernels | model | µs at {n} threads | µs per step | × last / first |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "## `num_threads` left unset",
        "",
        "A [64, 2048] × [2048, 2048] FULLY_CONNECTED (XNNPACK) with `Interpreter(num_threads=...)`: the OS threads "
        "of the process before the interpreter was made and after it ran, and its median latency.",
        "",
        "| num_threads | OS threads | µs |",
        "|---|---|---|",
        *unset,
    ]) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--export", metavar="DIR", help="convert only: write the .tflite files to DIR")
    p.add_argument("--time", metavar="DIR", help="time the files --export wrote (LiteRT alone)")
    p.add_argument("--latency-seconds", type=float, default=3.0, help="per thread count and kernel set")
    p.add_argument("--latency-blocks", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args(argv)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    from report import command_line, emit, machine_description

    if args.time:
        from importlib.metadata import version

        folder = Path(args.time)
        datas = {name: (folder / f"{name}.tflite").read_bytes() for name in (*MODELS, "big_fc")}
        built = json.loads((folder / "index.json").read_text())["converted"]
        versions = f"LiteRT (ai-edge-litert) {version('ai-edge-litert')}; the files converted with {built}"
    else:
        from measure import quiet
        from report import fuselite_revision
        from report import versions as versions_of

        with quiet(True):
            datas = {**build(), "big_fc": big_fc()}
        versions = f"{versions_of()}; fuselite sources at {fuselite_revision()}"
        if args.export:
            folder = Path(args.export)
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in datas.items():
                (folder / f"{name}.tflite").write_bytes(data)
            (folder / "index.json").write_text(json.dumps({"converted": versions}))
            print(f"wrote {len(datas)} models to {folder}; time them with: python benchmarks/loop_threads.py "
                  f"--time {folder}", file=sys.stderr)
            return 0
    fc = datas.pop("big_fc")
    results = time_all(datas, args.threads, args.latency_seconds, args.latency_blocks)
    unset = unset_threads(fc, 1.0)
    emit(report(results, args.threads, command_line(), machine_description(), versions, started,
                time.perf_counter() - t0, unset), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
