"""lingvo-style LSTM cell composites -> one LSTM builtin, end to end on stock LiteRT.

Each composite is written the lingvo way: a ``tf.function`` with
``experimental_implements`` whose body computes one cell step from a zero state in
plain TF ops (``concat([x, m0]) @ weight``, per-gate layer norm times ``ln_scale``,
``+ bias``, gates in lingvo's order cell-input/input/forget/output, projection).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import invoke_twice, litert_op_names

import fuselite
from fuselite.fusion import FusionError

RNG = np.random.default_rng(11)
ATOL = 1e-5
BODY_OPS = {"CONCATENATION", "FULLY_CONNECTED", "BATCH_MATMUL", "SPLIT", "SPLIT_V", "LOGISTIC", "TANH", "MUL",
            "ADD", "SUB", "RSQRT", "MEAN", "SQUARED_DIFFERENCE", "RESHAPE", "SHAPE", "PACK", "STRIDED_SLICE"}


def lingvo_cell_step(x, weight, bias, projection, ln_scale=None, *, cifg=False):
    """lingvo's LSTMCellSimple / LayerNormalizedLSTMCellSimple, one step from zero state."""
    gates = 3 if cifg else 4
    n_cell = weight.shape[1] // gates
    has_projection = projection.shape.rank == 2
    n_out = projection.shape[1] if has_projection else n_cell
    batch = tf.shape(x)[0]
    m0 = tf.zeros(tf.stack([batch, n_out]))
    c0 = tf.zeros(tf.stack([batch, n_cell]))
    xmw = tf.matmul(tf.concat([x, m0], 1), weight)
    if ln_scale is not None:  # per-gate layer norm, as lingvo's _PerGateLayerNorm
        per_gate = tf.reshape(xmw, tf.stack([batch, gates, n_cell]))
        mean = tf.reduce_mean(per_gate, axis=[2], keepdims=True)
        variance = tf.reduce_mean(tf.square(per_gate - mean), axis=[2], keepdims=True)
        normed = (per_gate - mean) * tf.math.rsqrt(variance + 1e-8)
        xmw = tf.reshape(normed, tf.shape(xmw)) * tf.expand_dims(ln_scale, 0)
    xmw = xmw + tf.expand_dims(bias, 0)
    if cifg:
        i_i, f_g, o_g = tf.split(xmw, 3, axis=1)
        new_c = tf.sigmoid(f_g) * c0 + (1.0 - tf.sigmoid(f_g)) * tf.tanh(i_i)
    else:
        i_i, i_g, f_g, o_g = tf.split(xmw, 4, axis=1)
        new_c = tf.sigmoid(f_g) * c0 + tf.sigmoid(i_g) * tf.tanh(i_i)
    new_m = tf.sigmoid(o_g) * tf.tanh(new_c)
    return tf.matmul(new_m, projection) if has_projection else new_m


def _weights(n_in, n_cell, n_out, gates, tag):
    w = tf.Variable(RNG.standard_normal((n_in + n_out, gates * n_cell)).astype(np.float32) * 0.5, name=f"{tag}_wm")
    b = tf.Variable(RNG.standard_normal((gates * n_cell,)).astype(np.float32) * 0.5, name=f"{tag}_b")
    p = tf.Variable(RNG.standard_normal((n_cell, n_out)).astype(np.float32) * 0.5, name=f"{tag}_w_proj")
    s = tf.Variable(1.0 + 0.3 * RNG.standard_normal((gates * n_cell,)).astype(np.float32), name=f"{tag}_ln_scale")
    return w, b, p, s


def lingvo_model(implements: str, *, layer_norm=False, cifg=False, projection=False, batch=1, n_in=5, n_cell=4,
                 n_out=3):
    """A model function calling one lingvo cell composite with frozen-variable weights."""
    gates = 3 if cifg else 4
    n_out = n_out if projection else n_cell
    w, b, p, s = _weights(n_in, n_cell, n_out, gates, implements.split(",")[0].split('"')[-1])

    @tf.function(experimental_implements=implements)
    def cell(*args):
        return lingvo_cell_step(*args, cifg=cifg)

    @tf.function(input_signature=[tf.TensorSpec([batch, n_in], tf.float32, name="x")])
    def model(x):
        args = [x, w, b, p if projection else tf.constant(0.0)]
        return cell(*args, s) if layer_norm else cell(*args)

    model.variables_ = (w, b, p, s)  # keep them alive
    return model


def _convert(model, **kw):
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], **kw)
    return conv, conv.convert()


