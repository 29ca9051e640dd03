"""Mutable variables: LiteRT resource variables, init via CALL_ONCE, reset, program order.

Every test runs the converted model on the stock LiteRT interpreter and compares each
invoke with TensorFlow eager running the same module from the same starting state.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.errors import ConversionError, MutableVariableError
from fuselite.runtime import reset_variables

RNG = np.random.default_rng(0)


def stock_interpreter(data: bytes):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    return interp


def op_names(interp) -> set[str]:
    return {d["op_name"] for d in interp._get_ops_details()}


def run_and_compare(tf_fn, runner, inputs: list[dict], atol=1e-6):
    """Invoke both sides once per input dict; every output must agree each time."""
    for step, x in enumerate(inputs):
        want = tf_fn(**{k: tf.constant(v) for k, v in x.items()})
        want = want if isinstance(want, dict) else {"output_0": want}
        got = runner(**x)
        assert set(got) == set(want), (got.keys(), want.keys())
        for k in want:
            np.testing.assert_allclose(got[k], np.asarray(want[k]), atol=atol, rtol=0,
                                       err_msg=f"step {step}, output {k}")


# -- 1. a counter -----------------------------------------------------------------------
class Counter(tf.Module):
    def __init__(self):
        self.count = tf.Variable(tf.zeros([3]), name="count")
        self.steps = tf.Variable(0, name="steps")
        self.scale = tf.Variable([1.5, -2.0, 0.5], name="scale")  # never assigned: frozen

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def __call__(self, x):
        self.count.assign_add(x * self.scale)
        self.steps.assign_add(1)
        return {"count": self.count.read_value(), "steps": self.steps.read_value()}


def test_counter_ten_invokes_then_reset():
    m = Counter()
    conv = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m)
    data = conv.convert()
    interp = stock_interpreter(data)
    runner = interp.get_signature_runner("serving_default")
    xs = [{"x": RNG.normal(size=3).astype(np.float32)} for _ in range(10)]
    run_and_compare(m.__call__, runner, xs)
    reset_variables(interp)
    fresh = Counter()  # a fresh module starts from the initial state
    run_and_compare(fresh.__call__, runner, xs)


def test_reset_all_variables_alone_resets_resource_variables():
    """LiteRT's reset_all_variables() zeroes only is_variable tensors: a witness (an RNN's in-place state)
    tells the next invoke to run the reset function first, as the reset signature does. The witness is the
    Interpreter's (litert_api="interpreter"): CompiledModel refuses its variable tensor."""
    m = Counter()
    data = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m,
                                                      litert_api="interpreter").convert()
    interp = stock_interpreter(data)
    runner = interp.get_signature_runner("serving_default")
    x = np.ones(3, np.float32)
    assert [int(runner(x=x)["steps"]) for _ in range(3)] == [1, 2, 3]
    interp.reset_all_variables()
    assert [int(runner(x=x)["steps"]) for _ in range(2)] == [1, 2]
    interp.get_signature_runner("reset_variables")()  # what fuselite.runtime.reset_variables runs
    assert int(runner(x=x)["steps"]) == 1
    interp.reset_all_variables()
    interp.get_signature_runner("reset_variables")()  # both: still the initial state, once
    np.testing.assert_allclose(runner(x=x)["count"], np.asarray(m.scale), atol=1e-6)


def test_reset_before_any_invoke_and_initial_value_at_conversion_time():
    m = Counter()
    m.count.assign([10.0, 20.0, 30.0])  # the value at conversion time is the initial value
    data = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m).convert()
    interp = stock_interpreter(data)
    reset_variables(interp)  # before CALL_ONCE ran: harmless
    runner = interp.get_signature_runner("serving_default")
    xs = [{"x": RNG.normal(size=3).astype(np.float32)} for _ in range(3)]
    run_and_compare(m.__call__, runner, xs)


