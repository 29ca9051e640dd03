"""On-device training with builtins only (issue 66, part 3b): train / infer / save / restore signatures.

1. The optimizer ops of ``lower/training.py`` one by one (``CASES``, ``lowering_kit``: both LiteRT kernel sets
   against TF eager, builtins only), every rule exercised.
2. Whole ``train`` signatures run for 20 steps on stock LiteRT (XNNPACK and the builtin kernels, each from a
   fresh interpreter) against TensorFlow running the same steps from the same state: the losses agree to 1e-5
   relative. A ``tf.Module`` (through ``from_concrete_functions`` and a SavedModel), Keras 3 models with Keras
   optimizers and losses, a Conv2D / DepthwiseConv2D / BatchNorm (inference) / Dense model, Embeddings, a
   frozen base with a trained head, ``tf.compat.v1`` and tf-keras legacy optimizers.
3. ``save`` -> a new interpreter -> ``restore`` -> ``infer`` equals TF's trained model (and Adam resumes).
4. What does not convert is named.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema
from lowering_kit import C, F, V, check_case, missing_rules

import fuselite
from fuselite.errors import ConversionError, InputError, MutableVariableError
from fuselite.runtime import interpreter
from fuselite.runtime.signatures import kernel_set
from fuselite.training import checkpoint_functions, checkpoint_names

STEPS = 20
RTOL = 1e-5  # losses after N steps, LiteRT against TF
raw = tf.raw_ops

# --------------------------------------------------------------------------------------------
# 1. the optimizer ops, one by one
# --------------------------------------------------------------------------------------------
_STATE: dict[str, list] = {}


def _variables(key: str, starts) -> list:
    if key not in _STATE:
        with tf.init_scope():
            _STATE[key] = [tf.Variable(tf.zeros(s.shape, s.dtype), name=f"{key}_{i}") for i, s in enumerate(starts)]
    return _STATE[key]


def _apply(key: str, n: int, update):
    """A case function ``fn(grad, start_1 .. start_n, *scalars)``: the variable and its slots are assigned the
    ``start`` inputs first (every call starts from the same state), ``update(handles, grad, *scalars)`` runs the
    TF op, and their new values come out."""

    def fn(grad, *rest):
        starts, scalars = rest[:n], rest[n:]
        vs = _variables(key, starts)
        for v, s in zip(vs, starts):
            v.assign(s)
        update([v.handle for v in vs], grad, *scalars)
        return [v.read_value() for v in vs]

    return fn


S = (3, 4)
POS = F(*S, lo=0.1, hi=1.0)  # accumulators of squares are positive


def _gd(h, g, *_):
    raw.ResourceApplyGradientDescent(var=h[0], alpha=0.1, delta=g)


def _momentum(nesterov, keras_form=False):
    op = raw.ResourceApplyKerasMomentum if keras_form else raw.ResourceApplyMomentum
    return lambda h, g: op(var=h[0], accum=h[1], lr=0.1, grad=g, momentum=0.9, use_nesterov=nesterov)


def _adam(nesterov):
    return lambda h, g: raw.ResourceApplyAdam(var=h[0], m=h[1], v=h[2], beta1_power=0.9 ** 3, beta2_power=0.999 ** 3,
                                              lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7, grad=g,
                                              use_nesterov=nesterov)


def _adam_scalars_in(h, g, b1p, b2p, lr):  # v1 Adam reads beta powers from variables: not constants
    raw.ResourceApplyAdam(var=h[0], m=h[1], v=h[2], beta1_power=b1p, beta2_power=b2p, lr=lr, beta1=0.9, beta2=0.999,
                          epsilon=1e-7, grad=g)


CASES = [
    C("apply_gradient_descent", _apply("gd", 1, _gd), F(*S), F(*S)),
    C("apply_gradient_descent_lr_input", _apply("gd_lr", 1, lambda h, g, lr: raw.ResourceApplyGradientDescent(
        var=h[0], alpha=lr, delta=g)), F(*S), F(*S), F(lo=0.01, hi=0.5)),
    C("apply_momentum", _apply("mom", 2, _momentum(False)), F(*S), F(*S), F(*S)),
    C("apply_momentum_nesterov", _apply("mom_n", 2, _momentum(True)), F(*S), F(*S), F(*S)),
    C("apply_keras_momentum", _apply("kmom", 2, _momentum(False, True)), F(*S), F(*S), F(*S)),
    C("apply_keras_momentum_nesterov", _apply("kmom_n", 2, _momentum(True, True)), F(*S), F(*S), F(*S)),
    C("apply_adam", _apply("adam", 3, _adam(False)), F(*S), F(*S), F(*S), POS),
    C("apply_adam_nesterov", _apply("adam_n", 3, _adam(True)), F(*S), F(*S), F(*S), POS),
    C("apply_adam_scalars_in", _apply("adam_in", 3, _adam_scalars_in), F(*S), F(*S), F(*S), POS,
      F(lo=0.1, hi=0.9), F(lo=0.1, hi=0.99), F(lo=0.001, hi=0.1)),
    C("apply_adagrad", _apply("adagrad", 2, lambda h, g: raw.ResourceApplyAdagrad(var=h[0], accum=h[1], lr=0.1,
                                                                                   grad=g)), F(*S), F(*S), POS),
    C("apply_adagrad_no_slot_update", _apply("adagrad_ns", 2, lambda h, g: raw.ResourceApplyAdagrad(
        var=h[0], accum=h[1], lr=0.1, grad=g, update_slots=False)), F(*S), F(*S), POS),
    C("apply_adagrad_v2", _apply("adagrad2", 2, lambda h, g: raw.ResourceApplyAdagradV2(
        var=h[0], accum=h[1], lr=0.1, epsilon=1e-7, grad=g)), F(*S), F(*S), POS),
    C("apply_rms_prop", _apply("rms", 3, lambda h, g: raw.ResourceApplyRMSProp(
        var=h[0], ms=h[1], mom=h[2], lr=0.01, rho=0.9, momentum=0.5, epsilon=1e-7, grad=g)), F(*S), F(*S), POS,
      F(*S)),
    # rows 1 and 3, 1 twice: duplicates accumulate
    C("scatter_add", _apply("sc_add", 1, lambda h, u, i: raw.ResourceScatterAdd(resource=h[0], indices=i, updates=u)),
      F(3, 4), F(5, 4), V(np.array([1, 3, 1], np.int32), 3), expect=["SCATTER_ND"]),
    C("scatter_sub_int64_indices", _apply("sc_sub", 1, lambda h, u, i: raw.ResourceScatterSub(
        resource=h[0], indices=i, updates=u)), F(3, 4), F(5, 4), V(np.array([4, 0, 4], np.int64), 3),
      expect=["SCATTER_ND"]),
    C("scatter_add_2d_indices", _apply("sc_add2", 1, lambda h, u, i: raw.ResourceScatterAdd(
        resource=h[0], indices=i, updates=u)), F(2, 2, 3), F(6, 3), V(np.array([[0, 5], [5, 2]], np.int32), 2, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_rule(case):
    check_case(case)


def test_every_rule_of_the_family_is_exercised():
    assert missing_rules(CASES, ["fuselite.lower.training"]) == []


def test_the_updates_the_variables_pass_keeps_are_the_ones_lowered():
    """passes/variables.py lets exactly the updates through that lower/training.py lowers (the two layers may not
    import each other, so each names them)."""
    from fuselite.lower import LOWERINGS
    from fuselite.passes.variables import UPDATE_OPS

    assert {k for k, r in LOWERINGS.items() if r.__module__ == "fuselite.lower.training"} == UPDATE_OPS


# --------------------------------------------------------------------------------------------
# helpers: builtins only, N steps on LiteRT, the reference on TF
# --------------------------------------------------------------------------------------------
_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def model_ops(data: bytes) -> set[str]:
    """Every operator code of the model (all subgraphs): builtin names, or a custom op's code."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    out = set()
    for code in m.operatorCodes:
        b = max(code.builtinCode, code.deprecatedBuiltinCode)
        out.add(code.customCode.decode() if b == schema.BuiltinOperator.CUSTOM else _NAMES[b])
    return out


