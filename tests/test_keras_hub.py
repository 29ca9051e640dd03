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


# backbones that needed a lowering of their own (issue 42): sliding-window masks from the length (Gemma 3, Qwen 3:
# MatrixBandPart with computed bounds), shifted windows (Swin: Roll), rotary frequencies (RoFormer v2: an einsum
# with an ellipsis), relative positions (DeBERTa v3: int64 Abs and Sign), Fourier token mixing (FNet: the real part
# of FFT2D of a real tensor)
_SMALL = dict(vocabulary_size=50, num_layers=2, hidden_dim=16, intermediate_dim=32)
MORE = {
    "FNetBackbone": dict(_SMALL, max_sequence_length=16),
    "RoformerV2Backbone": dict(_SMALL, num_heads=2, head_size=8),
    "DebertaV3Backbone": dict(_SMALL, num_heads=2, max_sequence_length=16, bucket_size=4),
    "Gemma3Backbone": dict(_SMALL, image_size=16, num_query_heads=2, num_key_value_heads=1, head_dim=8,
                           use_sliding_window_attention=True, sliding_window_size=4),
    "Qwen3Backbone": dict(_SMALL, num_query_heads=2, num_key_value_heads=1, head_dim=8, sliding_window_size=4),
    "SwinTransformerBackbone": dict(image_shape=(32, 32, 3), embed_dim=16, depths=[2], num_heads=[2], window_size=4,
                                    patch_size=4),
}


def _inputs(model, batch: int, length: int, seed: int):
    """Feeds for any backbone: token ids, masks and segments for a text one (the first row padded), an image."""
    rng = np.random.default_rng(seed)
    specs = model.input if isinstance(model.input, dict) else {"x": model.input}
    feeds = {}
    for key, t in specs.items():
        shape = [batch if i == 0 else (length if d is None else d) for i, d in enumerate(t.shape)]
        if "int" in str(t.dtype):
            v = rng.integers(1, 50, shape) if "token" in key else np.ones(shape) if "mask" in key else \
                rng.integers(0, 2, shape)
            if "mask" in key:
                v[0, -2:] = 0
            feeds[key] = v.astype(np.int32)
        else:
            feeds[key] = rng.standard_normal(shape).astype(np.float32)
    return feeds if isinstance(model.input, dict) else feeds["x"]


@pytest.mark.parametrize("name", sorted(MORE))
def test_keras_hub_backbones_with_ops_of_their_own(name):
    """Each converts with its batch and length (or image) left dynamic and gives Keras' numbers, every output,
    at two shapes, on both LiteRT kernel sets; a dict of outputs keeps its keys as the signature's names."""
    import keras

    keras.utils.set_random_seed(0)
    model = getattr(keras_hub.models, name)(**MORE[name])
    data = fuselite.Converter.from_keras_model(model).convert()
    for batch, length, seed in [(1, 7, 0), (2, 12, 1)]:
        feeds = _inputs(model, batch, length, seed)
        want = model(feeds)
        want = {k: np.asarray(v) for k, v in want.items()} if isinstance(want, dict) else {None: np.asarray(want)}
        for builtin in (False, True):
            got = run(data, feeds if isinstance(feeds, dict) else [feeds], builtin_kernels=builtin)
            if None not in want:
                assert sorted(got) == sorted(want), (sorted(got), sorted(want))
            for key, w in want.items():
                g = got[key] if key is not None else next(iter(got.values()))
                np.testing.assert_allclose(g, w, atol=TOL * max(1.0, float(np.abs(w).max())))