# -- 2. a streaming moving average ---------------------------------------------------------
class MovingAverage(tf.Module):
    """The mean of the last N inputs (a shift register) and the running mean of all inputs."""

    def __init__(self, n=4, d=5):
        self.buffer = tf.Variable(tf.zeros([n, d]), name="buffer")
        self.seen = tf.Variable(0.0, name="seen")
        self.running = tf.Variable(tf.zeros([d]), name="running")
        self.n = n

    @tf.function(input_signature=[tf.TensorSpec([5], tf.float32)])
    def step(self, x):
        self.buffer.assign(tf.concat([self.buffer[1:], x[None]], axis=0))
        self.seen.assign_add(1.0)
        self.running.assign(self.running + (x - self.running) / self.seen)
        window = tf.reduce_sum(self.buffer, axis=0) / tf.minimum(self.seen, float(self.n))
        return {"window": window, "running": self.running.read_value()}


def test_moving_average_ten_invokes_then_reset():
    m = MovingAverage()
    data = fuselite.Converter.from_concrete_functions([m.step.get_concrete_function()], m).convert()
    interp = stock_interpreter(data)
    runner = interp.get_signature_runner("serving_default")
    xs = [{"x": RNG.normal(size=5).astype(np.float32)} for _ in range(10)]
    run_and_compare(m.step, runner, xs)
    reset_variables(interp)
    fresh = MovingAverage()
    run_and_compare(fresh.step, runner, xs)


# -- 3. program order within one call ---------------------------------------------------------
class ReadAssignRead(tf.Module):
    def __init__(self):
        self.v = tf.Variable([1.0, 2.0], name="v")

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def f(self, x):
        before = self.v.read_value() * 3.0       # the old value
        self.v.assign(x * 2.0)
        middle = self.v.read_value() + before    # the new value
        self.v.assign_sub(middle)
        after = self.v.read_value()              # after a second write
        return {"before": before, "middle": middle, "after": after}


@pytest.mark.parametrize("batch_size", [None, 1], ids=["traced", "from_function_def"])
def test_read_before_and_after_assign_in_one_call(batch_size):
    m = ReadAssignRead()
    conv = fuselite.Converter.from_concrete_functions([m.f.get_concrete_function()], m, batch_size=batch_size)
    runner = stock_interpreter(conv.convert()).get_signature_runner("serving_default")
    xs = [{"x": RNG.normal(size=2).astype(np.float32)} for _ in range(3)]
    run_and_compare(m.f, runner, xs)


class LoopAndState(tf.Module):
    """Assigns inside a while loop, and a read feeding a computation whose result is assigned
    back (the pattern of a stateful RNN: state [batch, units] read, new state assigned)."""

    def __init__(self):
        self.total = tf.Variable(tf.zeros([3]), name="total")
        self.state = tf.Variable(tf.zeros([2, 4]), name="state")
        self.w = tf.Variable(RNG.normal(size=(3, 4)).astype(np.float32) * 0.5, name="w")
        self.u = tf.Variable(RNG.normal(size=(4, 4)).astype(np.float32) * 0.5, name="u")

    @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32)])
    def f(self, x):
        for i in tf.range(3):
            self.total.assign_add(x[0] * tf.cast(i + 1, tf.float32))
        h = tf.tanh(tf.matmul(x, self.w) + tf.matmul(self.state.read_value(), self.u))
        self.state.assign(h)
        return {"h": h, "total": self.total.read_value()}


def test_assigns_in_loops_and_recurrent_state():
    m = LoopAndState()
    conv = fuselite.Converter.from_concrete_functions([m.f.get_concrete_function()], m)
    data = conv.convert()
    interp = stock_interpreter(data)
    assert "WHILE" in op_names(interp)
    runner = interp.get_signature_runner("serving_default")
    xs = [{"x": RNG.normal(size=(2, 3)).astype(np.float32)} for _ in range(5)]
    run_and_compare(m.f, runner, xs, atol=1e-5)
    assert {v["name"] for v in conv.report.mutable_variables} == {"total", "state"}
    assert {v["name"] for v in conv.report.frozen_variables} == {"w", "u"}


