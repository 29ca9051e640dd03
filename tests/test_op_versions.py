"""Operator versions against GetBuiltinOperatorVersion (tensorflow/lite/tools/versioning/op_version.cc)."""

import numpy as np
import pytest

from fuselite.ir import Function, Module
from fuselite.tflite.versions import min_runtime_version, op_version, runtime_version

F32, I32, I64, BOOL = np.float32, np.int32, np.int64, np.bool_


def _op(fn, kind, inputs, out_dtype=F32, out_shape=None, attrs=None, n_out=1):
    return fn.make_op("tfl." + kind, inputs, [(out_dtype, out_shape)] * n_out, attrs or {})


def _fc(n_inputs=3, keep_num_dims=False, bias=True):
    fn = Function("f")
    x = fn.add_input("x", F32, (None, 5, 4))
    ins = [x, fn.const(np.ones((3, 4), F32))]
    if n_inputs == 3:
        ins.append(fn.const(np.zeros(3, F32)) if bias else None)
    return _op(fn, "FULLY_CONNECTED", ins, attrs={"keep_num_dims": keep_num_dims, "weights_format": "DEFAULT",
                                                  "fused_activation_function": "NONE"})


def test_fully_connected():
    assert op_version(_fc()) == 1
    assert op_version(_fc(keep_num_dims=True)) == 5
    # "inputs.size() == 2" is checked before keep_num_dims.
    assert op_version(_fc(n_inputs=2, keep_num_dims=True)) == 6
    # A None bias is written as tensor -1: still three inputs, so not version 6.
    assert op_version(_fc(bias=False)) == 1


@pytest.mark.parametrize("adj_x", [False, True])
def test_batch_matmul_adjoint_does_not_bump(adj_x):
    fn = Function("f")
    a, b = fn.add_input("a", F32, (2, 3, 4)), fn.add_input("b", F32, (2, 4, 5))
    assert op_version(_op(fn, "BATCH_MATMUL", [a, b], attrs={"adj_x": adj_x, "adj_y": adj_x})) == 1
    a8, b8 = fn.add_input("a8", np.int8, (2, 3, 4)), fn.add_input("b8", np.int8, (2, 4, 5))
    assert op_version(_op(fn, "BATCH_MATMUL", [a8, b8], np.int32)) == 2


def _binary(kind, dtype, sa, sb):
    fn = Function("f")
    return _op(fn, kind, [fn.add_input("a", dtype, sa), fn.add_input("b", dtype, sb)], dtype)


@pytest.mark.parametrize("kind, expected", [("ADD", 1), ("MUL", 1), ("SUB", 3), ("DIV", 2), ("MAXIMUM", 3)])
def test_5d_broadcast(kind, expected):
    assert op_version(_binary(kind, F32, (2, 3, 4, 5, 6), (1, 3, 1, 5, 6))) == expected
    # Same 5-D shapes: no broadcast, version 1.
    assert op_version(_binary(kind, F32, (2, 3, 4, 5, 6), (2, 3, 4, 5, 6))) == 1
    # 4-D broadcast stays at version 1.
    assert op_version(_binary(kind, F32, (3, 4, 5, 6), (1, 4, 1, 6))) == 1


def test_unknown_dims_are_written_as_one():
    # op_signature.cc compares the written `shape`, where an unknown dim is 1.
    assert op_version(_binary("SUB", F32, (None, 3, 4, 5, 6), (1, 3, 4, 5, 6))) == 1
    assert op_version(_binary("SUB", F32, (None, 3, 4, 5, 6), (2, 3, 4, 5, 6))) == 3


@pytest.mark.parametrize("kind, expected", [("ADD", 4), ("SUB", 4), ("MUL", 5), ("DIV", 1)])
def test_int64_arithmetic(kind, expected):
    assert op_version(_binary(kind, I64, (3,), (3,))) == expected


def test_int_and_float_dtype_rules():
    assert op_version(_binary("FLOOR_DIV", F32, (3,), (3,))) == 2
    assert op_version(_binary("FLOOR_DIV", I32, (3,), (3,))) == 1
    assert op_version(_binary("DIV", I32, (3,), (3,))) == 1
    fn = Function("f")
    assert op_version(_op(fn, "ABS", [fn.add_input("x", I32, (3,))], I32)) == 5
    assert op_version(_op(fn, "SIGN", [fn.add_input("y", I32, (3,))], I32)) == 2
    axis = fn.const(np.array(0, I32))
    data = fn.add_input("d", I32, (4, 3))
    assert op_version(_op(fn, "SPLIT", [axis, data], I32, n_out=2, attrs={"num_splits": 2})) == 3
    fdata = fn.add_input("fd", F32, (4, 3))
    assert op_version(_op(fn, "SPLIT", [axis, fdata], F32, n_out=2, attrs={"num_splits": 2})) == 1