def test_dict_outputs_keep_the_models_keys():
    """A backbone's dict outputs are the signature's output names, as Keras' export names them (not the layers
    that produce them: pooled_dense, dropout_1)."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras_hub.models.BertBackbone(**BACKBONES["BertBackbone"])
    from fuselite.inspect import describe

    outputs = describe(fuselite.Converter.from_keras_model(model).convert())["signatures"]["serving_default"]["outputs"]
    assert sorted(o["name"] for o in outputs) == ["pooled_output", "sequence_output"], outputs


def test_causal_decoder_16x8_is_no_worse_than_int8():
    """GPT-2 (causal, padded): its masked softmax's -1e9 fill no longer takes the logits' range, so widening to
    16x8 brings the error down instead of up (of the output's range, before: int8 1.28%, 16x8 10.4%; after: int8
    1.28%, 16x8 0.42%). Bounds: int8 5% (the issue's bar), 16x8 at most int8's, on both kernel sets."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras_hub.models.GPT2Backbone(**BACKBONES["GPT2Backbone"])
    calibration = [_feeds(model, 1, 8, seed) for seed in range(100, 116)]
    feeds = _feeds(model, 1, 8, 0)
    want = np.asarray(model(feeds))
    errors = {}
    for mode, ops in (("int8", "TFLITE_BUILTINS_INT8"),
                      ("16x8", "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8")):
        conv = fuselite.Converter.from_keras_model(model)
        conv.optimizations = ["DEFAULT"]
        conv.representative_dataset = lambda: iter(calibration)
        conv.target_spec.supported_ops = [ops]
        data = conv.convert()
        errors[mode] = max(float(np.abs(next(iter(run(data, feeds, builtin_kernels=b).values())) - want).max())
                           for b in (False, True)) / float(np.ptp(want))
    assert errors["int8"] <= 0.05 and errors["16x8"] <= errors["int8"], errors


def test_gpt2_causal_lm_prefill_and_decode_with_its_cache():
    """keras-hub's ``call_with_cache`` traced as a prefill of 8 tokens and a decode of 1: its cache updates are
    XlaDynamicUpdateSlice (refused before: 'no lowering for TF op XlaDynamicUpdateSlice'), now LiteRT's
    DYNAMIC_UPDATE_SLICE. Both signatures in one file, one buffer per weight; logits and the updated cache match
    TF within 1e-4 of their range (measured 1.6e-7 / 1.8e-7 prefill, 1.9e-7 / 1.3e-7 decode)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(**dict(TINY, max_sequence_length=16))
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    cache_shape = (1, 2, 2, 16, 2, 8)  # batch, layers, key / value, length, heads, head size

    def step(length):
        @tf.function(input_signature=[tf.TensorSpec((1, length), tf.int32), tf.TensorSpec(cache_shape, tf.float32),
                                      tf.TensorSpec((), tf.int32)])
        def fn(tokens, cache, index):
            logits, _, cache = lm.call_with_cache(tokens, cache, index)
            return {"logits": logits, "cache": cache}
        return fn

    prefill, decode = step(8), step(1)
    conv = fuselite.Converter.from_concrete_functions([prefill.get_concrete_function(),
                                                       decode.get_concrete_function()])
    data = conv.convert()
    assert "DYNAMIC_UPDATE_SLICE" in litert_op_names(data)
    from ai_edge_litert.interpreter import Interpreter

    keys = list(Interpreter(model_content=data).get_signature_list())
    assert len(keys) == 2, keys
    from ai_edge_litert import schema_py_generated as schema

    weights = sum(w.numpy().nbytes for w in lm.weights if w.numpy().nbytes >= 1024)
    m = schema.Model.GetRootAs(data, 0)
    held = sum(m.Buffers(i).DataLength() for i in range(m.BuffersLength()) if m.Buffers(i).DataLength() >= 1024)
    assert weights <= held < 1.2 * weights, (held, weights)  # each weight once, read by both signatures
    rng = np.random.default_rng(0)
    tokens, cache, index = rng.integers(0, 50, (1, 8)).astype(np.int32), np.zeros(cache_shape, np.float32), 0
    for fn, signature in ((prefill, 0), (decode, 1)):
        want = {k: v.numpy() for k, v in fn(tf.constant(tokens), tf.constant(cache), tf.constant(index)).items()}
        for builtin in (False, True):
            got = run(data, {"tokens": tokens, "cache": cache, "index": np.array(index, np.int32)}, keys[signature],
                      builtin_kernels=builtin)
            for key, value in want.items():
                assert np.abs(got[key] - value).max() <= TOL * np.ptp(value), (key, builtin)
        tokens, cache, index = rng.integers(0, 50, (1, 1)).astype(np.int32), want["cache"], 8
