"""Conversions from several threads at once: no hang, the same models as sequentially (issue 13).

The Keras frontend replaces each recurrent layer's ``call`` while it traces; two threads
converting one model used to wrap each other's replacement, recursively, and never finish.
The converting threads run with a time limit: a hang is a failure, not a stuck suite.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import keras_flavour

import fuselite
from fuselite.runtime import run
from fuselite.testing import models as zoo

LIMIT_S = 120  # each conversion takes well under a second alone


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_same_model_converted_from_four_threads_at_once(flavour):
    k = keras_flavour(flavour)
    k.utils.set_random_seed(0)
    i = k.Input((12, 8))
    x = k.layers.LSTM(16, return_sequences=True)(i)
    model = k.Model(i, k.layers.Bidirectional(k.layers.SimpleRNN(8))(x))
    sample = zoo.sample_inputs(model, seed=3)
    want = np.asarray(model(sample[0]))
    start = threading.Barrier(4)

    def convert(_):
        start.wait(timeout=LIMIT_S)
        conv = fuselite.Converter.from_keras_model(model)
        data = conv.convert()
        return data, conv.report.ops_after

    pool = ThreadPoolExecutor(4)
    try:
        results = [f.result(timeout=LIMIT_S) for f in [pool.submit(convert, n) for n in range(4)]]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    sequential = fuselite.Converter.from_keras_model(model)
    sequential.convert()
    for data, ops in results:
        assert ops == sequential.report.ops_after  # fused as alone (UNIDIRECTIONAL_SEQUENCE_LSTM, ...)
        got = list(run(data, sample).values())[0]
        assert np.abs(got - want).max() <= 1e-5


def test_the_model_keeps_its_own_behaviour_in_other_threads_while_it_is_converted():
    """A thread calling the model while another converts it runs Keras' own layers, not fuselite's tracing."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((12, 8))
    model = k.Model(i, k.layers.LSTM(16)(i))
    x = zoo.sample_inputs(model, seed=4)[0]
    want = np.asarray(model(x))
    stop = threading.Event()
    seen = []

    def use():
        while not stop.is_set():
            seen.append(float(np.abs(np.asarray(model(x)) - want).max()))

    user = threading.Thread(target=use)
    user.start()
    try:
        for _ in range(3):
            fuselite.Converter.from_keras_model(model).convert()
    finally:
        stop.set()
        user.join(timeout=LIMIT_S)
    assert seen and max(seen) <= 1e-6
    assert "call" not in model.layers[1].__dict__  # nothing left behind on the layer
