"""The op-coverage benchmark (benchmarks/op_coverage.py): its case list, how it judges outputs, and its
child-process runner on real cases (one that crashes its child on purpose)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks")
sys.path.insert(0, BENCHMARKS)

import op_cases  # noqa: E402
import op_coverage  # noqa: E402


def test_case_ids_are_unique_and_every_case_names_a_sourced_op():
    ids = Counter(c.id for c in op_cases.CASES)
    assert [k for k, n in ids.items() if n > 1] == []
    for c in op_cases.CASES:
        assert c.op and c.op in op_cases.SOURCES, c.id
        assert op_cases.SOURCES[c.op] in op_cases.FILES, c.op
        assert (c.fn is None) != (c.make is None), f"{c.id}: a function or a factory"
        assert c.judge in ("values", "random", "shape"), c.id
        assert c.judge != "random" or c.check is not None, f"{c.id}: a random case needs its distribution check"
        assert c.tol == op_cases.TOL or c.why, f"{c.id}: a larger tolerance says why"
    assert len(op_cases.OPS) >= 200


def test_the_cases_where_the_official_converter_is_wrong_are_there():
    ids = {c.id: c.op for c in op_cases.CASES}
    assert {ids.get(k) for k in op_cases.OFFICIAL_WRONG} == {
        "FakeQuantWithMinMaxArgs", "IsInf", "ReverseV2", "LookupTableSizeV2"}


def test_judge_tells_right_from_wrong():
    case = op_cases.C("t", "Abs", abs, op_cases.f(2))
    want = [np.array([1.0, -200.0], np.float32), np.array([3, 4], np.int32)]
    assert op_cases.judge(case, want, want) is None
    near = [np.array([1.0 + 1e-6, -200.0 - 1e-3], np.float32), want[1]]  # 1e-3 <= 1e-5 * 200
    assert op_cases.judge(case, near, want) is None
    assert "max abs error" in op_cases.judge(case, [np.array([1.01, -200.0], np.float32), want[1]], want)
    assert "values differ" in op_cases.judge(case, [want[0], np.array([3, 5], np.int32)], want)
    assert "dtype" in op_cases.judge(case, [want[0], want[1].astype(np.int64)], want)
    assert "shape" in op_cases.judge(case, [want[0][None], want[1]], want)
    nan = [np.array([np.nan, 1.0], np.float32)]
    assert op_cases.judge(case, nan, nan) is None
    assert "NaN" in op_cases.judge(case, [np.array([0.0, 1.0], np.float32)], nan)
    check = op_cases.uniform_check(0.0, 1.0)
    assert check([np.random.default_rng(0).uniform(size=2000).astype(np.float32)]) is None
    assert check([np.full(2000, 0.5, np.float32)]) is not None


@pytest.fixture
def crash_module(tmp_path, monkeypatch):
    (tmp_path / "crash_cases.py").write_text(textwrap.dedent("""
        import os
        from op_cases import C, f
        CASES = [C("crash_on_purpose", "Abs", lambda x: os._exit(3), f(2))]
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(op_coverage.EXTRA_CASES, "crash_cases")


def test_the_runner_classifies_real_cases_and_survives_a_crash(crash_module):
    # the official converter's results are fixed by the pinned TensorFlow; fuselite's abs is a plain builtin
    # one child; the crash costs its own case, and the case after it runs again in a child of its own
    units = [["abs", "fuselite"], ["floor_mod_int", "official"], ["random_uniform", "official"],
             ["fake_quant_vars_per_channel", "official"], ["crash_on_purpose", "official"],
             ["lookup_table_size", "official"]]
    res = op_coverage.run_units(units, jobs=2, size=len(units), timeout=120)
    status = {k: r["status"] for k, r in res.items()}
    assert status == {("abs", "fuselite"): "right", ("crash_on_purpose", "official"): "crashed",
                      ("floor_mod_int", "official"): "right", ("random_uniform", "official"): "right",
                      ("fake_quant_vars_per_channel", "official"): "refused",
                      ("lookup_table_size", "official"): "wrong"}, res
    assert "exit status 3" in res[("crash_on_purpose", "official")]["detail"]
    assert "FakeQuantWithMinMaxVarsPerChannel" in res[("fake_quant_vars_per_channel", "official")]["detail"]
    assert "shape [1], TF []" in res[("lookup_table_size", "official")]["detail"]
