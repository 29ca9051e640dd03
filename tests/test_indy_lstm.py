"""IndyLSTM composites (``indy_lstm_<uuid>``) -> one ``UNIDIRECTIONAL_SEQUENCE_LSTM`` with diagonal recurrent
weights, as the official converter's prepare-composites stage fuses them (issue 17).

An IndyLSTM is Keras' LSTM whose recurrent kernel is diagonal per gate: the composite takes it as
``[units, 4]`` (one column per gate i, f, c, o). The body here builds the full ``[units, 4 units]``
kernel from it (``MatrixDiag`` + concat, as in the official converter's test) and runs tf-keras'
``standard_lstm``. Results are compared with TensorFlow on stock LiteRT within 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

import fuselite
from fuselite.runtime import run

TOL = 1e-5


def _indy_model(time_major: bool, go_backwards: bool, return_sequences: bool, implements="indy_lstm_test",
                features: int = 3, units: int = 4):
    import tensorflow as tf
    from tf_keras.src.layers.rnn.lstm import standard_lstm

    rng = np.random.default_rng(3)
    t, b, f, u = 5, 2, features, units
    k = tf.constant(rng.standard_normal((f, 4 * u)).astype(np.float32) * 0.5)
    rk = tf.constant(rng.standard_normal((u, 4)).astype(np.float32))
    bias = tf.constant(rng.standard_normal(4 * u).astype(np.float32) * 0.5)
    attributes = {"api_implements": implements, "time_major": time_major, "go_backwards": go_backwards}

    @tf.function(autograph=False, experimental_attributes=attributes)
    def indy(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
        diagonals = tf.linalg.diag(tf.transpose(recurrent_kernel))  # [4, u, u]
        full = tf.concat(tf.unstack(diagonals), axis=1)  # [u, 4u]
        return standard_lstm(inputs, init_h, init_c, kernel, full, bias, None, time_major, go_backwards, None,
                             False, return_sequences)

    shape = [t, b, f] if time_major else [b, t, f]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32), tf.TensorSpec([b, u], tf.float32)])
    def model(x, h0):
        last, outputs, h, c, _ = indy(x, h0, tf.zeros([b, u]), k, rk, bias)
        return {"last": last, "outputs": outputs, "h": h, "c": c}

    xs = [rng.standard_normal(shape).astype(np.float32), rng.standard_normal((b, u)).astype(np.float32)]
    return model, xs


def _lstm_ops(data: bytes) -> list:
    m = schema.ModelT.InitFromPackedBuf(data, 0)
    sg = m.subgraphs[0]
    kinds = {i: c.builtinCode for i, c in enumerate(m.operatorCodes)}
    return [(op, sg, m) for op in sg.operators
            if kinds[op.opcodeIndex] == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM]


@pytest.mark.parametrize("flags", [(False, False, True), (True, False, False), (False, True, False),
                                   (True, True, True)])
def test_indy_lstm_becomes_one_diagonal_sequence_op(flags):
    model, xs = _indy_model(*flags)
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()])
    data = conv.convert()
    (composite,) = conv.report.composites
    assert composite["status"] == "fused", conv.report.composites
    ((lstm, sg, m),) = _lstm_ops(data)
    assert lstm.builtinOptions.diagonalRecurrentTensors
    assert [m.operatorCodes[lstm.opcodeIndex].version] == [4]  # op_version.cc: diagonal -> 4
    recurrent = [list(sg.tensors[i].shape) for i in lstm.inputs[5:9]]
    assert recurrent == [[4]] * 4, recurrent
    assert len(sg.operators) < 15, [m.operatorCodes[o.opcodeIndex].builtinCode for o in sg.operators]
    got = run(data, xs)
    want = {k: np.asarray(v) for k, v in model(*xs).items()}
    for name, w in want.items():
        g = next(v for key, v in got.items() if name in key)
        np.testing.assert_allclose(g, w, atol=TOL, err_msg=name)


def test_indy_lstm_whose_body_is_a_full_lstm_is_declined_and_still_right():
    """A body that does not use the kernel as diagonals (here: an ``indy_lstm_*`` name on a plain LSTM
    whose recurrent kernel happens to be [units, 4]) must not be fused as one."""
    import tensorflow as tf
    from tf_keras.src.layers.rnn.lstm import standard_lstm

    rng = np.random.default_rng(4)
    b, t, f, u = 2, 5, 3, 4
    k = tf.constant(rng.standard_normal((f, 4 * u)).astype(np.float32) * 0.5)
    rk = tf.constant(rng.standard_normal((u, 4)).astype(np.float32))
    bias = tf.constant(np.zeros(4 * u, np.float32))

    @tf.function(autograph=False, experimental_attributes={"api_implements": "indy_lstm_wrong"})
    def not_indy(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
        full = tf.tile(recurrent_kernel, [1, u])  # every unit sees every unit: not diagonal
        return standard_lstm(inputs, init_h, init_c, kernel, full, bias, None, False, False, None, False, True)

    @tf.function(input_signature=[tf.TensorSpec([b, t, f], tf.float32)])
    def model(x):
        return not_indy(x, tf.zeros([b, u]), tf.zeros([b, u]), k, rk, bias)[1]

    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()])
    data = conv.convert()
    indy = [r for r in conv.report.composites if r["interface"] == "indy_lstm_wrong"]
    assert indy and indy[0]["status"] == "declined" and "did not reproduce" in indy[0]["reason"], \
        conv.report.composites
    assert not any(op[0].builtinOptions.diagonalRecurrentTensors for op in _lstm_ops(data))
    x = rng.standard_normal((b, t, f)).astype(np.float32)
    (got,) = run(data, [x]).values()
    np.testing.assert_allclose(got, model(x), atol=TOL)


def _quantized(model, xs, mode: str, keep_float=()):
    import tensorflow as tf

    # the fused op's quantized forms (LiteRT's integer LSTM kernel): the Interpreter's
    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], litert_api="interpreter")
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.keep_float = list(keep_float)
    if mode == "int8":
        rng = np.random.default_rng(0)
        conv.representative_dataset = lambda: ([x * rng.uniform(0.5, 1.5) for x in xs] for _ in range(16))
    data = conv.convert()
    got = run(data, xs)
    want = {k: np.asarray(v) for k, v in model(*xs).items()}
    errors = {k: float(np.abs(got[k] - w).max() / (w.max() - w.min())) for k, w in want.items()}
    return conv, errors


def test_indy_lstm_dynamic_range_keeps_the_diagonals_float():
    """The hybrid kernel reads diagonal recurrent weights as float (lstm_eval.cc, recurrent_to_gate_diag):
    int8 diagonals gave NaN. 32 units over 32 features: input weights of 1024 elements, so the op is quantized
    (a smaller one stays float32, as TF's converter leaves it)."""
    model, xs = _indy_model(False, False, True, features=32, units=32)
    conv, errors = _quantized(model, xs, "dynamic")
    (rec,) = [r for r in conv.report.quantization["ops"] if "unidirectional_sequence_lstm" in r["op"]]
    assert rec["mode"] != "float", rec
    assert max(errors.values()) < 0.02, errors  # measured 0.2% of each output's range


def test_indy_lstm_int8_keeps_the_lstm_float_and_its_state_read_after_it():
    """LiteRT's integer LSTM kernel has no diagonal form: the op stays float, with the reason; the cell state
    read after it stays float too (a QUANTIZE of the state was ordered before the op: c came out zero)."""
    model, xs = _indy_model(False, False, True)
    conv, errors = _quantized(model, xs, "int8")
    ops = conv.report.quantization["ops"]
    (rec,) = [r for r in ops if "unidirectional_sequence_lstm" in r["op"]]
    assert rec["mode"] == "float" and "diagonal" in rec["reason"], rec
    assert any(r["mode"] == "int8" for r in ops), ops
    assert max(errors.values()) < 0.03, errors  # measured 0.6% of each output's range (c's range 1.3)


def test_lstm_kept_float_returns_its_cell_state_in_an_int8_model():
    """A plain LSTM kept float by keep_float, with return_state: its states come out right in an int8 model."""
    import tensorflow as tf

    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(1)
    i = keras.Input((6, 3), batch_size=2)
    seq, h, c = keras.layers.LSTM(5, return_sequences=True, return_state=True, name="lstm")(i)
    net = keras.Model(i, [seq, h, c])
    fn = tf.function(lambda x: dict(zip(("seq", "h", "c"), net(x))),
                     input_signature=[tf.TensorSpec([2, 6, 3], tf.float32)])
    xs = [np.random.default_rng(2).standard_normal((2, 6, 3)).astype(np.float32)]
    conv, errors = _quantized(fn, xs, "int8", keep_float=["UNIDIRECTIONAL_SEQUENCE_LSTM"])
    assert max(errors.values()) < 0.03, errors
