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

from fuselite.demo import CALIBRATION

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


@pytest.fixture(scope="module")
def lstm_tflite(models):
    """lstm.keras converted once by the command line with its defaults, for the tests that read the file."""
    out = _run("convert", models / "lstm.keras", "-o", models / "lstm_default.tflite", "-q")
    assert out.returncode == 0, out.stderr
    return models / "lstm_default.tflite"


def test_version_and_python_dash_m():
    from fuselite import __version__

    for cmd in (FUSELITE, [sys.executable, "-m", "fuselite.cli"]):
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == f"fuselite {__version__}", out


def test_convert_verify_quiet_and_report(models):
    out = _run("convert", models / "lstm.keras", "-o", models / "lstm.tflite", "--verify", "--report",
               models / "report.json", "--rnn-form", "fused")
    assert out.returncode == 0, out.stderr
    assert "verify against" in out.stdout and "PASSED" in out.stdout and "stateless" in out.stdout
    report = json.loads((models / "report.json").read_text())
    assert report["ops_after"]["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 1
    assert [r["form"] for r in report["composites"]] == ["fused"]
    default = _run("convert", models / "lstm.keras", "-o", models / "default.tflite", "-q", "--verify", "--report",
                   models / "default.json")
    assert default.returncode == 0, default.stderr
    (form,) = [r["form"] for r in json.loads((models / "default.json").read_text())["composites"]]
    assert form.startswith("unrolled (by size at 1 thread: "), form  # a small LSTM
    threaded = _run("convert", models / "lstm.keras", "-o", models / "threads.tflite", "--threads", "4", "--json")
    assert threaded.returncode == 0, threaded.stderr
    report = json.loads(threaded.stdout)  # the fused op at 4 threads is the Interpreter's: the loop by default
    assert [r["form"] for r in report["composites"]] == ["loop"] and report["recurrent"]["threads"] == 4
    assert report["litert_api"]["apis"] == ["Interpreter", "CompiledModel"]
    threaded = _run("convert", models / "lstm.keras", "-o", models / "threads.tflite", "--threads", "4", "--json",
                    "--litert-api", "interpreter")
    report = json.loads(threaded.stdout)
    assert [r["form"] for r in report["composites"]] == ["fused"] and report["litert_api"]["apis"] == ["Interpreter"]
    quiet = _run("convert", models / "saved", "-o", models / "saved.tflite", "-q", "--verify")
    assert quiet.returncode == 0 and quiet.stdout == "", (quiet.stdout, quiet.stderr)


def test_inspect_reads_fuselite_and_official_models(models):
    _run("convert", models / "lstm.keras", "-o", models / "inspect.tflite", "-q", "--rnn-form", "fused")
    out = _run("inspect", models / "inspect.tflite")
    assert out.returncode == 0, out.stderr
    assert "input  sequence: float32[1, 10, 4]" in out.stdout and "UNIDIRECTIONAL_SEQUENCE_LSTM 1" in out.stdout
    assert "description: fuselite" in out.stdout and "source keras_model" in out.stdout
    info = json.loads(_run("inspect", models / "official.tflite", "--json").stdout)
    assert info["subgraphs"][0]["ops"]["FULLY_CONNECTED"] == 2 and info["bytes"]["weights"] > 0
    (sig,) = info["signatures"].values()
    assert sig["inputs"][0]["shape"] == [-1, 6] and sig["inputs"][0]["dtype"] == "float32"


def test_verify_passes_and_fails_as_it_should(models, lstm_tflite):
    ok = _run("verify", models / "lstm.keras", lstm_tflite, "--inputs", models / "inputs.npz")
    assert ok.returncode == 0 and "PASSED" in ok.stdout, ok.stdout + ok.stderr
    assert _run("verify", models / "saved", lstm_tflite).returncode == 0
    official = _run("verify", models / "mlp.keras", models / "official.tflite", "--json")
    assert official.returncode == 0 and json.loads(official.stdout)["passed"], official.stderr
    # a model of another program: the error is measured and the exit code says so
    wrong = _run("verify", models / "mlp.keras", lstm_tflite)
    _one_line_error(wrong, 1, "error")


def test_bench_one_and_two_models(models):
    _run("convert", models / "mlp.keras", "-o", models / "bench.tflite", "-q")
    out = _run("bench", models / "bench.tflite", models / "official.tflite", "--seconds", "0.3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{models / 'bench.tflite'}: median") and "µs" in lines[0]
    assert lines[2].startswith(f"{models / 'official.tflite'} / {models / 'bench.tflite'}: ")


def test_bad_input_one_clear_line(models, lstm_tflite):
    _one_line_error(_run("inspect", models / "missing.tflite"), 1, "model not found")
    _one_line_error(_run("inspect", models / "junk.tflite"), 1, "not a TFLite model")
    _one_line_error(_run("bench", models / "junk.tflite"), 1, "not a TFLite model")
    _one_line_error(_run("verify", models / "missing.keras", lstm_tflite), 1, "source model not found")
    _one_line_error(_run("verify", models / "lstm.keras", lstm_tflite, "--inputs", models / "wrong_name.npz"),
                    1, "inputs lack sequence")
    _one_line_error(_run("verify", models / "lstm.keras", lstm_tflite, "--inputs",
                         models / "wrong_shape.npz"), 1, "input 'sequence' has shape [1, 7, 4]")
    _one_line_error(_run("verify", models / "lstm.keras", lstm_tflite, "--inputs", models / "junk.tflite"),
                    1, "cannot read inputs")
    _one_line_error(_run("convert", models / "lstm.keras", "-o", models / "x.tflite", "--tolerance", "1"), 2,
                    "--inputs and --tolerance are for use with --verify")
    _one_line_error(_run("inspect"), 2, "the following arguments are required: model")
    for verb in (("convert", models / "lstm.keras", "-o", models / "x.tflite"), ("bench", lstm_tflite)):
        _one_line_error(_run(*verb, "--threads", "0"), 2,  # the option's own check (fuselite/options.py)
                        "threads is the LiteRT num_threads the model will run with, an integer from 1 to 1024, got 0")


def test_without_tensorflow_one_line_says_what_to_install(models):
    """TensorFlow is the user's own install: when it is missing, convert and verify say what to install
    (inspect and bench need only LiteRT)."""
    blocked = "import sys; sys.modules['tensorflow'] = None; from fuselite.cli import main; sys.exit(main(sys.argv[1:]))"
    for args in (["convert", models / "lstm.keras", "-o", models / "no_tf.tflite"],
                 ["verify", models / "lstm.keras", models / "official.tflite"]):
        out = subprocess.run([sys.executable, "-c", blocked, *map(str, args)], capture_output=True, text=True,
                             timeout=120)
        _one_line_error(out, 1, "fuselite needs TensorFlow")
        assert "pip install 'fuselite[cpu]'" in out.stderr
    out = subprocess.run([sys.executable, "-c", blocked, "inspect", str(models / "official.tflite")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "FULLY_CONNECTED 2" in out.stdout, out.stderr


def test_compare_side_by_side(models):
    out = _run("compare", models / "lstm.keras", "--seconds", "0.3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["fuselite", "tf.lite.TFLiteConverter"]
    rows = {ln[:24].strip(): ln[24:].split() for ln in lines[1:7]}
    # the small LSTM unrolled by default (by its size, at one thread): no sequence op, no WHILE loop
    assert rows["converts"][0] == "yes" and rows["sequence ops / WHILE"][:3] == ["0", "/", "0"], out.stdout
    assert float(rows["max abs error vs TF"][0]) <= 1e-5
    assert lines[-1].startswith("latency fuselite / official: ")
    saved = json.loads(_run("compare", models / "saved", "--seconds", "0.2", "--json").stdout)
    # the SavedModel's LSTM (a recognised loop) unrolled by its size too: no WHILE, no sequence op
    assert saved[0]["converts"] and saved[0]["passed"] and (saved[0]["sequence_ops"], saved[0]["while"]) == (0, 0), saved
    assert saved[1]["converts"] or saved[1]["error"], saved  # the official converter: converts, or says why not
    data = json.loads(_run("compare", models / "mlp.keras", "--seconds", "0.2", "--json").stdout)
    assert [r["converter"] for r in data] == ["fuselite", "tf.lite.TFLiteConverter"]
    assert all(r["converts"] and r["passed"] and r["latency_us"] > 0 for r in data), data


def test_progress_callback_sees_every_pass_that_runs():
    import fuselite
    from fuselite.passes.manager import pass_names
    from fuselite.pipeline import PIPELINE

    k = keras_flavour("keras3")
    i = k.Input((4,))
    conv = fuselite.Converter.from_keras_model(k.Model(i, k.layers.Dense(2)(i)))
    seen = []
    conv.progress = seen.append
    conv.convert()
    assert set(seen) == set(conv.report.stage_seconds) and seen[0] == "import" and seen[-1] == "predict-gpu-placement"
    assert set(seen) <= set(pass_names(PIPELINE))


def test_progress_line_on_a_terminal_only(models):
    """On a terminal, convert shows the running stage on one line (then clears it); piped, nothing."""
    import os
    import pty

    primary, secondary = pty.openpty()
    out = subprocess.run([*FUSELITE, "convert", str(models / "lstm.keras"), "-o", str(models / "tty.tflite")],
                         stdout=subprocess.PIPE, stderr=secondary, text=True, timeout=300)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    shown = b"".join(chunks).decode()
    assert out.returncode == 0
    assert "[fuselite" in shown and "fuse-composites ..." in shown and shown.endswith("\r\x1b[K"), shown[-300:]
    piped = _run("convert", models / "lstm.keras", "-o", models / "piped.tflite")
    assert piped.returncode == 0 and "[fuselite" not in piped.stderr


def test_html_report_is_one_self_contained_page(models):
    out = _run("convert", models / "lstm.keras", "-o", models / "html.tflite", "-q", "--report", models / "r.html",
               "--rnn-form", "fused")
    assert out.returncode == 0, out.stderr
    page = (models / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "http://" not in page and "https://" not in page and "<link" not in page
    assert "keras.layers.LSTM</code></td><td><span class='fused'>fused</span>" in page
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in page and "<code>fuse-composites</code>" in page
    assert "Not quantized." in page
    assert "(form: fused)</span>" in page and "Recurrent forms: rnn_form=&#x27;fused&#x27; (GRU unrolled" in page
    _one_line_error(_run("convert", models / "lstm.keras", "-o", models / "x.tflite", "--report", models / "r.pdf"),
                    2, "--report writes .json, .html or .txt")


def test_html_report_shows_declined_composites_and_quantization():
    import fuselite

    k = keras_flavour("keras3")

    @tf.function(experimental_implements="my.unknown_op")
    def unknown(x):
        return tf.nn.relu(x) * 2.0

    k.utils.set_random_seed(0)
    i = k.Input((6, 3), batch_size=1)
    x = k.layers.Lambda(lambda t: unknown(t))(k.layers.LSTM(8, return_sequences=True)(i))
    conv = fuselite.Converter.from_keras_model(k.Model(i, k.layers.Dense(2)(k.layers.LSTM(4)(x))))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    samples = [[np.random.default_rng(s).standard_normal((1, 6, 3)).astype(np.float32)] for s in range(5)]
    conv.representative_dataset = lambda: iter(samples)
    conv.convert()
    page = conv.report.to_html()
    assert "my.unknown_op</code></td><td><span class='declined'>not fused</span>" in page
    assert "no fusion rule for interface &#x27;my.unknown_op&#x27;" in page  # escaped
    assert "Mode <b>int8</b>" in page and "output error" in page


def test_convert_takes_the_io_types_and_check_fusions_options(models):
    np.savez(models / "cal.npz", sequence=np.random.default_rng(0).standard_normal((8, 1, 10, 4)).astype(np.float32))
    out = _run("convert", models / "lstm.keras", "-o", models / "io.tflite", "--quantize", "int8", "--calibration-data",
               models / "cal.npz", "--inference-input-type", "int8", "--inference-output-type", "int8",
               "--no-check-fusions", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert all(not (c.get("check") or {}).get("checked") for c in report["composites"]), report["composites"]
    (sig,) = json.loads(_run("inspect", models / "io.tflite", "--json").stdout)["signatures"].values()
    assert sig["inputs"][0]["dtype"] == "int8" and sig["outputs"][0]["dtype"] == "int8"
    assert "scale" in sig["inputs"][0]["quantization"]
    checked = _run("verify", models / "lstm.keras", models / "io.tflite", "--tolerance", "0.05")
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr


_NO_TF_CHILD = """
import sys, time
t0 = time.perf_counter()
from fuselite.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "tf_keras"))
print(f"SECONDS {time.perf_counter() - t0:.3f}", file=sys.__stdout__)
print("LOADED " + " ".join(loaded[:5]), file=sys.__stdout__)
sys.exit(code)
"""


def _without_tensorflow(*args):
    """The CLI in a fresh process, and which TensorFlow / Keras modules it loaded (none, for these verbs)."""
    out = subprocess.run([sys.executable, "-c", _NO_TF_CHILD, *map(str, args)], capture_output=True, text=True,
                         timeout=120)
    *lines, seconds, loaded = out.stdout.splitlines()
    assert loaded == "LOADED ", f"{args[0]} imported {loaded[7:]}"
    return out.returncode, "\n".join(lines), out.stderr, float(seconds.split()[1])


def test_litert_verbs_and_input_errors_never_import_tensorflow(models, tmp_path):
    """inspect and bench need only LiteRT, and a missing or damaged input is said before TensorFlow's import:
    none of them loads a tensorflow or keras module (TensorFlow's import is what takes seconds)."""
    _run("convert", models / "mlp.keras", "-o", models / "notf.tflite", "-q")
    code, text, err, seconds = _without_tensorflow("inspect", models / "official.tflite")
    assert code == 0 and "FULLY_CONNECTED 2" in text, err
    assert f"conversion metadata: TensorFlow {tf.__version__}, source keras_model, optimizations none" in text
    code, text, err, _ = _without_tensorflow("inspect", models / "notf.tflite", "--json")
    assert code == 0 and json.loads(text)["conversion_metadata"]["tensorflow_version"] == tf.__version__, err
    code, text, err, _ = _without_tensorflow("bench", models / "notf.tflite", "--seconds", "0.1")
    assert code == 0 and "median" in text, err
    (tmp_path / "cut.keras").write_bytes((models / "lstm.keras").read_bytes()[:2000])
    for args, message in [
            (("convert", tmp_path / "missing.keras", "-o", tmp_path / "x.tflite"), "Keras model file not found"),
            (("convert", tmp_path / "no_saved_model", "-o", tmp_path / "x.tflite"), "SavedModel not found"),
            (("convert", tmp_path / "cut.keras", "-o", tmp_path / "x.tflite"), "damaged or truncated"),
            (("verify", tmp_path / "missing.keras", models / "notf.tflite"), "source model not found"),
            (("verify", models / "lstm.keras", tmp_path / "missing.tflite"), "model not found"),
            (("compare", tmp_path / "missing.keras"), "source model not found")]:
        code, _, err, _ = _without_tensorflow(*args)
        assert code == 1 and message in err and "Traceback" not in err, (args, err)


def test_conversion_metadata_read_without_tensorflow_as_tensorflow_reads_it(models):
    """inspect's own reader of CONVERSION_METADATA (conversion_metadata.fbs) gives what TensorFlow's reader
    gives, on the official converter's files (float and dynamic range) and on fuselite's."""
    from tensorflow.lite.python import util

    from fuselite.inspect import describe

    mlp = tf.keras.models.load_model(models / "mlp.keras", compile=False)
    official = tf.lite.TFLiteConverter.from_keras_model(mlp)
    official.optimizations = [tf.lite.Optimize.DEFAULT]
    (models / "official_dynamic.tflite").write_bytes(official.convert())
    _run("convert", models / "mlp.keras", "-o", models / "meta_dynamic.tflite", "-q", "--quantize", "dynamic")
    _run("convert", models / "saved", "-o", models / "meta_saved.tflite", "-q")
    kinds = {1: "tf_saved_model", 2: "keras_model"}
    modes = {1002: "ptq_dynamic_range"}
    seen = set()
    for name in ("official.tflite", "official_dynamic.tflite", "meta_dynamic.tflite", "meta_saved.tflite"):
        data = (models / name).read_bytes()
        theirs = util.get_conversion_metadata(data)
        ours = describe(data)["conversion_metadata"]
        assert ours == {"tensorflow_version": theirs.environment.tensorflowVersion.decode(),
                        "model_type": kinds[theirs.environment.modelType],
                        "optimization_modes": [modes[m] for m in theirs.options.modelOptimizationModes]}, name
        seen.add((ours["model_type"], tuple(ours["optimization_modes"])))
    assert seen == {("keras_model", ()), ("keras_model", ("ptq_dynamic_range",)), ("tf_saved_model", ())}
    renamed = (models / "official.tflite").read_bytes().replace(b"CONVERSION_METADATA", b"SOMETHING_ELSE_META")
    assert describe(renamed)["conversion_metadata"] is None and "SOMETHING_ELSE_META" in describe(renamed)["metadata"]


def test_damaged_keras_file_is_said_to_be_damaged(models, tmp_path):
    """A .keras file cut short (it starts as a zip, but is not a readable one) is damaged or truncated; a file
    that is not a zip at all is not a Keras model file."""
    whole = (models / "lstm.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "text.keras").write_text("not a zip archive")
    cut = _run("convert", tmp_path / "cut.keras", "-o", tmp_path / "x.tflite")
    _one_line_error(cut, 1, f"'{tmp_path / 'cut.keras'}' is damaged or truncated")
    _one_line_error(_run("verify", tmp_path / "cut.keras", models / "official.tflite"), 1, "damaged or truncated")
    text = _run("convert", tmp_path / "text.keras", "-o", tmp_path / "x.tflite")
    _one_line_error(text, 1, "is not a Keras model file: a .keras file is a zip archive")
    assert "is damaged" not in text.stderr and not (tmp_path / "x.tflite").exists()


def test_compare_gives_a_converters_reason_whole(monkeypatch, tmp_path):
    """The official converter's error (its last error line) is kept whole and wrapped under the table, never cut
    mid-word."""
    from fuselite import compare

    reason = ("ConverterError: Some ops are not supported by the native TFLite runtime, you can enable TF kernels "
              "fallback using TF Select. See instructions: https://www.tensorflow.org/lite/guide/ops_select For "
              "example, converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, "
              "tf.lite.OpsSet.SELECT_TF_OPS] and then try again with the ops listed below.")
    monkeypatch.setattr(compare, "_OFFICIAL", f"import sys\nprint({reason!r}, file=sys.stderr)\nsys.exit(1)\n")
    data, error, _ = compare.official_conversion(str(tmp_path / "model.keras"), str(tmp_path))
    assert data is None and error == reason
    rows = [{"converter": "fuselite", "converts": True, "error": None, "seconds": 1.0, "ops": 3, "sequence_ops": 0,
             "while": 0, "size": 100, "max_abs_error": 0.0, "latency_us": 5.0},
            {"converter": "tf.lite.TFLiteConverter", "converts": False, "error": error, "seconds": 2.0}]
    lines = compare.format_comparison(rows).splitlines()
    notes = lines[lines.index(next(ln for ln in lines if ln.startswith("tf.lite.TFLiteConverter: "))):]
    assert len(notes) > 1 and all(len(ln) <= 100 for ln in notes), notes
    assert " ".join(ln.strip() for ln in notes) == f"tf.lite.TFLiteConverter: {reason}"


def test_demo_prints_only_its_own_lines():
    """``make demo`` (python -m fuselite.cli demo): Keras' bidirectional LSTM text classifier side by side with the
    official converter (which fails, and whose SELECT_TF_OPS file the stock interpreter refuses), fuselite's file
    exact at two sentence lengths, then its int8; no TensorFlow / LiteRT C++ log lines (CUDA, oneDNN, absl),
    unless --verbose. (About 20 s.)"""
    out = subprocess.run([sys.executable, "-m", "fuselite.cli", "demo"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("fuselite demo: the text classifier of Keras' own example"), out.stdout
    table = out.stdout.splitlines()
    runs = next(line for line in table if line.startswith("runs on stock LiteRT"))
    assert runs.split()[4:] == ["yes", "—", "no"], runs
    assert "FlexTensorList" in out.stdout and f"fuselite int8, calibrated on {CALIBRATION} sentences" in out.stdout
    shown = out.stdout + out.stderr
    for native in ("cuda", "oneDNN", "I0000", "absl", "XNNPACK", "cpu_feature_guard"):
        assert native not in shown, shown
