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
