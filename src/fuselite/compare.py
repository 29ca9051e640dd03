"""fuselite next to ``tf.lite.TFLiteConverter`` on one model: ``fuselite compare SRC``.

Converts ``SRC`` (a ``.keras`` file or a SavedModel directory) with both converters — the
official one in a child process, since it can crash the process (its calibrator does) —
then, for each model that converts, checks it against TensorFlow with
:func:`fuselite.verify.verify` and times both with :func:`fuselite.verify.bench`
(interleaved). :func:`format_comparison` prints one table: converts or not (and why, in
full: a reason is wrapped, never cut), ops, recurrent ops (fused sequence ops and ``WHILE``
loops), size, max error against TensorFlow, latency.

Example::

    rows = compare("model.keras")
    print(format_comparison(rows))
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from fuselite.errors import ConversionError, InputError
from fuselite.runtime.child import run_isolated

SEQUENCE_OPS = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN",
                "BIDIRECTIONAL_SEQUENCE_RNN", "LSTM", "RNN", "SVDF")

_OFFICIAL = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
src, out = sys.argv[1], sys.argv[2]
import tensorflow as tf
if os.path.isdir(src):
    conv = tf.lite.TFLiteConverter.from_saved_model(src)
else:
    import keras
    conv = tf.lite.TFLiteConverter.from_keras_model(keras.models.load_model(src, compile=False))
if len(sys.argv) > 3 and sys.argv[3] == "select":  # what Keras' export(format="litert") asks for
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
open(out, "wb").write(conv.convert())
"""


def official_conversion(src: str, workdir: str, select_tf_ops: bool = False) -> tuple[bytes | None, str | None, float]:
    """(the official converter's model or None, why not, seconds) for ``src``, in a child process;
    ``select_tf_ops``: with ``SELECT_TF_OPS`` besides the builtins, as Keras' ``export(format="litert")``."""
    out = os.path.join(workdir, "official-select.tflite" if select_tf_ops else "official.tflite")
    t0 = time.perf_counter()
    try:
        r = run_isolated(["-c", _OFFICIAL, os.path.abspath(src), os.path.abspath(out),
                          *(["select"] if select_tf_ops else [])], cwd=workdir, capture_output=True, text=True,
                         timeout=1800)
    except subprocess.TimeoutExpired:
        return None, "did not finish in 30 min", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if r.returncode != 0 or not os.path.exists(out):
        lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
        why = why.replace("\\n", " ")  # TensorFlow's messages carry escaped line breaks
        return None, (f"crashed (signal {-r.returncode})" if r.returncode < 0 else why), seconds
    with open(out, "rb") as f:
        return f.read(), None, seconds


def _fuselite(src: str) -> tuple[bytes | None, str | None, float]:
    from fuselite.load import load_source

    class _Args:  # the CLI's defaults
        signature_keys = tags = batch_size = None
        strict_fusion = verify_ir = False
        print_after, rules = (), []
        target, micro_sources, bidirectional, rnn_form = "litert", None, "split", "default"
        threads = 1
        accelerator_config = vela_output = None

    t0 = time.perf_counter()
    try:
        data = load_source(src, _Args()).convert()
    except ConversionError as e:
        return None, str(e).strip(), time.perf_counter() - t0
    return data, None, time.perf_counter() - t0


def compare(src: str, seconds: float = 2.0, tolerance: float = 1e-4) -> list[dict]:
    """One row per converter: ``{"converter", "converts", "error", "seconds", "ops", "sequence_ops", "while",
    "size", "max_abs_error", "passed", "latency_us"}`` (``None`` where it does not apply)."""
    from fuselite.inspect import describe
    from fuselite.verify import bench, verify

    if not os.path.exists(src):
        raise InputError(f"source model not found: '{src}'")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuselite-compare-") as work:
        for name, (data, error, secs) in (("fuselite", _fuselite(src)), ("tf.lite.TFLiteConverter",
                                                                        official_conversion(src, work))):
            row = {"converter": name, "converts": data is not None, "error": error, "seconds": secs, "data": data}
            if data is not None:
                info = describe(data)
                ops = {k: v for sg in info["subgraphs"] for k, v in sg["ops"].items()}
                row.update(ops=sum(sum(sg["ops"].values()) for sg in info["subgraphs"]),
                           sequence_ops=sum(ops.get(k, 0) for k in SEQUENCE_OPS), size=len(data),
                           **{"while": ops.get("WHILE", 0)})
                try:
                    result = verify(src, data, tolerance=tolerance)
                    row["max_abs_error"] = max((o["max_abs_error"] for o in result.outputs), default=0.0)
                    row["passed"] = result.passed
                except Exception as e:  # it converts but does not run (or not as TensorFlow)
                    row["error"] = f"does not run: {str(e).strip() or type(e).__name__}"
            rows.append(row)
        runnable = [r for r in rows if r["converts"] and "max_abs_error" in r]
        if runnable:
            for r, t in zip(runnable, bench([r["data"] for r in runnable], seconds)):
                r["latency_us"] = t["median_us"]
    for r in rows:
        r.pop("data")
    return rows


_WIDTH = 100  # columns of the table's notes (a reason is wrapped, never cut)


def _wrapped(text: str) -> list[str]:
    """``text`` in lines of at most :data:`_WIDTH` columns (a word longer than that, a path or a URL, on its own
    line), its own line breaks kept; continuation lines indented."""
    import textwrap

    lines: list[str] = []
    for i, para in enumerate(text.splitlines() or [""]):
        lines += textwrap.wrap(para, _WIDTH, initial_indent="" if i == 0 else "  ", subsequent_indent="  ",
                               break_long_words=False, break_on_hyphens=False) or [""]
    return lines


def format_comparison(rows: list[dict], error_label: str = "max abs error vs TF") -> str:
    """The table ``fuselite compare`` prints (``error_label``: what the error row measures against)."""
    head = ["", *(r["converter"] for r in rows)]

    def cell(r, key, fmt):
        return fmt(r[key]) if r.get(key) is not None else "—"

    table = [
        ["converts", *(("yes" if r["converts"] else "no") + f" ({r['seconds']:.1f} s)" for r in rows)],
        ["runs on stock LiteRT", *(("yes" if r.get("max_abs_error") is not None else "no") if r["converts"] else "—"
                                   for r in rows)],
        ["ops", *(cell(r, "ops", str) for r in rows)],
        ["sequence ops / WHILE", *(f"{r['sequence_ops']} / {r['while']}" if r["converts"] else "—" for r in rows)],
        ["size, bytes", *(cell(r, "size", lambda v: f"{v:,}") for r in rows)],
        [error_label, *(cell(r, "max_abs_error", lambda v: f"{v:.2e}") for r in rows)],
        ["latency, µs (1 thread)", *(cell(r, "latency_us", lambda v: f"{v:.1f}") for r in rows)],
    ]
    widths = [max(len(str(row[i])) for row in [head, *table]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *table]]
    lines += [line for r in rows if r["error"] for line in _wrapped(f"{r['converter']}: {r['error']}")]
    timed = [r for r in rows if r.get("latency_us")]
    if len(timed) >= 2 and timed[0] is rows[0]:  # fuselite against each other converter that runs
        short = {"tf.lite.TFLiteConverter": "official"}
        lines += [f"latency {rows[0]['converter']} / {short.get(r['converter'], r['converter'])}: "
                  f"{rows[0]['latency_us'] / r['latency_us']:.2f}x (interleaved)" for r in timed[1:]]
    return "\n".join(lines)
