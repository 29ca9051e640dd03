"""Shared fixtures: models are built once per session (per xdist worker)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("FUSELITE_VERIFY_IR", "1")  # every conversion in the tests checks the IR after each pass

import numpy as np
import pytest

from fuselite.testing import models as zoo


def form_name(form: str) -> str:
    """A report record's ``form`` without the note on why the default chose it (" (by size ...)")."""
    return form.split(" (by size ")[0]


def litert_op_names(model: bytes) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model)
    return [d["op_name"] for d in interp._get_ops_details()]


def keras_flavour(name: str):
    return zoo.keras3() if name == "keras3" else zoo.tf_keras()


@pytest.fixture(scope="session")
def built_models():
    """(flavour, model name) -> (model, inputs, reference output); built lazily, cached."""
    cache = {}

    def get(flavour: str, name: str):
        key = (flavour, name)
        if key not in cache:
            model = zoo.build(name, keras_flavour(flavour))
            xs = zoo.sample_inputs(model)
            ref = np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False))
            cache[key] = (model, xs, ref)
        return cache[key]

    return get


def invoke_twice(data: bytes, xs: list[np.ndarray], **options) -> list[list[np.ndarray]]:
    """Outputs of two invokes with the same inputs on one interpreter (stateless models agree)."""
    from fuselite.runtime import interpreter

    interp = interpreter(data, **options)
    runs = []
    for _ in range(2):
        for d, x in zip(interp.get_input_details(), xs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        runs.append([interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()])
    return runs


def match_outputs(got: list[np.ndarray], refs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pair LiteRT outputs with Keras outputs (signature order may differ): by shape, then values."""
    remaining, pairs = list(got), []
    for r in refs:
        cands = [g for g in remaining if g.shape == r.shape]
        assert cands, f"no output of shape {r.shape} among {[g.shape for g in remaining]}"
        best = min(cands, key=lambda g: float(np.abs(g - r).max()))
        remaining = [g for g in remaining if g is not best]
        pairs.append((best, r))
    return pairs


def assert_stateless_and_matches(data: bytes, model, xs: list[np.ndarray], atol: float, num_threads: int = 1) -> None:
    """Two invokes give bit-identical outputs, and they match the Keras model within ``atol``: with LiteRT's
    default XNNPACK delegate and on its builtin kernels alone (what runs where XNNPACK does not), at
    ``num_threads``."""
    from ai_edge_litert.interpreter import OpResolverType

    ref = model(xs[0] if len(xs) == 1 else xs, training=False)
    refs = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        first, second = invoke_twice(data, xs, num_threads=num_threads, experimental_op_resolver_type=resolver)
        for a, b in zip(first, second):
            np.testing.assert_array_equal(a, b)  # stateless: same input, bit-identical output
        assert len(first) == len(refs)
        for got, want in match_outputs(first, refs):
            np.testing.assert_allclose(got, want, atol=atol)


@pytest.fixture(autouse=True)
def _record_fingerprints(request, monkeypatch):
    """With ``FUSELITE_FINGERPRINTS=DIR``, record the hashes of every model a test converts.

    One JSON line per conversion in ``DIR/<worker>.jsonl`` (see benchmarks/fingerprints.py):
    compare two runs' files to check that a refactor leaves every output byte alone.
    """
    directory = os.environ.get("FUSELITE_FINGERPRINTS")
    if not directory:
        yield
        return
    import json
    import sys

    import fuselite

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))
    from fingerprints import fingerprint

    original = fuselite.Converter.convert
    count = [0]

    def convert(self):
        data = original(self)
        count[0] += 1
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(directory, f"{worker}.jsonl"), "a") as f:
            f.write(json.dumps({"test": request.node.nodeid, "n": count[0], **fingerprint(data)}) + "\n")
        return data

    monkeypatch.setattr(fuselite.Converter, "convert", convert)
    yield


_TFLM_RUN = """
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
interp = runtime.Interpreter.from_bytes(open(sys.argv[1], "rb").read())
outs = []
for sample in np.load(sys.argv[2])["x"]:
    interp.set_input(sample, 0)
    interp.invoke()
    outs.append(interp.get_output(0).copy())
np.save(sys.argv[3], np.stack(outs))
"""


def run_on_tflm(data: bytes, xs: np.ndarray, tmp_path) -> tuple:
    """Run ``data`` on TFLite Micro's interpreter in a subprocess (a native runtime may crash), one invoke per
    sample of ``xs`` (its first axis), input 0 to output 0, state carried between invokes. Returns
    (the completed process, the stacked outputs or None when it failed)."""
    import subprocess
    import sys

    (tmp_path / "m.tflite").write_bytes(data)
    np.savez(tmp_path / "x.npz", x=xs)
    out = subprocess.run([sys.executable, "-c", _TFLM_RUN, str(tmp_path / "m.tflite"), str(tmp_path / "x.npz"),
                          str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=300)
    return out, (np.load(tmp_path / "y.npy") if out.returncode == 0 else None)
