"""Conv2D(groups=g): LiteRT's CONV_2D takes grouped filters as they are (groups = input channels / filter
input channels, op version 6); ConvNeXt's depthwise form is groups = channels. Within 1e-5 of Keras."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import run


@pytest.mark.parametrize("groups, filters", [(4, 8), (8, 8), (2, 6), (8, 16)])
def test_grouped_conv2d(groups, filters):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((10, 10, 8))
    model = k.Model(i, k.layers.Conv2D(filters, 3, groups=groups, padding="same", activation="relu")(i))
    data = fuselite.Converter.from_keras_model(model).convert()
    assert litert_op_names(data) == ["CONV_2D"], litert_op_names(data)
    x = np.random.default_rng(0).standard_normal((1, 10, 10, 8)).astype(np.float32)
    np.testing.assert_allclose(next(iter(run(data, [x]).values())), np.asarray(model(x)), atol=1e-5)


def test_grouped_conv2d_with_dynamic_range_weights():
    import tensorflow as tf

    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((10, 10, 16))
    model = k.Model(i, k.layers.Conv2D(32, 3, groups=4)(i))
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    data = conv.convert()
    x = np.random.default_rng(0).standard_normal((1, 10, 10, 16)).astype(np.float32)
    want = np.asarray(model(x))
    err = np.abs(next(iter(run(data, [x]).values())) - want).max()
    assert err <= 0.02 * np.ptp(want), err  # int8 weights: within 2% of the output range
