"""Safe on the user's machine (issue 65): no verb, and no child process of one, imports code from the working
directory; writing never harms a file the user did not name as the output. Every command runs in a subprocess
with a time and a memory limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from fuselite.runtime.micro import micro_available
from fuselite.runtime.npu import openvino_libs
from fuselite.runtime.vela import vela_available

# the `fuselite` command a user runs (pip's console script: its folder, not the working directory, leads sys.path)
FUSELITE = os.path.join(os.path.dirname(sys.executable), "fuselite")
MEMORY = 6 << 30
# modules a verb or one of its children imports, shadowed in the working directory: each leaves a mark and exits
SHADOWED = ("json", "numpy", "tensorflow", "keras", "ai_edge_litert", "tflite_micro", "ethosu", "openvino", "h5py")


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _run(args, cwd, timeout=600, command=FUSELITE):
    return subprocess.run([command, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limited)


@pytest.fixture(scope="module")
def shadows(tmp_path_factory):
    """A working directory of modules named like those fuselite imports (a package for the dotted ones), and the
    folder their marks go to; a tiny Keras model and calibration data beside them."""
    root = tmp_path_factory.mktemp("safety")
    cwd, marks = root / "cwd", root / "marks"
    cwd.mkdir()
    marks.mkdir()
    for name in SHADOWED:
        code = f"open({str(marks / name)!r}, 'w').write('imported'); raise SystemExit(97)\n"
        (cwd / name).mkdir()
        (cwd / name / "__init__.py").write_text(code)
    (cwd / "ethosu" / "vela.py").write_text(f"open({str(marks / 'ethosu.vela')!r}, 'w').write('ran')\n")
    import keras

    keras.utils.set_random_seed(0)
    i = keras.Input((6,), batch_size=1, name="features")
    model = keras.Model(i, keras.layers.Dense(2)(keras.layers.Dense(5, activation="relu")(i)))
    model.save(root / "mlp.keras")
    np.savez(root / "calibration.npz", features=np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))
    return root, cwd, marks


def test_the_shadows_work(shadows):
    """The control: a plain `python -c` in that folder does import them (so the test below can fail)."""
    _, cwd, marks = shadows
    out = subprocess.run([sys.executable, "-c", "import json"], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 97 and (marks / "json").exists()
    (marks / "json").unlink()


VERBS = {
    "convert": ["convert", "{root}/mlp.keras", "-o", "{root}/out.tflite"],
    "convert --target micro": ["convert", "{root}/mlp.keras", "-o", "{root}/micro.tflite", "--target", "micro"],
    "convert --target ethos-u": ["convert", "{root}/mlp.keras", "-o", "{root}/npu.tflite", "--target", "ethos-u",
                                 "--calibration-data", "{root}/calibration.npz"],
    "convert --target gpu": ["convert", "{root}/mlp.keras", "-o", "{root}/gpu.tflite", "--target", "gpu"],
    "convert --target npu": ["convert", "{root}/mlp.keras", "-o", "{root}/intel.tflite", "--target", "npu"],
    "inspect": ["inspect", "{root}/out.tflite"],
    "verify": ["verify", "{root}/mlp.keras", "{root}/out.tflite"],
    "bench": ["bench", "{root}/out.tflite", "--seconds", "0.2"],
    "compare": ["compare", "{root}/mlp.keras", "--seconds", "0.2"],
    "pipeline": ["pipeline"],
    "demo": ["demo"],
}
NEEDS = {"convert --target micro": micro_available, "convert --target ethos-u": vela_available,
         "convert --target npu": lambda: openvino_libs() is not None}


@pytest.mark.parametrize("verb", list(VERBS))
def test_no_verb_imports_code_from_the_working_directory(shadows, verb):
    """Every verb (and its children: TFLite Micro's interpreter, Vela, LiteRT's accelerators, the official
    converter) run from a folder of shadowing modules: none is imported, and the verb works."""
    root, cwd, marks = shadows
    if verb in NEEDS and not NEEDS[verb]():
        pytest.skip(f"{verb}: its tool is not installed here")
    if verb in ("inspect", "verify", "bench") and not (root / "out.tflite").exists():
        assert _run([a.format(root=root) for a in VERBS["convert"]], cwd).returncode == 0
    out = _run([a.format(root=root) for a in VERBS[verb]], cwd)
    assert sorted(p.name for p in marks.iterdir()) == [], (verb, out.stderr[-2000:])
    assert out.returncode == 0, (verb, out.stderr[-2000:])


# --- writing never harms --------------------------------------------------------------------------------------


def _one_line(out, code: int = 1, says: str = ""):
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in out.stderr and says in lines[0], out.stderr[-2000:]


def _tree(folder) -> dict:
    """Every file under ``folder`` with its bytes and mode."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode) for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def saved_model(shadows):
    root, _, _ = shadows
    import keras

    model = keras.models.load_model(root / "mlp.keras")
    model.export(str(root / "sm"), verbose=False)
    return root / "sm"


