"""tf.signal.rfft / stft / irfft / fft and complex values (keyword-spotting audio front ends; lower/fft.py) beyond
the lowering cases (``test_lowering_rules.py`` runs every rule on both LiteRT kernel sets): RFFT2D or DFT matrices
on stock LiteRT within 1e-5 of TensorFlow, the DFT matrices against numpy, the TFLite Micro forms run on TFLM, what
the report says of each transform, complex64 model inputs against the official converter's file, the errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from conftest import litert_op_names

import fuselite
from fuselite.errors import ConversionError
from fuselite.lower.fft import MATRIX_UP_TO, dft_matrices, irfft_matrices, rfft_matrices
from fuselite.runtime import run
from fuselite.runtime.micro import micro_available, run_samples_on_micro

TOL = 1e-5
needs_micro = pytest.mark.skipif(not micro_available(), reason="tflite-micro is not installed")


def _convert_and_compare(fn, x):
    data = fuselite.Converter.from_concrete_functions([fn.get_concrete_function()]).convert()
    want = fn(x)
    want = [t.numpy() for t in (want if isinstance(want, (list, tuple)) else [want])]
    got = list(run(data, [x]).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=TOL * max(1.0, float(np.abs(w).max())))
    return data


@pytest.mark.parametrize("fft_length, builtins", [(512, {"RFFT2D", "COMPLEX_ABS", "REAL", "IMAG"}),
                                                  (64, {"FULLY_CONNECTED", "SQRT"})])
def test_stft_magnitude_real_and_imag(fft_length, builtins):
    """A power of two above MATRIX_UP_TO: LiteRT's RFFT2D and its complex parts; up to it, the DFT matrices
    (faster there) and no complex tensor at all."""
    @tf.function(input_signature=[tf.TensorSpec([2, 1200], tf.float32)])
    def spectrogram(x):
        s = tf.signal.stft(x, frame_length=fft_length, frame_step=fft_length // 2, fft_length=fft_length)
        return tf.abs(s), tf.math.real(s), tf.math.imag(s)

    x = np.random.default_rng(0).standard_normal((2, 1200)).astype(np.float32)
    ops = set(litert_op_names(_convert_and_compare(spectrogram, x)))
    assert builtins <= ops, ops
    if fft_length <= MATRIX_UP_TO:
        assert not ops & {"RFFT2D", "COMPLEX_ABS", "REAL", "IMAG", "BITCAST"}, ops


@pytest.mark.parametrize("frame, length", [(48, 64), (64, 32), (16, 16), (400, 512), (48, 48), (30, 50)])
def test_rfft_pads_or_crops_to_the_fft_length(frame, length):
    @tf.function(input_signature=[tf.TensorSpec([3, frame], tf.float32)])
    def magnitude(x):
        return tf.abs(tf.signal.rfft(x, fft_length=[length]))

    _convert_and_compare(magnitude, np.random.default_rng(1).standard_normal((3, frame)).astype(np.float32))


def _tolerance(want: np.ndarray) -> float:
    """float32 rounding of sums of a few hundred products: 1e-5 of the largest output (at least 1e-5)."""
    return 1e-5 * max(1.0, float(np.abs(want).max()))


def _convert(fn, *specs, **options) -> tuple[bytes, fuselite.Converter]:
    cf = tf.function(fn, autograph=False).get_concrete_function(*specs)
    conv = fuselite.Converter.from_concrete_functions([cf], **options)
    return conv.convert(), conv


@pytest.mark.parametrize("length, n", [(8, 8), (40, 80), (20, 12), (7, 7), (9, 16)])
def test_the_dft_matrices_are_numpys_transforms(length, n):
    """Each matrix, cropping or zero padding folded in, against numpy's FFT of the same values (float64)."""
    rng = np.random.default_rng(length * n)
    x = rng.standard_normal((3, length))
    wr, wi = rfft_matrices(length, n)
    np.testing.assert_allclose(x @ wr.T + 1j * (x @ wi.T), np.fft.rfft(x, n), atol=1e-12)
    z = x + 1j * rng.standard_normal((3, length))
    for inverse, want in ((False, np.fft.fft(z, n)), (True, np.fft.ifft(z, n))):
        dr, di = dft_matrices(length, n, inverse)
        np.testing.assert_allclose(z @ (dr + 1j * di).T, want, atol=1e-12)
    mr, mi = irfft_matrices(length, n)  # length bins in; TF crops or pads them to n // 2 + 1
    np.testing.assert_allclose(z.real @ mr.T + z.imag @ mi.T, np.fft.irfft(z, n), atol=1e-12)