# -- 4. two signatures sharing variables, through a SavedModel -----------------------------------
class Shared(tf.Module):
    def __init__(self):
        self.acc = tf.Variable(tf.zeros([3]), name="acc")
        self.n = tf.Variable(0, name="n")

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def increment(self, x):
        self.acc.assign_add(x)
        self.n.assign_add(1)
        return self.acc.read_value()

    @tf.function(input_signature=[])
    def get(self):
        return {"acc": self.acc.read_value(), "n": self.n.read_value()}


def _saved_shared(tmp_path, module, extra=None):
    sigs = {"increment": module.increment.get_concrete_function(), "get": module.get.get_concrete_function()}
    sigs.update(extra or {})
    path = str(tmp_path / "shared")
    tf.saved_model.save(module, path, signatures=sigs)
    return path


def test_two_signatures_share_a_variable_through_saved_model(tmp_path):
    m = Shared()
    conv = fuselite.Converter.from_saved_model(_saved_shared(tmp_path, m))
    data = conv.convert()
    interp = stock_interpreter(data)
    assert set(interp.get_signature_list()) == {"increment", "get", "reset_variables"}
    inc, get = interp.get_signature_runner("increment"), interp.get_signature_runner("get")
    ref = Shared()  # the loaded SavedModel's state equals a fresh module's
    xs = [{"x": RNG.normal(size=3).astype(np.float32)} for _ in range(4)]
    run_and_compare(ref.get, get, [{}])  # get first: the init runs from any signature
    for x in xs:
        run_and_compare(ref.increment, inc, [x])
        run_and_compare(ref.get, get, [{}])
    reset_variables(interp)
    ref = Shared()
    run_and_compare(ref.get, get, [{}])
    run_and_compare(ref.increment, inc, xs)
    run_and_compare(ref.get, get, [{}])


def test_reset_signature_name_clash_is_an_error(tmp_path):
    m = Shared()
    path = _saved_shared(tmp_path, m, {"reset_variables": m.get.get_concrete_function()})
    with pytest.raises(ConversionError, match="reset_variables"):
        fuselite.Converter.from_saved_model(path).convert()


# -- Keras layers that assign variables --------------------------------------------------------------
def test_keras_layer_assigning_a_variable():
    import keras

    class Accumulate(keras.layers.Layer):
        def build(self, shape):
            self.total = self.add_weight(shape=(shape[-1],), initializer="zeros", trainable=False, name="total")
            self.k = self.add_weight(shape=(shape[-1],), initializer="ones", name="k")

        def call(self, x):
            self.total.assign_add(keras.ops.sum(x, axis=0))
            return x * self.k + self.total

    inp = keras.Input((4,), batch_size=2)
    model = keras.Model(inp, Accumulate()(inp))
    conv = fuselite.Converter.from_keras_model(model)
    interp = stock_interpreter(conv.convert())
    sigs = interp.get_signature_list()
    key = next(k for k in sigs if k != "reset_variables")
    runner = interp.get_signature_runner(key)
    name = sigs[key]["inputs"][0]
    xs = [RNG.normal(size=(2, 4)).astype(np.float32) for _ in range(4)]
    for x in xs:
        (got,) = runner(**{name: x}).values()
        np.testing.assert_allclose(got, np.asarray(model(x)), atol=1e-5)
    assert [v["name"] for v in conv.report.mutable_variables] == [model.layers[-1].total.path]


