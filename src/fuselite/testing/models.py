"""Small reference models, built in-process with random weights (no downloads).

Every builder takes the Keras flavour to use (``keras`` for Keras 3, ``tf_keras`` for
tf-keras) so the same architecture is exercised through both. Weights are seeded.

Example::

    import keras
    model = build("mlp", keras)
"""

from __future__ import annotations

import numpy as np


def keras3():
    import keras

    return keras


def tf_keras():
    import tf_keras

    return tf_keras


def mlp(k):
    L = k.layers
    i = k.Input((32,), name="features")
    x = L.Dense(64, activation="relu")(i)
    x = L.Dense(64, activation="gelu" if _has_gelu(k) else "tanh")(x)
    x = L.Dense(10, activation="softmax")(x)
    return k.Model(i, x, name="mlp")


def cnn(k):
    """Conv + BatchNorm + depthwise conv + pooling."""
    L = k.layers
    i = k.Input((32, 32, 3), name="image")
    x = L.Conv2D(16, 3, padding="same", use_bias=False)(i)
    x = L.BatchNormalization()(x)
    x = L.ReLU()(x)
    x = L.DepthwiseConv2D(3, padding="same")(x)
    x = L.BatchNormalization()(x)
    x = L.ReLU(6.0)(x)
    x = L.MaxPooling2D(2)(x)
    x = L.Conv2D(32, 3, strides=2, padding="valid", activation="relu")(x)
    x = L.AveragePooling2D(2)(x)
    x = L.Flatten()(x)
    x = L.Dense(10)(x)
    return k.Model(i, x, name="cnn")


def mobilenet_v2(k):
    return k.applications.MobileNetV2(alpha=0.35, input_shape=(96, 96, 3), weights=None, classes=10)


def resnet_block(k):
    L = k.layers
    i = k.Input((16, 16, 8), name="image")
    x = L.Conv2D(8, 3, padding="same")(i)
    x = L.BatchNormalization()(x)
    x = L.Activation("relu")(x)
    x = L.Conv2D(8, 3, padding="same")(x)
    x = L.BatchNormalization()(x)
    x = L.Add()([x, i])
    x = L.Activation("relu")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(4)(x)
    return k.Model(i, x, name="resnet_block")


def transformer_block(k):
    L = k.layers
    i = k.Input((16, 32), name="tokens")
    a = L.MultiHeadAttention(num_heads=4, key_dim=8)(i, i)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([i, a]))
    f = L.Dense(64, activation="relu")(x)
    f = L.Dense(32)(f)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, f]))
    return k.Model(i, x, name="transformer_block")


def text_model(k):
    L = k.layers
    i = k.Input((20,), dtype="int32", name="token_ids")
    x = L.Embedding(1000, 16)(i)
    x = L.GlobalAveragePooling1D()(x)
    x = L.Dense(16, activation="relu")(x)
    x = L.Dense(1, activation="sigmoid")(x)
    return k.Model(i, x, name="text_model")


def lstm_64(k):
    """LSTM(64) over 50 steps of 32 features (the issue's reference RNN)."""
    i = k.Input((50, 32), name="sequence")
    return k.Model(i, k.layers.LSTM(64)(i), name="lstm_64")


def lstm_sequence(k):
    """LSTM(64) returning the full sequence."""
    i = k.Input((50, 32), name="sequence")
    return k.Model(i, k.layers.LSTM(64, return_sequences=True)(i), name="lstm_sequence")


def stacked_lstm(k):
    i = k.Input((50, 32), name="sequence")
    x = k.layers.LSTM(64, return_sequences=True)(i)
    x = k.layers.LSTM(64, return_sequences=True)(x)
    return k.Model(i, k.layers.LSTM(32)(x), name="stacked_lstm")


def bidirectional_lstm(k):
    i = k.Input((50, 32), name="sequence")
    return k.Model(i, k.layers.Bidirectional(k.layers.LSTM(64, return_sequences=True))(i), name="bidirectional_lstm")


def simple_rnn(k):
    i = k.Input((50, 32), name="sequence")
    return k.Model(i, k.layers.SimpleRNN(64)(i), name="simple_rnn")


def gru(k):
    i = k.Input((50, 32), name="sequence")
    return k.Model(i, k.layers.GRU(64)(i), name="gru")


def text_lstm(k, masked: bool = False):
    """Embedding -> LSTM -> Dense text classifier; ``masked``: over padded sequences (Embedding(mask_zero=True),
    token 0 masked)."""
    i = k.Input((40,), dtype="int32", name="token_ids")
    x = k.layers.Embedding(1000, 32, mask_zero=masked)(i)
    x = k.layers.LSTM(64)(x)
    return k.Model(i, k.layers.Dense(4, activation="softmax")(x), name="masked_text_lstm" if masked else "text_lstm")


def stateful_lstm(k):
    """LSTM(64), stateful (batch 1): its state carries from one invoke to the next."""
    i = k.Input((50, 32), batch_size=1, name="sequence")
    return k.Model(i, k.layers.LSTM(64, stateful=True)(i), name="stateful_lstm")


def keyword_spotter(k):
    """A Conv1D + GRU keyword spotter over 49 frames of 40 log-mel features (12 keywords)."""
    L = k.layers
    i = k.Input((49, 40), name="frames")
    x = L.Conv1D(32, 5, strides=2, activation="relu")(i)
    x = L.GRU(32)(x)
    return k.Model(i, L.Dense(12, activation="softmax")(x), name="keyword_spotter")


