"""keras-hub text backbones (tiny configs built in-process, random weights) through ``from_keras_model``: dict
inputs ({'token_ids', 'padding_mask'[, 'segment_ids']}), batch and sequence length left dynamic. Each converts to
builtins only (no WHILE, no custom op) and matches Keras within 1e-4 at several batch sizes and lengths, padding
included (issue 17: every keras-hub text backbone was blocked by einsums with more than one dynamic dimension)."""

from __future__ import annotations

import keras_hub  # a test dependency (pyproject's test extras)
import numpy as np
import pytest
from conftest import litert_op_names

import fuselite
from fuselite.runtime import run

TOL = 1e-4
TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32)
BACKBONES = {
    "BertBackbone": dict(TINY, max_sequence_length=16),
    "GPT2Backbone": dict(TINY, max_sequence_length=16),  # causal attention
    "DistilBertBackbone": dict(TINY, max_sequence_length=16),
}


def _feeds(model, batch: int, length: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), np.int32)
    mask[0, length - 2:] = 0  # the first row padded at the end
    feeds = {"token_ids": rng.integers(1, 50, (batch, length)).astype(np.int32) * mask, "padding_mask": mask}
    if "segment_ids" in model.input:
        feeds["segment_ids"] = (rng.random((batch, length)) < 0.5).astype(np.int32)
    return feeds


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_keras_hub_backbone_with_dynamic_length(name):
    import keras

    keras.utils.set_random_seed(0)
    model = getattr(keras_hub.models, name)(**BACKBONES[name])
    data = fuselite.Converter.from_keras_model(model).convert()
    ops = litert_op_names(data)
    assert "WHILE" not in ops and not [o for o in ops if o.startswith("CUSTOM")], ops
    for batch, length, seed in [(1, 7, 0), (2, 12, 1)]:
        feeds = _feeds(model, batch, length, seed)
        want = model({k: v.astype(model.input[k].dtype) for k, v in feeds.items()})
        want = want["sequence_output"] if isinstance(want, dict) else want
        got = run(data, feeds)
        (out,) = [v for v in got.values() if v.shape == tuple(np.shape(want))][:1]
        np.testing.assert_allclose(out, np.asarray(want), atol=TOL * max(1.0, float(np.abs(want).max())))