# -- 5. report and ops -----------------------------------------------------------------------------------
def test_report_and_ops():
    m = Counter()
    conv = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m)
    data = conv.convert()
    r = conv.report
    assert r.mutable_variables == [{"name": "count", "shape": [3], "dtype": "float32"},
                                   {"name": "steps", "shape": [], "dtype": "int32"}]
    assert r.frozen_variables == [{"name": "scale", "shape": [3], "dtype": "float32"}]
    text = str(r)
    assert "mutable variables (resource variables): 2" in text and "count: float32[3]" in text
    assert "frozen variables: 1" in text and "scale: float32[3]" in text
    assert json.loads(r.to_json())["mutable_variables"][1]["name"] == "steps"
    assert "reset_variables" in r.signatures
    interp = stock_interpreter(data)
    assert {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"} <= op_names(interp)
    out = interp.get_signature_runner("serving_default")(x=np.ones(3, np.float32))
    np.testing.assert_allclose(out["count"], np.asarray(m.scale.numpy()))


def test_flatbuffer_resource_ops():
    from ai_edge_litert import schema_py_generated as schema

    m = Counter()
    data = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m).convert()
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    codes = {i: c.builtinCode for i, c in enumerate(model.operatorCodes)}
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    main = model.subgraphs[model.signatureDefs[0].subgraphIndex]
    first = main.operators[0]
    assert names[codes[first.opcodeIndex]] == "CALL_ONCE"  # the init runs before anything reads
    init = model.subgraphs[first.builtinOptions.initSubgraphIndex]
    assert len(init.inputs) == 0 and len(init.outputs) == 0
    handles = [o for o in main.operators if names[codes[o.opcodeIndex]] == "VAR_HANDLE"]
    assert sorted(o.builtinOptions.sharedName.decode() for o in handles) == ["count", "steps"]
    assert all(o.builtinOptions.container in (None, b"") for o in handles)
    assert all(main.tensors[o.outputs[0]].type == schema.TensorType.RESOURCE for o in handles)
    assert all(c.version == 1 for c in model.operatorCodes if names[c.builtinCode] in
               ("VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"))
    meta = next(x for x in model.metadata if x.name.decode() == "min_runtime_version")
    assert bytes(model.buffers[meta.buffer].data).rstrip(b"\0") == b"2.6.0"


# -- 6. unsupported uses ------------------------------------------------------------------------------------
def test_unsupported_resource_op_on_mutable_variable_is_named():
    class Scatter(tf.Module):
        def __init__(self):
            self.table = tf.Variable(tf.zeros([4, 2]), name="table")

        @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
        def f(self, x):
            self.table.scatter_update(tf.IndexedSlices(x[None], tf.constant([1])))
            return self.table.read_value()

    m = Scatter()
    with pytest.raises(MutableVariableError) as e:
        fuselite.Converter.from_concrete_functions([m.f.get_concrete_function()], m).convert()
    msg = str(e.value)
    assert "ResourceScatterUpdate" in msg and "'table'" in msg
    assert any("ResourceScatterUpdate" in p for p in e.value.problems)


def test_sliced_assign_is_an_error_not_a_frozen_variable():
    """``v[0].assign(x)`` (ResourceStridedSliceAssign) writes the variable: never frozen, never dropped."""
    class Sliced(tf.Module):
        def __init__(self):
            self.v = tf.Variable(np.zeros(3, np.float32), name="sliced")

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def f(self, x):
            self.v[0].assign(x)
            return self.v.read_value() * 2.0

    m = Sliced()
    with pytest.raises(MutableVariableError) as e:
        fuselite.Converter.from_concrete_functions([m.f.get_concrete_function()], m).convert()
    assert "ResourceStridedSliceAssign" in str(e.value) and "'sliced'" in str(e.value)


def test_read_only_variables_are_still_constants():
    class ReadOnly(tf.Module):
        def __init__(self):
            self.w = tf.Variable([[1.0, 2.0], [3.0, 4.0]], name="w")

        @tf.function(input_signature=[tf.TensorSpec([1, 2], tf.float32)])
        def f(self, x):
            return tf.matmul(x, self.w)

    m = ReadOnly()
    conv = fuselite.Converter.from_concrete_functions([m.f.get_concrete_function()], m)
    interp = stock_interpreter(conv.convert())
    assert not op_names(interp) & {"VAR_HANDLE", "READ_VARIABLE", "CALL_ONCE"}
    assert "reset_variables" not in interp.get_signature_list()
    assert conv.report.mutable_variables == []


