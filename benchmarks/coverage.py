#!/usr/bin/env python
"""Coverage: which models each converter turns into a LiteRT model that runs and gives Keras' numbers.

Each case is a model built in-process with random weights (``weights=None``): Keras 3 common layers,
recurrent layers and their wrappers, attention with a dynamic sequence length, an audio front end, dict
inputs, a subclassed model, ``keras.applications`` at small input sizes, tf-keras applications, and
keras-hub backbones in tiny configs (dict inputs, a dynamic sequence length). Each runs in a child process
(a converter or a kernel may crash it): converted with fuselite (``from_keras_model``) and with
``tf.lite.TFLiteConverter.from_keras_model`` (both with defaults), each model run on stock LiteRT (1
thread) on the same inputs as Keras, batch 1. A row says, per converter: converts, runs (prepares and
invokes), max abs error against Keras, ops, and loops (``WHILE``) and non-builtin ops left. A model
"matches" at max abs error <= 1e-4 × max(1, max |Keras output|). Example::

    .venv/bin/python benchmarks/coverage.py --out docs/coverage.md
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import json
import subprocess
import sys
import time

import numpy as np

TOL = 1e-4


def _seq(k, layer, shape=(12, 8), batch=None):
    i = k.Input(shape, batch_size=batch)
    return k.Model(i, layer(i))


def _cases() -> dict:
    """name -> builder(keras) -> model."""

    def mlp(k):
        i = k.Input((32,))
        return k.Model(i, k.layers.Dense(10)(k.layers.Dense(64, activation="relu")(i)))

    def cnn(k):
        i = k.Input((32, 32, 3))
        x = k.layers.MaxPooling2D()(k.layers.Conv2D(16, 3, activation="relu")(i))
        x = k.layers.GlobalAveragePooling2D()(k.layers.Conv2D(32, 3, activation="relu")(x))
        return k.Model(i, k.layers.Dense(10)(x))

    def separable(k):
        i = k.Input((24, 24, 8))
        return k.Model(i, k.layers.ReLU()(k.layers.BatchNormalization()(k.layers.SeparableConv2D(16, 3)(i))))

    def small(layer, shape):
        return lambda k: _seq(k, layer(k), shape)

    def layernorm_gelu(k):
        i = k.Input((10, 16))
        return k.Model(i, k.layers.Dense(8, activation="gelu")(k.layers.LayerNormalization()(i)))

    def text_lstm(k, mask=False):
        i = k.Input((20,), dtype="int32")
        x = k.layers.Embedding(100, 16, mask_zero=mask)(i)
        return k.Model(i, k.layers.Dense(2)(k.layers.LSTM(16)(x)))

    def mha(k, causal=True, length=None):
        i = k.Input((length, 16))
        y = k.layers.MultiHeadAttention(2, 8)(i, i, use_causal_mask=causal)
        return k.Model(i, k.layers.Dense(4)(k.layers.LayerNormalization()(i + y)))

    def transformer(k):
        i = k.Input((16, 32))
        x = k.layers.LayerNormalization()(i + k.layers.MultiHeadAttention(4, 8)(i, i))
        f = k.layers.Dense(32)(k.layers.Dense(64, activation="gelu")(x))
        return k.Model(i, k.layers.LayerNormalization()(x + f))

    def stft(k):
        import tensorflow as tf

        i = k.Input((400,))
        spec = k.layers.Lambda(lambda t: tf.abs(tf.signal.stft(t, 64, 32, 64)))(i)
        return k.Model(i, k.layers.Dense(4)(k.layers.Flatten()(spec)))

    def dict_inputs(k):
        ids = k.Input((8,), dtype="int32", name="token_ids")
        mask = k.Input((8,), dtype="int32", name="padding_mask")
        w = k.ops.cast(k.ops.expand_dims(mask, -1), "float32")
        y = k.layers.Dense(2)(k.ops.sum(k.layers.Embedding(50, 8)(ids) * w, axis=1))
        return k.Model({"token_ids": ids, "padding_mask": mask}, y)

    def subclassed(k):
        class Head(k.Model):
            def __init__(self):
                super().__init__()
                self.rnn, self.out = k.layers.GRU(8), k.layers.Dense(3)

            def call(self, x):
                return self.out(self.rnn(x))

        m = Head()
        m(np.zeros((1, 12, 8), np.float32))
        return m

    def activations(k):  # a row of Keras activations, one Dense each
        i = k.Input((16,))
        names = ("relu", "relu6", "elu", "selu", "swish", "hard_swish", "gelu", "leaky_relu", "sigmoid", "tanh",
                 "softsign", "exponential")
        return k.Model(i, k.layers.Concatenate()([k.layers.Dense(4, activation=a)(i) for a in names]))

    def tf_op(fn, shape, dtype="float32"):  # a Lambda around TensorFlow ops, between two Dense layers
        def build(k):
            import tensorflow as tf

            i = k.Input(shape, dtype=dtype)
            return k.Model(i, k.layers.Lambda(lambda t: fn(tf, t))(i))
        return build

    def rescale_normalize(k):
        i = k.Input((16, 16, 3))
        norm = k.layers.Normalization(mean=[0.4, 0.5, 0.6], variance=[0.05, 0.06, 0.07])
        x = norm(k.layers.Rescaling(1 / 255)(i))
        return k.Model(i, k.layers.Conv2D(8, 3)(x))

    def app(name, shape, **kw):
        return lambda k: getattr(k.applications, name)(weights=None, input_shape=shape, include_top=False, **kw)

    def tf_keras_app(name, shape, **kw):  # a tf-keras model (the official converter's home ground)
        return lambda k: app(name, shape, **kw)(__import__("tf_keras"))

    def hub(name, **kw):  # a keras-hub backbone, a tiny config built in-process (dynamic sequence length)
        def build(k):
            import keras_hub

            return getattr(keras_hub.models, name)(**kw)
        return build

    text = dict(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32)

    return {
        "mlp": mlp, "cnn": cnn, "separable_conv_bn": separable,
        "conv1d_dynamic_length": small(lambda k: lambda x: k.layers.Dense(2)(k.layers.Conv1D(8, 3)(x)), (None, 6)),
        "time_distributed_dense": small(lambda k: k.layers.TimeDistributed(k.layers.Dense(8)), (10, 6)),
        "layernorm": small(lambda k: k.layers.LayerNormalization(), (10, 16)),
        "groupnorm": small(lambda k: k.layers.GroupNormalization(groups=4), (8, 8, 8)),
        "upsampling2d": small(lambda k: lambda x: k.layers.Conv2D(4, 3)(k.layers.UpSampling2D()(x)), (8, 8, 4)),
        "upsampling2d_bilinear": small(lambda k: k.layers.UpSampling2D(interpolation="bilinear"), (8, 8, 4)),
        "resizing": small(lambda k: k.layers.Resizing(12, 12), (8, 8, 3)),
        "rescale_normalize": rescale_normalize,
        "activations": activations,
        "prelu": small(lambda k: lambda x: k.layers.PReLU()(k.layers.Dense(8)(x)), (16,)),
        "image_resize": tf_op(lambda tf, t: tf.image.resize(t, (20, 20)), (10, 10, 3)),
        "rfft_front_end": tf_op(lambda tf, t: tf.abs(tf.signal.rfft(t)), (64,)),
        "gather_where_argmax": tf_op(lambda tf, t: tf.where(t > 0, t, tf.gather(t, [3, 2, 1, 0], axis=1))
                                     + tf.cast(tf.expand_dims(tf.argmax(t, axis=1), 1), tf.float32), (4,)),
        "top_k": tf_op(lambda tf, t: tf.math.top_k(t, k=3).values, (16,)),
        "reduce_cumsum": tf_op(lambda tf, t: tf.concat([tf.reduce_max(t, 1, keepdims=True),
                                                        tf.reduce_mean(t, 1, keepdims=True),
                                                        tf.math.cumsum(t, axis=1)], axis=1), (16,)),
        "conv_transpose": small(lambda k: k.layers.Conv2DTranspose(8, 3, strides=2), (8, 8, 4)),
        "conv1d_pool": small(lambda k: lambda x: k.layers.GlobalMaxPooling1D()(k.layers.Conv1D(8, 3)(x)), (20, 4)),
        "grouped_conv": small(lambda k: k.layers.Conv2D(16, 3, groups=4), (10, 10, 8)),
        "depthwise_conv": small(lambda k: k.layers.DepthwiseConv2D(3), (10, 10, 8)),
        "layernorm_gelu": layernorm_gelu,
        "mish": small(lambda k: k.layers.Dense(8, activation="mish"), (16,)),
        "softplus": small(lambda k: k.layers.Dense(8, activation="softplus"), (16,)),
        "lstm": small(lambda k: k.layers.LSTM(32), (12, 8)),
        "lstm_sequence": small(lambda k: k.layers.LSTM(32, return_sequences=True), (12, 8)),
        "stacked_lstm": small(lambda k: lambda x: k.layers.LSTM(16)(k.layers.LSTM(16, return_sequences=True)(x)),
                              (12, 8)),
        "gru": small(lambda k: k.layers.GRU(32), (12, 8)),
        "simple_rnn": small(lambda k: k.layers.SimpleRNN(32), (12, 8)),
        "bidirectional_lstm": small(lambda k: k.layers.Bidirectional(k.layers.LSTM(16)), (12, 8)),
        "bidirectional_gru": small(lambda k: k.layers.Bidirectional(k.layers.GRU(16)), (12, 8)),
        "text_lstm": text_lstm,
        "text_lstm_masked": lambda k: text_lstm(k, mask=True),
        "convlstm2d": small(lambda k: k.layers.ConvLSTM2D(4, 3), (5, 8, 8, 2)),
        "mha_causal_dynamic_length": mha,
        "mha_static": lambda k: mha(k, causal=False, length=10),
        "transformer_block": transformer,
        "stft_front_end": stft,
        "dict_inputs": dict_inputs,
        "subclassed": subclassed,
        "MobileNetV2": app("MobileNetV2", (96, 96, 3), alpha=0.35),
        "EfficientNetB0": app("EfficientNetB0", (64, 64, 3)),
        "DenseNet121": app("DenseNet121", (64, 64, 3)),
        "NASNetMobile": app("NASNetMobile", (64, 64, 3)),
        "ConvNeXtTiny": app("ConvNeXtTiny", (64, 64, 3)),
        "ResNet50": app("ResNet50", (64, 64, 3)),
        "ResNet50V2": app("ResNet50V2", (64, 64, 3)),
        "VGG16": app("VGG16", (64, 64, 3)),
        "InceptionV3": app("InceptionV3", (96, 96, 3)),
        "Xception": app("Xception", (96, 96, 3)),
        "MobileNetV3Small": app("MobileNetV3Small", (96, 96, 3)),
        "EfficientNetV2B0": app("EfficientNetV2B0", (64, 64, 3)),
        "DenseNet169": app("DenseNet169", (64, 64, 3)),
        "tf_keras.MobileNetV2": tf_keras_app("MobileNetV2", (96, 96, 3), alpha=0.35),
        "tf_keras.ResNet50": tf_keras_app("ResNet50", (64, 64, 3)),
        "tf_keras.EfficientNetB0": tf_keras_app("EfficientNetB0", (64, 64, 3)),
        "tf_keras.InceptionV3": tf_keras_app("InceptionV3", (96, 96, 3)),
        "keras_hub.BertBackbone": hub("BertBackbone", **text, max_sequence_length=32),
        "keras_hub.DistilBertBackbone": hub("DistilBertBackbone", **text, max_sequence_length=32),
        "keras_hub.RobertaBackbone": hub("RobertaBackbone", **text, max_sequence_length=32),
        "keras_hub.AlbertBackbone": hub("AlbertBackbone", **{**text, "num_groups": 1, "num_inner_repetitions": 1,
                                                             "embedding_dim": 8}, max_sequence_length=32),
        "keras_hub.ElectraBackbone": hub("ElectraBackbone", vocab_size=100, **{k: v for k, v in text.items()
                                                                             if k != "vocabulary_size"},
                                         embedding_dim=8, max_sequence_length=32),
        "keras_hub.GPT2Backbone": hub("GPT2Backbone", **text, max_sequence_length=32),
        "keras_hub.OPTBackbone": hub("OPTBackbone", **text, max_sequence_length=32),
    }


CASES = list(_cases())
# the rows with recurrent layers: dynamic range's own page (hybrid sequence kernels and FULLY_CONNECTED)
RECURRENT = ["lstm", "lstm_sequence", "stacked_lstm", "gru", "simple_rnn", "bidirectional_lstm", "bidirectional_gru",
             "text_lstm", "text_lstm_masked", "convlstm2d", "subclassed"]


def _input_specs(model) -> list[tuple]:
    """(shape, dtype) per input: the model's inputs, or a subclassed model's build shape."""
    if getattr(model, "inputs", None):
        return [(t.shape, str(t.dtype)) for t in model.inputs]
    (shape,) = model._build_shapes_dict.values()
    return [(shape, "float32")]


def _input_names(model) -> list[str]:
    inputs = getattr(model, "inputs", None) or [None]
    return [str(getattr(t, "name", "")).split(":")[0] for t in inputs]


def _inputs(model, rng) -> list[np.ndarray]:
    xs = []
    for name, (t_shape, t_dtype) in zip(_input_names(model), _input_specs(model)):
        shape = [1] + [d if d is not None else 7 for d in t_shape[1:]]
        if "int" in t_dtype or "bool" in t_dtype:
            # token ids below every tiny vocabulary; masks on; segment ids 0 or 1 (BERT's two types)
            high = {"mask": 1, "segment": 2}.get(next((k for k in ("mask", "segment") if k in name), ""), 20)
            x = np.ones(shape, np.int32) if high == 1 else rng.integers(0, high, shape).astype(np.int32)
            xs.append(x.astype(bool) if "bool" in t_dtype else x)
        else:
            xs.append(rng.standard_normal(shape).astype(np.float32))
    return xs


def _errors(got: list, want: list, spans: list[float] | None = None) -> float:
    """Max abs error over the outputs (paired by shape: signature order may differ); with ``spans``, each
    output's as a share of its span (``_spans``: its range over every test input, not this input's alone: a
    two-value output's own range can be near 0 on one input, dict_inputs' 8.7% was 1.1% of its whole range)."""
    errs = []
    for i, w in enumerate(want):
        cands = [g for g in got if np.shape(g) == np.shape(w)]
        err = min(float(np.abs(np.asarray(g, np.float64) - w).max()) for g in cands) if cands else np.inf
        errs.append(err / max(spans[i], 1e-12) if spans is not None else err)
    return max(errs) if errs else np.inf


def _spans(cases: list) -> list[float]:
    """Each output's range (max - min of the Keras output) over all the test inputs."""
    wants = [w for _, w in cases]
    return [max(float(ws[i].max()) for ws in wants) - min(float(ws[i].min()) for ws in wants)
            for i in range(len(wants[0]))]


