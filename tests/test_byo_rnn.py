"""Bring your own RNN (docs/byo-rnn.md): both worked examples, end to end on stock LiteRT vs TF eager."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import assert_stateless_and_matches, litert_op_names

import fuselite
from fuselite.examples import byo_rnn
from fuselite.examples.byo_rnn import GateWiseLSTM, PeepholeLSTM, fuse_peephole_lstm
from fuselite.rnn.forms.fused import last_time_step, lstm_sequence, zero_state
from fuselite.rnn.kit import GATE_ORDERS, keras_to_litert, split_gates

TOL = 1e-5
ROOT = Path(__file__).resolve().parents[1]


def convert(module, input_shape, **options):
    """Convert ``module.__call__`` for inputs of ``input_shape`` (None: unknown batch)."""
    fn = tf.function(module.__call__, input_signature=[tf.TensorSpec(input_shape, tf.float32)])
    conv = fuselite.Converter.from_concrete_functions([fn.get_concrete_function()], **options)
    return conv, conv.convert()


def check_fused(module, input_shape=(2, 7, 3), batch=2, **options):
    """Fused into one UNIDIRECTIONAL_SEQUENCE_LSTM, no WHILE, stateless, and equal to TF eager (a composite of
    the built-in LSTM's interface in its fused form: rnn_form="fused")."""
    options.setdefault("rnn_form", "fused")
    conv, data = convert(module, input_shape, strict_fusion=True, **options)
    ops = litert_op_names(data)
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1, ops
    assert "WHILE" not in ops, ops
    x = np.random.default_rng(1).standard_normal((batch, *input_shape[1:])).astype(np.float32)
    assert_stateless_and_matches(data, lambda x, training: module(x), [x], TOL)
    return conv, data


def sequence_op_inputs(data: bytes) -> list[int]:
    """The tensor indices of the fused op's 24 inputs (-1 for an absent optional input)."""
    from ai_edge_litert.interpreter import Interpreter

    ops = Interpreter(model_content=data)._get_ops_details()
    (op,) = [d for d in ops if d["op_name"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    return list(op["inputs"])


# -- Example 1: a custom LSTM behind the Keras LSTM interface ---------------------------------


@pytest.mark.parametrize("return_sequences", [False, True])
def test_gate_wise_lstm_is_fused_by_the_built_in_rule(return_sequences):
    conv, _ = check_fused(GateWiseLSTM(features=3, units=5, return_sequences=return_sequences))
    (record,) = conv.report.composites
    assert (record["interface"], record["status"]) == ("keras.layers.LSTM", "fused")


def test_gate_wise_lstm_computes_what_keras_lstm_computes():
    """The rearranged weights really are Keras' layout: a Keras LSTM with them agrees."""
    module = GateWiseLSTM(features=3, units=5, return_sequences=True)
    layer = tf.keras.layers.LSTM(5, return_sequences=True)
    x = np.random.default_rng(2).standard_normal((2, 7, 3)).astype(np.float32)
    layer(x)
    cat = lambda d, axis: np.concatenate([d[g].numpy() for g in GATE_ORDERS["keras", "LSTM"]], axis)  # noqa: E731
    layer.set_weights([cat(module.w_x, 1), cat(module.w_h, 1), cat(module.b, 0)])
    np.testing.assert_allclose(module(x), layer(x), atol=TOL)


def test_gate_wise_lstm_unfused_body_converts_exactly():
    """With the built-in rule overridden by a declining one, the composite's own body is converted."""

    @fuselite.fusion("keras.layers.LSTM", register=False)
    def decline_all(c):
        c.decline("left unfused on purpose")

    module = GateWiseLSTM(features=3, units=5, return_sequences=True)
    conv, data = convert(module, (2, 7, 3), fusions=[decline_all])
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in litert_op_names(data)
    assert conv.report.composites[0]["reason"] == "left unfused on purpose"
    x = np.random.default_rng(1).standard_normal((2, 7, 3)).astype(np.float32)
    assert_stateless_and_matches(data, lambda x, training: module(x), [x], TOL)


# -- Example 2: a new rule for a peephole LSTM --------------------------------------------------


@pytest.mark.parametrize("return_sequences", [False, True])
def test_peephole_lstm_is_fused_by_a_user_rule(return_sequences):
    module = PeepholeLSTM(features=3, units=5, return_sequences=return_sequences)
    conv, data = check_fused(module, fusions=[fuse_peephole_lstm])
    assert conv.report.composites[0]["status"] == "fused"
    inputs = sequence_op_inputs(data)
    assert all(i >= 0 for i in inputs[9:12]), inputs  # cell_to_input/forget/output weights
    assert all(i < 0 for i in inputs[20:24]), inputs  # no layer norm


def test_peepholes_change_the_result():
    """The match above is not vacuous: without its peepholes the module computes something else."""
    module = PeepholeLSTM(features=3, units=5, return_sequences=True)
    x = np.random.default_rng(1).standard_normal((2, 7, 3)).astype(np.float32)
    with_peepholes = module(x).numpy()
    for w in (module.w_ci, module.w_cf, module.w_co):
        w.assign(tf.zeros_like(w))
    assert np.abs(module(x).numpy() - with_peepholes).max() > 1e-2


def test_peephole_lstm_with_unknown_batch_is_converted_with_batch_one():
    module = PeepholeLSTM(features=3, units=5, activation="relu")
    conv, _ = check_fused(module, input_shape=(None, 7, 3), batch=1, fusions=[fuse_peephole_lstm])
    assert any("batch size of 1" in w for w in conv.report.warnings), conv.report.warnings


def test_mismatched_composite_is_declined_with_its_reason_and_still_converts():
    module = PeepholeLSTM(features=3, units=5, return_sequences=True, activation="elu")
    conv, data = convert(module, (2, 7, 3), fusions=[fuse_peephole_lstm])
    (record,) = conv.report.composites
    assert record["status"] == "declined"
    assert record["reason"].startswith("activation 'elu' has no fused equivalent"), record
    assert "activation 'elu'" in str(conv.report)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in litert_op_names(data)
    x = np.random.default_rng(1).standard_normal((2, 7, 3)).astype(np.float32)
    assert_stateless_and_matches(data, lambda x, training: module(x), [x], TOL)
    with pytest.raises(fuselite.FusionError, match="activation 'elu'"):
        convert(module, (2, 7, 3), fusions=[fuse_peephole_lstm], strict_fusion=True)


def test_without_the_rule_the_composite_is_not_fused_and_still_converts():
    module = PeepholeLSTM(features=3, units=5)
    conv, data = convert(module, (2, 7, 3))
    assert conv.report.composites[0]["status"] == "not fused"
    x = np.random.default_rng(1).standard_normal((2, 7, 3)).astype(np.float32)
    assert_stateless_and_matches(data, lambda x, training: module(x), [x], TOL)


# -- lstm_sequence's layer norm (inputs 20-23) ----------------------------------------------------


def layer_norm_lstm(x, kernel, recurrent_kernel, bias, coefficients):
    """Each gate's pre-activation normalised over the units, scaled per gate, then biased."""
    batch, units = tf.shape(x)[0], recurrent_kernel.shape[0]
    h = c = tf.zeros([batch, units], x.dtype)
    biases, scales = tf.split(bias, 4), tf.split(coefficients, 4)
    outputs = []
    for t in range(x.shape[1]):
        z = tf.split(tf.matmul(x[:, t], kernel) + tf.matmul(h, recurrent_kernel), 4, axis=1)
        zi, zf, zc, zo = (scales[g] * (z[g] - tf.reduce_mean(z[g], 1, keepdims=True))
                          / tf.sqrt(tf.math.reduce_variance(z[g], 1, keepdims=True) + 1e-8) + biases[g]
                          for g in range(4))
        c = tf.sigmoid(zf) * c + tf.sigmoid(zi) * tf.tanh(zc)
        h = tf.sigmoid(zo) * tf.tanh(c)
        outputs.append(h)
    return tf.stack(outputs, axis=1)


@fuselite.fusion("test.LayerNormLSTM", register=False)
def fuse_layer_norm_lstm(c):
    x, kernel, recurrent_kernel, bias, coefficients = c.args
    units = recurrent_kernel.shape[0]
    per_gate = keras_to_litert(kernel.const, recurrent_kernel.const, bias.const, 4)
    return lstm_sequence(c, x, *per_gate, zero_state(c, x.shape[0], units), zero_state(c, x.shape[0], units),
                         layer_norm=split_gates(coefficients.const, 4))


def test_lstm_sequence_layer_norm_matches_the_kernel_math():
    rng = np.random.default_rng(4)
    units = 6
    w = [tf.Variable(rng.standard_normal(s).astype(np.float32) * 0.5)
         for s in [(3, 4 * units), (units, 4 * units), (4 * units,), (4 * units,)]]

    @tf.function(experimental_implements="test.LayerNormLSTM", autograph=False)
    def composite(x, kernel, recurrent_kernel, bias, coefficients):
        return layer_norm_lstm(x, kernel, recurrent_kernel, bias, coefficients)

    class LayerNormLSTM(tf.Module):
        def __call__(self, x):
            return composite(x, *w)

    module = LayerNormLSTM()
    _, data = check_fused(module, fusions=[fuse_layer_norm_lstm])
    inputs = sequence_op_inputs(data)
    assert all(i >= 0 for i in inputs[20:24]) and all(i < 0 for i in inputs[9:12]), inputs


def test_lstm_sequence_needs_states_that_are_rewritten_on_every_invoke():
    @fuselite.fusion(byo_rnn.PEEPHOLE_LSTM, register=False)
    def careless(c):
        x = c.args[0]
        plain = c.op("ZEROS_LIKE", [np.zeros((2, 5), np.float32)], dtype=np.float32, shape=(2, 5))
        seq = lstm_sequence(c, x, *[[np.zeros((5, n), np.float32)] * 4 for n in (3, 5)], [np.zeros(5)] * 4,
                            plain, plain)
        return last_time_step(c, seq)

    conv, _ = convert(PeepholeLSTM(features=3, units=5), (2, 7, 3), fusions=[careless])
    assert "zero_state() or initial_state()" in conv.report.composites[0]["reason"]


# -- the doc shows the code that runs here ------------------------------------------------------


def test_every_python_block_of_the_doc_is_tested_code():
    doc = (ROOT / "docs" / "byo-rnn.md").read_text()
    sources = Path(byo_rnn.__file__).read_text() + Path(__file__).read_text()
    blocks = re.findall(r"```python(?: excerpt)?\n(.*?)```", doc, re.S)
    assert len(blocks) >= 4
    for block in blocks:  # verbatim, or indented as a whole (a line quoted from a function body)
        assert any(textwrap.indent(block, pad) in sources for pad in ("", " " * 4, " " * 8)), \
            f"docs/byo-rnn.md shows code that is not in the examples or tests:\n{block}"