def assert_builtins_only(data: bytes) -> None:
    ops = model_ops(data)
    bad = sorted(o for o in ops if o not in _NAMES.values() or o in ("CUSTOM", "DELEGATE") or o.startswith("Flex"))
    assert not bad, f"non-builtin ops: {bad}"
    assert {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"} <= ops


def litert_steps(data: bytes, batches: list[dict], builtin: bool):
    """A fresh interpreter (``builtin``: LiteRT's builtin kernels, else XNNPACK); ``train`` once per batch.
    Returns the losses and the interpreter."""
    interp = interpreter(data, **kernel_set(builtin))
    train = interp.get_signature_runner("train")
    return [float(train(**b)["loss"]) for b in batches], interp


def tf_steps(train, batches: list[dict]) -> list[float]:
    return [float(train(**{k: tf.constant(v) for k, v in b.items()})["loss"]) for b in batches]


def check_training(data: bytes, train, batches: list[dict]) -> dict:
    """Both kernel sets trained on ``batches`` against TF's ``train`` (run once, after the conversion read the
    initial state): the losses agree to RTOL. Returns {builtin: interpreter after the steps}."""
    assert_builtins_only(data)
    want = tf_steps(train, batches)
    interps = {}
    for builtin in (False, True):
        got, interps[builtin] = litert_steps(data, batches, builtin)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0,
                                   err_msg="builtin kernels" if builtin else "XNNPACK")
    return interps


