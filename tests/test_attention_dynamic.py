"""A causal decoder block with batch and sequence length both left open: MultiHeadAttention(use_causal_mask=True)
(einsum with several dynamic dims, band_part of the runtime shape) converts to builtins and matches Keras
within 1e-5 at several batch sizes and lengths."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.runtime import run


@pytest.mark.parametrize("causal", [True, False])
def test_multi_head_attention_with_dynamic_batch_and_length(causal):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((None, 16))
    y = k.layers.MultiHeadAttention(2, 8)(i, i, use_causal_mask=causal)
    model = k.Model(i, k.layers.Dense(4)(k.layers.LayerNormalization()(i + y)))
    data = fuselite.Converter.from_keras_model(model).convert()
    ops = litert_op_names(data)
    assert "WHILE" not in ops and not [o for o in ops if o.startswith("CUSTOM")], ops
    for batch, length in [(1, 5), (2, 9), (3, 1)]:
        x = np.random.default_rng(length).standard_normal((batch, length, 16)).astype(np.float32)
        got = next(iter(run(data, [x]).values()))
        np.testing.assert_allclose(got, np.asarray(model(x)), atol=1e-5)
