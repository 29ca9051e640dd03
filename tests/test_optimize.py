"""TFLite-level optimizations, end to end on LiteRT against TF eager."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import litert_op_names

import fuselite
from fuselite.runtime import run

RNG = np.random.default_rng(7)
W = tf.constant(RNG.standard_normal((3, 3, 4, 6)).astype(np.float32))


def _convert(fn, shape):
    cf = tf.function(fn, input_signature=[tf.TensorSpec(shape, tf.float32)]).get_concrete_function()
    data = fuselite.Converter.from_concrete_functions([cf]).convert()
    x = RNG.standard_normal([1 if d is None else d for d in shape]).astype(np.float32)
    got = next(iter(run(data, [x]).values()))
    np.testing.assert_allclose(got, fn(tf.constant(x)).numpy(), atol=1e-5)
    return litert_op_names(data)


@pytest.mark.parametrize("size", [8, 9])
def test_same_style_pad_folds_into_strided_conv(size):
    # ZeroPadding2D + Conv2D(strides=2, 'valid') as in MobileNetV2: the pad SAME would add
    before, after = (0, 1) if size % 2 == 0 else (1, 1)
    ops = _convert(lambda x: tf.nn.conv2d(tf.pad(x, [[0, 0], [before, after], [before, after], [0, 0]]), W, 2,
                                          "VALID"), [1, size, size, 4])
    assert "PAD" not in ops and ops.count("CONV_2D") == 1


def test_other_pad_is_kept():
    ops = _convert(lambda x: tf.nn.conv2d(tf.pad(x, [[0, 0], [2, 0], [0, 2], [0, 0]]), W, 1, "VALID"), [1, 8, 8, 4])
    assert "PAD" in ops


def test_bias_batchnorm_and_relu_fold_into_conv():
    scale = RNG.uniform(0.5, 2, 6).astype(np.float32)
    shift = RNG.standard_normal(6).astype(np.float32)
    ops = _convert(lambda x: tf.nn.relu6(tf.nn.conv2d(x, W, 1, "SAME") * scale + shift), [None, 8, 8, 4])
    assert ops == ["CONV_2D"]


def test_tensordot_becomes_fully_connected_keep_num_dims():
    w = RNG.standard_normal((4, 5)).astype(np.float32)
    ops = _convert(lambda x: tf.tensordot(x, w, axes=[[2], [0]]), [None, 3, 4])
    assert ops == ["FULLY_CONNECTED"]


def test_shared_conv_output_is_not_folded():
    # the conv output is used twice: folding the MUL into the weights would change the other use
    ops = _convert(lambda x: (lambda y: y * 2.0 + y)(tf.nn.conv2d(x, W, 1, "SAME")), [1, 8, 8, 4])
    assert "MUL" in ops or "ADD" in ops


def test_reverse_pair_through_transpose_keeps_a_returned_transpose():
    """REVERSE(TRANSPOSE(REVERSE(y))) cancels only when the TRANSPOSE has no other reader."""

    @tf.function(input_signature=[tf.TensorSpec([2, 3, 4], tf.float32)])
    def f(x):
        t = tf.transpose(tf.reverse(x * 2.0, [0]), [1, 0, 2])
        return t, tf.reverse(t, [1]) + 1.0

    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    data = fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert()
    got = run(data, [x])
    want = [np.asarray(t) for t in f(x)]
    for name, w in zip(sorted(got), want):
        np.testing.assert_allclose(got[name], w, atol=1e-6)


def test_adding_zero_and_multiplying_by_one_go():
    """x + 0, 0 + x, x - 0, x * 1 are x (a freshly initialised batch norm's offset); a zero that broadcasts x
    to a larger shape stays."""
    zeros, ones = np.zeros(4, np.float32), np.ones((1, 4), np.float32)
    ops = _convert(lambda x: tf.nn.relu((zeros + (x + zeros) * ones - zeros) * 2.0), [None, 3, 4])
    assert ops == ["MUL", "RELU"] or ops == ["MUL"], ops
    ops = _convert(lambda x: x + np.zeros((2, 3, 4), np.float32), [1, 1, 4])  # broadcast: [1, 1, 4] -> [2, 3, 4]
    assert ops == ["ADD"], ops


def test_freshly_initialised_batch_norm_offset_goes():
    import keras

    keras.utils.set_random_seed(0)
    i = keras.Input((6, 6, 3))
    bn = keras.layers.BatchNormalization()(keras.layers.Add()([i, i]))
    model = keras.Model(i, keras.layers.ReLU()(bn))
    data = fuselite.Converter.from_keras_model(model).convert()
    assert litert_op_names(data).count("ADD") == 1, litert_op_names(data)  # beta = mean = 0: no offset
    x = RNG.standard_normal((2, 6, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(next(iter(run(data, [x]).values())), np.asarray(model(x)), atol=1e-5)
