"""Reductions, arg-max / arg-min, top-k and cumulative sums: one catalog entry each (``catalog.py`` says what an entry holds)."""

from __future__ import annotations

from fuselite.ops.catalog import add_entries
from fuselite.ops.conditions import EXP_LIKE, INT8, INT8_ONLY, INT16, INT16_INT8, either, in_, out
from fuselite.ops.facts import RANGE, SAME, Facts

add_entries({
    # an int8 input, an integer (index) output
    "ARG_MAX": Facts(
        integer=SAME,
        versions=[(in_(0, "bool"), 3), (INT8, 2)],
        runtime=("1.9.0", "1.14.0", "2.9.0"),
        micro_op="AddArgMax"),
    "ARG_MIN": Facts(
        integer=SAME,
        versions=[(in_(0, "bool"), 3), (INT8, 2)],
        runtime=("1.9.0", "1.14.0", "2.9.0"),
        micro_op="AddArgMin"),
    "CUMSUM": Facts(
        no_integer="LiteRT's CUMSUM takes float32, int32 and int64 only (cumsum.cc)",
        runtime=("2.4.0",),
        micro_op="AddCumSum"),
    # unsorted_segment.cc: float32 and int32 data
    **{f"UNSORTED_SEGMENT_{name}": Facts(
        no_integer="LiteRT's UNSORTED_SEGMENT ops take float32 and int32 data only (unsorted_segment.cc)",
        runtime=("2.11.0" if name == "MIN" else "2.10.0",)) for name in ("SUM", "MAX", "MIN", "PROD")},
    "MEAN": Facts(
        integer=RANGE,
        int16=True,
        versions=INT16_INT8,
        runtime=("1.6.0", "1.14.0", "2.4.0"),
        micro_op="AddMean"),
    "REDUCE_ALL": Facts(runtime=("2.6.0",), micro_op="AddReduceAll"),
    "REDUCE_ANY": Facts(runtime=("1.11.0",)),
    "REDUCE_MAX": Facts(  # TFLite Micro's reduce.cc: int8 only
        integer=SAME,
        int16=True,
        micro="int8",
        versions=INT16_INT8,
        runtime=("1.11.0", "1.14.0", "2.5.0"),
        micro_op="AddReduceMax"),
    "REDUCE_MIN": Facts(
        integer=SAME,
        int16=True,
        micro="int8",
        versions=INT16_INT8,
        runtime=("1.11.0", "1.14.0", "2.5.0"),
        micro_op="AddReduceMin"),
    "REDUCE_PROD": Facts(versions=EXP_LIKE, runtime=("1.11.0", "2.6.0")),
    "SUM": Facts(integer=RANGE, int16=True, versions=INT8_ONLY, runtime=("1.10.0", "1.15.0"), micro_op="AddSum"),
    "TOPK_V2": Facts(  # its values are the input's
        integer=SAME,
        int16=True,
        versions=[(either(INT16, in_(1, "int16"), out(1, "int16")), 3), (INT8, 2)],
        runtime=("1.7.0", "1.14.0", "2.13.0")),
})

add_entries({
    # non_max_suppression.cc: boxes [N, 4], scores [N], max_output_size (int32 scalar), iou and score thresholds
    # (V5: and the soft-NMS sigma); indices padded with zeros to max_output_size, (V5: their scores,) the number
    # selected. Kept float, as TensorFlow's converter keeps them: the selection compares the float scores and IoUs
    **{kind: Facts(no_integer=f"kept float, as TensorFlow's converter keeps {kind} (the selection compares float "
                              "scores and overlaps)", runtime=("2.1.0",))
       for kind in ("NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5")},
})
