"""Run a model on TFLite Micro's interpreter (the ``tflite-micro`` package) and measure its tensor arena.

TFLM is a native runtime that may abort the process on a model it cannot handle, and does on
an arena too small for some models, so it runs in subprocesses. :func:`run_on_micro` loads the
model with a large arena and invokes it once on zeros; with ``measure_arena`` it then finds the
smallest arena TFLM loads and runs the model in: a bisection (16-byte steps) that starts from
what TFLM's recording allocator reports having used (a lower bound: planning needs temporary
room on top) and goes on in a fresh subprocess when a probe crashes one. The recording
allocator keeps its records in the arena too (a few hundred bytes more than the plain
``MicroAllocator`` of a firmware build), so the figure is an upper bound for a firmware.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import tempfile

from fuselite.runtime.child import run_isolated

TIMEOUT_S = 600

_SCRIPT = r"""
import json, sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime

data = open(sys.argv[1], "rb").read()
inputs = json.loads(sys.argv[2])
lo, hi = int(sys.argv[4]), int(sys.argv[5])  # hi 0: run once in a large arena; else bisect (lo fails, hi runs)
log = open(sys.argv[3], "a")

def stage(what):  # where a process that TFLM aborts stopped
    log.write(json.dumps({"stage": what}) + "\n")
    log.flush()

def runs(size):
    stage("loading")
    try:
        interp = runtime.Interpreter.from_bytes(data, arena_size=size)
    except (RuntimeError, ValueError) as e:
        return None, "TFLite Micro could not load the model: " + str(e)
    stage("invoking")
    try:
        for i, (shape, dtype) in enumerate(inputs):
            interp.set_input(np.zeros(shape, dtype), i)
        interp.invoke()
    except Exception as e:
        return None, "TFLite Micro could not run the model: " + str(e)
    stage("ran")
    return interp, None

if hi == 0:
    size = max(10 * len(data), 1 << 20)
    interp, error = runs(size)
    while error and "allocate" in error and size < (1 << 30):
        size *= 4
        interp, error = runs(size)
    if error:
        log.write(json.dumps({"error": error}) + "\n")
    else:
        sys.stderr.flush()
        interp.print_allocations()
        log.write(json.dumps({"ran": size}) + "\n")
else:
    def probe(size):
        log.write(json.dumps({"try": size}) + "\n")
        log.flush()
        ok = runs(size)[0] is not None
        log.write(json.dumps({"ok" if ok else "fails": size}) + "\n")
        log.flush()
        return ok

    step = 256  # up from the lower bound first (the answer is usually close above it), then bisect
    while lo + step < hi:
        if probe(lo + step):
            hi = lo + step
            break
        lo, step = lo + step, step * 4
    while hi - lo > 16:
        mid = (lo + hi) // 32 * 16
        lo, hi = (lo, mid) if probe(mid) else (mid, hi)
    log.write(json.dumps({"arena": hi}) + "\n")
log.close()
"""
_SAMPLES_SCRIPT = r"""
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime

data = open(sys.argv[1], "rb").read()
feed = np.load(sys.argv[2])
n_in, n_samples = int(feed["n_inputs"]), int(feed["n_samples"])
interp = runtime.Interpreter.from_bytes(data, arena_size=max(10 * len(data), 1 << 22))
outs = {}
for s in range(n_samples):
    for i in range(n_in):
        interp.set_input(feed[f"s{s}_i{i}"], i)
    interp.invoke()
    o = 0
    while True:
        try:
            outs[f"s{s}_o{o}"] = interp.get_output(o).copy()
        except Exception:
            break
        o += 1