def _strided_slice(shape, dtype=F32, **masks):
    fn = Function("f")
    x = fn.add_input("x", dtype, shape)
    r = len(shape)
    idx = [fn.const(np.full(r, v, I32)) for v in (0, 1, 1)]
    attrs = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0,
             "offset": False}
    attrs.update(masks)
    return _op(fn, "STRIDED_SLICE", [x] + idx, dtype, attrs=attrs)


def test_strided_slice():
    assert op_version(_strided_slice((2, 3, 4))) == 1
    assert op_version(_strided_slice((2, 3, 4), ellipsis_mask=1)) == 6
    assert op_version(_strided_slice((2, 3, 4), new_axis_mask=2)) == 6
    assert op_version(_strided_slice((2, 3, 4, 5, 6))) == 4
    assert op_version(_strided_slice((2, 3), BOOL)) == 3
    assert op_version(_strided_slice((2, 3, 4), offset=True)) == 8


def test_concat_and_pack_of_int64_and_bool_stay_at_one():
    fn = Function("f")
    for dtype in (I64, BOOL):
        a, b = fn.add_input("a", dtype, (3,)), fn.add_input("b", dtype, (3,))
        assert op_version(_op(fn, "CONCATENATION", [a, b], dtype, attrs={"axis": 0})) == 1
        assert op_version(_op(fn, "PACK", [a, b], dtype, attrs={"axis": 0, "values_count": 2})) == 1


def test_shape_and_misc_rules():
    fn = Function("f")
    x = fn.add_input("x", F32, (None, 3))
    shape = fn.const(np.array([2, 3], I32))
    assert op_version(_op(fn, "BROADCAST_TO", [x, shape])) == 2  # version 1 was retired
    p = fn.add_input("p", BOOL, (3, 4))
    pads = fn.const(np.array([[1, 1], [0, 0]], I32))
    assert op_version(_op(fn, "PAD", [p, pads], BOOL)) == 5
    g = _op(fn, "GATHER", [fn.add_input("g", F32, (2, 5)), fn.add_input("i", I32, (2, 3))],
            attrs={"axis": 1, "batch_dims": 1})
    assert op_version(g) == 5
    upd = [fn.add_input("l", F32, (4, 3)), fn.add_input("u", F32, (1, 3))]
    assert op_version(_op(fn, "DYNAMIC_UPDATE_SLICE", upd + [fn.add_input("s", I32, (2,))])) == 1
    assert op_version(_op(fn, "DYNAMIC_UPDATE_SLICE", upd + [fn.add_input("s64", I64, (2,))])) == 2


def test_conv_family():
    fn = Function("f")
    opts = {"padding": "SAME", "stride_h": 1, "stride_w": 1, "fused_activation_function": "NONE"}
    x = fn.add_input("x", F32, (1, 8, 8, 2))
    conv = _op(fn, "CONV_2D", [x, fn.const(np.ones((4, 3, 3, 2), F32)), fn.const(np.zeros(4, F32))], attrs=opts)
    assert op_version(conv) == 1
    grouped = _op(fn, "CONV_2D", [x, fn.const(np.ones((4, 3, 3, 1), F32)), fn.const(np.zeros(4, F32))], attrs=opts)
    assert op_version(grouped) == 6
    dw = _op(fn, "DEPTHWISE_CONV_2D", [x, fn.const(np.ones((1, 3, 3, 2), F32)), fn.const(np.zeros(2, F32))],
             attrs=dict(opts, dilation_h_factor=2, dilation_w_factor=2, depth_multiplier=1))
    assert op_version(dw) == 2
    tc_in = [fn.const(np.array([1, 16, 16, 4], I32)), fn.const(np.ones((4, 3, 3, 2), F32)), x]
    assert op_version(_op(fn, "TRANSPOSE_CONV", tc_in + [None], attrs=opts)) == 1
    assert op_version(_op(fn, "TRANSPOSE_CONV", tc_in + [fn.const(np.zeros(4, F32))], attrs=opts)) == 3
    relu = dict(opts, fused_activation_function="RELU")
    assert op_version(_op(fn, "TRANSPOSE_CONV", tc_in + [None], attrs=relu)) == 4


def test_runtime_table_and_min_runtime_version():
    assert runtime_version("FULLY_CONNECTED", 5) == "2.0.0"
    assert runtime_version("SUB", 3) == "2.3.0"
    assert runtime_version("BROADCAST_TO", 1) is None
    module = Module()
    fn = module.add(Function("main"))
    a, b = fn.add_input("a", F32, (2, 3, 4, 5, 6)), fn.add_input("b", F32, (1, 3, 1, 5, 6))
    fn.ops.append(_op(fn, "SUB", [a, b]))  # v3 -> 2.3.0
    assert min_runtime_version(module) == "2.3.0"
    fn.ops.append(_op(fn, "ABS", [fn.add_input("i", I32, (3,))], I32))  # v5 -> 2.12.0 (numeric compare)
    assert min_runtime_version(module) == "2.12.0"
