"""The peephole LSTM cell (rnn/cells/peephole_lstm.py): the worked example of docs/architecture.md, "Adding a
cell". One family file, driven through the public cell API (examples/byo_rnn.py, Example 3) in all three
forms, each against TensorFlow on LiteRT's builtin kernels and with XNNPACK (tolerance 1e-5), and its NumPy
reference against TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import assert_stateless_and_matches, litert_op_names

import fuselite
from fuselite.examples.byo_rnn import PeepholeLSTM, fuse_peephole_lstm_any_form
from fuselite.rnn.cells.peephole_lstm import numpy_peephole_lstm

TOL = 1e-5
FORM_OPS = {"fused": "UNIDIRECTIONAL_SEQUENCE_LSTM", "loop": "WHILE", "unrolled": "LOGISTIC"}


def _convert(module, shape, rnn_form):
    fn = tf.function(module.__call__, input_signature=[tf.TensorSpec(shape, tf.float32)])
    conv = fuselite.Converter.from_concrete_functions([fn.get_concrete_function()], fusions=[fuse_peephole_lstm_any_form],
                                                      strict_fusion=True, rnn_form=rnn_form)
    return conv, conv.convert()


@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("rnn_form", ["fused", "unrolled", "loop"])
def test_the_peephole_cell_runs_in_every_form(rnn_form, return_sequences):
    module = PeepholeLSTM(features=3, units=5, return_sequences=return_sequences, seed=2)
    conv, data = _convert(module, (2, 7, 3), rnn_form)
    (record,) = conv.report.composites
    assert record["status"] == "fused" and record["form"] == rnn_form, record
    ops = litert_op_names(data)
    assert FORM_OPS[rnn_form] in ops, ops
    assert ("UNIDIRECTIONAL_SEQUENCE_LSTM" in ops) == (rnn_form == "fused"), ops
    assert ("WHILE" in ops) == (rnn_form == "loop"), ops
    x = np.random.default_rng(1).standard_normal((2, 7, 3)).astype(np.float32)
    assert_stateless_and_matches(data, lambda x, training: module(x), [x], TOL)


def test_the_default_form_is_the_lstm_familys():
    module = PeepholeLSTM(features=3, units=4, seed=3)
    conv, data = _convert(module, (1, 6, 3), "default")
    assert "WHILE" in litert_op_names(data)  # the LSTM family's default form, docs/rnn.md#forms


def test_the_numpy_reference_is_the_tensorflow_cell():
    module = PeepholeLSTM(features=3, units=5, return_sequences=True, seed=4)
    x = np.random.default_rng(5).standard_normal((2, 7, 3)).astype(np.float32)
    seq, _, _ = numpy_peephole_lstm(x, module.kernel.numpy(), module.recurrent_kernel.numpy(), module.bias.numpy(),
                                    [module.w_ci.numpy(), module.w_cf.numpy(), module.w_co.numpy()])
    np.testing.assert_allclose(seq.transpose(1, 0, 2), module(x).numpy(), atol=1e-5)
