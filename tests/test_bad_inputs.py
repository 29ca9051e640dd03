"""Bad inputs are one line with the reason, never a traceback or a hang (issue 65): representative datasets that
raise, give strings, the wrong number or shape of arrays, or never end (the max_calibration_samples limit); .npz
files of strings, of objects, or whose header claims terabytes (verify / bench --inputs, --calibration-data); a
.keras zip bomb; a FIFO where a model file belongs. The command line runs in subprocesses under a memory limit."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import fuselite
from fuselite.errors import ConversionError
from fuselite.npz import read_npz

MEMORY_LIMIT = 6 << 30  # RLIMIT_AS of the command-line runs: an 8 TiB allocation cannot happen, 3.7 GB cannot


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _cli(*args, timeout=240):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-m", "fuselite.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limited, env=env, stdin=subprocess.DEVNULL)


def _one_line(out, message: str, code: int = 1, prefix: str = "fuselite: error: "):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    if code == 2:  # argparse's usage lines come first; its error is the last line
        lines = lines[-1:]
    assert len(lines) == 1 and lines[0].startswith(prefix), out.stderr
    assert message in lines[0], out.stderr


def _model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(2)])


def _forged_npy(shape, descr="<f4") -> bytes:
    """An .npy header claiming ``shape`` and no data behind it."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    model = _model()
    model.save(d / "m.keras")
    (d / "m.tflite").write_bytes(fuselite.Converter.from_keras_model(model).convert())
    np.savez(d / "good.npz", x=np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    np.savez(d / "strings.npz", x=np.array([["a", "b", "c", "d"]] * 3))
    np.savez(d / "objects.npz", x=np.array([[1, 2, 3, 4]], dtype=object))
    with zipfile.ZipFile(d / "huge.npz", "w") as z:  # 8 TiB claimed in a file of a few hundred bytes
        z.writestr("x.npy", _forged_npy((1 << 41,)))
    np.save(d / "single.npy", np.zeros((1, 4), np.float32))
    (d / "text.npz").write_text("not an npz")
    # a .keras zip bomb: 256 MiB of zeros deflated into a few hundred KiB, where Keras reads config.json whole
    with zipfile.ZipFile(d / "bomb.keras", "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        with z.open("config.json", "w") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(256):
                f.write(chunk)
    # a forged central directory: the member claims 3.7 GB, stored in a few bytes
    with zipfile.ZipFile(d / "forged.keras", "w") as z:
        z.writestr("config.json", b"{}")
    data = bytearray((d / "forged.keras").read_bytes())
    central = data.rfind(b"PK\x01\x02")
    data[central + 24:central + 28] = (3_700_000_000).to_bytes(4, "little")  # uncompressed size
    (d / "forged.keras").write_bytes(bytes(data))
    os.mkfifo(d / "fifo.npz")
    os.mkfifo(d / "fifo.h5")
    os.mkfifo(d / "fifo.keras")
    return d


# -- .npz: the reader --------------------------------------------------------------------------------------------

def test_read_npz_refuses_before_reading(files):
    assert read_npz(str(files / "good.npz"))["x"].shape == (3, 4)
    with pytest.raises(ConversionError, match=r"header claims shape \[2199023255552\] float32 \(8\.0 TiB\)"):
        read_npz(str(files / "huge.npz"))
    with pytest.raises(ConversionError, match="holds Python objects"):
        read_npz(str(files / "objects.npz"))
    with pytest.raises(ConversionError, match="single .npy array"):
        read_npz(str(files / "single.npy"))
    with pytest.raises(ConversionError, match="not an .npz"):
        read_npz(str(files / "text.npz"))
    with pytest.raises(ConversionError, match="not a regular file"):
        read_npz(str(files / "fifo.npz"))  # (opening it would block)
    with pytest.raises(ConversionError, match=r"more than 1\.0 KiB"):
        np.savez(files / "big.npz", x=np.zeros((1, 1024), np.float32))
        read_npz(str(files / "big.npz"), max_bytes=1024)


# -- the command line -------------------------------------------------------------------------------------------

def test_cli_npz_inputs(files):
    m, k = files / "m.tflite", files / "m.keras"
    _one_line(_cli("bench", m, "--inputs", files / "strings.npz", "--seconds", "0.1"),
              "input 'x' is given as strings (dtype <U1); the model takes float32")
    _one_line(_cli("bench", m, "--inputs", files / "huge.npz"), "(8.0 TiB), the file holds 0 bytes of it")
    _one_line(_cli("bench", m, "--inputs", files / "objects.npz"), "holds Python objects")
    _one_line(_cli("bench", m, "--inputs", files / "fifo.npz"), "not a regular file")
    _one_line(_cli("verify", k, m, "--inputs", files / "strings.npz"), "input 'x' is given as strings")
    _one_line(_cli("verify", k, m, "--inputs", files / "huge.npz"), "cannot read inputs")


def test_cli_calibration_data(files):
    convert = ("convert", files / "m.keras", "-o", files / "q.tflite", "--quantize", "int8", "--calibration-data")
    _one_line(_cli(*convert, files / "strings.npz"),
              "calibration sample 0: input 'x' is an array of strings (dtype <U1), the model takes float32")
    _one_line(_cli(*convert, files / "huge.npz"), "cannot read calibration data")
    out = _cli(*convert, files / "good.npz", "--max-calibration-samples", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert '"limit": 2' in out.stdout and "max_calibration_samples limit" in out.stdout
    _one_line(_cli(*convert, files / "good.npz", "--max-calibration-samples", "0"),
              "max_calibration_samples is the most representative_dataset samples", 2, "fuselite convert: error: ")


def test_cli_keras_zip_bomb_and_fifo(files):
    bomb = files / "bomb.keras"
    assert bomb.stat().st_size < 2 << 20
    _one_line(_cli("convert", bomb, "-o", files / "b.tflite"), "'config.json': 256.0 MiB")
    _one_line(_cli("verify", bomb, files / "m.tflite"), "refused as a zip bomb")
    _one_line(_cli("convert", files / "forged.keras", "-o", files / "b.tflite"), "'config.json': 3.4 GiB, stored in")
    _one_line(_cli("convert", files / "fifo.keras", "-o", files / "b.tflite", timeout=60), "not a regular file")
    _one_line(_cli("convert", files / "fifo.h5", "-o", files / "b.tflite", timeout=60), "not a regular file")
    assert not (files / "b.tflite").exists()


# -- representative_dataset through the Python API --------------------------------------------------------------

def _quantize(dataset, **options):
    conv = fuselite.Converter.from_keras_model(_model(), optimizations=["DEFAULT"], representative_dataset=dataset,
                                               **options)
    return conv, conv.convert


def _sample():
    return [np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)]


def test_representative_dataset_that_raises():
    def gen():
        yield _sample()
        yield _sample()
        raise RuntimeError("the data loader broke")

    _, convert = _quantize(gen)
    with pytest.raises(ConversionError, match="representative_dataset raised RuntimeError at sample 2: the data "
                                              "loader broke") as e:
        convert()
    assert isinstance(e.value.__cause__, RuntimeError)  # chained, for whoever debugs their loader
    _, convert = _quantize(lambda: 1 / 0)
    with pytest.raises(ConversionError, match=re.escape("representative_dataset raised ZeroDivisionError: "
                                                        "division by zero (when called)")):
        convert()


@pytest.mark.parametrize("dataset, message", [
    (lambda: ([np.array([["a", "b", "c", "d"]])] for _ in range(2)),
     "calibration sample 0: input 'x' is an array of strings (dtype <U1), the model takes float32"),
    (lambda: (_sample() * 2 for _ in range(2)), "calibration sample 0: the model has 1 input(s) (x), the sample 2"),
    (lambda: ([np.zeros((1, 5), np.float32)] for _ in range(2)),
     "calibration sample 0: input 'x' has shape [1, 5], the model takes [?, 4]"),
    (lambda: ([[object()] * 4] for _ in range(2)), "calibration sample 0: input 'x' has dtype |O"),
    (lambda: (None for _ in range(2)), "calibration sample 0 is None"),
    (5, "representative_dataset is a callable returning an iterable of samples (a generator function), or an "
        "iterable of samples; got int"),
    (lambda: 5, "calling it returned int"),
    ("samples.npz", "got str"),
    (lambda: iter(()), "the representative dataset gave no samples"),
])
def test_representative_dataset_misfits(dataset, message):
    _, convert = _quantize(dataset)
    with pytest.raises(ConversionError) as e:
        convert()
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_endless_representative_dataset_stops_at_the_limit():
    def endless():
        while True:
            yield _sample()

    conv, convert = _quantize(endless, max_calibration_samples=5)
    convert()
    assert conv.report.calibration["samples"] == 5 and conv.report.calibration["limit"] == 5
    assert any("calibration used 5 sample(s): the max_calibration_samples limit" in w for w in conv.report.warnings)
    conv, convert = _quantize(lambda: (_sample() for _ in range(5)), max_calibration_samples=5)
    convert()  # exactly the limit: not cut short, nothing to say
    assert "limit" not in conv.report.calibration and not any("max_calibration_samples" in w
                                                               for w in conv.report.warnings)
    assert fuselite.Converter.from_keras_model(_model()).max_calibration_samples == 500
    with pytest.raises(ConversionError, match="max_calibration_samples is the most"):
        _quantize(endless, max_calibration_samples=0)[1]()