@pytest.mark.parametrize("inside", ["saved_model.pb", "variables/variables.index", "new.tflite", ""])
def test_the_output_is_never_an_input_or_inside_one(shadows, saved_model, inside, tmp_path):
    before = _tree(saved_model)
    out = _run(["convert", saved_model, "-o", saved_model / inside], tmp_path)
    _one_line(out, 1, "inside the input" if inside else "directory")
    assert _tree(saved_model) == before


def test_a_fifo_or_a_device_is_never_replaced(shadows, tmp_path):
    from fuselite.paths import output_problem

    root, _, _ = shadows
    fifo = tmp_path / "pipe.tflite"
    os.mkfifo(fifo)
    _one_line(_run(["convert", root / "mlp.keras", "-o", fifo], tmp_path), 1, "it is a FIFO")
    assert stat_kind(fifo) == "fifo"
    assert "it is a device" in output_problem(os.devnull)  # (not written: a failing check would replace it)


def stat_kind(path) -> str:
    import stat

    mode = os.stat(path).st_mode
    return "fifo" if stat.S_ISFIFO(mode) else "file" if stat.S_ISREG(mode) else "other"


@pytest.mark.parametrize("output", ["", "newdir/", "missing/m.tflite"])
def test_an_output_that_cannot_be_a_file_is_one_line_before_any_work(shadows, tmp_path, output):
    root, _, _ = shadows
    out = _run(["convert", root / "mlp.keras", "-o", output], tmp_path, timeout=60)
    _one_line(out, 1, {"": "empty path", "newdir/": "names a folder", "missing/m.tflite": "does not exist"}[output])
    assert list(tmp_path.iterdir()) == []


