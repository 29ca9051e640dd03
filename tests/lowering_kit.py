"""The harness of the end-to-end lowering tests (``tests/test_lowering_*.py``): a case is ``C(id, fn, *input_specs,
...)``; ``fn`` is traced as a ``tf.function`` for the input specs (``F`` float32, ``I`` int32, ``V`` fixed value;
``None`` marks a dynamic dim, fed as size 1), its concrete function is converted with fuselite, run on the stock
LiteRT interpreter on **both kernel sets** (XNNPACK and LiteRT's builtin kernels) and compared with TF eager:

* float results: ``|tflite - tf| <= atol`` with ``atol = 1e-5`` (a case needing more must pass ``atol=`` and say
  why in a comment);
* integer / bool results: exact equality (and equal dtypes and shapes everywhere);
* ``check=``: a case's own comparison of the values (random ops: shape, dtype and distribution);
* every op of the converted model must be a TFLite builtin (no CUSTOM / Flex ops);
* ``expect`` / ``absent`` list builtins that must / must not appear.

:func:`missing_rules` says which rules of the given lowering modules no case ran, so a new rule needs a new row
in its family's test file. Weights (``W``) and inputs are drawn from RNGs seeded by the case id, so every run sees
the same numbers.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter

import fuselite
from fuselite.lower import LOWERINGS
from fuselite.runtime import run

ATOL = 1e-5

# lowering module -> the test file whose cases exercise its rules (test_lowering_rules.py: every other module)
FAMILY_TESTS: dict[str, str] = {
    "fuselite.lower.math_special": "test_lowering_math_special.py",
    "fuselite.lower.random": "test_lowering_random.py",
    "fuselite.lower.index": "test_lowering_index.py",
    "fuselite.lower.image": "test_lowering_image.py",
    "fuselite.lower.tensor_lists": "test_lowering_tensor_lists.py",
    "fuselite.lower.gradients": "test_lowering_gradients.py",
    "fuselite.lower.training": "test_training.py",
}

# --------------------------------------------------------------------------------------------
# input specs and weights
# --------------------------------------------------------------------------------------------


class In(NamedTuple):
    shape: tuple
    dtype: Any = tf.float32
    lo: float | None = None  # uniform [lo, hi) if given, standard normal otherwise (floats)
    hi: float | None = None
    nonzero: bool = False  # ints: never 0 (divisors)
    value: Any = None  # a fixed value instead of a random one


def V(value, *shape):
    """An input fed with a fixed ``value`` (spec shape ``shape``, e.g. with unknown dims)."""
    value = np.asarray(value)
    return In(tuple(shape), tf.as_dtype(value.dtype), value=value)


def F(*shape, lo=None, hi=None):
    """A float32 input."""
    return In(tuple(shape), tf.float32, lo, hi)


def I(*shape, lo=-5, hi=6, nonzero=False):  # noqa: E743
    """An int32 input, uniform in [lo, hi)."""
    return In(tuple(shape), tf.int32, lo, hi, nonzero)


def value_of(spec: In, rng: np.random.Generator) -> np.ndarray:
    if spec.value is not None:
        return spec.value
    shape = tuple(1 if d is None else d for d in spec.shape)
    if spec.dtype == tf.int32:
        v = rng.integers(spec.lo, spec.hi, size=shape).astype(np.int32)
        if spec.nonzero:
            v[v == 0] = 1
        return v
    if spec.lo is None:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.uniform(spec.lo, spec.hi, size=shape).astype(np.float32)


_W = {"seed": 0, "n": 0}


def W(*shape, lo=None, hi=None):
    """A constant float32 weight: the k-th W() call of a case gets the same values every time
    the case's function runs (tracing for fuselite and the eager reference run)."""
    rng = np.random.default_rng([_W["seed"], _W["n"]])
    _W["n"] += 1
    if lo is None:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def reset_weights(seed: int) -> None:
    _W.update(seed=seed, n=0)


class Case(NamedTuple):
    id: str
    fn: Callable
    specs: tuple
    atol: float = ATOL
    expect: tuple = ()  # builtin op names that must appear in the converted model
    absent: tuple = ()  # ... and that must not (near-misses of fused patterns)
    marks: tuple = ()
    # instead of comparing values: check(got, expected) with the outputs as lists of arrays (dtypes and shapes
    # are still compared), for ops whose values differ by design (random numbers: their distribution)
    check: Callable | None = None
    module: str = ""  # the test module that made the case (C() fills it)


def C(id, fn, *specs, atol=ATOL, expect=(), absent=(), marks=(), check=None):
    module = sys._getframe(1).f_globals.get("__name__", "")  # the family's test file: its cases' ids are its own
    return Case(id, fn, tuple(specs), atol, tuple(expect), tuple(absent), tuple(marks), check, module)


