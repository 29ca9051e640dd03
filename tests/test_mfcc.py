"""The MFCC keyword-spotting front end (issue 66, user report 1): ``tf.signal.stft`` (frame 640, step 320, FFT 512 on
one second at 16 kHz) -> ``tf.abs`` -> 40 mel bins (``tf.signal.linear_to_mel_weight_matrix``) -> ``log(x + 1e-6)``
-> ``tf.signal.mfccs_from_log_mel_spectrograms``, the first 13. Its DCT is an RFFT of length 80, which fuselite
refused ("powers of two only"); the official converter (TF 2.21) converts none of it, float or int8 (the DCT's
slice of complex bins is no builtin; an RFFT of 80 alone becomes an RFFT2D that LiteRT cannot prepare).

Float, for LiteRT and for TFLite Micro: within 1e-5 of the largest output (sums of 512 products, float32). int8
(fuselite's full-integer quantization, a representative dataset): within 2% of each sample's output range against
the float TF model, on LiteRT and on TFLite Micro.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

import fuselite
from fuselite.runtime import run
from fuselite.runtime.micro import micro_available, run_samples_on_micro
from fuselite.runtime.quantization_error import real_output, tensor_quantization, to_input

MEL = tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 4000.0)
INT8_TOLERANCE = 0.02  # of each sample's output range

needs_micro = pytest.mark.skipif(not micro_available(), reason="tflite-micro is not installed")


def mfcc(audio):
    stft = tf.signal.stft(audio, frame_length=640, frame_step=320, fft_length=512)
    mel = tf.tensordot(tf.abs(stft), MEL, 1)
    return tf.signal.mfccs_from_log_mel_spectrograms(tf.math.log(mel + 1e-6))[..., :13]


def audio(seed: int) -> np.ndarray:
    """One second of three tones and noise, at levels a microphone gives."""
    rng = np.random.default_rng(seed)
    t = np.arange(16000) / 16000
    x = sum(rng.uniform(0.05, 0.4) * np.sin(2 * np.pi * rng.uniform(80, 4000) * t + rng.uniform(0, 6))
            for _ in range(3))
    return (x + rng.uniform(0.005, 0.05) * rng.standard_normal(16000)).astype(np.float32)[None]


SAMPLES = [audio(100 + s) for s in range(3)]


def _converter(target: str, int8: bool) -> fuselite.Converter:
    cf = tf.function(mfcc, autograph=False).get_concrete_function(tf.TensorSpec([1, 16000], tf.float32))
    conv = fuselite.Converter.from_concrete_functions([cf], target=target)
    if int8:
        conv.optimizations = ["DEFAULT"]
        calibration = [[audio(s)] for s in range(16)]
        conv.representative_dataset = lambda: iter(calibration)
    return conv


def _ops(data: bytes) -> set[str]:
    return {d["op_name"] for d in Interpreter(model_content=data)._get_ops_details()}


def _float_tolerance(want: np.ndarray) -> float:
    return 1e-5 * max(1.0, float(np.abs(want).max()))


def test_float_for_litert_on_both_kernel_sets():
    conv = _converter("litert", int8=False)
    data = conv.convert()
    assert {"RFFT2D", "COMPLEX_ABS", "FULLY_CONNECTED"} <= _ops(data)  # the FFT of 512; the DCT: one matrix
    assert any("one FULLY_CONNECTED of 40x40" in w for w in conv.report.warnings), conv.report.warnings
    for x in SAMPLES:
        want = mfcc(tf.constant(x)).numpy()
        for builtin in (False, True):
            got = next(iter(run(data, [x], builtin_kernels=builtin).values()))
            np.testing.assert_allclose(got, want, rtol=0, atol=_float_tolerance(want))


@needs_micro
def test_float_for_tflite_micro_runs_there():
    conv = _converter("micro", int8=False)
    data = conv.convert()
    assert conv.report.micro["ran"] and not _ops(data) & {"RFFT2D", "COMPLEX_ABS", "REAL", "IMAG"}
    for (got,), x in zip(run_samples_on_micro(data, [[x] for x in SAMPLES]), SAMPLES):
        want = mfcc(tf.constant(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=_float_tolerance(want))


@pytest.mark.parametrize("target", ["litert", pytest.param("micro", marks=needs_micro)])
def test_int8_is_within_two_percent_of_the_range(target):
    """The log's input reaches 1e-6 while its range reaches ~100: below one int8 step. The values it is computed
    from stay float (the quantizer's LOG rule, quantize/int8_engine.py; on LiteRT RFFT2D has no integer kernel
    anyway), the DCT and the last slice are int8."""
    conv = _converter(target, int8=True)
    data = conv.convert()
    (q_in,), (q_out,) = tensor_quantization(data)
    ops = {r["op"]: r for r in conv.report.quantization["ops"]}
    assert ops["mfccs_from_log_mel_spectrograms/dct/Real"]["mode"] == "int8"
    assert "LOG" in ops["Tensordot/MatMul"].get("reason", "")
    feeds = [[to_input(q_in, x)] for x in SAMPLES]
    runs = {"LiteRT": [[next(iter(run(data, f).values()))] for f in feeds]}
    if target == "micro":
        runs["TFLite Micro"] = run_samples_on_micro(data, feeds)
    for where, outs in runs.items():
        for (got,), x in zip(outs, SAMPLES):
            want = mfcc(tf.constant(x)).numpy()
            error = np.abs(real_output(q_out, got) - want).max() / np.ptp(want)
            assert error <= INT8_TOLERANCE, f"{where}: {error:.2%} of the output range"
