"""Keras preprocessing layers inside the model (issue 45): each layer alone in a small Keras 3 model, converted and
run on stock LiteRT (builtin kernels and XNNPACK) against Keras, exactly (bucket ids and counts are integers or
small integer-valued floats: any difference is a wrong bucket or a lost count)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import fuselite
from fuselite.runtime import run

BOUNDARIES = [-1.0, 0.0, 0.5, 2.0]


def _exact(model, x):
    data = fuselite.Converter.from_keras_model(model).convert()
    want = np.asarray(model(x))
    for builtin in (True, False):
        got = next(iter(run(data, [x], builtin_kernels=builtin).values()))
        assert got.dtype == want.dtype and np.array_equal(got, want), (builtin, got, want)
    return data


@pytest.mark.parametrize("mode", ["int", "one_hot", "multi_hot", "count"])
def test_discretization_buckets_as_keras(mode):
    """BUCKETIZE (and, for the encoded modes, ONE_HOT and a sum or max over the row), values on the boundaries
    included: a value equal to a boundary goes to the bucket above it."""
    i = keras.Input((7,))
    model = keras.Model(i, keras.layers.Discretization(bin_boundaries=BOUNDARIES, output_mode=mode)(i))
    x = np.array([[-2.0, -1.0, 0.0, 0.25, 0.5, 2.0, 3.0], [5.0, 5.0, -5.0, 0.0, 0.0, 0.0, 1.0]], np.float32)
    _exact(model, x)


@pytest.mark.parametrize("mode", ["one_hot", "multi_hot", "count"])
def test_category_encoding_as_keras(mode):
    """Ids 0..num_tokens-1, repeated ids (counted once by multi_hot, each time by count)."""
    shape = (1,) if mode == "one_hot" else (4,)
    i = keras.Input(shape, dtype="int32")
    model = keras.Model(i, keras.layers.CategoryEncoding(num_tokens=6, output_mode=mode)(i))
    x = np.array([[5], [0], [3]], np.int32) if mode == "one_hot" else \
        np.array([[0, 3, 3, 5], [1, 1, 1, 1], [2, 4, 0, 5]], np.int32)
    _exact(model, x)


def test_category_encoding_with_count_weights():
    """count with count_weights: each id's weight summed into its slot (a float sum of at most 4 weights: exact to
    float32 rounding, compared at 1e-6)."""
    ids, weights = keras.Input((4,), dtype="int32"), keras.Input((4,))
    model = keras.Model([ids, weights], keras.layers.CategoryEncoding(num_tokens=6, output_mode="count")(
        ids, count_weights=weights))
    x = [np.array([[0, 3, 3, 5], [2, 2, 2, 2]], np.int32), np.array([[0.5, 1.5, 2.0, -1.0], [1, 2, 3, 4]], np.float32)]
    data = fuselite.Converter.from_keras_model(model).convert()
    for builtin in (True, False):
        got = next(iter(run(data, x, builtin_kernels=builtin).values()))
        np.testing.assert_allclose(got, np.asarray(model(x)), rtol=1e-6)
