"""The IR without TensorFlow: users index, verifier, text form, and passes tested as IR text in -> IR text out."""

from __future__ import annotations

import io
import textwrap

import numpy as np
import pytest

from fuselite.ir import Function, Module, Quantization
from fuselite.ir.invariants import IRVerificationError, check, verify
from fuselite.ir.text import IRParseError, format_module, parse_module
from fuselite.passes.bidirectional import cancel_reverse_pairs
from fuselite.passes.dce import dce
from fuselite.passes.fold_tfl import fold_tfl_function
from fuselite.passes.inline import inline_calls
from fuselite.passes.manager import FixedPoint, Group, Pass, format_pipeline, run_pipeline
from fuselite.passes.optimize import optimize
from fuselite.report import Report

FC = '{"fused_activation_function": "NONE", "keep_num_dims": False, "weights_format": "DEFAULT", ' \
     '"asymmetric_quantize_inputs": False}'
FC_RELU = FC.replace('"NONE"', '"RELU"')


def ir(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def run_on_text(text: str, run) -> str:
    """Parse ``text``, check it, run the pass, check the result and print it."""
    module = parse_module(ir(text))
    check(module)
    run(module)
    check(module)
    return format_module(module)


def each_function(pass_fn):
    return lambda m: [pass_fn(f) for f in m.functions.values()]


# -- passes: IR text in -> IR text out ----------------------------------------------------

PASS_CASES = {
    "inline a call, then drop the callee": (lambda m: (inline_calls(m), dce(m)), """
        signature "serving_default" = @main
        func @main(%x:float32[2] as "x") {
          %call:float32[2] = tf.PartitionedCall(%x) {"f": "double"}
          return %call as "y"
        }
        func @double(%a:float32[2]) {
          %sum:float32[2] = tf.AddV2(%a, %a)
          return %sum
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2] as "x") {
          %partitionedcall/addv2:float32[2] = tf.AddV2(%x, %x) name "partitionedcall/addv2"
          return %partitionedcall/addv2 as "y"
        }
        """),
    "dce keeps variable writes": (dce, """
        signature "serving_default" = @main
        func @main(%x:float32[2] as "x", %v:resource[]) {
          %dead:float32[2] = tfl.RELU(%x)
          () = tfl.ASSIGN_VARIABLE(%v, %x)
          %live:float32[2] = tfl.TANH(%x)
          return %live as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2] as "x", %v:resource[]) {
          () = tfl.ASSIGN_VARIABLE(%v, %x)
          %live:float32[2] = tfl.TANH(%x)
          return %live as "y"
        }
        """),
    "fold TFLite ops on constants": (each_function(fold_tfl_function), """
        signature "serving_default" = @main
        func @main(%x:float32[2] as "x") {
          %a:float32[2] = const array([1.0, 2.0], float32)
          %b:float32[2] = const array([10.0, 20.0], float32)
          %sum:float32[2] = tfl.ADD(%a, %b) {"fused_activation_function": "NONE"}
          %y:float32[2] = tfl.MUL(%x, %sum) {"fused_activation_function": "NONE"}
          return %y as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2] as "x") {
          %sum:float32[2] = const array([11.0, 22.0], float32)
          %y:float32[2] = tfl.MUL(%x, %sum) {"fused_activation_function": "NONE"}
          return %y as "y"
        }
        """),
    "common subexpressions": (optimize, """
        signature "serving_default" = @main
        func @main(%x:float32[2] as "x") {
          %t1:float32[2] = tfl.TANH(%x)
          %t2:float32[2] = tfl.TANH(%x)
          %y:float32[2] = tfl.ADD(%t1, %t2) {"fused_activation_function": "NONE"}
          return %y as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2] as "x") {
          %t1:float32[2] = tfl.TANH(%x)
          %y:float32[2] = tfl.ADD(%t1, %t1) {"fused_activation_function": "NONE"}
          return %y as "y"
        }
        """),
    "two transposes compose into one": (optimize, """
        signature "serving_default" = @main
        func @main(%x:float32[2x3x4] as "x") {
          %p1:int32[3] = const array([1, 0, 2], int32)
          %t1:float32[3x2x4] = tfl.TRANSPOSE(%x, %p1)
          %p2:int32[3] = const array([0, 2, 1], int32)
          %t2:float32[3x4x2] = tfl.TRANSPOSE(%t1, %p2)
          return %t2 as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2x3x4] as "x") {
          %transpose/perm:int32[3] = const array([1, 2, 0], int32)
          %t2:float32[3x4x2] = tfl.TRANSPOSE(%x, %transpose/perm)
          return %t2 as "y"
        }
        """),
    "a reverse of a reverse cancels": (lambda m: (each_function(cancel_reverse_pairs)(m), dce(m)), """
        signature "serving_default" = @main
        func @main(%x:float32[2x3] as "x") {
          %axis:int32[1] = const array([0], int32)
          %r1:float32[2x3] = tfl.REVERSE_V2(%x, %axis)
          %r2:float32[2x3] = tfl.REVERSE_V2(%r1, %axis)
          %y:float32[2x3] = tfl.TANH(%r2)
          return %y as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2x3] as "x") {
          %y:float32[2x3] = tfl.TANH(%x)
          return %y as "y"
        }
        """),
    "bias add and ReLU fold into FULLY_CONNECTED": (optimize, f"""
        signature "serving_default" = @main
        func @main(%x:float32[1x2] as "x") {{
          %w:float32[3x2] = const array([[1.0, 2.0], [0.5, 0.5], [1.0, -1.0]], float32)
          %fc:float32[1x3] = tfl.FULLY_CONNECTED(%x, %w, _) {FC}
          %b:float32[3] = const array([1.0, 2.0, 3.0], float32)
          %add:float32[1x3] = tfl.ADD(%fc, %b) {{"fused_activation_function": "NONE"}}
          %relu:float32[1x3] = tfl.RELU(%add)
          return %relu as "y"
        }}
        """, f"""
        signature "serving_default" = @main

        func @main(%x:float32[1x2] as "x") {{
          %w:float32[3x2] = const array([[1.0, 2.0], [0.5, 0.5], [1.0, -1.0]], float32)
          %fully_connected/bias:float32[3] = const array([1.0, 2.0, 3.0], float32)
          %fc:float32[1x3] = tfl.FULLY_CONNECTED(%x, %w, %fully_connected/bias) {FC_RELU}
          return %fc as "y"
        }}
        """),
    "a per-channel MUL scales the FULLY_CONNECTED weights": (optimize, f"""
        signature "serving_default" = @main
        func @main(%x:float32[1x2] as "x") {{
          %w:float32[3x2] = const array([[1.0, 2.0], [0.5, 0.5], [1.0, -1.0]], float32)
          %fc:float32[1x3] = tfl.FULLY_CONNECTED(%x, %w, _) {FC}
          %s:float32[3] = const array([2.0, 3.0, 4.0], float32)
          %mul:float32[1x3] = tfl.MUL(%fc, %s) {{"fused_activation_function": "NONE"}}
          return %mul as "y"
        }}
        """, f"""
        signature "serving_default" = @main

        func @main(%x:float32[1x2] as "x") {{
          %w_1:float32[3x2] = const array([[2.0, 4.0], [1.5, 1.5], [4.0, -4.0]], float32)
          %fc:float32[1x3] = tfl.FULLY_CONNECTED(%x, %w_1, _) {FC}
          return %fc as "y"
        }}
        """),
    "an all-zero FULLY_CONNECTED bias is left out": (optimize, f"""
        signature "serving_default" = @main
        func @main(%x:float32[1x2] as "x") {{
          %w:float32[3x2] = const array([[1.0, 2.0], [0.5, 0.5], [1.0, -1.0]], float32)
          %b:float32[3] = const array([0.0, 0.0, 0.0], float32)
          %fc:float32[1x3] = tfl.FULLY_CONNECTED(%x, %w, %b) {FC}
          return %fc as "y"
        }}
        """, f"""
        signature "serving_default" = @main

        func @main(%x:float32[1x2] as "x") {{
          %w:float32[3x2] = const array([[1.0, 2.0], [0.5, 0.5], [1.0, -1.0]], float32)
          %fc:float32[1x3] = tfl.FULLY_CONNECTED(%x, %w, _) {FC}
          return %fc as "y"
        }}
        """),
    "lower TF ops to TFLite builtins": (lambda m: __import__("fuselite.lower", fromlist=["x"]).lower_module(m), """
        signature "serving_default" = @main
        func @main(%x:float32[2] as "x", %z:float32[2] as "z") {
          %sum:float32[2] = tf.AddV2(%x, %z)
          %y:float32[2] = tf.Relu(%sum)
          return %y as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2] as "x", %z:float32[2] as "z") {
          %addv2:float32[2] = tfl.ADD(%x, %z) {"fused_activation_function": "NONE"} name "addv2"
          %relu:float32[2] = tfl.RELU(%addv2)
          return %relu as "y"
        }
        """),
    "topological order restores definition before use": (lambda m: m.functions["main"].topo_sort(), """
        signature "serving_default" = @main
        func @main(%x:float32[2] as "x") {
          %a:float32[2] = tfl.TANH(%x)
          %b:float32[2] = tfl.RELU(%a)
          return %b as "y"
        }
        """, """
        signature "serving_default" = @main

        func @main(%x:float32[2] as "x") {
          %a:float32[2] = tfl.TANH(%x)
          %b:float32[2] = tfl.RELU(%a)
          return %b as "y"
        }
        """),
}


@pytest.mark.parametrize("case", list(PASS_CASES))
def test_pass_on_ir_text(case):
    run, before, after = PASS_CASES[case]
    assert run_on_text(before, run) == ir(after)


def test_topo_sort_repairs_an_out_of_order_function():
    m = parse_module(ir(PASS_CASES["topological order restores definition before use"][1]))
    fn = m.functions["main"]
    fn.ops.reverse()
    assert any("used before it is defined" in p for p in verify(m))
    fn.topo_sort()
    assert verify(m) == []
    assert [op.kind for op in fn.ops] == ["TANH", "RELU"]


# -- text form --------------------------------------------------------------------------------


def test_text_round_trip_keeps_names_attrs_and_constants():
    text = ir("""
        signature "serving_default" = @main
        signature "other" = @second

        func @main(%x:float32[?x4] as "x", %"odd name:1":int32[*]) attributes {"_implements": "a.b"} {
          %c:int64[2x2] = const array([[1, 2], [3, -4]], int64)
          %"dense/BiasAdd:0":float32[?x4] = tfl.ADD(%x, %c) {"fused_activation_function": "NONE", "f": [1.5, nan, -inf], "t": (1,), "b": b'\\x00'} name "n" loc "model.py:12"
          %s:float32[] = const array(0.25, float32)
          return %"dense/BiasAdd:0" as "y", %s, %"odd name:1" as "z"
        }

        func @second() {
          () = tfl.CALL_ONCE() {"init_subgraph_index": "@main"}
          return
        }
        """)
    module = parse_module(text)
    assert format_module(module) == text
    fn = module.functions["main"]
    assert fn.input_names == ["x", ""] and fn.output_names == ["y", "", "z"]
    assert fn.inputs[0].shape == (None, 4) and fn.inputs[1].shape is None
    op = fn.ops[0]
    assert op.name == "n" and op.location == "model.py:12" and op.attrs["t"] == (1,)
    assert np.isnan(op.attrs["f"][1]) and op.inputs[1].const.dtype == np.int64
    assert fn.outputs[1].const.shape == () and fn.outputs[1].const.dtype == np.float32


def test_quantized_constants_print_and_parse_back():
    text = ir("""
        func @main(%x:float32[1x3]) {
          %w:int8[2x3] = const array([[127, -5, 0], [3, -127, 9]], int8) quant {"scale": [0.5, 0.25], "zero_point": [0, 0], "axis": 0}
          %y:float32[1x2] = tfl.FULLY_CONNECTED(%x, %w, _) {"asymmetric_quantize_inputs": True}
          return %y
        }
        """)
    module = parse_module(text)
    assert format_module(module) == text
    w = module.functions["main"].ops[0].inputs[1]
    assert w.quant.scale == (0.5, 0.25) and w.quant.per_channel and verify(module) == []


def test_elided_constants_are_for_reading_only():
    fn = Function("main")
    x = fn.add_input("x", np.float32, (1, 64))
    (y,) = fn.add_op("tfl.ADD", [x, fn.const(np.ones((1, 64), np.float32), "w")], [(np.float32, (1, 64))],
                     {"fused_activation_function": "NONE"}).outputs
    fn.outputs = [y]
    m = Module()
    m.add(fn)
    text = format_module(m, elide=16)
    assert "array(<elided 64>, float32)" in text
    with pytest.raises(IRParseError, match="elided"):
        parse_module(text)


@pytest.mark.parametrize("bad, message", [
    ("func @f(%x:float32[2]) {\n  %y:float32[2] = tfl.RELU(%z)\n  return %y\n}", "%z is used before it is defined"),
    ("func @f(%x:float32[2]) {\n  %y:float32[2] = RELU(%x)\n  return %y\n}", "an op type"),
    ("func @f(%x:float32[2]) {\n  %x:float32[2] = tfl.RELU(%x)\n  return %x\n}", "defined twice"),
    ("func @f(%x:float32[2]) {\n  %y:float32[2] = tfl.RELU(%x)\n}", "no 'return'"),
    ("module {", "expected 'signature' or 'func'"),
])
def test_parse_errors_name_the_line(bad, message):
    with pytest.raises(IRParseError, match=message):
        parse_module(bad)


# -- users index --------------------------------------------------------------------------------


def _chain():
    fn = Function("main")
    x = fn.add_input("x", np.float32, (2,))
    a = fn.add_op("tfl.TANH", [x], [(np.float32, (2,))])
    b = fn.add_op("tfl.RELU", [a.outputs[0]], [(np.float32, (2,))])
    fn.outputs = [b.outputs[0]]
    return fn, x, a, b


def test_users_index_follows_every_kind_of_change():
    fn, x, a, b = _chain()
    assert fn.uses(x) == [a] and fn.uses(a.outputs[0]) == [b]
    b.inputs[0] = x  # item assignment on an op's inputs
    assert fn.uses(x) == [a, b] and fn.uses(a.outputs[0]) == []
    b.inputs = [a.outputs[0]]  # replacing the list
    assert fn.uses(x) == [a]
    fn.ops.remove(b)  # list method on fn.ops
    assert fn.uses(a.outputs[0]) == []
    fn.ops[1:1] = [b]  # slice assignment
    assert fn.uses(a.outputs[0]) == [b]
    fn.ops = [a]  # replacing the list
    assert fn.uses(a.outputs[0]) == []
    fn.replace_op(a, [b], b.outputs)
    assert fn.uses(x) == [] and fn.is_output(b.outputs[0])


def test_users_index_is_cached_between_changes():
    fn, x, a, b = _chain()
    first = fn.users()
    assert fn.users() is first
    b.inputs.append(x)
    assert fn.users() is not first and fn.uses(x) == [a, b]


# -- verifier ---------------------------------------------------------------------------------


def _module(fn) -> Module:
    m = Module()
    m.add(fn)
    m.signatures["serving_default"] = fn.name
    return m


def _misshapen_const(fn):
    c = fn.const(np.zeros(3, np.float32))
    c.shape = (4,)
    return c


def test_verifier_accepts_a_well_formed_module():
    fn, *_ = _chain()
    assert verify(_module(fn)) == []


@pytest.mark.parametrize("breakage, message", [
    (lambda fn, m, x, a, b: fn.ops.remove(a), "not defined in this function"),
    (lambda fn, m, x, a, b: fn.ops.reverse(), "used before it is defined"),
    (lambda fn, m, x, a, b: setattr(fn, "outputs", [Function("other").add_input("o", np.float32, (2,))]),
     "output 0 %o is not defined"),
    (lambda fn, m, x, a, b: b.attrs.update(f="missing"), "refers to function 'missing'"),
    (lambda fn, m, x, a, b: m.signatures.update(other="nowhere"), "signature 'other' names function 'nowhere'"),
    (lambda fn, m, x, a, b: b.inputs.append(_misshapen_const(fn)), "shape (4,) but its constant has shape (3,)"),
    (lambda fn, m, x, a, b: setattr(a.outputs[0], "shape", [2]), "malformed shape"),
    (lambda fn, m, x, a, b: setattr(a, "type", "TANH"), "no dialect"),
    (lambda fn, m, x, a, b: fn.ops.append(b), "defined twice"),
    (lambda fn, m, x, a, b: setattr(fn, "output_names", ["y", "y"]), "output_names"),
    (lambda fn, m, x, a, b: b.inputs.append(fn.const(np.ones(3, np.float32), quant=Quantization((1.0,), (0,)))),
     "quantization on a float32 value"),
    (lambda fn, m, x, a, b: b.inputs.append(fn.const(np.ones((2, 3), np.int8), quant=Quantization((1.0,) * 3, (0,) * 3))),
     "3 per-channel scales on axis 0"),
    (lambda fn, m, x, a, b: b.inputs.append(fn.const(np.ones(3, np.int8), quant=Quantization((0.0,), (0,)))),
     "positive and finite"),
])
def test_verifier_names_each_broken_invariant(breakage, message):
    fn, x, a, b = _chain()
    m = _module(fn)
    breakage(fn, m, x, a, b)
    problems = verify(m)
    assert any(message in p for p in problems), problems
    with pytest.raises(IRVerificationError, match="after pass 'p'"):
        check(m, after="p")


# -- pass manager -----------------------------------------------------------------------------


class _Ctx:
    def __init__(self, verify_ir=True, print_after=()):
        self.report = Report()
        self.verify_ir, self.print_after = verify_ir, frozenset(print_after)
        self.print_stream, self.print_elide = io.StringIO(), 16


def test_fixed_point_stops_at_the_first_pass_that_changes_nothing():
    calls = []
    budget = {"a": 3, "b": 2}

    def step(name):
        def run(m, ctx):
            calls.append(name)
            budget[name] -= 1
            return budget[name] >= 0

        return Pass(name, run, name)

    run_pipeline([FixedPoint("fp", [step("a"), step("b")], "x", max_rounds=10)], Module(), _Ctx())
    assert calls == ["a", "b", "a", "b", "a", "b"]  # b's third run changed nothing
    calls.clear()
    budget.update(a=100, b=100)
    run_pipeline([FixedPoint("fp", [step("a"), step("b")], "x", max_rounds=2)], Module(), _Ctx())
    assert calls == ["a", "b", "a", "b"]


def test_groups_run_when_their_condition_holds_and_passes_are_timed():
    ran = []
    p = Pass("p", lambda m, ctx: ran.append("p"), "doc of p")
    ctx = _Ctx()
    run_pipeline([Group("g", [p], "group", when=lambda m, c: False), p], Module(), ctx)
    assert ran == ["p"] and set(ctx.report.stage_seconds) == {"p"}
    assert "g: (when needed)" in format_pipeline([Group("g", [p], "group", when=lambda m, c: False)])


def test_the_verifier_names_the_pass_that_broke_the_ir():
    fn, x, a, b = _chain()
    m = _module(fn)
    breaker = Pass("break-it", lambda m, ctx: m.functions["main"].ops.remove(a), "removes a used op")
    with pytest.raises(IRVerificationError, match="after pass 'break-it'"):
        run_pipeline([breaker], m, _Ctx(verify_ir=True))


def test_print_after_prints_the_ir_after_the_named_pass():
    fn, *_ = _chain()
    ctx = _Ctx(print_after=["second"])
    run_pipeline([Pass("first", lambda m, c: None, ""), Pass("second", lambda m, c: None, "")], _module(fn), ctx)
    out = ctx.print_stream.getvalue()
    assert out.startswith("// ----- IR after second -----") and "tfl.RELU(%tanh)" in out
    assert "after first" not in out