_BUILTINS = {k: v for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
_BUILTIN_NAMES = set(_BUILTINS) - {"CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES"}


def _model_ops(model: bytes) -> list[str]:
    """Builtin names of every operator code in the model (all subgraphs)."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model, 0))
    names = {v: k for k, v in _BUILTINS.items()}
    out = []
    for code in m.operatorCodes:
        b = max(code.builtinCode, code.deprecatedBuiltinCode)
        out.append(code.customCode.decode() if b == schema.BuiltinOperator.CUSTOM else names.get(b, str(b)))
    return out


def _flat(outputs) -> list[np.ndarray]:
    return [np.asarray(t) for t in tf.nest.flatten(outputs)]


# (the case's test module, case id) -> converted model (each case converts once per session; two families' files
# may share a case id and a worker process)
_MODELS: dict[tuple[str, str], bytes] = {}


def _key(case: Case) -> tuple[str, str]:
    return case.module, case.id
_RULES_RUN: set[str] = set()  # TF op types whose lowering rule ran during some conversion


@contextmanager
def _recording_rules():
    saved = dict(LOWERINGS)

    def recorded(rule):
        def run_rule(ctx):
            _RULES_RUN.add(ctx.op.kind)
            return rule(ctx)

        return run_rule

    LOWERINGS.update({kind: recorded(rule) for kind, rule in saved.items()})
    try:
        yield
    finally:
        LOWERINGS.clear()
        LOWERINGS.update(saved)


def _seed(case: Case) -> int:
    return zlib.crc32(case.id.encode())


def _specs(case: Case) -> list:
    return [tf.TensorSpec(s.shape, s.dtype, name=f"in{i}") for i, s in enumerate(case.specs)]


def _convert(case: Case) -> bytes:
    if _key(case) not in _MODELS:
        reset_weights(_seed(case))
        cf = tf.function(case.fn, autograph=False).get_concrete_function(*_specs(case))
        with _recording_rules():
            _MODELS[_key(case)] = fuselite.Converter.from_concrete_functions([cf]).convert()
    return _MODELS[_key(case)]




def check_case(case: Case) -> None:
    """Convert ``case``, run it on both LiteRT kernel sets and compare with TF eager (the module docstring)."""
    rng = np.random.default_rng(_seed(case))
    values = [value_of(s, rng) for s in case.specs]
    model = _convert(case)

    # only TFLite builtins, in the main subgraph (interpreter view) and in every subgraph
    ops = [d["op_name"] for d in Interpreter(model_content=model)._get_ops_details()]
    assert ops, "the converted model has no ops"
    assert set(ops) <= _BUILTIN_NAMES, f"non-builtin ops: {sorted(set(ops) - _BUILTIN_NAMES)}"
    all_ops = _model_ops(model)
    assert set(all_ops) <= _BUILTIN_NAMES, f"non-builtin ops: {sorted(set(all_ops) - _BUILTIN_NAMES)}"
    for kind in case.expect:
        assert kind in all_ops, f"expected {kind} in {sorted(set(all_ops))}"
    for kind in case.absent:
        assert kind not in all_ops, f"unexpected {kind} in {sorted(set(all_ops))}"

    reset_weights(_seed(case))
    expected = _flat(case.fn(*[tf.constant(v) for v in values]))
    for builtin in (False, True):
        kernels = "builtin kernels" if builtin else "XNNPACK"
        out = run(model, values, builtin_kernels=builtin)
        got = [out[f"output_{i}"] for i in range(len(expected))]
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            assert g.dtype == e.dtype, f"{kernels}, output {i}: dtype {g.dtype} != {e.dtype}"
            assert g.shape == e.shape, f"{kernels}, output {i}: shape {g.shape} != {e.shape}"
        if case.check is not None:
            case.check(got, expected)
            continue
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            if e.dtype.kind in "fc":
                np.testing.assert_allclose(g, e, rtol=0, atol=case.atol, err_msg=f"{kernels}, output {i}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"{kernels}, output {i}")


def missing_rules(cases: Iterable[Case], modules: Iterable[str]) -> list[str]:
    """The TF op types whose lowering rule lives in one of ``modules`` (``fuselite.lower.math`` ...) and ran in
    no case's conversion (cases not converted yet in this process are converted here)."""
    for case in cases:
        if _key(case) not in _MODELS:  # not converted yet in this process (-k, xdist)
            try:
                _convert(case)
            except Exception:
                pass  # that case's own test reports the failure
    modules = set(modules)
    return sorted(kind for kind, rule in LOWERINGS.items()
                  if getattr(rule, "__module__", None) in modules and kind not in _RULES_RUN)
