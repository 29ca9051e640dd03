"""Whole models, Keras 3 and tf-keras, in memory and through SavedModels, vs TF eager on LiteRT."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import litert_op_names

import fuselite
from fuselite.runtime import run
from fuselite.testing import models as zoo

FLAVOURS = ["keras3", "tf_keras"]
# Builtins the reference models are allowed to use: anything else (CUSTOM, FLEX, WHILE...) fails.
NAMES = sorted(zoo.BUILDERS)


def _check(data: bytes, xs, ref, name: str):
    ops = litert_op_names(data)
    assert ops and all(not o.startswith(("CUSTOM", "FlexDelegate", "DELEGATE")) for o in ops), ops
    out = run(data, xs)
    assert len(out) == 1
    got = next(iter(out.values()))
    assert got.shape == ref.shape
    tol = zoo.TOLERANCE.get(name, 1e-5)
    err = float(np.abs(got - ref).max())
    assert err <= tol, f"{name}: max abs error {err:.3g} > {tol}"
    return ops


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", NAMES)
def test_keras_model(built_models, flavour, name):
    model, xs, ref = built_models(flavour, name)
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    ops = _check(data, xs, ref, name)
    assert conv.report.frozen_variables, "weights should have been frozen into constants"
    assert sum(conv.report.ops_after.values()) == len(ops)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet_block", "transformer_block", "text_model", "mobilenet_v2"])
def test_saved_model_round_trip(built_models, tmp_path, flavour, name):
    import tensorflow as tf

    model, xs, ref = built_models(flavour, name)
    path = str(tmp_path / "sm")
    if flavour == "keras3":
        model.export(path, verbose=False)  # Keras 3's own SavedModel export
    else:
        tf.saved_model.save(model, path)
    data = fuselite.Converter.from_saved_model(path).convert()
    _check(data, xs, ref, name)


def test_keras3_saved_via_tf_saved_model_save(built_models, tmp_path):
    import tensorflow as tf

    model, xs, ref = built_models("keras3", "mlp")
    path = str(tmp_path / "sm")

    class Wrapper(tf.Module):
        def __init__(self, m):
            self.m = m

        @tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32, name="features")])
        def serve(self, x):
            return {"probs": self.m(x, training=False)}

    w = Wrapper(model)
    tf.saved_model.save(w, path, signatures={"serving_default": w.serve})
    data = fuselite.Converter.from_saved_model(path).convert()
    out = run(data, {"features": xs[0]})
    assert list(out) == ["probs"]
    np.testing.assert_allclose(out["probs"], ref, atol=1e-5)


def test_dynamic_batch_signature(built_models):
    """A None batch becomes shape_signature -1; the model runs at another batch size."""
    from ai_edge_litert.interpreter import Interpreter

    model, _, _ = built_models("keras3", "cnn")
    data = fuselite.Converter.from_keras_model(model).convert()
    interp = Interpreter(model_content=data)
    detail = interp.get_input_details()[0]
    assert list(detail["shape_signature"]) == [-1, 32, 32, 3]
    x = np.random.default_rng(1).standard_normal((3, 32, 32, 3)).astype(np.float32)
    interp.resize_tensor_input(detail["index"], x.shape)
    interp.allocate_tensors()
    interp.set_tensor(detail["index"], x)
    interp.invoke()
    got = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, model(x, training=False), atol=1e-5)


def test_batch_norm_folded_into_conv(built_models):
    model, _, _ = built_models("keras3", "resnet_block")
    conv = fuselite.Converter.from_keras_model(model)
    conv.convert()
    assert "MUL" not in conv.report.ops_after  # BN scale folded into the conv weights
    assert conv.report.ops_after.get("CONV_2D") == 2
