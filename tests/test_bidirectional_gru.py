"""Bidirectional(GRU): no LiteRT op, so both directions are unrolled into builtins (no WHILE loop) or each a loop
(rnn_form="loop", the default: a WHILE without TensorLists per direction), the backward states put back in time order; every merge mode, sequences or last step, return_state, reset_after both ways,
Keras 3 and tf-keras: within 1e-5 of Keras on LiteRT, and stateless."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import run

TOL = 1e-5


def _model(k, merge_mode, sequences, state=False, reset_after=True):
    k.utils.set_random_seed(0)
    i = k.Input((7, 5), batch_size=2)
    y = k.layers.Bidirectional(k.layers.GRU(6, return_sequences=sequences, return_state=state,
                                            reset_after=reset_after), merge_mode=merge_mode)(i)
    return k.Model(i, list(y) if isinstance(y, (list, tuple)) else y)


def _check(model, form):
    data = fuselite.Converter.from_keras_model(model, rnn_form=form).convert()
    ops = litert_op_names(data)
    assert ops.count("WHILE") == (2 if form == "loop" else 0) and "FULLY_CONNECTED" in ops, ops
    x = np.random.default_rng(3).standard_normal((2, 7, 5)).astype(np.float32)
    want = model(x)
    want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
    got = list(run(data, [x]).values())
    again = list(run(data, [x]).values())
    assert len(got) == len(want)
    for w in want:  # signature order may differ from Keras': pair by closeness
        assert min(float(np.abs(g - w).max()) for g in got if g.shape == w.shape) <= TOL
    assert all(np.array_equal(a, b) for a, b in zip(got, again))


@pytest.mark.parametrize("form", ["unrolled", "loop"])
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "ave", "mul", None])
@pytest.mark.parametrize("sequences", [True, False])
def test_bidirectional_gru_every_merge_mode(merge_mode, sequences, form):
    _check(_model(keras_flavour("keras3"), merge_mode, sequences), form)


@pytest.mark.parametrize("form", ["unrolled", "loop"])
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("reset_after", [True, False])
def test_bidirectional_gru_flavours_states_and_reset_after(flavour, reset_after, form):
    _check(_model(keras_flavour(flavour), "concat", True, state=True, reset_after=reset_after), form)