def test_a_power_of_two_takes_rfft2d_above_the_measured_length_and_matrices_up_to_it():
    long, short = MATRIX_UP_TO * 2, MATRIX_UP_TO
    for n, builtin in ((long, True), (short, False)):
        data, _ = _convert(lambda x: tf.abs(tf.signal.rfft(x)), tf.TensorSpec([2, n], tf.float32))
        ops = {d["op_name"] for d in Interpreter(model_content=data)._get_ops_details()}
        assert ("RFFT2D" in ops) == builtin and ("FULLY_CONNECTED" in ops) != builtin, (n, ops)


def test_the_report_says_each_transforms_form_and_its_cost():
    def front(x):
        return tf.abs(tf.signal.rfft(x)), tf.abs(tf.signal.rfft(x[:, :40], [80]))

    _, conv = _convert(front, tf.TensorSpec([3, 512], tf.float32))
    lines = [w for w in conv.report.warnings if w.startswith("RFFT ")]
    assert len(lines) == 2, conv.report.warnings
    fast = next(w for w in lines if "length 512" in w)
    assert "RFFT2D" in fast and "4,608 multiply-adds" in fast  # 512 log2 512
    odd = next(w for w in lines if "length 80" in w)
    # 41 bins x 40 values, real and imaginary parts: 3,280; the padding to 80 is folded into the matrices
    assert "DFT matrix products" in odd and "3,280 multiply-adds" in odd and "powers of two only" in odd
    assert "~896 at length 128" in odd  # RFFT2D's, at the next power of two


@needs_micro
def test_micro_runs_a_power_of_two_rfft_as_matrix_products_on_tflite_micro():
    """TFLite Micro has no RFFT2D (nor REAL / IMAG / COMPLEX_ABS): target='micro' writes the DFT matrices, and
    the magnitude as SQRT of a sum of squares; TFLM's outputs against TF."""
    def spectrum(x):
        return tf.abs(tf.signal.rfft(x))

    spec = tf.TensorSpec([1, 3, 512], tf.float32)
    data, conv = _convert(spectrum, spec, target="micro")
    ops = {d["op_name"] for d in Interpreter(model_content=data)._get_ops_details()}
    assert "RFFT2D" not in ops and "COMPLEX_ABS" not in ops and "FULLY_CONNECTED" in ops, ops
    assert conv.report.micro["ran"]
    assert any("TFLite Micro has no RFFT2D kernel" in w for w in conv.report.warnings), conv.report.warnings
    xs = [np.random.default_rng(s).standard_normal((1, 3, 512)).astype(np.float32) for s in range(2)]
    for (got,), x in zip(run_samples_on_micro(data, [[x] for x in xs]), xs):
        want = spectrum(x).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=_tolerance(want))