def check_restore(data: bytes, trained, infer, x: np.ndarray, atol=1e-5) -> None:
    """``save`` on the trained interpreter -> a new one -> ``restore`` -> ``infer`` equals TF's ``infer``."""
    weights = trained.get_signature_runner("save")()
    fresh = interpreter(data)
    (name,) = fresh.get_signature_list()["infer"]["inputs"]
    want = {k: np.asarray(v) for k, v in infer(tf.constant(x)).items()}
    before = fresh.get_signature_runner("infer")(**{name: x})
    assert any(np.abs(before[k] - want[k]).max() > 1e-3 for k in want), "training changed nothing"
    fresh.get_signature_runner("restore")(**weights)
    got = fresh.get_signature_runner("infer")(**{name: x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=atol, err_msg=k)


def signatures(train, infer, save, restore) -> dict:
    return {"train": train.get_concrete_function(), "infer": infer.get_concrete_function(),
            "save": save.get_concrete_function(), "restore": restore.get_concrete_function()}


def class_batches(rng, n_in: int, n_out: int, batch: int, one_hot: bool, steps: int = STEPS) -> list[dict]:
    """A learnable classification problem: the label is the argmax of a fixed projection of x."""
    proj = np.random.default_rng(99).normal(size=(n_in, n_out))
    out = []
    for _ in range(steps):
        x = rng.normal(size=(batch, n_in)).astype(np.float32)
        y = np.argmax(x @ proj, axis=1).astype(np.int32)
        out.append({"x": x, "y": np.eye(n_out, dtype=np.float32)[y] if one_hot else y})
    return out


# --------------------------------------------------------------------------------------------
# 2. a tf.Module: two-layer classifier, softmax cross-entropy, SGD by hand
# --------------------------------------------------------------------------------------------
class Classifier(tf.Module):
    def __init__(self, features=4, hidden=8, classes=3, batch=8, lr=0.5):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w1 = tf.Variable(rng.normal(size=(features, hidden)).astype(np.float32) * 0.5, name="w1")
        self.b1 = tf.Variable(np.zeros(hidden, np.float32), name="b1")
        self.w2 = tf.Variable(rng.normal(size=(hidden, classes)).astype(np.float32) * 0.5, name="w2")
        self.b2 = tf.Variable(np.zeros(classes, np.float32), name="b2")
        self.lr = lr
        self.weights = [self.w1, self.b1, self.w2, self.b2]
        x, y = tf.TensorSpec([batch, features], tf.float32), tf.TensorSpec([batch, classes], tf.float32)
        self.train = tf.function(self._train, input_signature=[x, y])
        self.infer = tf.function(self._infer, input_signature=[x])
        self.save, self.restore = checkpoint_functions(self.weights)

    def logits(self, x):
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, self.w1), self.b1))  # BiasAddGrad, ReluGrad
        return tf.matmul(h, self.w2) + self.b2  # broadcast: Sum of the gradient

    def _train(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=self.logits(x)))
        for v, g in zip(self.weights, tape.gradient(loss, self.weights)):
            v.assign_sub(self.lr * g)
        return {"loss": loss}

    def _infer(self, x):
        return {"logits": self.logits(x), "probabilities": tf.nn.softmax(self.logits(x))}


