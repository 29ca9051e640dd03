"""The command line's verbs through the real entry points (subprocesses): --version, python -m fuselite,
convert --verify / -q / --report, inspect, verify and bench on a Keras 3 LSTM model, a SavedModel and a
.tflite written by the official converter; bad input gives one clear line and exit code 1 (or 2 for usage)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import keras_flavour

FUSELITE = [sys.executable, "-m", "fuselite"]


def _run(*args, timeout=300):
    return subprocess.run([*FUSELITE, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _one_line_error(out, code: int, message: str):
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr and message in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0 or code == 2, out.stderr  # argparse adds its usage line


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A Keras 3 LSTM model (.keras), a SavedModel of it, and the official converter's .tflite of an MLP."""
    d = tmp_path_factory.mktemp("cli")
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((10, 4), batch_size=1, name="sequence")
    lstm = k.Model(i, k.layers.Dense(3, name="scores")(k.layers.LSTM(8)(i)))
    lstm.save(d / "lstm.keras")
    lstm.export(str(d / "saved"), verbose=False)
    j = k.Input((6,), name="features")
    mlp = k.Model(j, k.layers.Dense(2)(k.layers.Dense(5, activation="relu")(j)))
    mlp.save(d / "mlp.keras")
    (d / "official.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(mlp).convert())
    (d / "junk.tflite").write_bytes(b"not a model at all, just bytes")
    np.savez(d / "inputs.npz", sequence=np.ones((1, 10, 4), np.float32))
    np.savez(d / "wrong_name.npz", other=np.ones((1, 10, 4), np.float32))
    np.savez(d / "wrong_shape.npz", sequence=np.ones((1, 7, 4), np.float32))
    return d


def test_version_and_python_dash_m():
    from fuselite import __version__

    for cmd in (FUSELITE, [sys.executable, "-m", "fuselite.cli"]):
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == f"fuselite {__version__}", out


def test_convert_verify_quiet_and_report(models):
    out = _run("convert", models / "lstm.keras", "-o", models / "lstm.tflite", "--verify", "--report",
               models / "report.json")
    assert out.returncode == 0, out.stderr
    assert "verify against" in out.stdout and "PASSED" in out.stdout and "stateless" in out.stdout
    report = json.loads((models / "report.json").read_text())
    assert report["ops_after"]["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 1
    quiet = _run("convert", models / "saved", "-o", models / "saved.tflite", "-q", "--verify")
    assert quiet.returncode == 0 and quiet.stdout == "", (quiet.stdout, quiet.stderr)


def test_inspect_reads_fuselite_and_official_models(models):
    _run("convert", models / "lstm.keras", "-o", models / "inspect.tflite", "-q")
    out = _run("inspect", models / "inspect.tflite")
    assert out.returncode == 0, out.stderr
    assert "input  sequence: float32[1, 10, 4]" in out.stdout and "UNIDIRECTIONAL_SEQUENCE_LSTM 1" in out.stdout
    assert "description: fuselite" in out.stdout and "source keras_model" in out.stdout
    info = json.loads(_run("inspect", models / "official.tflite", "--json").stdout)
    assert info["subgraphs"][0]["ops"]["FULLY_CONNECTED"] == 2 and info["bytes"]["weights"] > 0
    (sig,) = info["signatures"].values()
    assert sig["inputs"][0]["shape"] == [-1, 6] and sig["inputs"][0]["dtype"] == "float32"


def test_verify_passes_and_fails_as_it_should(models):
    _run("convert", models / "lstm.keras", "-o", models / "verify.tflite", "-q")
    ok = _run("verify", models / "lstm.keras", models / "verify.tflite", "--inputs", models / "inputs.npz")
    assert ok.returncode == 0 and "PASSED" in ok.stdout, ok.stdout + ok.stderr
    assert _run("verify", models / "saved", models / "verify.tflite").returncode == 0
    official = _run("verify", models / "mlp.keras", models / "official.tflite", "--json")
    assert official.returncode == 0 and json.loads(official.stdout)["passed"], official.stderr
    # a model of another program: the error is measured and the exit code says so
    wrong = _run("verify", models / "mlp.keras", models / "verify.tflite")
    _one_line_error(wrong, 1, "error")


def test_bench_one_and_two_models(models):
    _run("convert", models / "mlp.keras", "-o", models / "bench.tflite", "-q")
    out = _run("bench", models / "bench.tflite", models / "official.tflite", "--seconds", "0.3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{models / 'bench.tflite'}: median") and "µs" in lines[0]
    assert lines[2].startswith(f"{models / 'official.tflite'} / {models / 'bench.tflite'}: ")


def test_bad_input_one_clear_line(models):
    _run("convert", models / "lstm.keras", "-o", models / "bad.tflite", "-q")
    _one_line_error(_run("inspect", models / "missing.tflite"), 1, "model not found")
    _one_line_error(_run("inspect", models / "junk.tflite"), 1, "not a TFLite model")
    _one_line_error(_run("bench", models / "junk.tflite"), 1, "not a TFLite model")
    _one_line_error(_run("verify", models / "missing.keras", models / "bad.tflite"), 1, "source model not found")
    _one_line_error(_run("verify", models / "lstm.keras", models / "bad.tflite", "--inputs", models / "wrong_name.npz"),
                    1, "inputs lack sequence")
    _one_line_error(_run("verify", models / "lstm.keras", models / "bad.tflite", "--inputs",
                         models / "wrong_shape.npz"), 1, "input 'sequence' has shape [1, 7, 4]")
    _one_line_error(_run("verify", models / "lstm.keras", models / "bad.tflite", "--inputs", models / "junk.tflite"),
                    1, "cannot read inputs")
    _one_line_error(_run("convert", models / "lstm.keras", "-o", models / "x.tflite", "--tolerance", "1"), 2,
                    "--inputs and --tolerance are for use with --verify")
    _one_line_error(_run("inspect"), 2, "the following arguments are required: model")