def test_written_files_keep_an_existing_mode_and_follow_the_umask(shadows, tmp_path):
    root, _, _ = shadows
    private = tmp_path / "private.tflite"
    private.write_bytes(b"old")
    private.chmod(0o600)
    assert _run(["convert", root / "mlp.keras", "-o", private, "-q"], tmp_path).returncode == 0
    assert private.read_bytes() != b"old" and (private.stat().st_mode & 0o777) == 0o600

    def umask_027():
        _limited()
        os.umask(0o027)

    fresh = tmp_path / "fresh.tflite"
    proc = subprocess.run([FUSELITE, "convert", str(root / "mlp.keras"), "-o", str(fresh), "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, preexec_fn=umask_027)
    assert proc.returncode == 0, proc.stderr
    assert (fresh.stat().st_mode & 0o777) == 0o640


@pytest.mark.parametrize("report", ["same", "missing/report.json", "folder"])
def test_every_output_is_checked_before_the_model_is_written(shadows, tmp_path, report):
    root, _, _ = shadows
    model = tmp_path / "m.tflite"
    (tmp_path / "folder.json").mkdir()
    path = {"same": model.with_suffix(".json"), "missing/report.json": tmp_path / "missing" / "report.json",
            "folder": tmp_path / "folder.json"}[report]
    args = ["convert", root / "mlp.keras", "-o", model if report != "same" else path, "--report", path]
    out = _run(args, tmp_path, timeout=60)
    _one_line(out, 1, {"same": "are the same file", "missing/report.json": "does not exist",
                       "folder": "it is a directory"}[report])
    assert not model.exists() and not (report == "same" and path.exists())


@pytest.mark.skipif(not micro_available(), reason="TFLite Micro's interpreter (fuselite[micro]) is not installed")
def test_micro_sources_taken_by_a_folder_fail_before_writing_and_names_are_sanitized(shadows, tmp_path):
    import keras

    import fuselite

    root, _, _ = shadows
    sources = tmp_path / "src"
    (sources / "m_model_data.cc").mkdir(parents=True)
    out = _run(["convert", root / "mlp.keras", "-o", tmp_path / "m.tflite", "--micro-sources", sources], tmp_path)
    _one_line(out, 1, "it is a directory")
    assert not (tmp_path / "m.tflite").exists()
    # a model name is a file name: it may hold anything, and it goes into C++ identifiers and comments
    conv = fuselite.Converter.from_keras_model(keras.models.load_model(root / "mlp.keras"), micro_sources=tmp_path / "c")
    conv.convert_to(tmp_path / 'int\n#include "evil.h"\\.tflite')
    for file in (tmp_path / "c").iterdir():
        text = file.read_text()
        assert "evil.h\"" not in text and not any(ln.startswith('#include "evil') for ln in text.splitlines())
        assert "namespace int_" in text or "int_" in file.name


@pytest.mark.parametrize("verb", ["compare", "bench"])
def test_sigterm_leaves_no_temporary_folder(shadows, tmp_path, verb):
    """compare's folder (the official converter's child) and bench's (LiteRT's child) go when it is killed."""
    import signal
    import time

    root, _, _ = shadows
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    if verb == "bench" and not (root / "out.tflite").exists():
        assert _run([a.format(root=root) for a in VERBS["convert"]], tmp_path).returncode == 0
    args = {"compare": ["compare", root / "mlp.keras", "--seconds", "30"],
            "bench": ["bench", root / "out.tflite", "--seconds", "60"]}[verb]
    prefix = {"compare": "fuselite-compare-", "bench": "fuselite-litert-"}[verb]
    proc = subprocess.Popen([FUSELITE, *map(str, args)], cwd=tmp_path,
                            env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_limited)
    deadline = time.time() + 300
    while time.time() < deadline and not any(p.name.startswith(prefix) for p in tmp.iterdir()):
        time.sleep(0.2)
    assert any(p.name.startswith(prefix) for p in tmp.iterdir()), f"{verb} never started"
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    assert [p.name for p in tmp.iterdir() if p.name.startswith("fuselite-")] == []


@pytest.mark.skipif(not vela_available(), reason="Arm's Vela (fuselite[ethos-u]) is not installed")
def test_vela_output_replaces_a_planted_symlink_instead_of_following_it(shadows, tmp_path):
    root, _, _ = shadows
    kept, victim = tmp_path / "vela", tmp_path / "victim.txt"
    kept.mkdir()
    victim.write_text("precious")
    (kept / "m_vela.tflite").symlink_to(victim)
    out = _run(["convert", root / "mlp.keras", "-o", tmp_path / "m.tflite", "--target", "ethos-u",
                "--calibration-data", root / "calibration.npz", "--vela-output", kept, "-q"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert victim.read_text() == "precious" and not (kept / "m_vela.tflite").is_symlink()


def test_rules_from_the_working_directory_are_imported_alone(shadows):
    """--rules MODULE is the one import of the working directory, and only of the module named: its folder is
    looked up after the installed packages and only for that import (the shadows beside it stay unimported)."""
    root, cwd, marks = shadows
    (cwd / "my_rules.py").write_text("import fuselite\n\n@fuselite.fusion('test.unused', register=False)\n"
                                     "def rule(c):\n    return None\n")
    out = _run(["convert", root / "mlp.keras", "-o", root / "rules.tflite", "--rules", "my_rules", "-q"], cwd)
    assert sorted(p.name for p in marks.iterdir()) == [], out.stderr[-2000:]
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_cli_runs_from_another_thread():
    """main() installs its SIGTERM handler on the main thread only: called from a thread it still runs."""
    import threading

    from fuselite.cli import main

    codes = []
    t = threading.Thread(target=lambda: codes.append(main(["pipeline", "-q"])))
    t.start()
    t.join(60)
    assert codes == [0]
