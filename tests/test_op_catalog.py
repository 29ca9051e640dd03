"""The per-op catalog (ops/catalog.py): one entry per op kind is what the quantizers read (the tables derived from
the entries), and an entry alone decides an op's integer form (docs/architecture.md, "an integer rule for an op")."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import fuselite
from fuselite.ops import catalog
from fuselite.ops.catalog import OPS, Facts, register_op


def _elu_records(integer_only: bool = False):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.ELU()])
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = ["DEFAULT"]
    conv.representative_dataset = lambda: ([np.random.default_rng(i).random((1, 8), np.float32)] for i in range(8))
    if integer_only:
        conv.target_spec.supported_ops = ["TFLITE_BUILTINS_INT8"]
    conv.convert()
    return [r for r in conv.report.quantization["ops"] if r["kind"] == "ELU"]


def test_the_tables_the_quantizers_read_are_the_entries():
    for kind, facts in OPS.items():
        assert (kind in catalog.INTEGER_KERNELS) == (facts.integer is not None)
        assert (kind in catalog.INT16_KINDS) == facts.int16
        assert (kind in catalog.HYBRID_KERNELS) == (facts.hybrid is not None)
        assert not (facts.integer and facts.no_integer), f"{kind}: an integer kernel and a reason it has none"
        assert not facts.int16 or facts.integer, f"{kind}: a 16x8 form but no integer kernel"
    # the engine's and the dynamic-range quantizer's names are the catalog's tables, not copies
    from fuselite.quantize import dynamic, int8_kernels
    from fuselite.tflite import micro, versions
    assert int8_kernels.INTEGER_KERNELS is catalog.INTEGER_KERNELS and dynamic.HYBRID_KERNELS is catalog.HYBRID_KERNELS
    assert versions.VERSION_RULES is catalog.VERSION_RULES and micro.RESOLVER is catalog.MICRO_RESOLVER
    for kind, facts in OPS.items():  # every resolver method one of MicroMutableOpResolver's Add...
        assert facts.micro_op is None or facts.micro_op.startswith("Add"), kind


def test_an_op_has_one_entry():
    with pytest.raises(ValueError, match="ops with a catalog entry already: ADD"):
        catalog.add_entries({"ADD": Facts()})


def test_an_entry_decides_the_ops_integer_form():
    assert [r["mode"] for r in _elu_records()] == ["int8"]
    entry = register_op("ELU", None)
    try:
        records = _elu_records()
        assert [r["mode"] for r in records] == ["float"] and "no integer ELU form" in records[0]["reason"]
        with pytest.raises(fuselite.ConversionError, match="cannot be integer"):
            _elu_records(integer_only=True)
        register_op("ELU", Facts(no_integer="a reason read in elu.cc"))
        assert "a reason read in elu.cc" in _elu_records()[0]["reason"]
    finally:
        register_op("ELU", entry)
    assert OPS["ELU"] == entry and [r["mode"] for r in _elu_records()] == ["int8"]