@pytest.mark.parametrize("source", ["concrete_functions", "saved_model"])
def test_tf_module_classifier_trains_saves_and_restores(source, tmp_path):
    m = Classifier()
    sigs = signatures(m.train, m.infer, m.save, m.restore)
    if source == "saved_model":
        tf.saved_model.save(m, str(tmp_path / "sm"), signatures=sigs)
        conv = fuselite.Converter.from_saved_model(str(tmp_path / "sm"))
    else:
        conv = fuselite.Converter.from_concrete_functions(sigs, m)
    data = conv.convert()
    assert {v["name"] for v in conv.report.mutable_variables} == {"w1", "b1", "w2", "b2"}
    batches = class_batches(np.random.default_rng(1), 4, 3, 8, one_hot=True)
    interps = check_training(data, m.train, batches)
    sig_list = interps[False].get_signature_list()
    assert set(sig_list) == {"train", "infer", "save", "restore", "reset_variables"}
    assert sorted(sig_list["save"]["outputs"]) == sorted(sig_list["restore"]["inputs"]) == ["b1", "b2", "w1", "w2"]
    check_restore(data, interps[True], m.infer, batches[0]["x"])


# --------------------------------------------------------------------------------------------
# Keras 3 models, optimizers and losses
# --------------------------------------------------------------------------------------------
def keras_train_step(model, optimizer, loss_fn, x_spec, y_spec, training=True):
    """A ``train_step``-like tf.function over ``model.trainable_variables``; the optimizer built before tracing."""
    optimizer.build(model.trainable_variables)

    @tf.function(input_signature=[x_spec, y_spec])
    def train(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=training))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss}

    @tf.function(input_signature=[x_spec])
    def infer(x):
        return {"output": model(x, training=False)}

    return train, infer


KERAS_CASES = {
    "sgd-sparse_categorical_crossentropy": (lambda: keras.optimizers.SGD(0.2),
                                            lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                            3, None, "sparse"),
    "sgd_momentum-categorical_crossentropy": (lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
                                              lambda: keras.losses.CategoricalCrossentropy(from_logits=True),
                                              3, None, "one_hot"),
    "adam-mse": (lambda: keras.optimizers.Adam(0.02), keras.losses.MeanSquaredError, 2, None, "regression"),
    "adam-binary_crossentropy": (lambda: keras.optimizers.Adam(0.02), keras.losses.BinaryCrossentropy, 1,
                                 "sigmoid", "binary"),
    "adamw-binary_crossentropy_from_logits": (lambda: keras.optimizers.AdamW(0.02),
                                              lambda: keras.losses.BinaryCrossentropy(from_logits=True), 1, None,
                                              "binary"),
    "rmsprop_momentum-mse": (lambda: keras.optimizers.RMSprop(0.01, momentum=0.5), keras.losses.MeanSquaredError, 2,
                             None, "regression"),
}


def _keras_batches(kind: str, out: int, rng) -> list[dict]:
    if kind in ("sparse", "one_hot"):
        return class_batches(rng, 4, out, 8, one_hot=kind == "one_hot")
    proj = np.random.default_rng(7).normal(size=(4, out)).astype(np.float32)
    batches = []
    for _ in range(STEPS):
        x = rng.normal(size=(8, 4)).astype(np.float32)
        y = x @ proj if kind == "regression" else (x @ proj > 0).astype(np.float32)
        batches.append({"x": x, "y": y})
    return batches


