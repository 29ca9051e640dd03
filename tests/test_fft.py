"""tf.signal.rfft / stft and complex parts (keyword-spotting audio front ends): RFFT2D over [..., 1, L],
COMPLEX_ABS, REAL, IMAG on stock LiteRT, within 1e-5 of TensorFlow; a length LiteRT cannot transform is
refused with one clear line."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import litert_op_names

import fuselite
from fuselite.runtime import run

TOL = 1e-5


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


def test_stft_magnitude_real_and_imag():
    @tf.function(input_signature=[tf.TensorSpec([2, 400], tf.float32)])
    def spectrogram(x):
        s = tf.signal.stft(x, frame_length=64, frame_step=32, fft_length=64)
        return tf.abs(s), tf.math.real(s), tf.math.imag(s)

    x = np.random.default_rng(0).standard_normal((2, 400)).astype(np.float32)
    ops = litert_op_names(_convert_and_compare(spectrogram, x))
    assert {"RFFT2D", "COMPLEX_ABS", "REAL", "IMAG"} <= set(ops), ops


@pytest.mark.parametrize("frame, length", [(48, 64), (64, 32), (16, 16)])
def test_rfft_pads_or_crops_to_the_fft_length(frame, length):
    @tf.function(input_signature=[tf.TensorSpec([3, frame], tf.float32)])
    def magnitude(x):
        return tf.abs(tf.signal.rfft(x, fft_length=[length]))

    _convert_and_compare(magnitude, np.random.default_rng(1).standard_normal((3, frame)).astype(np.float32))


def test_fft_length_not_a_power_of_two_is_refused():
    @tf.function(input_signature=[tf.TensorSpec([1, 48], tf.float32)])
    def magnitude(x):
        return tf.abs(tf.signal.rfft(x))

    with pytest.raises(fuselite.ConversionError, match="fft_length 48 is not a power of two"):
        fuselite.Converter.from_concrete_functions([magnitude.get_concrete_function()]).convert()