def _side(convert, names, cases, quantize=None) -> dict:
    """One converter's row: converts, runs, and its error over ``cases`` ((inputs, Keras outputs), ...): the
    largest, as a share of each output's range over the test inputs for an integer model."""
    from fuselite.inspect import describe
    from fuselite.runtime import run

    out: dict = {}
    t0 = time.perf_counter()
    try:
        data = convert()
    except Exception as e:
        return {"converts": False, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"}
    out.update(converts=True, seconds=time.perf_counter() - t0, size=len(data))
    ops: dict = {}
    for sg in describe(data)["subgraphs"]:
        for kind, n in sg["ops"].items():
            ops[kind] = ops.get(kind, 0) + n
    out.update(ops=sum(ops.values()), loops=ops.get("WHILE", 0),
               custom=sorted(k for k in ops if k.startswith("CUSTOM") or k == "FLEX"))
    if quantize and quantize != "dynamic":  # dynamic range computes in float throughout
        out["float_ops"] = _float_ops(data)
    spans = _spans(cases) if quantize else None
    for builtin in ((False, True) if quantize else (False,)):
        key = "builtin" if builtin else "xnnpack"
        errors = []
        for xs, want in cases:
            try:
                try:
                    got = run(data, dict(zip(names, xs)) if len(names) == len(xs) else xs, builtin_kernels=builtin)
                except Exception:
                    got = run(data, xs, builtin_kernels=builtin)
            except Exception as e:
                out.update(runs=False, error=f"{key}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
                return out
            errors.append(_errors(list(got.values()), want, spans))
        out[f"error_{key}"] = max(errors)
    out["runs"] = True
    if quantize:  # a share of the output range, the larger of the two kernel sets'
        out["relative_error"] = max(out["error_xnnpack"], out["error_builtin"])
        return out
    err = out.pop("error_xnnpack")
    allowed = TOL * max([1.0] + [float(np.abs(w).max()) for w in cases[0][1]])
    out.update(max_abs_error=err, matches=bool(err <= allowed))
    return out


def _float_ops(data: bytes) -> int:
    """Ops of the first subgraph that compute in float (QUANTIZE / DEQUANTIZE not counted)."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.Model.GetRootAs(data, 0)
    g = m.Subgraphs(0)
    count = 0
    for i in range(g.OperatorsLength()):
        op = g.Operators(i)
        code = m.OperatorCodes(op.OpcodeIndex())
        kind = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if kind in (schema.BuiltinOperator.QUANTIZE, schema.BuiltinOperator.DEQUANTIZE):
            continue
        types = [g.Tensors(op.Outputs(j)).Type() for j in range(op.OutputsLength()) if op.Outputs(j) >= 0]
        count += schema.TensorType.FLOAT32 in types
    return count


CALIBRATION_DRAWS = 32  # the integer sweep's representative dataset: random draws, as a new user's


def _quantized(conv, quantize: str, draws: list):
    """``conv`` (either converter) set up for full-integer quantization as a new user would: float edges,
    integer op sets only."""
    import tensorflow as tf

    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "dynamic":  # int8 weights, float activations: no dataset, the default op set
        return conv
    conv.representative_dataset = lambda: (list(d) for d in draws)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8] if quantize == "int8" else \
        [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return conv


TEST_DRAWS = 4  # integer sweeps: the error is the largest over this many inputs (none of them a calibration draw)


def _layers(model) -> list:
    flatten = getattr(model, "_flatten_layers", None)
    return list(flatten(include_self=False, recursive=True)) if flatten else []


def recompute_batch_norm(model, draws: list) -> int:
    """Batch-norm statistics recomputed on the calibration draws (one pass in training mode with momentum 0,
    dropout off; ``--recompute-batch-norm``): with ``weights=None`` they are 0 and 1, and activations collapse
    through a deep network (MobileNetV2's output then hardly depends on its input: a row that measures little).
    Recomputed, each layer's activations are normalised, but a random network is then chaotic: a perturbation
    grows layer by layer, and both converters' int8 outputs are ~100% off on InceptionV3 (docs/integer-coverage.md
    says what was measured). Both converters get the same model. Returns the number of layers recomputed."""
    norms = [layer for layer in _layers(model) if "BatchNormalization" in type(layer).__name__]
    if not norms:
        return 0
    drops = [layer for layer in _layers(model) if "Dropout" in type(layer).__name__ and hasattr(layer, "rate")]
    saved = [(layer, layer.momentum) for layer in norms], [(layer, layer.rate) for layer in drops]
    batch = [np.concatenate([d[i] for d in draws]) for i in range(len(draws[0]))]
    try:
        for layer in norms:
            layer.momentum = 0.0
        for layer in drops:
            layer.rate = 0.0
        model(batch if len(batch) > 1 else batch[0], training=True)
    finally:
        for layer, momentum in saved[0]:
            layer.momentum = momentum
        for layer, rate in saved[1]:
            layer.rate = rate
    return len(norms)


def _spread(wants: list[list[np.ndarray]]) -> dict:
    """The float model's outputs over the test inputs: their range, and how much they depend on the input (the
    mean over elements of the std across inputs, as a share of the std over everything; 0: the same output
    for every input)."""
    first = [np.stack([w[k] for w in wants]) for k in range(len(wants[0]))]
    whole = max(float(np.std(f)) for f in first)
    across = max(float(np.mean(np.std(f, axis=0))) for f in first)
    return {"range": max(float(f.max() - f.min()) for f in first), "input_dependence": across / max(whole, 1e-30)}


def child(name: str, quantize: str | None = None, batch_norm: bool = False) -> dict:
    import keras
    import tensorflow as tf

    import fuselite

    keras.utils.set_random_seed(0)
    model = _cases()[name](keras)
    draws = [_inputs(model, np.random.default_rng(100 + i)) for i in range(CALIBRATION_DRAWS)]
    recomputed = recompute_batch_norm(model, draws) if batch_norm else 0
    struct = getattr(model, "_inputs_struct", None)
    names = _input_names(model) if getattr(model, "inputs", None) else ["input"]

    def keras_outputs(xs):
        if isinstance(struct, dict):  # Keras 3 dict inputs: by the inputs' names (model.inputs has its own order)
            call = {key: xs[names.index(str(t.name).split(":")[0])] for key, t in struct.items()}
        else:
            call = xs if len(xs) > 1 else xs[0]
        return [np.asarray(o, np.float64) for o in tf.nest.flatten(model(call, training=False))]

    tests = [_inputs(model, np.random.default_rng(seed)) for seed in range(TEST_DRAWS if quantize else 1)]
    cases = [(xs, keras_outputs(xs)) for xs in tests]

    def convert(make):
        conv = make(model)
        return (_quantized(conv, quantize, draws) if quantize else conv).convert()

    def official():
        try:
            return convert(tf.lite.TFLiteConverter.from_keras_model)
        except Exception:
            if quantize != "dynamic":
                raise
        # dynamic range, the official converter's best path for Keras 3 RNNs (from_keras_model fails on their
        # TensorLists): a function of the test inputs' static shapes, batch 1, its variables frozen (kept as
        # variables, LiteRT reads them uninitialised), as benchmarks/keras_hub_catalog.py gives it
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        specs = [tf.TensorSpec(x.shape, x.dtype) for x in tests[0]]
        fn = tf.function(lambda *xs: model(xs[0] if len(xs) == 1 else list(xs), training=False))
        frozen = convert_variables_to_constants_v2(fn.get_concrete_function(*specs))
        return convert(lambda m: tf.lite.TFLiteConverter.from_concrete_functions([frozen], m))

    result = {"name": name,
              "fuselite": _side(lambda: convert(fuselite.Converter.from_keras_model), names, cases, quantize),
              "tf": _side(official, names, cases, quantize)}
    if quantize:
        result.update(spread=_spread([w for _, w in cases]), batch_norms_recomputed=recomputed)
    return result


def _cell(side: dict) -> str:
    if not side.get("converts"):
        return f"no: {side.get('error', 'crashed')}".replace("|", "\\|")[:90]
    if not side.get("runs"):
        return f"converts; does not run: {side.get('error', '')}".replace("|", "\\|")[:90]
    extra = [f"{side['loops']} WHILE"] if side["loops"] else []
    extra += side["custom"]
    if "relative_error" in side:  # integer: the error as a share of the output range, on each kernel set
        if side.get("float_ops"):
            extra.append(f"{side['float_ops']} float")
        return (f"{100 * side['error_builtin']:.2f}% / {100 * side['error_xnnpack']:.2f}%, {side['ops']} ops"
                + (f" ({', '.join(extra)})" if extra else ""))
    mark = "✓" if side["matches"] else "✗"
    return f"{mark} {side['max_abs_error']:.1e}, {side['ops']} ops" + (f" ({', '.join(extra)})" if extra else "")


ERROR_FACTOR, ERROR_SLACK = 1.0, 0.002  # the integer bar: at most the official error + 0.2% of the range


MEASURES = 0.10  # a float output depending on the input less than this (input_dependence) measures little
COLLAPSED = 1e-5  # ... and one whose values span less than this (activations at the quantizers' smallest ranges)


def measures_little(res: dict) -> bool:
    """Random weights collapsed the float model's activations: its output hardly depends on its input, or spans
    next to nothing (MobileNetV2: 6e-10); an integer error there is a share of a near-constant or vanishing
    output's range, set by the quantizers' smallest ranges, not a measure of the quantizer."""
    spread = res.get("spread", {})
    return spread.get("input_dependence", 1.0) < MEASURES or spread.get("range", 1.0) < COLLAPSED


def ratio(res: dict) -> float | None:
    """fuselite's integer error over the official converter's (both running, on a row that measures), or None."""
    ours, theirs = res["fuselite"], res["tf"]
    if not (ours.get("runs") and theirs.get("runs")) or measures_little(res):
        return None
    return ours["relative_error"] / max(theirs["relative_error"], 1e-12)


def _spread_cell(res: dict) -> str:
    spread = res.get("spread")
    if not spread:
        return "—"
    return f"{spread['range']:.3g}, {100 * spread['input_dependence']:.0f}%"


def verdict(res: dict) -> str:
    """An integer row: ok (fuselite runs on both kernel sets within the bar, or where the official converter
    fails), worse (runs, error above the bar), fails (the official converter runs it, fuselite does not),
    neither."""
    ours, theirs = res["fuselite"], res["tf"]
    if not ours.get("runs"):
        return "fails" if theirs.get("runs") else "neither"
    if measures_little(res):
        return "runs (measures little)"
    if not theirs.get("runs"):
        return "ok (only fuselite)"
    bar = ERROR_FACTOR * theirs["relative_error"] + ERROR_SLACK
    return "ok" if ours["relative_error"] <= bar else f"worse (bar {100 * bar:.2f}%)"


def _run_case(name: str, args) -> dict:
    """One case's results, from a child process (a converter or a kernel may crash it)."""
    command = [sys.executable, __file__, "--child", name] + (["--quantize", args.quantize] if args.quantize else []) \
        + (["--recompute-batch-norm"] if args.recompute_batch_norm else [])
    try:
        r = subprocess.run(command, capture_output=True, text=True, timeout=900)
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
        why = f"crashed (exit {r.returncode})"
    except subprocess.TimeoutExpired:
        line, why = None, "timed out (900 s)"
    if line is None:
        return {"name": name, "fuselite": {"converts": False, "error": why}, "tf": {"converts": False, "error": why}}
    return json.loads(line[len("RESULT "):])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", choices=CASES, default=None,
                   help="the rows to run (default: all; with --quantize dynamic, the recurrent ones)")
    p.add_argument("--quantize", choices=("int8", "int16x8", "dynamic"),
                   help="full-integer quantization (32 random calibration draws, integer op sets only, float "
                        "edges), or dynamic range (optimizations=[DEFAULT] alone), for both converters; each "
                        "model run on LiteRT's builtin kernels and with XNNPACK")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    p.add_argument("--json", help="also write every row's measurements here")
    p.add_argument("--recompute-batch-norm", action="store_true",
                   help="integer sweeps: recompute every batch-norm layer's statistics on the calibration draws "
                        "first (both converters get the same model)")
    p.add_argument("--update", metavar="JSON", help="the rows of an earlier run's --json, --cases run again in "
                                                    "their place (--cases is then required); the whole report")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.quantize, args.recompute_batch_norm)), flush=True)
        return 0
    if args.update and args.cases is None:
        p.error("--update runs --cases again: name them")
    args.cases = args.cases or (RECURRENT if args.quantize == "dynamic" else CASES)
    from report import command_line, emit, fuselite_revision, machine_description, versions

    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    results = []
    if args.update:  # the rows of an earlier run, --cases run again and put in their place
        with open(args.update) as f:
            results = json.load(f)
    for n, name in enumerate(args.cases, start=1):
        print(f"[coverage] {n}/{len(args.cases)} {name} ...", file=sys.stderr, flush=True)
        res = _run_case(name, args)
        at = next((k for k, r in enumerate(results) if r["name"] == name), None)
        if at is None:
            results.append(res)
        else:
            results[at] = res
    rows, counts = [], {"fuselite": 0, "tf": 0}
    verdicts: dict[str, int] = {}
    for res in results:
        name = res["name"]
        if args.quantize:
            v = verdict(res)
            verdicts[v.split(" (")[0]] = verdicts.get(v.split(" (")[0], 0) + 1
            for side in counts:
                counts[side] += bool(res[side].get("runs"))
            r = ratio(res)
            rows.append(f"| {name} | {_spread_cell(res)} | {_cell(res['fuselite'])} | {_cell(res['tf'])} | "
                        f"{'—' if r is None else f'{r:.2f}'} | {v} |")
        else:
            for side in counts:
                counts[side] += bool(res[side].get("matches"))
            rows.append(f"| {name} | {_cell(res['fuselite'])} | {_cell(res['tf'])} |")
    ratios = [r for r in map(ratio, results) if r is not None] if args.quantize else []
    head = [f"- Command: `{command_line()}` (from `{os.getcwd()}`)",
            f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
            f"- Machine: {machine_description()}",
            f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}"]
    if args.update:
        head.append(f"- Rows run by this command: {', '.join(args.cases)}; the others are an earlier run's, kept "
                    f"in {os.path.basename(args.update)} (its own command, date and sources in the notes below)")
    if args.quantize:
        mode = {"int8": "int8", "int16x8": "16x8", "dynamic": "dynamic range"}[args.quantize]
        opset = "TFLITE_BUILTINS_INT8" if args.quantize == "int8" else \
            "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"
        setup = "`optimizations=[DEFAULT]` alone (int8 weights, float activations: no dataset, the default op " \
            "set; where the official converter's `from_keras_model` fails, as on Keras 3 RNNs' TensorLists, its " \
            "`from_concrete_functions` of a function at the test inputs' static shapes, variables frozen)" \
            if args.quantize == "dynamic" else f"`optimizations=[DEFAULT]`, a representative dataset of " \
            f"{CALIBRATION_DRAWS} random draws, `supported_ops=[{opset}]`, float input and output"
        text = "\n".join([
            f"# Integer coverage ({mode}): fuselite and tf.lite.TFLiteConverter on many architectures", "", *head,
            f"- Both converters as a new user sets them: {setup}. Random weights "
            "(`weights=None`)" + (", every batch-norm layer's statistics recomputed on the calibration draws (one "
            "pass in training mode, momentum 0, dropout off)" if args.recompute_batch_norm else "") + ", the same "
            "model for both converters. Each model runs "
            "on stock LiteRT on LiteRT's builtin kernels and with XNNPACK (1 thread), batch 1 (a dynamic length "
            f"as 7), on {TEST_DRAWS} inputs that are not calibration draws. A cell: the largest max abs error "
            "against the float Keras model as a share of the output's range over the test inputs, builtin "
            "kernels / XNNPACK; ops; in "
            "brackets loops, non-builtin ops and ops left computing in float. Float output: the Keras output's "
            "range over the test inputs, and how much it depends on the input (the mean std across inputs as a "
            f"share of the whole std); below {100 * MEASURES:g}%, or a range under {COLLAPSED:g}, the row measures "
            "little (random weights collapsed the activations: the error is a share of a near-constant or "
            "vanishing output's range), and has no verdict or ratio. Ratio: fuselite's error over the official converter's (the larger of the two kernel "
            "sets' each).",
            f"- Verdict: ok where fuselite runs on both kernel sets with an error at most the official converter's "
            f"+ {100 * ERROR_SLACK:g}% of the range (or the official converter fails).",
            f"- Converts and runs: fuselite {counts['fuselite']} of {len(rows)}, tf.lite.TFLiteConverter "
            f"{counts['tf']} of {len(rows)}. Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
            + f". Median ratio over the {len(ratios)} models both run (rows that measure): "
            + (f"{float(np.median(ratios)):.2f}" if ratios else "—") + ".", "",
            "| model | float output | fuselite | tf.lite.TFLiteConverter | ratio | verdict |",
            "|---|---|---|---|---|---|",
            *rows]) + "\n"
    else:
        text = "\n".join([
            "# Coverage: fuselite and tf.lite.TFLiteConverter on many architectures", "", *head,
            "- Keras 3 models (and tf-keras applications, keras-hub backbones in tiny configs) with random weights, "
            "batch 1 inputs (a dynamic length as 7). Both converters with defaults (`from_keras_model`); each model "
            f"run on stock LiteRT. ✓: max abs error against Keras <= {TOL:g} × max(1, max |output|); ✗ above. In "
            "brackets: loops and non-builtin ops left. fuselite's recurrent layers are in its default loop form (a "
            "WHILE without TensorLists per layer and direction, docs/rnn.md#forms), masked ones too; ConvLSTM2D is "
            "unrolled.",
            f"- Matching Keras: fuselite {counts['fuselite']} of {len(rows)}, tf.lite.TFLiteConverter "
            f"{counts['tf']} of {len(rows)}.",
            "",
            "| model | fuselite | tf.lite.TFLiteConverter |",
            "|---|---|---|",
            *rows,
        ]) + "\n"
    emit(text, args.out)
    if args.json or args.update:
        with open(args.json or args.update, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
