"""Activation folding only into ops whose LiteRT kernels apply the fused activation.

For each op kind with a fused-activation slot, a Keras model of that op followed by a ReLU
(or ReLU6) converts to one op with the activation folded, prepares and runs on stock LiteRT,
and matches Keras within 1e-5 (plus 1e-6 relative). CONCATENATION has the slot in the schema, but LiteRT's kernel
refuses any activation there (concatenation.cc: ``params->activation == kTfLiteActNone``):
its ReLU stays a separate op.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import run

TOL = 1e-5


def _two_inputs(k, layer):
    a, b = k.Input((4, 4, 3)), k.Input((4, 4, 3))
    return [a, b], layer([a, b])


def _build(kind: str):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    one = k.Input((6, 6, 3))
    if kind == "CONV_2D":
        ins, y = one, k.layers.Conv2D(4, 3)(one)
    elif kind == "DEPTHWISE_CONV_2D":
        ins, y = one, k.layers.DepthwiseConv2D(3)(one)
    elif kind == "FULLY_CONNECTED":
        ins = k.Input((5,))
        y = k.layers.Dense(4)(ins)
    elif kind == "TRANSPOSE_CONV":
        ins, y = one, k.layers.Conv2DTranspose(4, 3)(one)
    elif kind == "MAX_POOL_2D":
        ins, y = one, k.layers.MaxPooling2D(2)(k.layers.Conv2D(4, 1, activation="tanh")(one))
    elif kind == "AVERAGE_POOL_2D":
        ins, y = one, k.layers.AveragePooling2D(2)(k.layers.Conv2D(4, 1, activation="tanh")(one))
    elif kind in ("ADD", "SUB", "MUL", "CONCATENATION"):
        layer = {"ADD": k.layers.Add(), "SUB": k.layers.Subtract(), "MUL": k.layers.Multiply(),
                 "CONCATENATION": k.layers.Concatenate()}[kind]
        ins, y = _two_inputs(k, layer)
    elif kind == "DIV":
        a, b = k.Input((4, 4, 3)), k.Input((4, 4, 3))
        ins, y = [a, b], k.ops.divide(a, k.ops.exp(b))
    else:
        raise AssertionError(kind)
    act = k.layers.ReLU(max_value=6.0) if kind in ("DEPTHWISE_CONV_2D", "MUL") else k.layers.ReLU()
    return k.Model(ins, k.layers.Flatten()(act(y)))


KINDS = ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "MAX_POOL_2D", "AVERAGE_POOL_2D",
         "ADD", "SUB", "MUL", "DIV", "CONCATENATION"]


@pytest.mark.parametrize("kind", KINDS)
def test_activation_folds_only_where_the_kernel_applies_it(kind):
    from ai_edge_litert import schema_py_generated as schema

    model = _build(kind)
    data = fuselite.Converter.from_keras_model(model).convert()
    ops = litert_op_names(data)
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    host = [op for op in m.subgraphs[0].operators if names[m.operatorCodes[op.opcodeIndex].builtinCode] == kind]
    assert host, ops
    fused = [getattr(op.builtinOptions, "fusedActivationFunction", 0) for op in host]
    if kind == "CONCATENATION":
        assert fused == [0] and "RELU" in ops, ops  # left separate: the kernel refuses it
    else:
        assert any(fused) and "RELU" not in ops and "RELU6" not in ops, (ops, fused)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, *t.shape[1:])).astype(np.float32) * 3 for t in model.inputs]
    want = np.asarray(model(xs if len(xs) > 1 else xs[0]))
    got = next(iter(run(data, xs).values()))
    np.testing.assert_allclose(got, want, atol=TOL, rtol=1e-6)  # DIV by exp(b) reaches ~260: float32 rounding
