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


def _list_transformer(k):
    """Keras' example transformer written as a subclass: source and target token ids as one list argument."""

    class Transformer(k.Model):
        def __init__(self):
            super().__init__(name="transformer")
            self.source, self.target = k.layers.Embedding(30, 16), k.layers.Embedding(30, 16)
            self.attention = k.layers.MultiHeadAttention(2, 8)
            self.decoder = k.layers.GRU(16, return_sequences=True)
            self.head = k.layers.Dense(30)

        def call(self, inputs):
            source, target = inputs
            memory = self.source(source)
            return self.head(self.decoder(self.attention(self.target(target), memory)))

    return Transformer()


def _dict_model(k):
    class TwoFeatures(k.Model):
        def __init__(self):
            super().__init__()
            self.a, self.b = k.layers.Dense(4), k.layers.Dense(4)

        def call(self, inputs):
            return self.a(inputs["audio"]) + self.b(inputs["meta"])

    return TwoFeatures()


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("structure", ["list", "tuple", "dict"])
def test_subclassed_model_with_structured_inputs(flavour, structure):
    """A subclassed model called once on a list, tuple or dict converts through the structure of that call: a
    list's or tuple's inputs named input_0, input_1 (integer ids where the model casts them to integers at
    once, as Embedding does), a dict's by its keys; Keras' numbers at batch 1 and 2 on both kernel sets."""
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if structure == "dict":
        model = _dict_model(k)
        x = {"audio": rng.standard_normal((2, 3)).astype(np.float32),
             "meta": rng.standard_normal((2, 5)).astype(np.float32)}
        names, dtypes = ["audio", "meta"], [np.float32, np.float32]
    else:
        model = _list_transformer(k)
        ids = [rng.integers(0, 30, (2, 7)).astype(np.int32), rng.integers(0, 30, (2, 5)).astype(np.int32)]
        x = ids if structure == "list" else tuple(ids)
        names, dtypes = ["input_0", "input_1"], [np.int32, np.int32]
    model(x)
    data = fuselite.Converter.from_keras_model(model).convert()
    from fuselite.runtime import interpreter

    details = interpreter(data).get_input_details()
    assert sorted(d["name"] for d in details) == names and [d["dtype"] for d in details] == dtypes
    for batch in (1, 2):
        feed = {n: v[:batch] for n, v in (x.items() if structure == "dict" else zip(names, x))}
        for builtin in (False, True):
            got = next(iter(run(data, feed, builtin_kernels=builtin).values()))
            np.testing.assert_allclose(got, np.asarray(model(
                feed if structure == "dict" else [feed[n] for n in names])), atol=TOL)


def test_subclassed_model_with_several_arguments_is_refused_clearly():
    """Keras records the shapes of a call's first argument only: a call(self, a, b) model says how to convert it."""
    k = keras_flavour("keras3")

    class Two(k.Model):
        def __init__(self):
            super().__init__()
            self.dense = k.layers.Dense(2)

        def call(self, a, b):
            return self.dense(a) + self.dense(b)

    model = Two()
    model(np.zeros((1, 3), np.float32), np.zeros((1, 3), np.float32))
    with pytest.raises(fuselite.InputError, match="several tensor arguments"):
        fuselite.Converter.from_keras_model(model).convert()


@pytest.mark.parametrize("body", ["numpy", "int_of_none"])
def test_what_the_models_code_raises_while_traced_is_a_conversion_error_naming_its_line(body):
    """A call that runs eagerly but not traced (np.asarray of a symbolic tensor: NotImplementedError; the batch,
    unknown when traced, as an int: TypeError) reached the user raw from deep in TensorFlow: it is a ConversionError
    naming the layer's class, the file and line of the model's own code, the exception and the traced shapes."""
    k = keras_flavour("keras3")

    class Odd(k.layers.Layer):
        def call(self, x):
            if body == "numpy":
                return x * float(np.asarray(x).mean())
            return k.ops.reshape(x, (int(x.shape[0]), -1))

        def compute_output_shape(self, shape):  # Keras builds the model without calling call
            return shape

    i = k.Input((3,))
    model = k.Model(i, Odd()(k.layers.Dense(2)(i)))
    with pytest.raises(fuselite.ConversionError) as e:
        fuselite.Converter.from_keras_model(model).convert()
    text = str(e.value)
    assert type(e.value) is fuselite.ConversionError, type(e.value)
    assert "test_subclassed.py:" in text and ("np.asarray" in text or "int(x.shape[0])" in text), text
    assert ("NotImplementedError" if body == "numpy" else "TypeError") in text and "(?, 3)" in text, text
    assert ("symbolic" if body == "numpy" else "NoneType") in text and "in user code" not in text, text