def _check_matches_tf_and_stateless(data, model, batch, n_in):
    xs = [RNG.standard_normal((batch, n_in)).astype(np.float32) for _ in range(2)]
    for x in xs:
        first, second = invoke_twice(data, [x])
        np.testing.assert_array_equal(first[0], second[0])  # zero state on every invoke
        np.testing.assert_allclose(first[0], model(x).numpy(), atol=ATOL)


CELLS = {
    "simple": dict(implements="LSTMCellSimple"),
    "simple_projection": dict(implements="LSTMCellSimple", projection=True),
    "cifg": dict(implements="LSTMCellSimple,CoupleInputForgetGates", cifg=True),
    "cifg_projection": dict(implements="LSTMCellSimple,CoupleInputForgetGates", cifg=True, projection=True),
    "layer_norm": dict(implements="LayerNormalizedLstmCellSimple", layer_norm=True),
    "layer_norm_projection": dict(implements="LayerNormalizedLstmCellSimple", layer_norm=True, projection=True),
    "layer_norm_cifg": dict(implements="LayerNormalizedLstmCellSimple,CoupleInputForgetGates", layer_norm=True,
                            cifg=True, projection=True),
    "attributed_form": dict(implements='name: "LSTMCellSimple,CoupleInputForgetGates"', cifg=True),
    "batch_3": dict(implements="LSTMCellSimple", projection=True, batch=3),
}


@pytest.mark.parametrize("case", list(CELLS))
def test_lingvo_cell_becomes_one_lstm_op(case):
    spec = CELLS[case]
    model = lingvo_model(**spec)
    conv, data = _convert(model)
    (rec,) = conv.report.composites
    assert rec["status"] == "fused", rec
    assert rec["into"] == ["FILL", "FILL", "LSTM"]
    ops = litert_op_names(data)
    assert sorted(ops) == ["FILL", "FILL", "LSTM"]  # zero states + the cell; no primitive of the body is left
    assert not BODY_OPS & set(ops)
    _check_matches_tf_and_stateless(data, model, spec.get("batch", 1), 5)


def test_lstm_op_inputs_follow_the_kernel_contract():
    """24 inputs; CIFG leaves the input-gate tensors out; states are variables; no clipping; FULL kernel."""
    from ai_edge_litert import schema_py_generated as schema

    model = lingvo_model("LayerNormalizedLstmCellSimple,CoupleInputForgetGates", layer_norm=True, cifg=True,
                         projection=True)
    _, data = _convert(model)
    m = schema.ModelT.InitFromPackedBuf(data, 0)
    sg = m.subgraphs[0]
    (op,) = [o for o in sg.operators if m.operatorCodes[o.opcodeIndex].builtinCode == schema.BuiltinOperator.LSTM]
    ins = list(op.inputs)
    assert len(ins) == 24
    absent = [i for i, t in enumerate(ins) if t == -1]
    assert absent == [1, 5, 9, 10, 11, 12, 17, 20]  # input gate (CIFG), peepholes, projection bias, input LN
    assert sg.tensors[ins[18]].isVariable and sg.tensors[ins[19]].isVariable
    assert list(sg.tensors[ins[18]].shape) == [1, 3] and list(sg.tensors[ins[19]].shape) == [1, 4]
    assert list(sg.tensors[ins[16]].shape) == [3, 4]  # projection [n_out, n_cell]
    assert list(sg.tensors[ins[2]].shape) == [4, 5] and list(sg.tensors[ins[6]].shape) == [4, 3]
    opts = op.builtinOptions
    assert opts.cellClip == 0.0 and opts.projClip == 0.0
    assert opts.kernelType == schema.LSTMKernelType.FULL
    assert opts.fusedActivationFunction == schema.ActivationFunctionType.TANH


def test_unknown_batch_is_fixed_to_one_and_reported():
    model = lingvo_model("LSTMCellSimple", batch=None)
    conv, data = _convert(model)
    assert conv.report.composites[0]["status"] == "fused"
    assert "fixed batch size of 1" in str(conv.report)
    _check_matches_tf_and_stateless(data, model, 1, 5)


# -- declines: the composite is converted from its body, the reason is reported ------------------