@pytest.mark.parametrize("name", list(KERAS_CASES))
def test_keras_model_with_keras_optimizer_and_loss(name):
    make_opt, make_loss, out, activation, kind = KERAS_CASES[name]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,), batch_size=8), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(out, activation=activation)])
    optimizer = make_opt()
    y_spec = tf.TensorSpec([8], tf.int32) if kind == "sparse" else tf.TensorSpec([8, out], tf.float32)
    train, infer = keras_train_step(model, optimizer, make_loss(), tf.TensorSpec([8, 4], tf.float32), y_spec)
    # the optimizer's state too (Adam's moments, its int64 iteration count): training resumes after restore
    save, restore = checkpoint_functions([*model.trainable_variables, *optimizer.variables])
    conv = fuselite.Converter.from_concrete_functions(signatures(train, infer, save, restore), model)
    data = conv.convert()
    batches = _keras_batches(kind, out, np.random.default_rng(2))
    *steps, resume = batches
    interps = check_training(data, train, steps)
    check_restore(data, interps[False], infer, batches[0]["x"])
    # a new interpreter restored from the checkpoint takes the next step as TF does
    weights = interps[False].get_signature_runner("save")()
    fresh = interpreter(data)
    fresh.get_signature_runner("restore")(**weights)
    got = float(fresh.get_signature_runner("train")(**resume)["loss"])
    np.testing.assert_allclose(got, tf_steps(train, [resume])[0], rtol=RTOL)


def test_conv_depthwise_batchnorm_dense_model():
    """Conv2D + DepthwiseConv2D + BatchNormalization in inference mode + Dense; SGD with momentum. The moving
    statistics are only read (inference mode): constants; gamma and beta train."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8, 8, 3), batch_size=2), keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.DepthwiseConv2D(3, strides=2, padding="same"), keras.layers.BatchNormalization(),
        keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    bn = model.layers[2]
    bn.moving_mean.assign(np.random.default_rng(0).normal(size=4).astype(np.float32) * 0.1)
    bn.moving_variance.assign(np.random.default_rng(1).uniform(0.5, 2.0, size=4).astype(np.float32))
    train, infer = keras_train_step(model, keras.optimizers.SGD(0.05, momentum=0.9),
                                    keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                    tf.TensorSpec([2, 8, 8, 3], tf.float32), tf.TensorSpec([2], tf.int32),
                                    training=False)
    save, restore = checkpoint_functions(model.trainable_variables)
    conv = fuselite.Converter.from_concrete_functions(signatures(train, infer, save, restore), model)
    data = conv.convert()
    frozen = {v["name"] for v in conv.report.frozen_variables}
    assert {bn.moving_mean.path, bn.moving_variance.path} <= frozen
    assert {bn.gamma.path, bn.beta.path} <= {v["name"] for v in conv.report.mutable_variables}
    rng = np.random.default_rng(3)
    batches = [{"x": rng.normal(size=(2, 8, 8, 3)).astype(np.float32), "y": rng.integers(0, 3, 2).astype(np.int32)}
               for _ in range(STEPS)]
    interps = check_training(data, train, batches)
    check_restore(data, interps[True], infer, batches[0]["x"])


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_keras_embedding_model(opt):
    """Keras 3's SGD updates the table in place with scatter_sub (ResourceScatterSub -> SCATTER_ND); Adam with
    the gradient made dense (UnsortedSegmentSum)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,), batch_size=4, dtype="int32"), keras.layers.Embedding(10, 4),
                              keras.layers.Flatten(), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.5) if opt == "sgd" else keras.optimizers.Adam(0.05)
    train, infer = keras_train_step(model, optimizer, keras.losses.MeanSquaredError(),
                                    tf.TensorSpec([4, 3], tf.int32), tf.TensorSpec([4, 2], tf.float32))
    save, restore = checkpoint_functions(model.trainable_variables)
    data = fuselite.Converter.from_concrete_functions(signatures(train, infer, save, restore), model).convert()
    if opt == "sgd":
        assert "SCATTER_ND" in model_ops(data)
    rng = np.random.default_rng(4)
    table = rng.normal(size=(10, 2)).astype(np.float32)
    batches = []
    for _ in range(STEPS):
        ids = rng.integers(0, 10, size=(4, 3)).astype(np.int32)  # repeated ids in a batch: duplicates accumulate
        batches.append({"x": ids, "y": table[ids].sum(axis=1)})
    interps = check_training(data, train, batches)
    check_restore(data, interps[False], infer, batches[0]["x"])


