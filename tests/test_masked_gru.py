"""A masked GRU (Embedding(mask_zero=True) -> GRU, every padded text model) without a loop: the unrolled GRU
keeps the state and repeats the previous output at masked steps, as Keras does, for any mask (right and left
padding, holes); within 1e-5 of Keras on LiteRT, no WHILE."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import run

TOL = 1e-5
TOKENS = np.array([[5, 3, 9, 4, 0, 0, 0, 0],      # right padding
                   [0, 0, 0, 7, 2, 8, 1, 6],      # left padding
                   [4, 0, 6, 0, 0, 3, 0, 2]], np.int32)  # holes


def _model(k, **gru):
    k.utils.set_random_seed(0)
    i = k.Input((8,), dtype="int32", batch_size=3)
    x = k.layers.Embedding(20, 6, mask_zero=True)(i)
    y = k.layers.GRU(5, **gru)(x)
    return k.Model(i, list(y) if isinstance(y, (list, tuple)) else y)


def _check_unrolled(model):
    """Fused (no loop, SELECT_V2 per step) and within TOL of Keras on every output."""
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    ops = litert_op_names(data)
    assert "WHILE" not in ops and "SELECT_V2" in ops, ops
    assert all(r["status"] == "fused" for r in conv.report.composites), conv.report.composites
    want = model(TOKENS)
    want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
    got = list(run(data, [TOKENS]).values())
    assert len(got) == len(want)
    for w in want:  # pair by closeness (signature order may differ)
        assert min(float(np.abs(g - w).max()) for g in got if g.shape == w.shape) <= TOL


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("gru", [{}, {"return_sequences": True}, {"return_state": True}, {"go_backwards": True},
                                 {"return_sequences": True, "go_backwards": True}, {"reset_after": False}],
                         ids=["last", "sequences", "state", "backwards", "sequences_backwards", "reset_before"])
def test_masked_gru_without_a_loop(flavour, gru):
    k = keras_flavour(flavour)
    model = _model(k, **gru)
    _check_unrolled(model)


def test_masked_gru_runs_on_tflite_micro():
    """The per-step mask is unstacked as float32 (TFLite Micro's UNPACK takes no bool): the micro target
    converts it and runs it on TFLM's interpreter while converting."""
    k = keras_flavour("keras3")
    conv = fuselite.Converter.from_keras_model(_model(k), target="micro")
    conv.convert()
    assert conv.report.micro["runs"] and conv.report.micro.get("ran"), conv.report.micro


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "SimpleRNN"])
@pytest.mark.parametrize("options", [{}, {"return_sequences": True}, {"return_state": True}, {"go_backwards": True}],
                         ids=["last", "sequences", "state", "backwards"])
def test_masked_lstm_and_simple_rnn_without_a_loop(flavour, layer, options):
    """The same for LSTM and SimpleRNN (fusion/masked_rnn.py): unrolled builtins, SELECT_V2 per step."""
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    i = k.Input((8,), dtype="int32", batch_size=3)
    y = getattr(k.layers, layer)(5, **options)(k.layers.Embedding(20, 6, mask_zero=True)(i))
    model = k.Model(i, list(y) if isinstance(y, (list, tuple)) else y)
    _check_unrolled(model)


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("layer", ["LSTM", "GRU", "SimpleRNN"])
@pytest.mark.parametrize("options", [{"merge_mode": "concat"}, {"merge_mode": "sum", "sequences": True},
                                     {"merge_mode": "concat", "state": True}], ids=["concat", "sum_sequences", "state"])
def test_masked_bidirectional_without_a_loop(flavour, layer, options):
    """Bidirectional over a mask: both directions unrolled with it, the backward one's outputs back in time order."""
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    i = k.Input((8,), dtype="int32", batch_size=3)
    cell = getattr(k.layers, layer)(5, return_sequences=options.get("sequences", False),
                                    return_state=options.get("state", False))
    y = k.layers.Bidirectional(cell, merge_mode=options["merge_mode"])(k.layers.Embedding(20, 6, mask_zero=True)(i))
    model = k.Model(i, list(y) if isinstance(y, (list, tuple)) else y)
    _check_unrolled(model)