# -- ordering machinery ---------------------------------------------------------------------------------------
def test_import_order_follows_control_dependencies():
    from types import SimpleNamespace as NS

    from fuselite.frontend.tf_graph import program_order

    def op(name, inputs=(), control=()):
        o = NS(name=name, inputs=[NS(op=i) for i in inputs], control_inputs=list(control))
        return o

    read1 = op("read1")
    assign = op("assign", control=[read1])
    read2 = op("read2", control=[assign])
    add = op("add", inputs=[read1, read2])
    assert program_order([read1, assign, read2, add]) == [read1, assign, read2, add]  # unchanged
    assert program_order([read2, add, assign, read1]) == [read1, assign, read2, add]


def test_topo_sort_keeps_side_effects_in_program_order():
    from fuselite.ir import Function

    fn = Function("f")
    x = fn.add_input("x", np.float32, (2,))
    h = fn.add_op("tfl.VAR_HANDLE", [], [("resource", ())]).outputs[0]
    read1 = fn.make_op("tfl.READ_VARIABLE", [h], [(np.float32, (2,))])
    neg = fn.make_op("tfl.NEG", [x], [(np.float32, (2,))])
    assign = fn.make_op("tfl.ASSIGN_VARIABLE", [h, neg.outputs[0]], [])
    read2 = fn.make_op("tfl.READ_VARIABLE", [h], [(np.float32, (2,))])
    # invalid order (assign before its operand): a plain topological sort could hoist read2 above assign
    fn.ops += [read1, assign, read2, neg]
    fn.outputs = [read1.outputs[0], read2.outputs[0]]
    fn.topo_sort()
    kinds = [op.kind for op in fn.ops]
    assert kinds.index("READ_VARIABLE") < kinds.index("ASSIGN_VARIABLE") < len(kinds) - 1
    assert fn.ops[-1] is read2 and fn.ops.index(neg) < fn.ops.index(assign)


def test_optimizer_does_not_merge_or_drop_reads():
    from fuselite.ir import Function
    from fuselite.passes.optimize import optimize_function

    fn = Function("f")
    x = fn.add_input("x", np.float32, (2,))
    h = fn.add_op("tfl.VAR_HANDLE", [], [("resource", ())], {"_pinned": True}).outputs[0]
    r1 = fn.add_op("tfl.READ_VARIABLE", [h], [(np.float32, (2,))], {"_pinned": True}).outputs[0]
    fn.add_op("tfl.ASSIGN_VARIABLE", [h, x], [], {"_pinned": True})
    r2 = fn.add_op("tfl.READ_VARIABLE", [h], [(np.float32, (2,))], {"_pinned": True}).outputs[0]
    fn.add_op("tfl.ASSIGN_VARIABLE", [h, x], [], {"_pinned": True})  # unused result: still kept
    fn.outputs = [r1, r2]
    optimize_function(fn)
    assert [op.kind for op in fn.ops] == ["VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "READ_VARIABLE",
                                          "ASSIGN_VARIABLE"]


def test_gather_from_a_mutable_variable_reads_it_in_order():
    class Table(tf.Module):
        def __init__(self):
            self.t = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2), name="t")

        @tf.function(input_signature=[tf.TensorSpec([2], tf.int32)])
        def f(self, i):
            before = tf.gather(self.t, i)  # ResourceGather on the variable
            self.t.assign_add(tf.ones([4, 2]))
            return before * 10.0 + tf.gather(self.t, i)

    m = Table()
    runner = stock_interpreter(fuselite.Converter.from_concrete_functions(
        [m.f.get_concrete_function()], m).convert()).get_signature_runner("serving_default")
    run_and_compare(m.f, runner, [{"i": np.array([3, 1], np.int32)}, {"i": np.array([0, 0], np.int32)}] * 2)