@needs_micro
def test_micro_runs_the_parts_of_a_2d_rfft_of_powers_of_two():
    def parts(x):
        y = tf.signal.rfft2d(x, [512, 512])
        return tf.math.real(y)[:, :4, :6], tf.math.imag(y)[:, :4, :6]

    spec = tf.TensorSpec([1, 5, 7], tf.float32)
    data, conv = _convert(parts, spec, target="micro")
    ops = {d["op_name"] for d in Interpreter(model_content=data)._get_ops_details()}
    assert not ops & {"RFFT2D", "REAL", "IMAG"}, ops
    x = np.random.default_rng(1).standard_normal((1, 5, 7)).astype(np.float32)
    got = run_samples_on_micro(data, [[x]])[0]
    want = [t.numpy() for t in parts(x)]
    for g, w in zip(sorted(got, key=lambda a: float(a.sum())), sorted(want, key=lambda a: float(a.sum()))):
        np.testing.assert_allclose(g, w, rtol=0, atol=_tolerance(w))


@needs_micro
def test_a_slice_with_an_ellipsis_runs_on_tflite_micro():
    """``x[..., :13]`` (the MFCC front end's last step): TFLite Micro's STRIDED_SLICE reads no ellipsis mask; the
    micro target names every dimension (passes/micro_forms.py, full_rank_strided_slices)."""
    def f(x):
        return x[..., 1:4] * 2.0, x[0, ..., 2]

    x = np.arange(2 * 3 * 6, dtype=np.float32).reshape(2, 3, 6)
    data, _ = _convert(f, tf.TensorSpec([2, 3, 6], tf.float32), target="micro")
    got = run_samples_on_micro(data, [[x]])[0]
    want = [t.numpy() for t in f(tf.constant(x))]
    assert sorted(g.shape for g in got) == sorted(w.shape for w in want)
    for w in want:
        assert any(g.shape == w.shape and np.array_equal(g, w) for g in got)


def test_a_complex64_input_runs_as_the_official_converters_file_does():
    """User report 2: a complex64 input was refused ("LiteRT inputs cannot hold complex64"); stock LiteRT runs the
    official converter's file of the same function. Both files, on LiteRT, against TF: exact."""
    @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.complex64)])
    def f(x):
        return tf.math.real(x) * 2 + tf.math.imag(x)

    cf = f.get_concrete_function()
    ours = fuselite.Converter.from_concrete_functions([cf]).convert()
    theirs = tf.lite.TFLiteConverter.from_concrete_functions([cf], f).convert()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 8)) + 1j * rng.standard_normal((2, 8))).astype(np.complex64)
    want = f(x).numpy()
    for builtin in (False, True):
        np.testing.assert_array_equal(next(iter(run(ours, [x], builtin_kernels=builtin).values())), want)
    it = Interpreter(model_content=theirs)  # the official file has no signature here: by tensor index
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want)


def test_a_complex_result_is_a_complex64_output():
    """A complex64 output (LiteRT holds it): the spectrum itself, of a length RFFT2D does not take."""
    data, _ = _convert(lambda x: tf.signal.rfft(x, [10]) * tf.constant(2j, tf.complex64),
                       tf.TensorSpec([3, 7], tf.float32))
    x = np.random.default_rng(2).standard_normal((3, 7)).astype(np.float32)
    got = next(iter(run(data, [x]).values()))
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, np.fft.rfft(x, 10) * 2j, atol=1e-5)


@pytest.mark.parametrize("fn, spec, words", [
    (lambda x: tf.signal.rfft(x), tf.TensorSpec([2, None], tf.float32), "static sizes"),
    (lambda x: tf.signal.fft(tf.cast(x, tf.complex128)), tf.TensorSpec([2, 4], tf.float32), "complex128"),
    (lambda x, n: tf.raw_ops.IRFFT(input=tf.complex(x, x), fft_length=tf.reshape(n, [1])), None,
     "fft_length must be a constant"),
], ids=["dynamic_length", "complex128", "length_at_run_time"])
def test_what_cannot_be_converted_is_an_error_naming_the_op(fn, spec, words):
    specs = [spec] if spec is not None else [tf.TensorSpec([2, 5], tf.float32), tf.TensorSpec([], tf.int32)]
    with pytest.raises(ConversionError, match=words) as e:
        _convert(fn, *specs)
    assert "FFT" in str(e.value)
