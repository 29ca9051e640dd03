"""Shared fixtures: models are built once per session (per xdist worker)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

from fuselite.testing import models as zoo


def litert_op_names(model: bytes) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=model)
    return [d["op_name"] for d in interp._get_ops_details()]


def keras_flavour(name: str):
    return zoo.keras3() if name == "keras3" else zoo.tf_keras()


@pytest.fixture(scope="session")
def built_models():
    """(flavour, model name) -> (model, inputs, reference output); built lazily, cached."""
    cache = {}

    def get(flavour: str, name: str):
        key = (flavour, name)
        if key not in cache:
            model = zoo.build(name, keras_flavour(flavour))
            xs = zoo.sample_inputs(model)
            ref = np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False))
            cache[key] = (model, xs, ref)
        return cache[key]

    return get