def test_frozen_base_trained_head_shares_weights_between_signatures():
    """Personalization: the base is frozen (trainable=False), only the head trains. The base's weights, read by
    train and infer alike and assigned by none, become constants; the head's are resource variables."""
    keras.utils.set_random_seed(0)
    base = keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(8, activation="relu")])
    head = keras.layers.Dense(3)
    model = keras.Sequential([keras.Input((6,), batch_size=8), base, head])
    base.trainable = False
    train, infer = keras_train_step(model, keras.optimizers.Adam(0.05),
                                    keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                    tf.TensorSpec([8, 6], tf.float32), tf.TensorSpec([8], tf.int32))
    save, restore = checkpoint_functions(head.trainable_variables)
    conv = fuselite.Converter.from_concrete_functions(signatures(train, infer, save, restore), model)
    data = conv.convert()
    frozen = {v["name"] for v in conv.report.frozen_variables}
    mutable = {v["name"] for v in conv.report.mutable_variables}
    assert {v.path for v in base.weights} <= frozen and not {v.path for v in base.weights} & mutable
    assert {v.path for v in head.weights} <= mutable
    batches = class_batches(np.random.default_rng(5), 6, 3, 8, one_hot=False)
    interps = check_training(data, train, batches)
    check_restore(data, interps[True], infer, batches[0]["x"])


# --------------------------------------------------------------------------------------------
# tf.compat.v1 and tf-keras legacy optimizers: ResourceApply* / ResourceScatterAdd
# --------------------------------------------------------------------------------------------
def _v1(name):
    v1 = tf.compat.v1.train
    return {"v1_sgd": lambda: v1.GradientDescentOptimizer(0.1),
            "v1_momentum_nesterov": lambda: v1.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
            "v1_adam": lambda: v1.AdamOptimizer(0.02),
            "v1_adagrad": lambda: v1.AdagradOptimizer(0.2),
            "v1_rms_prop": lambda: v1.RMSPropOptimizer(0.01, momentum=0.5)}[name]


def _tf_keras(name):
    import tf_keras

    legacy = tf_keras.optimizers.legacy
    return {"tf_keras_legacy_sgd_momentum": lambda: legacy.SGD(0.05, momentum=0.9),
            "tf_keras_legacy_adam": lambda: legacy.Adam(0.02),
            "tf_keras_legacy_adagrad": lambda: legacy.Adagrad(0.2)}[name]


class Regression(tf.Module):
    def __init__(self, make_optimizer, embedding=False):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w = tf.Variable(rng.normal(size=(4, 2)).astype(np.float32), name="w")
        self.b = tf.Variable(np.zeros(2, np.float32), name="b")
        self.table = tf.Variable(rng.normal(size=(10, 2)).astype(np.float32), name="table")
        self.weights = [self.w, self.b, self.table] if embedding else [self.w, self.b]
        self.embedding = embedding
        self.optimizer = make_optimizer()
        self.train = tf.function(self._train, input_signature=[
            tf.TensorSpec([8, 4], tf.float32), tf.TensorSpec([8], tf.int32), tf.TensorSpec([8, 2], tf.float32)])

    def _train(self, x, ids, y):
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, self.w) + self.b
            if self.embedding:
                pred += tf.gather(self.table, ids)  # an IndexedSlices gradient
            loss = tf.reduce_mean(tf.square(pred - y))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.weights), self.weights))
        return {"loss": loss}