def _declined_model(kind):
    n_in, n_cell = 5, 4
    w, b, p, s = _weights(n_in, n_cell, n_cell, 4, kind)
    sig = [tf.TensorSpec([1, n_in], tf.float32, name="x")]
    if kind == "unknown_token":
        impl, call = "LSTMCellSimple,UsePeepholes", lambda x: [x, w, b, tf.constant(0.0)]
    elif kind == "attribute":
        impl, call = fuselite.implements("LSTMCellSimple", cell_clip=10.0), lambda x: [x, w, b, tf.constant(0.0)]
    elif kind == "arity":
        impl, call = "LSTMCellSimple", lambda x: [x, w, b]
    elif kind == "arity_layer_norm":
        impl, call = "LayerNormalizedLstmCellSimple", lambda x: [x, w, b, tf.constant(0.0)]
    elif kind == "cifg_with_four_gates":  # 16 columns are not 3 gate blocks
        impl, call = "LSTMCellSimple,CoupleInputForgetGates", lambda x: [x, w, b, tf.constant(0.0)]
    elif kind == "variable_weight":
        impl = "LSTMCellSimple"
        sig.append(tf.TensorSpec([n_in + n_cell, 4 * n_cell], tf.float32, name="w"))
        call = lambda x, wm: [x, wm, b, tf.constant(0.0)]  # noqa: E731
    elif kind == "bias_shape":
        impl, call = "LSTMCellSimple", lambda x: [x, w, tf.concat([b, b], 0), tf.constant(0.0)]
    elif kind == "ln_scale_rank":
        impl, call = "LayerNormalizedLstmCellSimple", lambda x: [x, w, b, tf.constant(0.0), tf.reshape(s, [4, 4])]
    elif kind == "projection_transposed":  # [n_out, n_cell], transposed in the body: fine for TF, not the contract
        proj_t = tf.Variable(RNG.standard_normal((3, n_cell)).astype(np.float32), name="proj_t")
        w = tf.Variable(RNG.standard_normal((n_in + 3, 4 * n_cell)).astype(np.float32) * 0.5, name="proj_t_wm")
        p = (p, proj_t)
        impl, call = "LSTMCellSimple", lambda x: [x, w, b, proj_t]
    elif kind == "result_shape":
        impl, call = "LSTMCellSimple", lambda x: [x, w, b, tf.constant(0.0)]
    else:
        raise AssertionError(kind)

    @tf.function(experimental_implements=impl)
    def cell(*args):
        if kind == "arity":
            return lingvo_cell_step(*args, tf.constant(0.0))
        if kind == "bias_shape":
            return lingvo_cell_step(args[0], args[1], args[2][:16], args[3])
        if kind == "ln_scale_rank":
            return lingvo_cell_step(*args[:4], tf.reshape(args[4], [-1]))
        if kind == "projection_transposed":
            x, wm, bias, proj = args
            return lingvo_cell_step(x, wm, bias, tf.transpose(proj))
        if kind == "arity_layer_norm":
            return lingvo_cell_step(*args, tf.ones([16]))
        m = lingvo_cell_step(*args)
        return tf.concat([m, m], 1) if kind == "result_shape" else m

    @tf.function(input_signature=sig)
    def model(*xs):
        return cell(*call(*xs))

    model.variables_ = (w, b, p, s)
    return model, [spec.shape.as_list() for spec in sig]


DECLINES = {
    "unknown_token": "unknown token(s) 'UsePeepholes'",
    "attribute": "attribute(s) cell_clip are not part of the LSTMCellSimple contract",
    "arity": "expected 4 argument(s) (input, weight, bias, projection",
    "arity_layer_norm": "expected 5 argument(s)",
    "cifg_with_four_gates": "16 columns are not 3 equal gate blocks",
    "variable_weight": "the weight (argument 1) must be constant",
    "bias_shape": "the bias (argument 2) must have shape [16], got [32]",
    "ln_scale_rank": "the layer norm scale (argument 4) must have shape [16], got [4, 4]",
    "projection_transposed": "the projection (argument 3) must be [n_cell, n_out] = [4, n_out], got [3, 4]",
    "result_shape": "the body returns shape [1, 8], but the arguments give [batch, 4]",
}


@pytest.mark.parametrize("kind", list(DECLINES))
def test_misfit_composite_is_declined_converted_from_its_body_and_strict_raises(kind):
    model, shapes = _declined_model(kind)
    conv, data = _convert(model)
    (rec,) = conv.report.composites
    assert rec["status"] == "declined"
    assert DECLINES[kind] in rec["reason"], rec["reason"]
    assert DECLINES[kind] in str(conv.report)
    assert "LSTM" not in litert_op_names(data)
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    first, second = invoke_twice(data, xs)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_allclose(first[0], model(*xs).numpy(), atol=ATOL)
    with pytest.raises(FusionError, match=re.escape(DECLINES[kind])):
        _convert(model, strict_fusion=True)
