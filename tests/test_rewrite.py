"""The declared-rewrite API (``fuselite.passes.rewrite``) on hand-built IR, without TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from fuselite.ir import Function
from fuselite.passes.rewrite import RULES, TF, TFL, Const, OneOf, OpPattern, RewriteCtx, Rule, Var, rewrite

F32 = np.dtype(np.float32)


def _fn():
    fn = Function("f")
    return fn, fn.add_input("x", F32, (2, 4))


def _op(fn, kind, *inputs, name=""):
    """Append ``tfl.<kind>`` (or ``tf.<Kind>``) of ``inputs``; returns its result."""
    t = kind if "." in kind else f"tfl.{kind}"
    return fn.add_op(t, list(inputs), [(F32, (2, 4))], name=name or kind.lower()).outputs[0]


def _drop(ctx, m):
    """Drop the matched ``op``; its users read ``x``."""
    ctx.replace(m.op, m.x)


def _rule(pattern, replacement=_drop, **kw) -> Rule:
    return Rule(pattern, replacement, **kw)


def _matches(pattern, op, fn, anchor=None):
    return _rule(pattern, anchor=anchor).match(op, RewriteCtx(fn))


# -- matching --------------------------------------------------------------------------------


def test_match_captures_values_and_ops():
    fn, x = _fn()
    y = _op(fn, "ADD", x, fn.const(np.float32(2.0), "two"))
    m = _matches(TFL.ADD(Var("x"), Const("c"), name="op"), y.producer, fn)
    assert m is not None and m.x is x and m.c.const == 2.0 and m.op is y.producer
    assert m["x"] is x


def test_no_match_on_type_constant_value_or_arity():
    fn, x = _fn()
    c = fn.const(np.float32(2.0), "two")
    add, mul = _op(fn, "ADD", x, c).producer, _op(fn, "MUL", x, c).producer
    assert _matches(TFL.ADD(Var(), Const(value=2.0)), add, fn) is not None
    assert _matches(TFL.ADD(Var(), Const(value=3.0)), add, fn) is None  # another constant
    assert _matches(TFL.ADD(Var(), Var("y")), mul, fn) is None  # another op type
    assert _matches(TFL.ADD(Const(), Var()), add, fn) is None  # x is no constant
    assert _matches(TFL.ADD(Var()), add, fn) is None  # exactly as many operands...
    assert _matches(TFL.ADD(Var(), ...), add, fn) is not None  # ... unless more may follow


def test_nested_pattern_and_same_name_means_same_value():
    fn, x = _fn()
    y = fn.add_input("y", F32, (2, 4))
    xx = _op(fn, "MUL", _op(fn, "RELU", x), x)
    xy = _op(fn, "MUL", _op(fn, "RELU", x), y)
    pattern = TFL.MUL(TFL.RELU(Var("x"), name="relu"), Var("x"))
    m = _matches(pattern, xx.producer, fn)
    assert m is not None and m.relu is xx.producer.inputs[0].producer
    assert _matches(pattern, xy.producer, fn) is None


def test_commutative_operands():
    fn, x = _fn()
    c = fn.const(np.float32(2.0), "two")
    add, sub = _op(fn, "ADD", c, x).producer, _op(fn, "SUB", c, x).producer
    assert _matches(TFL.ADD(Var("x"), Const("c")), add, fn) is None
    m = _matches(TFL.ADD(Var("x"), Const("c"), commutative=True), add, fn)
    assert m is not None and m.x is x and m.c is c
    # commutative for the kinds named only: c - x is not x - c
    either = TFL["ADD", "SUB"](Var("x"), Const("c"), commutative=("ADD",))
    assert _matches(either, add, fn) is not None
    assert _matches(either, sub, fn) is None


def test_failed_order_leaves_no_captures_behind():
    fn, x = _fn()
    y = fn.add_input("y", F32, (2, 4))
    # ADD(NEG(y), RELU(x)) against ADD(a, NEG(b)): the first order binds a = NEG(y), fails on
    # RELU(x) for NEG(b), and must forget a before trying a = RELU(x), b = y
    neg, relu = _op(fn, "NEG", y), _op(fn, "RELU", x)
    add = _op(fn, "ADD", neg, relu).producer
    m = _matches(TFL.ADD(Var("a"), TFL.NEG(Var("b")), commutative=True), add, fn)
    assert m is not None and m.a is relu and m.b is y and set(m) == {"a", "b"}


def test_single_use():
    fn, x = _fn()
    r = _op(fn, "RELU", x)
    once = _op(fn, "NEG", r)
    pattern = TFL.NEG(TFL.RELU(Var(), single_use=True))
    assert _matches(pattern, once.producer, fn) is not None
    _op(fn, "ABS", r)  # a second reader of the RELU's result
    assert _matches(pattern, once.producer, fn) is None
    assert _matches(TFL.NEG(TFL.RELU(Var())), once.producer, fn) is not None


def test_where_checks_the_op_alone():
    fn, x = _fn()
    add = fn.add_op("tfl.ADD", [x, x], [(F32, (2, 4))], {"fused_activation_function": "RELU"})
    free = lambda op: op.attrs.get("fused_activation_function") == "NONE"  # noqa: E731
    assert _matches(TFL.ADD(Var(), Var(), where=free), add, fn) is None
    add.attrs["fused_activation_function"] = "NONE"
    assert _matches(TFL.ADD(Var(), Var(), where=free), add, fn) is not None


def test_producers_outside_the_function_do_not_match():
    fn, x = _fn()
    r = _op(fn, "RELU", x)
    neg = _op(fn, "NEG", r).producer
    fn.ops.remove(r.producer)  # a dangling producer, e.g. folded away elsewhere
    assert _matches(TFL.NEG(TFL.RELU(Var())), neg, fn) is None


def test_one_of():
    fn, x = _fn()
    half = fn.const(np.float32(0.5), "half")
    two = fn.const(np.float32(2.0), "two")
    mul, div = _op(fn, "tf.Mul", x, half).producer, _op(fn, "tf.RealDiv", x, two).producer
    neg = _op(fn, "tf.Neg", _op(fn, "tf.Mul", x, two)).producer
    halved = OneOf(TF.Mul(Var("x"), Const(value=0.5), commutative=True), TF.RealDiv(Var("x"), Const(value=2.0)))
    assert _matches(TF.Neg(halved), neg, fn) is None
    for op in (mul, div):
        assert _matches(TF.Exp(halved), fn.add_op("tf.Exp", [op.outputs[0]], [(F32, (2, 4))]), fn).x is x


# -- anchors below the root ------------------------------------------------------------------


def test_anchor_climbs_through_users_in_order():
    fn, x = _fn()
    r = _op(fn, "RELU", x)
    c1, c2 = fn.const(np.float32(1.0), "one"), fn.const(np.float32(2.0), "two")
    _op(fn, "ADD", r, c1)
    second = _op(fn, "ADD", c2, r)
    pattern = TFL.ADD(TFL.RELU(Var("x"), name="relu"), Const("c", value=2.0), commutative=True, name="op")
    m = _matches(pattern, r.producer, fn, anchor="relu")
    assert m is not None and m.op is second.producer and m.c is c2  # the first user did not match
    assert _matches(pattern, second.producer, fn, anchor="relu") is None  # anchor: a RELU
    with pytest.raises(ValueError, match="no op named 'nope'"):
        _rule(pattern, anchor="nope")


def test_driver_climbs_from_anchors_in_program_order():
    fn, x = _fn()
    c = fn.const(np.float32(1.0), "one")
    r1, r2 = _op(fn, "RELU", x, name="r1"), _op(fn, "RELU", x, name="r2")
    _op(fn, "TANH", r1)  # another reader of r1, which the climb passes over
    late = _op(fn, "ADD", r2, c)
    early = _op(fn, "ADD", r1, c)
    seen = []

    def record(ctx, m):
        """Note which ADD the anchor led to."""
        seen.append(m.op)

    pattern = TFL.ADD(TFL.RELU(Var("x"), name="relu"), Const("c"), name="op")
    assert rewrite(fn, [_rule(pattern, record, anchor="relu")]) == 2
    assert seen == [early.producer, late.producer]  # in the order of the RELUs, not of the ADDs


def test_anchor_through_a_single_use_middle():
    fn, x = _fn()
    r = _op(fn, "RELU", x)
    t = _op(fn, "TANH", r)
    root = _op(fn, "NEG", t)
    pattern = TFL.NEG(TFL.TANH(TFL.RELU(Var("x"), name="relu"), single_use=True, name="tanh"), name="op")
    m = _matches(pattern, r.producer, fn, anchor="relu")
    assert m is not None and m.tanh is t.producer and m.op is root.producer
    _op(fn, "ABS", t)
    assert _matches(pattern, r.producer, fn, anchor="relu") is None


# -- conditions and the driver -----------------------------------------------------------------


def _noop_chain():
    """x -> NEG -> RELU -> RELU -> out, and the rule dropping a RELU whose input is a RELU."""
    fn, x = _fn()
    out = _op(fn, "RELU", _op(fn, "RELU", _op(fn, "NEG", x)))
    fn.outputs = [out]
    return fn, x


def test_condition_decides():
    pattern = TFL.RELU(Var("x"), name="op")
    fn, _ = _noop_chain()
    assert rewrite(fn, [_rule(pattern, condition=lambda ctx, m: m.x.producer.kind == "TANH")]) == 0
    assert [op.kind for op in fn.ops] == ["NEG", "RELU", "RELU"]
    seen = []
    only_after_relu = _rule(pattern, condition=lambda ctx, m: seen.append(m.op) or m.x.producer.kind == "RELU")
    assert rewrite(fn, [only_after_relu]) == 1
    assert [op.kind for op in fn.ops] == ["NEG", "RELU"] and len(seen) == 2
    assert fn.outputs[0] is fn.ops[-1].outputs[0]


def test_first_only_and_sweep():
    drop_relu = _rule(TFL.RELU(Var("x"), name="op"))
    fn, _ = _noop_chain()
    assert rewrite(fn, [drop_relu], first_only=True) == 1
    assert [op.kind for op in fn.ops] == ["NEG", "RELU"]
    fn, x = _noop_chain()
    assert rewrite(fn, [drop_relu]) == 2
    assert [op.kind for op in fn.ops] == ["NEG"] and fn.outputs[0] is fn.ops[0].outputs[0]


def test_keep_marks_outputs():
    fn, _ = _noop_chain()
    keep = {v.uid for v in fn.outputs}
    rule = _rule(TFL.RELU(Var("x"), name="op"), condition=lambda ctx, m: not ctx.is_output(m.op.outputs[0]))
    assert rewrite(fn, [rule], keep=keep) == 1
    assert [op.kind for op in fn.ops] == ["NEG", "RELU"]


def test_new_ops_are_not_visited_in_the_same_walk():
    fn, x = _fn()
    fn.outputs = [_op(fn, "RELU", x)]

    def relu_again(ctx, m):
        """RELU(x) -> RELU(RELU(x)): would never end if new ops were visited."""
        new = ctx.fn.make_op("tfl.RELU", [m.op.outputs[0]], [(F32, (2, 4))])
        ctx.fn.ops.append(new)
        ctx.fn.outputs = [new.outputs[0]]

    assert rewrite(fn, [_rule(TFL.RELU(Var(), name="op"), relu_again)]) == 1
    assert len(fn.ops) == 2


def test_registered_rule_sets():
    import fuselite.passes.optimize  # noqa: F401  (registers the TFLite rules)
    import fuselite.passes.patterns  # noqa: F401  (registers the TF rules)

    with pytest.raises(ValueError, match="no rule set named 'nope'"):
        rewrite(Function("f"), "nope")
    names = {name: [r.name for r in rules] for name, rules in RULES.items()}
    assert names["fold_into_weighted"] == ["fold_channel_op", "fold_channel_op_through_heads"]
    assert names["tf_patterns"] == ["gelu_erfc", "gelu_erf", "gelu_tanh", "hard_swish",
                                    "real_dft", "real_dft_of_a_cast"]
    for rules in RULES.values():
        for r in rules:
            assert r.doc, f"rule {r.name} has no one-line doc"


# -- registered rules on hand-built graphs ------------------------------------------------------


def test_gelu_erf_form_on_ir():
    import fuselite.passes.patterns  # noqa: F401

    fn, x = _fn()
    inner = _op(fn, "tf.RealDiv", x, fn.const(np.float32(np.sqrt(2)), "sqrt2"))
    add = _op(fn, "tf.AddV2", fn.const(np.float32(1.0), "one"), _op(fn, "tf.Erf", inner))
    y = _op(fn, "tf.Mul", add, _op(fn, "tf.Mul", fn.const(np.float32(0.5), "half"), x))
    fn.outputs = [y]
    assert rewrite(fn, "tf_patterns") == 1
    gelu = fn.outputs[0].producer
    assert gelu.type == "tf.Gelu" and gelu.inputs == [x] and gelu.attrs == {"approximate": False}
    assert fn.ops[-2] is gelu  # placed before the product it replaces (left for DCE)


def test_bias_folds_into_conv_on_ir():
    import fuselite.passes.optimize  # noqa: F401

    fn = Function("f")
    x = fn.add_input("x", F32, (1, 4, 4, 2))
    w = fn.const(np.ones((3, 1, 1, 2), np.float32), "w")
    conv = fn.add_op("tfl.CONV_2D", [x, w, None], [(F32, (1, 4, 4, 3))],
                     {"fused_activation_function": "NONE"}, name="conv")
    shift = fn.const(np.arange(3, dtype=np.float32), "shift")
    y = fn.add_op("tfl.ADD", [shift, conv.outputs[0]], [(F32, (1, 4, 4, 3))],
                  {"fused_activation_function": "NONE"}).outputs[0]
    fn.outputs = [fn.add_op("tfl.RELU", [y], [(F32, (1, 4, 4, 3))]).outputs[0]]
    keep = {v.uid for v in fn.outputs}
    assert rewrite(fn, "fold_into_weighted", keep=keep, first_only=True) == 1
    assert [op.kind for op in fn.ops] == ["CONV_2D", "RELU"]
    np.testing.assert_array_equal(conv.inputs[2].const, [0, 1, 2])
    assert rewrite(fn, "fuse_activations", keep=keep) == 1
    assert [op.kind for op in fn.ops] == ["CONV_2D"] and conv.attrs["fused_activation_function"] == "RELU"
    assert fn.outputs == [conv.outputs[0]]


def test_pattern_repr_reads_like_the_expression():
    p = TFL.ADD(TFL.RELU(Var("x")), Const("c"), ...)
    assert repr(p) == "tfl.ADD(tfl.RELU(Var('x')), Const('c', value=None), ...)"
    assert isinstance(p, OpPattern)