def _regression_batches(rng) -> list[dict]:
    proj, table = rng.normal(size=(4, 2)), rng.normal(size=(10, 2))
    out = []
    for _ in range(STEPS):
        x, ids = rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int32)
        out.append({"x": x, "ids": ids, "y": (x @ proj + table[ids]).astype(np.float32)})
    return out


@pytest.mark.parametrize("name", ["v1_sgd", "v1_momentum_nesterov", "v1_adam", "v1_adagrad", "v1_rms_prop",
                                  "tf_keras_legacy_sgd_momentum", "tf_keras_legacy_adam", "tf_keras_legacy_adagrad"])
def test_fused_optimizer_ops(name):
    m = Regression(_v1(name) if name.startswith("v1") else _tf_keras(name))
    conv = fuselite.Converter.from_concrete_functions({"train": m.train.get_concrete_function()}, m)
    check_training(conv.convert(), m.train, _regression_batches(np.random.default_rng(6)))


def test_v1_sgd_embedding_scatter_add():
    """tf.compat.v1's GradientDescentOptimizer updates a gathered table with ResourceScatterAdd."""
    m = Regression(_v1("v1_sgd"), embedding=True)
    data = fuselite.Converter.from_concrete_functions({"train": m.train.get_concrete_function()}, m).convert()
    assert "SCATTER_ND" in model_ops(data)
    check_training(data, m.train, _regression_batches(np.random.default_rng(7)))


# --------------------------------------------------------------------------------------------
# 4. what does not convert, and the names
# --------------------------------------------------------------------------------------------
def test_sparse_optimizer_update_is_named():
    """tf.compat.v1's Momentum updates an Embedding's rows with ResourceSparseApplyMomentum: not lowered."""
    m = Regression(_v1("v1_momentum_nesterov"), embedding=True)
    with pytest.raises(MutableVariableError) as e:
        fuselite.Converter.from_concrete_functions({"train": m.train.get_concrete_function()}, m).convert()
    assert "ResourceSparseApplyMomentum" in str(e.value) and "'table'" in str(e.value)
    assert "ResourceApply{Adagrad, AdagradV2, Adam" in str(e.value)


def test_float64_variable_update_is_refused():
    v = tf.Variable(np.zeros(3), name="f64")  # float64

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float64)])
    def step(g):
        raw.ResourceApplyGradientDescent(var=v.handle, alpha=tf.constant(0.1, tf.float64), delta=g)
        return v.read_value()

    with pytest.raises(ConversionError, match="ResourceApplyGradientDescent.*only float32 variables convert"):
        fuselite.Converter.from_concrete_functions([step.get_concrete_function()]).convert()


def test_scatter_of_a_broadcast_scalar_is_refused():
    v = tf.Variable(np.zeros((4, 2), np.float32), name="rows")

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def step(u):
        raw.ResourceScatterAdd(resource=v.handle, indices=tf.constant([1, 2]), updates=u)
        return v.read_value()

    with pytest.raises(ConversionError, match="ResourceScatterAdd.*not a broadcast scalar"):
        fuselite.Converter.from_concrete_functions([step.get_concrete_function()]).convert()


def test_checkpoint_names():
    assert fuselite.checkpoint_functions is checkpoint_functions  # exported by the package
    a, b = tf.Variable(1.0, name="dense/kernel"), tf.Variable(2.0, name="dense/kernel")
    assert list(checkpoint_names([a, b])) == ["dense_kernel", "dense_kernel_1"]
    assert list(checkpoint_names({"head_w": a})) == ["head_w"]
    with pytest.raises(InputError, match="letters, digits"):
        checkpoint_names({"head/w": a})
    with pytest.raises(InputError, match="at least one"):
        checkpoint_functions([])
    save, restore = checkpoint_functions([a, b])
    restore(**{k: v * 10.0 for k, v in save().items()})  # TF round trip, names as the LiteRT signatures have them
    assert (float(a.numpy()), float(b.numpy())) == (10.0, 20.0)
