"""Subclassed Keras models and dict inputs through from_keras_model: Keras 3 (called once) and tf-keras (fit and called)
convert, fuse their recurrent layers and match Keras within 1e-5 on LiteRT; an unbuilt one is refused
with one clear line."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import run

TOL = 1e-5


def _subclassed(k):
    class Classifier(k.Model):
        def __init__(self):
            super().__init__()
            self.lstm = k.layers.LSTM(8)
            self.head = k.layers.Dense(3)

        def call(self, x):
            return self.head(self.lstm(x))

    return Classifier()


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_subclassed_model_converts_fused_and_exact(flavour):
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    model = _subclassed(k)
    x = np.random.default_rng(0).standard_normal((4, 6, 3)).astype(np.float32)
    if flavour == "tf_keras":  # the case: fit, then called
        model.compile("adam", "mse")
        model.fit(x, np.zeros((4, 3), np.float32), epochs=1, verbose=0)
    model(x)
    conv = fuselite.Converter.from_keras_model(model, rnn_form="fused")
    data = conv.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in litert_op_names(data) and "WHILE" not in litert_op_names(data)
    got = next(iter(run(data, [x[:1]]).values()))
    np.testing.assert_allclose(got, np.asarray(model(x[:1])), atol=TOL)


def test_unbuilt_subclassed_model_is_refused_clearly():
    k = keras_flavour("keras3")
    with pytest.raises(fuselite.InputError, match="has no known inputs: build it first"):
        fuselite.Converter.from_keras_model(_subclassed(k)).convert()


def test_not_a_keras_model_is_refused():
    with pytest.raises(fuselite.InputError, match="expects a Keras model, got function"):
        fuselite.Converter.from_keras_model(lambda x: x)


def test_functional_model_with_dict_inputs():
    """keras-hub style {'token_ids', 'padding_mask'} inputs: traced with a dict, signature names = its keys."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    ids = k.Input((6,), dtype="int32", name="token_ids")
    mask = k.Input((6,), dtype="int32", name="padding_mask")
    weights = k.ops.cast(k.ops.expand_dims(mask, -1), "float32")
    y = k.layers.Dense(2)(k.ops.sum(k.layers.Embedding(50, 8)(ids) * weights, axis=1))
    model = k.Model({"token_ids": ids, "padding_mask": mask}, y)
    data = fuselite.Converter.from_keras_model(model).convert()
    xs = {"token_ids": np.random.default_rng(0).integers(0, 50, (1, 6)).astype(np.int32),
          "padding_mask": np.array([[1, 1, 1, 0, 1, 0]], np.int32)}
    got = run(data, xs)  # by name: run() fails on a name the signature does not have
    np.testing.assert_allclose(next(iter(got.values())), np.asarray(model(xs)), atol=TOL)
