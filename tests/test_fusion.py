"""Composite fusion: the prepare-composites stage, Python rules, built-in rules, declines."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import litert_op_names

import fuselite
from fuselite.fusion import FusionError, registry
from fuselite.runtime import run
from fuselite.tflite.flexbuffer import decode_options

RNG = np.random.default_rng(3)
TABLE = tf.Variable(RNG.standard_normal((50, 8)).astype(np.float32), name="table")


def _custom_ops(data: bytes) -> list[tuple[str, dict]]:
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(data, 0)
    out = []
    for sg in m.subgraphs:
        for o in sg.operators:
            code = m.operatorCodes[o.opcodeIndex]
            if code.builtinCode == schema.BuiltinOperator.CUSTOM:
                opts = bytes(o.customOptions) if o.customOptions is not None else b""
                out.append((code.customCode.decode(), decode_options(opts)))
    return out


# -- implements() ---------------------------------------------------------------------------


def test_implements_string_round_trips_through_tensorflow():
    text = fuselite.implements("my_op", tfl_fusable_op=True, n=3, scale=0.5, mode="fast",
                               sizes=[1, 2, 3], weights=[0.25, 1.5], names=["a", 'b"c'], flags=[True, False])

    @tf.function(experimental_implements=text)
    def composite(x):
        return x + 1.0

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def f(x):
        return composite(x)

    from fuselite.frontend import concrete_function_entries, import_concrete_functions

    module = import_concrete_functions(concrete_function_entries([f.get_concrete_function()]))
    (fn,) = [fn for fn in module.functions.values() if fn.attrs.get("_implements") == "my_op"]
    assert fn.attrs["_implements._attrs"] == {
        "tfl_fusable_op": True, "n": 3, "scale": 0.5, "mode": "fast", "sizes": [1, 2, 3],
        "weights": [0.25, 1.5], "names": ["a", 'b"c'], "flags": [True, False]}


def test_implements_plain_name_and_bad_values():
    assert fuselite.implements("embedding_lookup") == "embedding_lookup"
    with pytest.raises(TypeError):
        fuselite.implements("x", bad={"a": 1})
    with pytest.raises(TypeError):
        fuselite.implements("x", mixed=[1, "a"])


# -- the TFLite docs' example ----------------------------------------------------------------


class DocsModel(tf.Module):
    """The example of the TFLite 'operation fusion' docs."""

    def __init__(self):
        super().__init__()
        self.conv_1 = tf.keras.layers.Conv2D(filters=1, kernel_size=(3, 3), bias_initializer="ones")
        self.conv_2 = tf.keras.layers.Conv2D(filters=1, kernel_size=(3, 3), bias_initializer="ones")

    @tf.function(input_signature=[tf.TensorSpec(shape=[1, 28, 28, 3], dtype=tf.float32),
                                  tf.TensorSpec(shape=[1, 28, 28, 3], dtype=tf.float32)])
    def __call__(self, input_1, input_2):
        output_1 = self.conv_1(input_1)
        output_2 = self.conv_2(input_2)
        return self.my_custom_fused_op(output_1, output_2)

    @tf.function(experimental_implements=(
        'name: "my_custom_fused_op" attr { key: "example_option" value { i: 10 } } '
        'attr { key: "tfl_fusable_op" value { b: true } }'))
    def my_custom_fused_op(self, input_1, input_2):
        return input_1 + input_2


@pytest.fixture(scope="module")
def docs_saved_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("docs") / "sm")
    model = DocsModel()
    tf.saved_model.save(model, path)
    return path, model


def test_docs_example_converts_to_two_convs_and_one_custom_op(docs_saved_model):
    path, _ = docs_saved_model
    conv = fuselite.Converter.from_saved_model(path)
    data = conv.convert()
    ops = litert_op_names(data)
    assert sorted(ops) == ["CONV_2D", "CONV_2D", "my_custom_fused_op"]  # bias fused, variables frozen
    assert _custom_ops(data) == [("my_custom_fused_op", {"example_option": 10})]
    assert len(conv.report.frozen_variables) == 4
    (rec,) = conv.report.composites
    assert rec["status"] == "fused" and rec["into"] == ["CUSTOM"]


# -- embeddings -------------------------------------------------------------------------------


def _embedding_model(interface: str, ids_shape, ids_dtype=tf.int32):
    @tf.function(experimental_implements=interface)
    def lookup(params, ids):
        return tf.gather(params, ids)

    @tf.function(input_signature=[tf.TensorSpec(ids_shape, ids_dtype, name="ids")])
    def f(ids):
        return lookup(TABLE, ids) * 2.0

    return f


@pytest.mark.parametrize("interface", ["embedding_matmul", "embedding_lookup"])
@pytest.mark.parametrize("ids_shape,ids_dtype", [([5], tf.int32), ([None, 4], tf.int32), ([2, 3], tf.int64)])
def test_embedding_composites_become_embedding_lookup(interface, ids_shape, ids_dtype):
    f = _embedding_model(interface, ids_shape, ids_dtype)
    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    data = conv.convert()
    ops = litert_op_names(data)
    assert "EMBEDDING_LOOKUP" in ops and "GATHER" not in ops
    ids = RNG.integers(0, 50, [1 if d is None else d for d in ids_shape]).astype(ids_dtype.as_numpy_dtype)
    np.testing.assert_array_equal(next(iter(run(data, [ids]).values())), f(ids).numpy())  # exact
    assert conv.report.composites[0]["status"] == "fused"


def test_embedding_with_wrong_arity_is_declined_and_still_converts():
    @tf.function(experimental_implements="embedding_lookup")
    def lookup(params, ids, scale):
        return tf.gather(params, ids) * scale

    @tf.function(input_signature=[tf.TensorSpec([4], tf.int32)])
    def f(ids):
        return lookup(TABLE, ids, 3.0)

    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    data = conv.convert()
    (rec,) = conv.report.composites
    assert rec["status"] == "declined" and "expected 2 argument(s), got 3" in rec["reason"]
    assert "expected 2 argument(s)" in str(conv.report)
    ops = litert_op_names(data)
    assert "GATHER" in ops and "EMBEDDING_LOOKUP" not in ops
    ids = np.array([1, 7, 0, 49], np.int32)
    np.testing.assert_allclose(next(iter(run(data, [ids]).values())), f(ids).numpy(), atol=1e-6)
    with pytest.raises(FusionError, match="expected 2 argument"):
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()], strict_fusion=True).convert()


def test_embedding_with_dynamic_ids_shape_is_declined():
    f = _embedding_model("embedding_lookup", [None, None, 2])
    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    data = conv.convert()
    assert "need a static shape" in conv.report.composites[0]["reason"]
    ids = RNG.integers(0, 50, (1, 3, 2)).astype(np.int32)
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    interp.resize_tensor_input(interp.get_input_details()[0]["index"], ids.shape)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], ids)
    interp.invoke()
    np.testing.assert_array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), f(ids).numpy())
    with pytest.raises(FusionError, match="static shape"):
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()], strict_fusion=True).convert()


def test_embedding_table_must_be_constant():
    @tf.function(experimental_implements="embedding_lookup")
    def lookup(params, ids):
        return tf.gather(params, ids)

    @tf.function(input_signature=[tf.TensorSpec([10, 4], tf.float32), tf.TensorSpec([3], tf.int32)])
    def f(table, ids):
        return lookup(table, ids)

    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    conv.convert()
    assert "must be a constant" in conv.report.composites[0]["reason"]


# -- user rules -----------------------------------------------------------------------------------


def _scaled_model(interface):
    @tf.function(experimental_implements=fuselite.implements(interface, factor=3))
    def scaled(x, w):
        return tf.matmul(x, w) * 3.0

    w = tf.Variable(RNG.standard_normal((4, 5)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32)])
    def f(x):
        return scaled(x, w) + scaled(x + 1.0, w)  # two call sites: fused once

    return f


def test_per_conversion_rule_fuses_into_builtin():
    @fuselite.fusion("test.scaled_matmul", register=False)
    def fuse_scaled(c):
        x, w = c.args
        if w.const is None:
            c.decline("w must be constant")
        factor = c.attrs["factor"]
        return c.op("FULLY_CONNECTED", [x, (w.const.T * factor).astype(np.float32), None],
                    {"fused_activation_function": "NONE"}, like=c.results[0])

    f = _scaled_model("test.scaled_matmul")
    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()], fusions=[fuse_scaled])
    data = conv.convert()
    (rec,) = conv.report.composites
    assert rec["status"] == "fused" and rec["call_sites"] == 2 and rec["into"] == ["FULLY_CONNECTED"]
    assert "MUL" not in litert_op_names(data)
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(next(iter(run(data, [x]).values())), f(x).numpy(), atol=1e-5)
    # without the rule the same composite converts from its body
    plain = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    plain.convert()
    assert plain.report.composites[0]["status"] == "not fused"


def test_global_rule_and_broken_rules_are_declined_not_fatal():
    calls = []

    @fuselite.fusion("test.broken")
    def broken(c):
        calls.append(1)
        raise KeyError("oops")

    try:
        f = _scaled_model("test.broken")
        conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
        data = conv.convert()
        assert calls == [1]  # once per composite function, not per call site
        assert "raised KeyError" in conv.report.composites[0]["reason"]
        x = RNG.standard_normal((2, 4)).astype(np.float32)
        np.testing.assert_allclose(next(iter(run(data, [x]).values())), f(x).numpy(), atol=1e-5)
    finally:
        registry.unregister("test.broken")


def test_rule_returning_wrong_results_is_declined():
    @fuselite.fusion("test.scaled_matmul", register=False)
    def wrong(c):
        return []

    f = _scaled_model("test.scaled_matmul")
    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()], fusions=[wrong])
    conv.convert()
    assert "returned 0 value(s) for 1 result(s)" in conv.report.composites[0]["reason"]


def test_fusions_argument_rejects_undecorated_functions():
    f = _scaled_model("test.scaled_matmul")
    with pytest.raises(TypeError, match="fusion"):
        fuselite.Converter.from_concrete_functions([f.get_concrete_function()], fusions=[lambda c: None])


def test_rules_from_an_installed_package_entry_point(tmp_path, monkeypatch):
    pkg = tmp_path / "fuselite_test_plugin.py"
    pkg.write_text(
        "import numpy as np\n"
        "import fuselite\n"
        "@fuselite.fusion('test.plugin_scaled', register=False)\n"
        "def rule(c):\n"
        "    x, w = c.args\n"
        "    return c.op('FULLY_CONNECTED', [x, (w.const.T * 3).astype(np.float32), None],\n"
        "                {'fused_activation_function': 'NONE'}, like=c.results[0])\n"
        "RULES = [rule]\n")
    dist = tmp_path / "fuselite_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fuselite-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fuselite.fusions]\nscaled = fuselite_test_plugin:RULES\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", False)
    try:
        f = _scaled_model("test.plugin_scaled")
        conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
        data = conv.convert()
        assert conv.report.composites[0]["status"] == "fused"
        assert "MUL" not in litert_op_names(data)
    finally:
        registry.unregister("test.plugin_scaled")


# -- a composite with a real body, a user rule to a custom op, and a NumPy kernel ------------------


def _sdpa_reference(q, k, v, scale):
    s = q @ np.swapaxes(k, -1, -2) * scale
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def test_scaled_dot_product_composite_runs_as_custom_op_with_python_kernel():
    scale = 0.125

    @tf.function(experimental_implements=fuselite.implements("demo.sdpa", scale=scale, causal=False))
    def sdpa(q, k, v):
        return tf.matmul(tf.nn.softmax(tf.matmul(q, k, transpose_b=True) * scale), v)

    wq = tf.Variable(RNG.standard_normal((8, 8)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([2, 5, 8], tf.float32, name="x")])
    def model(x):
        q = tf.einsum("btd,de->bte", x, wq)
        return sdpa(q, x, x) + 1.0

    @fuselite.fusion("demo.sdpa", register=False)
    def fuse_sdpa(c):
        c.expect_args(3)
        if any(a.rank != 3 for a in c.args):
            c.decline("q, k and v must have rank 3")
        return c.custom_op("DemoSdpa", c.args, {"scale": c.attrs["scale"], "causal": c.attrs["causal"]})

    conv = fuselite.Converter.from_concrete_functions([model.get_concrete_function()], fusions=[fuse_sdpa])
    data = conv.convert()
    assert _custom_ops(data) == [("DemoSdpa", {"scale": 0.125, "causal": False})]
    assert "BATCH_MATMUL" not in litert_op_names(data) and "SOFTMAX" not in litert_op_names(data)

    def kernel(inputs, options):
        q, k, v = inputs
        return _sdpa_reference(q, k, v, options["scale"]).astype(np.float32)

    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((2, 5, 8)).astype(np.float32)
        got = next(iter(run(data, [x], kernels={"DemoSdpa": kernel}).values()))
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5)


def test_custom_op_without_kernel_names_the_op(docs_saved_model):
    from fuselite.runtime.custom_ops import MissingKernelError

    data = fuselite.Converter.from_saved_model(docs_saved_model[0]).convert()
    with pytest.raises(MissingKernelError, match="my_custom_fused_op"):
        run(data, [np.zeros((1, 28, 28, 3), np.float32)] * 2)
