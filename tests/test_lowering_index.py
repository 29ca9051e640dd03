"""End-to-end tests of the index and array lowering rules (``fuselite.lower.index``): tf.function -> fuselite ->
stock LiteRT (both kernel sets) vs TF eager, exact for integers, 1e-5 for floats (``lowering_kit.py``); their int8
forms against TF (a few int8 steps); the variants a rule refuses, by the op's name and the reason.

``Empty`` without ``init`` leaves its values undefined in TensorFlow: that case compares dtype and shape only.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from lowering_kit import C, Case, F, I, V, check_case, missing_rules
from tensorflow.compiler.tf2xla.python import xla
from tensorflow.compiler.xla import xla_data_pb2

import fuselite
from fuselite.ir import Function
from fuselite.runtime import run
from fuselite.tflite.versions import op_version

FAMILY = ["fuselite.lower.index"]


def _diag3(**kw):
    return lambda d: tf.raw_ops.MatrixDiagV3(diagonal=d, k=kw.get("k", 0), num_rows=kw.get("rows", -1),
                                             num_cols=kw.get("cols", -1), padding_value=kw.get("pad", 0.0),
                                             align=kw.get("align", "RIGHT_LEFT"))


def _set_diag3(k, align="RIGHT_LEFT"):
    return lambda x, d: tf.raw_ops.MatrixSetDiagV3(input=x, diagonal=d, k=k, align=align)


def _xla_gather(offset_dims, collapsed, start_map, index_vector_dim, slice_sizes):
    dn = xla_data_pb2.GatherDimensionNumbers(offset_dims=offset_dims, collapsed_slice_dims=collapsed,
                                             start_index_map=start_map, index_vector_dim=index_vector_dim)
    return lambda x, i: xla.gather(x, i, dn, slice_sizes, indices_are_sorted=False)


def _stitch(x, y):
    return tf.dynamic_stitch([tf.constant([0, 4]), tf.constant([[1, 2], [3, 0]])], [x, y])


def _placeholder_with_default(x):
    return tf.raw_ops.PlaceholderWithDefault(input=x, shape=[2, 3]) * 2.0


def _sharding(x):
    return xla.sharding(x) + 1.0


def _empty_shape_dtype(got, expected):
    pass  # Empty's values are undefined in TensorFlow: check_case has compared dtypes and shapes already


CASES = [
    # -- diagonals --------------------------------------------------------------------------
    C("matrix_diag_v1", lambda d: tf.raw_ops.MatrixDiag(diagonal=d), F(2, 3), expect=["MATRIX_DIAG"]),
    C("matrix_diag_main", lambda d: tf.linalg.diag(d), F(2, 4), expect=["MATRIX_DIAG"]),
    C("matrix_diag_int32", lambda d: tf.linalg.diag(d), I(3), expect=["MATRIX_DIAG"]),
    C("matrix_diag_bool", lambda d: tf.linalg.diag(d > 0), F(2, 3), absent=["MATRIX_DIAG"]),
    C("matrix_diag_v1_bool", lambda d: tf.raw_ops.MatrixDiag(diagonal=d > 0), F(3)),
    C("matrix_diag_k1", lambda d: tf.linalg.diag(d, k=1), F(2, 3), absent=["MATRIX_DIAG"]),
    C("matrix_diag_k_neg2", lambda d: tf.linalg.diag(d, k=-2), I(3)),
    C("matrix_diag_band_right_left", _diag3(k=(-1, 1)), F(2, 3, 4)),
    C("matrix_diag_band_left_right", _diag3(k=(-1, 2), align="LEFT_RIGHT"), F(4, 4)),
    C("matrix_diag_band_v2", lambda d: tf.raw_ops.MatrixDiagV2(diagonal=d, k=(0, 1), num_rows=-1, num_cols=-1,
                                                                 padding_value=0.0), F(2, 3)),
    C("matrix_diag_rows_cols_padding", _diag3(k=0, rows=3, cols=5, pad=9.0), F(2, 3)),
    C("matrix_diag_padding_input", lambda d, p: tf.linalg.diag(d, num_rows=4, padding_value=p), F(3), F()),
    C("matrix_diag_dynamic_batch", _diag3(k=(-1, 0), pad=-1.0), F(None, 2, 3)),
    C("matrix_set_diag_v1", lambda x, d: tf.raw_ops.MatrixSetDiag(input=x, diagonal=d), F(2, 3, 3), F(2, 3),
      expect=["MATRIX_SET_DIAG"]),
    C("matrix_set_diag_main_wide", lambda x, d: tf.linalg.set_diag(x, d), F(3, 5), F(3), expect=["MATRIX_SET_DIAG"]),
    C("matrix_set_diag_int32", lambda x, d: tf.linalg.set_diag(x, d), I(2, 2, 2), I(2, 2)),
    C("matrix_set_diag_bool", lambda x, d: tf.linalg.set_diag(x > 0, d > 0), F(2, 3, 3), F(2, 3),
      absent=["MATRIX_SET_DIAG"]),
    C("matrix_set_diag_k2", lambda x, d: tf.linalg.set_diag(x, d, k=2), F(2, 4, 4), F(2, 2)),
    C("matrix_set_diag_band", _set_diag3((-2, 1)), F(3, 4), F(4, 3)),
    C("matrix_set_diag_band_left_left", lambda x, d: tf.raw_ops.MatrixSetDiagV2(input=x, diagonal=d, k=(-1, 1)),
      F(2, 4, 3), F(2, 3, 3)),
    C("matrix_diag_part_v1", lambda x: tf.raw_ops.MatrixDiagPart(input=x), F(2, 3, 4), expect=["GATHER"]),
    C("matrix_diag_part_main", lambda x: tf.linalg.diag_part(x), I(5, 3)),
    C("matrix_diag_part_band", lambda x: tf.linalg.diag_part(x, k=(-1, 2), padding_value=-7.0), F(2, 3, 4)),
    C("matrix_diag_part_band_left_right", lambda x: tf.linalg.diag_part(x, k=(-2, 0), align="LEFT_RIGHT"), F(4, 3)),
    C("matrix_diag_part_v2_k1", lambda x, p: tf.raw_ops.MatrixDiagPartV2(input=x, k=1, padding_value=p),
      F(None, 3, 3), F()),
    C("tensor_diag", lambda x: tf.linalg.tensor_diag(x), F(2, 3), expect=["MATRIX_DIAG"]),
    C("tensor_diag_part", lambda x: tf.linalg.tensor_diag_part(x), I(2, 3, 2, 3)),
    # -- sequences, segments, unique values -------------------------------------------------
    C("reverse_sequence", lambda x, n: tf.reverse_sequence(x, n, seq_axis=1, batch_axis=0), F(3, 4, 2),
      V(np.array([4, 1, 2], np.int32), 3), expect=["REVERSE_SEQUENCE"]),
    C("reverse_sequence_int64_lengths_batch_last", lambda x, n: tf.reverse_sequence(x, n, seq_axis=0, batch_axis=1),
      I(5, 3), V(np.array([0, 5, 3], np.int64), 3)),
    C("reverse_sequence_bool", lambda x, n: tf.reverse_sequence(x > 0, n, seq_axis=1), F(2, 4),
      V(np.array([3, 2], np.int32), 2)),
    C("segment_sum_const_ids", lambda x: tf.math.segment_sum(x, tf.constant([0, 0, 1, 2, 2])), F(5, 3),
      expect=["SEGMENT_SUM"]),
    C("segment_sum_ids_with_gaps", lambda x, s: tf.math.segment_sum(x, s), I(5, 2),
      V(np.array([1, 1, 3, 3, 3], np.int32), 5), expect=["UNSORTED_SEGMENT_SUM"]),
    C("segment_sum_int64_const_gap", lambda x: tf.math.segment_sum(x, tf.constant([0, 2, 2], tf.int64)), F(3)),
    C("segment_max_gaps", lambda x, s: tf.math.segment_max(x, s), F(6, 2),
      V(np.array([0, 0, 2, 2, 2, 4], np.int32), 6)),
    C("segment_min_const", lambda x: tf.math.segment_min(x, tf.constant([0, 1, 1, 2])), I(4, 3)),
    C("segment_min_gaps", lambda x, s: tf.math.segment_min(x, s), I(4), V(np.array([1, 1, 2, 2], np.int32), 4)),
    C("segment_prod_gaps", lambda x, s: tf.math.segment_prod(x, s), F(4, 2), V(np.array([0, 2, 2, 3], np.int32), 4)),
    C("segment_mean_gaps", lambda x, s: tf.math.segment_mean(x, s), F(5, 3), V(np.array([0, 0, 0, 3, 3], np.int32), 5)),
    C("unique_float", lambda x: tf.unique(tf.round(x)), F(8, lo=-3, hi=3), expect=["UNIQUE"]),
    C("unique_int32_idx_int64", lambda x: tf.unique(x, out_idx=tf.int64), I(10, lo=0, hi=4)),
    C("unique_int64", lambda x: tf.unique(tf.cast(x, tf.int64)), I(7, lo=-2, hi=2)),
    C("unique_with_counts", lambda x: tf.unique_with_counts(x), I(9, lo=0, hi=4), expect=["UNSORTED_SEGMENT_SUM"]),
    C("unique_with_counts_int64_dynamic", lambda x: tf.unique_with_counts(tf.round(x), out_idx=tf.int64),
      V(np.array([1.0, -2.0, 1.0, 3.0, 3.0, 1.0], np.float32), None)),
    C("unique_v2_axis0", lambda x: tf.raw_ops.UniqueV2(x=x, axis=tf.constant([0], tf.int64)), I(6, lo=0, hi=3)),
    C("list_diff", lambda x, y: tf.raw_ops.ListDiff(x=x, y=y), I(8, lo=0, hi=6), I(3, lo=0, hi=6), expect=["WHERE"]),
    C("list_diff_float_int64", lambda x, y: tf.raw_ops.ListDiff(x=tf.round(x), y=tf.round(y), out_idx=tf.int64),
      F(6, lo=-2, hi=2), F(2, lo=-2, hi=2)),
    C("search_sorted_left", lambda s, v: tf.searchsorted(s, v), V(np.array([[0.0, 1.0, 1.0, 3.0]], np.float32), 1, 4),
      V(np.array([[-1.0, 1.0, 2.0, 3.0, 4.0]], np.float32), 1, 5)),
    C("search_sorted_right_int64", lambda s, v: tf.searchsorted(s, v, side="right", out_type=tf.int64),
      V(np.array([[1, 1, 2], [0, 5, 9]], np.int32), 2, 3), I(2, 4, lo=0, hi=10)),
    C("cumprod", lambda x: tf.math.cumprod(x, axis=1), F(2, 5, lo=0.5, hi=1.5)),
    C("cumprod_exclusive_reverse_int", lambda x: tf.math.cumprod(x, axis=0, exclusive=True, reverse=True), I(7, 2)),
    C("cumprod_exclusive_length_3", lambda x: tf.math.cumprod(x, axis=-1, exclusive=True), F(4, 3)),
    C("sparse_to_dense_2d", lambda v: tf.sparse.to_dense(tf.sparse.SparseTensor([[0, 1], [1, 0], [2, 3]], v, [3, 4]),
                                                         default_value=-1.0), F(3), expect=["SPARSE_TO_DENSE"]),
    C("sparse_to_dense_runtime_indices", lambda i, v: tf.raw_ops.SparseToDense(
        sparse_indices=i, output_shape=[6], sparse_values=v, default_value=7, validate_indices=False),
      V(np.array([0, 2, 5], np.int32), 3), I(3)),
    C("sparse_to_dense_scalar_value_int64_indices", lambda d: tf.raw_ops.SparseToDense(
        sparse_indices=tf.constant([[0, 0, 1], [1, 1, 0]], tf.int64), output_shape=tf.constant([2, 2, 2], tf.int64),
        sparse_values=d, default_value=0.5), F()),
    # -- scatters and stitches --------------------------------------------------------------
    C("tensor_scatter_update", lambda x, u: tf.tensor_scatter_nd_update(x, tf.constant([[0], [3]]), u), F(4, 3),
      F(2, 3), expect=["SCATTER_ND", "SELECT_V2"]),
    C("tensor_scatter_update_runtime_indices_int64", lambda x, i, u: tf.tensor_scatter_nd_update(x, i, u),
      I(3, 4), V(np.array([[2, 1], [0, 3], [1, 1]], np.int64), 3, 2), I(3)),
    # the official converter's x * (1 - mask) + scattered gives NaN where an updated x is inf or NaN
    C("tensor_scatter_update_over_inf_nan", lambda x, u: tf.tensor_scatter_nd_update(x, tf.constant([[0], [2]]), u),
      V(np.array([np.inf, 1.0, np.nan, 2.0], np.float32), 4), F(2)),
    C("tensor_scatter_add_repeated", lambda x, u: tf.tensor_scatter_nd_add(x, tf.constant([[1], [1], [0]]), u),
      F(3, 2), F(3, 2)),
    C("tensor_scatter_sub", lambda x, i, u: tf.tensor_scatter_nd_sub(x, i, u), I(5),
      V(np.array([[4], [0], [4]], np.int32), 3, 1), I(3)),
    C("tensor_scatter_max", lambda x, i, u: tf.tensor_scatter_nd_max(x, i, u), F(3, 4),
      V(np.array([[2, 1], [0, 0], [2, 1]], np.int32), 3, 2), F(3), expect=["UNSORTED_SEGMENT_MAX"]),
    C("tensor_scatter_min_rows", lambda x, i, u: tf.tensor_scatter_nd_min(x, i, u), I(4, 3),
      V(np.array([[3], [1], [3]], np.int64), 3, 1), I(3, 3), expect=["UNSORTED_SEGMENT_MIN"]),
    C("scatter_nd_non_aliasing_add", lambda x, u: tf.raw_ops.ScatterNdNonAliasingAdd(
        input=x, indices=tf.constant([[2], [0], [2]]), updates=u), I(4), I(3)),
    C("dynamic_stitch", _stitch, F(2, 3), F(2, 2, 3), expect=["GATHER"]),
    C("dynamic_stitch_repeated_later_wins", lambda x, y: tf.dynamic_stitch(
        [tf.constant([0, 1, 2]), tf.constant([1])], [x, y]), I(3), I(1)),
    C("parallel_dynamic_stitch", lambda x, y: tf.raw_ops.ParallelDynamicStitch(
        indices=[tf.constant([2, 0]), tf.constant([1, 3])], data=[x, y]), F(2), F(2)),
    C("invert_permutation", lambda p: tf.math.invert_permutation(p), V(np.array([3, 0, 4, 1, 2], np.int32), 5)),
    C("invert_permutation_int64_dynamic", lambda p: tf.math.invert_permutation(p),
      V(np.array([2, 0, 1], np.int64), None)),
    # -- shapes, values, top-k, XLA ---------------------------------------------------------
    C("broadcast_args", lambda a, b: tf.raw_ops.BroadcastArgs(s0=a, s1=b), V(np.array([2, 1, 3], np.int32), 3),
      V(np.array([4, 1], np.int32), 2), expect=["BROADCAST_ARGS"]),
    C("broadcast_args_int64", lambda a, b: tf.raw_ops.BroadcastArgs(s0=a, s1=b), V(np.array([5, 1], np.int64), 2),
      V(np.array([1], np.int64), 1)),
    C("empty_init", lambda s: tf.raw_ops.Empty(shape=s, dtype=tf.int32, init=True), V(np.array([2, 3], np.int32), 2),
      expect=["FILL"]),
    C("empty_bool_init", lambda x: tf.logical_or(tf.raw_ops.Empty(shape=tf.shape(x), dtype=tf.bool, init=True), x > 0),
      F(None, 2)),
    C("empty_uninitialised", lambda x: tf.raw_ops.Empty(shape=tf.shape(x), dtype=tf.float32), F(None, 3),
      check=_empty_shape_dtype),
    C("approx_max_k", lambda x: tf.math.approx_max_k(x, 3), F(2, 7), expect=["TOPK_V2"]),
    # TensorFlow runs approx_min_k and other reduction dims under XLA only: the reference is jit-compiled
    C("approx_min_k_axis0", tf.function(lambda x: tf.math.approx_min_k(x, 2, reduction_dimension=0),
                                        jit_compile=True), F(5, 3)),
    C("approx_max_k_recall", lambda x: tf.math.approx_max_k(x, 4, recall_target=0.5), F(1, 2, 16)),
    C("xla_gather_rows", _xla_gather([1], [0], [0], 1, [1, 3]), F(5, 3), V(np.array([[4], [0], [2]], np.int32), 3, 1),
      expect=["GATHER_ND"]),
    C("xla_gather_nd_clamped", _xla_gather([1], [0, 1], [0, 1], 1, [1, 1, 4]), F(3, 2, 4),
      V(np.array([[2, 1], [0, 0], [7, -3]], np.int32), 3, 2)),
    C("xla_gather_columns_implicit_vector", _xla_gather([0], [1], [1], 1, [3, 1]), F(3, 5),
      V(np.array([4, 1], np.int32), 2)),
    C("xla_gather_permuted_start_map_uncollapsed", _xla_gather([0, 2], [1], [1, 0], 0, [1, 1, 2]), I(4, 3, 2),
      V(np.array([[2, 0, 1], [3, 1, 0]], np.int32), 2, 3)),
    C("xla_gather_window", _xla_gather([1, 2], [0], [0], 1, [1, 2, 2]), F(4, 3, 3),
      V(np.array([[1], [3]], np.int32), 2, 1)),
    C("concat_v1", lambda a, b: tf.raw_ops.Concat(concat_dim=1, values=[a, b]), F(2, 3), F(2, 1),
      expect=["CONCATENATION"]),
    C("reverse_v1", lambda x: tf.raw_ops.Reverse(tensor=x, dims=[True, False, True, True]), I(2, 3, 2, 2)),
    C("unravel_index", lambda i: tf.unravel_index(i, [3, 4, 5]), V(np.array([0, 7, 59, 23], np.int32), 4)),
    C("unravel_index_scalar_int64", lambda i: tf.unravel_index(i, tf.constant([4, 6], tf.int64)),
      V(np.array(17, np.int64))),
    C("xla_sharding", _sharding, F(2, 3)),
    C("placeholder_with_default", _placeholder_with_default, F(2, 3)),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_lowering_rule(case: Case):
    check_case(case)


def test_every_rule_of_the_family_is_exercised():
    assert missing_rules(CASES, FAMILY) == []


# --------------------------------------------------------------------------------------------
# int8 and 16x8: the forms the official converter makes integer, integer here where LiteRT's kernel is exact
# --------------------------------------------------------------------------------------------

_LEVELS = np.array([-1.0, 0.0, 0.5, 2.0], np.float32)  # Unique's values: distinct after int8 rounding

# id -> (fn, input shapes, {op kind: its mode in the int8 model})
INT8_CASES = {
    "set_diag": (lambda x, d: tf.linalg.set_diag(x, d) * 1.5, [(2, 3, 3), (2, 3)], {"MATRIX_SET_DIAG": "int8"}),
    "set_diag_band": (lambda x, d: tf.linalg.set_diag(x, d, k=(-1, 1)) * 1.5, [(4, 4), (3, 4)],
                      {"SELECT_V2": "int8", "GATHER": "int8"}),
    # matrix_diag.cc's raw 0 is not the zero point: float between DEQUANTIZE / QUANTIZE, exact
    "diag_main": (lambda d: tf.linalg.diag(d * 1.5) + 0.25, [(2, 4)], {"MATRIX_DIAG": "float"}),
    "diag_k1": (lambda d: tf.linalg.diag(d * 1.5, k=1, padding_value=-0.5), [(2, 4)],
                {"PADV2": "int8", "GATHER": "int8"}),
    "unique": (lambda x: tf.unique(x * 1.5)[0], [(8,)], {"UNIQUE": "int8"}),
    "sparse_to_dense": (lambda v: tf.raw_ops.SparseToDense(
        sparse_indices=tf.constant([[0, 1], [2, 0]]), output_shape=[3, 2], sparse_values=v * 1.5,
        default_value=0.25), [(2,)], {"SPARSE_TO_DENSE": "int8"}),
    "dynamic_stitch": (lambda x, y: tf.dynamic_stitch([tf.constant([1, 0]), tf.constant([2])], [x * 1.5, y]),
                       [(2, 3), (1, 3)], {"CONCATENATION": "int8", "GATHER": "int8"}),
    # SCATTER_ND fills raw zeros and adds raw values: float; the official int8 file fails to prepare its MUL
    "tensor_scatter_update": (lambda a, b: tf.tensor_scatter_nd_update(a, tf.constant([[0], [2]]), b) * 1.5,
                              [(4, 3), (2, 3)], {"SCATTER_ND": "float", "SELECT_V2": "int8"}),
    # no int8 kernels (reverse_sequence.cc, segment_sum.cc): float, where the official int8 REVERSE_SEQUENCE fails
    "reverse_sequence": (lambda x: tf.reverse_sequence(x * 1.5, tf.constant([2, 1, 3]), 1, 0), [(3, 4)],
                         {"REVERSE_SEQUENCE": "float"}),
    "segment_sum": (lambda x: tf.math.segment_sum(x * 1.5, tf.constant([0, 0, 1])), [(3, 2)],
                    {"SEGMENT_SUM": "float"}),
}


def _int8_draws(shapes, n: int, seed: int, unique: bool) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    if unique:
        return [[rng.choice(_LEVELS, size=s)] for s in shapes for _ in range(n)]
    return [[rng.uniform(-2, 2, size=s).astype(np.float32) for s in shapes] for _ in range(n)]


# the kernels that also take int16 (16x8): MATRIX_SET_DIAG and UNIQUE copy / compare raw int16 values
INT16_CASES = {"set_diag": {"MATRIX_SET_DIAG": "int16x8"}, "unique": {"UNIQUE": "int16x8"},
               "sparse_to_dense": {"SPARSE_TO_DENSE": "int8"}}  # no int16 kernel: int8 in a 16x8 model


@pytest.mark.parametrize("name, mode", [(n, "int8") for n in INT8_CASES] + [(n, "int16x8") for n in INT16_CASES])
def test_integer_forms_on_both_kernel_sets(name, mode):
    fn, shapes, modes = INT8_CASES[name]
    modes = modes if mode == "int8" else INT16_CASES[name]
    cf = tf.function(fn, autograph=False).get_concrete_function(*[tf.TensorSpec(s, tf.float32) for s in shapes])
    held_out = _int8_draws(shapes, 3, seed=7, unique=name == "unique")
    samples = _int8_draws(shapes, 32, seed=1, unique=name == "unique") + held_out
    conv = fuselite.Converter.from_concrete_functions([cf])
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: iter(samples)
    if mode == "int16x8":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    model = conv.convert()
    seen = {}
    for r in conv.report.quantization["ops"]:
        seen.setdefault(r["kind"], set()).add(r["mode"])
    for kind, kind_mode in modes.items():
        assert seen.get(kind) == {kind_mode}, (kind, seen)
    for xs in held_out:
        want = np.asarray(fn(*[tf.constant(x) for x in xs]))
        for builtin in (False, True):
            got = next(iter(run(model, xs, builtin_kernels=builtin).values()))
            assert got.shape == want.shape
            # a few int8 steps of the output's range (lowering_kit's exactness is for float and integer models)
            assert np.abs(got - want).max() <= 0.04 * np.ptp(want), (builtin, got, want)


# --------------------------------------------------------------------------------------------
# variants refused with the op and the reason
# --------------------------------------------------------------------------------------------

REFUSED = [
    ("xla_gather_window_on_indexed_dim", _xla_gather([1, 2], [], [0], 1, [2, 3]), [F(5, 3), I(2, 1)],
     "XlaGather.*windows of more than one element along indexed dims \\[0\\]"),
    ("dynamic_stitch_runtime_indices", lambda i, x: tf.dynamic_stitch([i], [x]), [I(3), F(3)],
     "DynamicStitch.*indices known only at run time"),
    ("dynamic_stitch_unwritten_row", lambda x: tf.dynamic_stitch([tf.constant([0, 2])], [x]), [F(2)],
     "DynamicStitch.*leave output rows \\[1\\] unwritten"),
    ("tensor_scatter_update_repeated", lambda x, u: tf.tensor_scatter_nd_update(x, tf.constant([[1], [1]]), u),
     [F(3), F(2)], "TensorScatterUpdate.*repeated indices"),
    ("approx_top_k_not_aggregated", lambda x: tf.math.approx_max_k(x, 2, aggregate_to_topk=False), [F(2, 8)],
     "ApproxTopK.*aggregate_to_topk=False"),
    ("segment_mean_int", lambda x: tf.math.segment_mean(x, tf.constant([0, 0, 1])), [I(3)],
     "SegmentMean.*a segment mean of int32 data"),
    ("sparse_to_dense_unsorted", lambda v: tf.raw_ops.SparseToDense(
        sparse_indices=tf.constant([2, 0]), output_shape=[3], sparse_values=v, default_value=0.0), [F(2)],
     "SparseToDense.*not sorted"),
    ("matrix_diag_dynamic_size", lambda d, n: tf.linalg.diag(d, num_rows=n, num_cols=n), [F(3), I()],
     "MatrixDiagV3.*num_rows is not a constant"),
]


@pytest.mark.parametrize("fn, specs, message", [pytest.param(*r[1:], id=r[0]) for r in REFUSED])
def test_a_variant_it_cannot_express_is_a_conversion_error_naming_the_op(fn, specs, message):
    signature = [tf.TensorSpec(s.shape, s.dtype) for s in specs]
    cf = tf.function(fn, autograph=False).get_concrete_function(*signature)
    with pytest.raises(fuselite.ConversionError, match=message):
        fuselite.Converter.from_concrete_functions([cf]).convert()


def test_sparse_to_dense_version_follows_op_version_cc():
    """op_version.cc: SPARSE_TO_DENSE is version 3 for int8 / uint8 values, 2 for int64, else 1."""
    def version(dtype):
        fn = Function("f")
        ins = [fn.add_input("i", np.int32, (2, 1)), fn.const(np.array([4], np.int32)),
               fn.add_input("v", dtype, (2,)), fn.const(np.zeros((), dtype))]
        return op_version(fn.make_op("tfl.SPARSE_TO_DENSE", ins, [(dtype, (4,))], {"validate_indices": True}))

    assert [version(d) for d in (np.float32, np.int32, np.int64, np.int8, np.uint8)] == [1, 1, 2, 3, 3]