np.savez(sys.argv[3], **outs)
"""


def run_samples_on_micro(model: bytes, samples: list[list]) -> list[list]:
    """``model``'s outputs (in the subgraph's order, as TFLM returns them) for each sample (its inputs in the
    subgraph's order, already in the input types), on TFLite Micro's interpreter in a subprocess, one invoke
    per sample. Raises :class:`MicroUnavailable`, or RuntimeError with what TFLM said when it fails."""
    import numpy as np

    if not micro_available():
        raise MicroUnavailable("TFLite Micro's Python interpreter is not installed (pip install 'fuselite[micro]')")
    with tempfile.TemporaryDirectory(prefix="fuselite-micro-") as tmp:
        path, feed, out = (os.path.join(tmp, f) for f in ("model.tflite", "in.npz", "out.npz"))
        with open(path, "wb") as f:
            f.write(model)
        arrays = {f"s{s}_i{i}": np.asarray(x) for s, xs in enumerate(samples) for i, x in enumerate(xs)}
        np.savez(feed, n_inputs=len(samples[0]) if samples else 0, n_samples=len(samples), **arrays)
        try:
            proc = run_isolated(["-c", _SAMPLES_SCRIPT, path, feed, out], cwd=tmp, capture_output=True,
                                text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"TFLite Micro did not run the samples in {TIMEOUT_S} s") from None
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError("TFLite Micro could not run the model: " + (_said(proc.stdout + proc.stderr)
                                                                          or f"exit code {proc.returncode}"))
        got = np.load(out)
        return [[got[f"s{s}_o{o}"] for o in range(sum(k.startswith(f"s{s}_o") for k in got.files))]
                for s in range(len(samples))]


_TOTAL = re.compile(r"Arena allocation total (\d+) bytes")


class MicroUnavailable(RuntimeError):
    """The ``tflite-micro`` package is not installed."""


def micro_available() -> bool:
    return importlib.util.find_spec("tflite_micro") is not None


def run_on_micro(model: bytes, inputs: list[tuple[list[int], str]], measure_arena: bool = False) -> dict:
    """``{}`` (with ``measure_arena``: ``{"arena_bytes": N}``) if TFLM loads the model and runs it on zeros
    (inputs: (shape, dtype name) each, in order); else ``{"error": what TFLM said}``. Raises
    :class:`MicroUnavailable` without tflite-micro."""
    if not micro_available():
        raise MicroUnavailable("TFLite Micro's Python interpreter is not installed (pip install 'fuselite[micro]')")
    with tempfile.TemporaryDirectory(prefix="fuselite-micro-") as tmp:
        path = os.path.join(tmp, "model.tflite")
        with open(path, "wb") as f:
            f.write(model)
        records, said = _run(path, inputs, 0, 0, tmp)
        if not records or "error" in records[-1] or "stage" in records[-1]:
            error = records[-1]["error"] if records and "error" in records[-1] else _stopped(records, said)
            return {"error": error + (f" ({_said(said)})" if _said(said) else "")}
        if not measure_arena:
            return {}
        total = _TOTAL.search(said)
        lo, hi = (int(total.group(1)) // 16 * 16 - 16 if total else 0), records[-1]["ran"]
        while True:  # a probe that crashes its process fails; the next process goes on from there
            records, _ = _run(path, inputs, lo, hi, tmp)
            records = [r for r in records if "stage" not in r]
            for r in records:
                lo, hi = (r["fails"], hi) if "fails" in r else (lo, r["ok"]) if "ok" in r else (lo, hi)
            if records and "arena" in records[-1]:
                return {"arena_bytes": records[-1]["arena"]}
            if records and "try" in records[-1]:
                lo = records[-1]["try"]
            elif not records:
                return {"error": "TFLite Micro's interpreter stopped while measuring the arena"}


def _stopped(records: list[dict], said: str) -> str:
    """What to say of an interpreter process that ended without a result: TFLM aborts the whole process where
    a kernel's check fails (``TFLITE_CHECK``, ``TFLITE_DCHECK``), printing nothing; the records say in which
    stage."""
    stage = records[-1].get("stage") if records else None
    code = re.search(r"exit code (-?\d+)", said)
    how = f"ended the process ({'SIGABRT' if code and code.group(1) in ('-6', '134') else 'exit code ' + code.group(1)})" \
        if code else "ended the process"
    where = {"loading": "while loading the model, where each op's kernel prepares (one of them failed a check "
                        "that aborts instead of returning an error; TFLM prints nothing for it)",
             "invoking": "while running the model on zeros (a kernel failed a check that aborts)"}.get(
        stage, "before it could load the model")
    return f"TFLite Micro's interpreter {how} {where}"


def _run(path: str, inputs, lo: int, hi: int, tmp: str) -> tuple[list[dict], str]:
    """One interpreter process: the records it wrote (in order), and TFLM's own output."""
    out = os.path.join(tmp, f"log-{lo}-{hi}.jsonl")
    try:
        proc = run_isolated(["-c", _SCRIPT, path, json.dumps(inputs), out, str(lo), str(hi)], cwd=tmp,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
        said = proc.stdout + proc.stderr + (f"\nexit code {proc.returncode}" if proc.returncode else "")
    except subprocess.TimeoutExpired:
        return [{"error": f"TFLite Micro did not finish loading and running the model in {TIMEOUT_S} s"}], ""
    records = []
    if os.path.exists(out):
        with open(out) as f:
            records = [json.loads(line) for line in f if line.strip()]
    return records, said


def _said(log: str) -> str:
    """TFLM's own lines about the failure (its kernels print why they refuse a node)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith(("[Recording", "Traceback"))
             and "File \"" not in ln and not re.fullmatch(r"exit code -?\d+", ln.strip())]
    return "; ".join(lines[-4:])