def text_bilstm(k):
    """Embedding + Bidirectional LSTM text classifier (Keras' own IMDB example, small)."""
    L = k.layers
    i = k.Input((40,), dtype="int32", name="token_ids")
    x = L.Embedding(1000, 32)(i)
    x = L.Bidirectional(L.LSTM(32))(x)
    return k.Model(i, L.Dense(2, activation="softmax")(x), name="text_bilstm")


def stateful_gru(k):
    """GRU(32), stateful (batch 1), over 20 steps of 8 features."""
    i = k.Input((20, 8), batch_size=1, name="sequence")
    return k.Model(i, k.layers.GRU(32, stateful=True)(i), name="stateful_gru")


BUILDERS = {
    "mlp": mlp, "cnn": cnn, "mobilenet_v2": mobilenet_v2, "resnet_block": resnet_block,
    "transformer_block": transformer_block, "text_model": text_model,
}
RNN_BUILDERS = {
    "lstm_64": lstm_64, "lstm_sequence": lstm_sequence, "stacked_lstm": stacked_lstm,
    "bidirectional_lstm": bidirectional_lstm,
    "simple_rnn": simple_rnn, "gru": gru, "text_lstm": text_lstm,
}
# masked: the recurrent forms benchmark's padded model (benchmarks/rnn_forms.py)
MASKED_BUILDERS = {"masked_text_lstm": lambda k: text_lstm(k, masked=True)}
# stateful: outputs depend on earlier invokes (not in the stateless model sweeps)
STATEFUL_BUILDERS = {"stateful_lstm": stateful_lstm, "stateful_gru": stateful_gru}
# the models people put on phones that LiteRT's accelerators are measured on (benchmarks/accelerators.py,
# docs/accelerators.md); INTEGER_ACCELERATOR_MODELS: those also converted to int8 there
ACCELERATOR_BUILDERS = {
    "mlp": mlp, "cnn": cnn, "mobilenet_v2": mobilenet_v2, "transformer_block": transformer_block,
    "lstm_sequence": lstm_sequence, "lstm_last_step": lstm_64, "bidirectional_lstm": bidirectional_lstm,
    "keyword_spotter": keyword_spotter, "simple_rnn": simple_rnn, "text_bilstm": text_bilstm,
    "stateful_gru": stateful_gru,
}
INTEGER_ACCELERATOR_MODELS = ("mlp", "cnn", "mobilenet_v2", "lstm_last_step", "keyword_spotter")
# max abs error allowed against TF eager (issue acceptance)
TOLERANCE = {"mobilenet_v2": 1e-4, "transformer_block": 1e-4}


def _has_gelu(k) -> bool:
    try:
        k.activations.get("gelu")
        return True
    except Exception:
        return False


def build(name: str, k, seed: int = 0):
    """Build model ``name`` with Keras flavour ``k``, seeded and with non-trivial BN stats."""
    k.utils.set_random_seed(seed)
    model = {**BUILDERS, **RNN_BUILDERS, **MASKED_BUILDERS, **STATEFUL_BUILDERS, **ACCELERATOR_BUILDERS}[name](k)
    _randomize_batchnorm(model, seed)
    return model


def _randomize_batchnorm(model, seed: int) -> None:
    """Give BatchNorm layers non-identity statistics so that folding is really tested."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if type(layer).__name__ == "BatchNormalization":
            weights = layer.get_weights()
            new = []
            for w in weights:
                new.append(rng.uniform(0.5, 1.5, w.shape).astype(w.dtype))
            layer.set_weights(new)


def sample_inputs(model, batch: int = 1, seed: int = 0) -> list[np.ndarray]:
    """Random inputs matching the model's input specs."""
    rng = np.random.default_rng(seed)
    out = []
    for t in model.inputs:
        shape = [batch if d is None else d for d in t.shape]
        dtype = np.dtype(str(t.dtype).replace("<dtype: '", "").replace("'>", ""))
        if dtype.kind in "iu":
            ids = rng.integers(0, 1000, shape).astype(dtype)
            if model.name.startswith("masked"):  # padded at the end, a quarter of the tokens
                ids[..., -(shape[-1] // 4):] = 0
            out.append(ids)
        else:
            out.append(rng.standard_normal(shape).astype(dtype))
    return out


def text_tokens(vocabulary: list[str], length: int):
    """A Keras 3 layer: raw strings -> word ids (0 padding, 1 out of vocabulary, then the vocabulary's), ``length``
    per row, from tensorflow-text's whitespace tokenizer and a static table: TextVectorization(split="whitespace",
    standardize=None) with kernels LiteRT can load (tensorflow-text's, ``fuselite/ops/text_kernels.py``)."""
    import keras
    import tensorflow as tf
    import tensorflow_text as tft

    class Tokens(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.tokenizer = tft.WhitespaceTokenizer()
            self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant(vocabulary), tf.range(2, len(vocabulary) + 2, dtype=tf.int64)), 1)

        def call(self, s):
            ids = tf.ragged.map_flat_values(self.table.lookup, self.tokenizer.tokenize(s))
            return ids.to_tensor(default_value=0, shape=[None, length])

    return Tokens()
