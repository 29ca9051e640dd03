"""Ops that move, copy or index values: shapes, slices, concatenation, padding, gathers, resizing, fills: one catalog entry each (``catalog.py`` says what an entry holds)."""

from __future__ import annotations

from fuselite.ops.catalog import add_entries
from fuselite.ops.conditions import (
    I16_IO,
    INT8,
    INT8_ONLY,
    INT16,
    INT16_INT8,
    PAD_RULE,
    SPACE_BATCH,
    attr,
    computed,
    either,
    in_,
    input_type,
    rank_gt,
)
from fuselite.ops.facts import AS_OUTPUT, SAME, Facts

add_entries({
    "BATCH_TO_SPACE_ND": Facts(
        integer=SAME,
        versions=SPACE_BATCH,
        runtime=("1.6.0", "1.14.0", "2.3.0", "2.12.0"),
        micro_op="AddBatchToSpaceNd"),
    "BROADCAST_ARGS": Facts(micro_op="AddBroadcastArgs"),
    "BROADCAST_TO": Facts(  # version 1 was retired
        integer=SAME,
        versions=[(in_(0, "int8", "int16"), 3), (lambda op: True, 2)],
        runtime=(None, "2.5.0", "2.5.0"),
        micro_op="AddBroadcastTo"),
    "CONCATENATION": Facts(  # concatenation.cc: no rescaling for int8
        integer=AS_OUTPUT,
        int16=True,
        versions=[(in_(0, "uint32"), 4), (INT16, 3), (INT8, 2)],
        runtime=("1.5.0", "1.14.0", "2.3.0", "2.14.0"),
        micro_op="AddConcatenation"),
    "DEPTH_TO_SPACE": Facts(integer=SAME, micro_op="AddDepthToSpace"),
    # dynamic_update_slice.cc: the update's integers copied into the operand's (int8 and int16 in LiteRT 2.3 and
    # TFLite Micro): a TensorList written step by step (keras-hub RWKV-7's time loop at a static length)
    "DYNAMIC_UPDATE_SLICE": Facts(
        integer=AS_OUTPUT,
        int16=True,
        versions=[(INT16, 4), (in_(0, "float16"), 3), (in_(2, "int64"), 2)],
        runtime=("2.9.0", "2.17.0", "2.19.0", "2.20.0"),
        micro_op="AddDynamicUpdateSlice"),
    "EXPAND_DIMS": Facts(integer=SAME, int16=True, runtime=("1.10.0",), micro_op="AddExpandDims"),
    # fill.cc: the scalar value must have the output's scale and zero point (int16: zero point 0)
    "FILL": Facts(
        integer=AS_OUTPUT,
        int16=True,
        versions=[(in_(1, "float16"), 4), (in_(1, "int8", "int16"), 3), (in_(1, "bool", "string"), 2)],
        runtime=("1.13.0", "2.3.0", "2.5.0", "2.12.0"),
        micro_op="AddFill",
        micro_limits=(
            (lambda op: len(op.inputs) > 1 and (op.inputs[1] is None or op.inputs[1].dtype != "float32"),
             "TFLite Micro's FILL takes a float32 value only"),
            (computed(0), "TFLite Micro's FILL takes constant dims only (here computed at run time: a recurrent "
                          "layer's state with a dynamic batch; target='micro' fixes it)"))),
    # TFLite Micro's gather.cc: float32 and int8 data
    "GATHER": Facts(
        integer=SAME,
        int16=True,
        micro="int8",
        versions=[(in_(1, "int16"), 6), (attr("batch_dims", 0), 5), (INT16, 4), (in_(0, "bool"), 3), (INT8, 2)],
        runtime=("1.6.0", "1.14.0", "1.15.0", "2.4.0", "2.5.0", "2.13.0"),
        micro_op="AddGather",
        micro_limits=((input_type(0, "int16"), "TFLite Micro's GATHER takes no int16 table"),)),
    "GATHER_ND": Facts(
        integer=SAME,
        versions=[(in_(0, "bool"), 5), (in_(1, "int16"), 4), (INT16, 3), (in_(0, "string"), 2)],
        runtime=("1.14.0", "2.3.0", "2.5.0", "2.13.0", "2.16.0"),
        micro_op="AddGatherNd"),
    "MIRROR_PAD": Facts(
        integer=SAME,
        versions=INT16_INT8,
        runtime=("1.13.1", "2.3.0", "2.12.0"),
        micro_op="AddMirrorPad"),
    # one_hot.cc: the on and off values copied as they are (int8 evaluates; int16 passes Prepare, not Eval)
    "ONE_HOT": Facts(integer=AS_OUTPUT, runtime=("1.11.0",)),
    "PACK": Facts(  # pack.cc: inputs and output must share parameters
        integer=AS_OUTPUT,
        int16=True,
        versions=[(INT8, 2), (I16_IO, 3), (in_(0, "uint32"), 4)],
        runtime=("1.11.0", "1.14.0", "2.3.0", "2.13.0"),
        micro_op="AddPack"),
    "PAD": Facts(
        integer=SAME,
        int16=True,
        versions=PAD_RULE,
        runtime=("1.5.0", "1.14.0", "2.4.0", "2.6.0", "2.20.0"),
        micro_op="AddPad"),
    # pad.cc (LiteRT and TFLite Micro): the constant value must have the output's scale and zero point, and
    # the output the input's (values copied): quantized at the input's parameters (``int8_engine.Int8Function``)
    "PADV2": Facts(
        integer=SAME,
        int16=True,
        versions=PAD_RULE,
        runtime=("1.9.0", "1.14.0", "2.4.0", "2.6.0", "2.20.0"),
        micro_op="AddPadV2"),
    "RANGE": Facts(no_integer="RANGE makes indices", versions=[(in_(0, "int64"), 2)], runtime=("1.13.0", "2.14.0")),
    "RANK": Facts(runtime=("1.14.0",)),
    "RESHAPE": Facts(integer=SAME, int16=True, runtime=("1.5.0",), micro_op="AddReshape"),
    "RESIZE_BILINEAR": Facts(  # TFLite Micro's resize_bilinear.cc
        integer=SAME,
        int16=True,
        micro="int8",
        versions=[(INT16, 4), (attr("half_pixel_centers"), 3), (INT8, 2)],
        runtime=("1.7.0", "1.14.0", "2.2.0", "2.5.0"),
        micro_op="AddResizeBilinear"),
    "RESIZE_NEAREST_NEIGHBOR": Facts(
        integer=SAME,
        int16=True,
        versions=[(INT16, 4), (either(attr("half_pixel_centers"), attr("align_corners")), 3),
            (INT8, 2)],
        runtime=("1.13.1", "1.14.0", "2.3.0", "2.4.0"),
        micro_op="AddResizeNearestNeighbor"),
    "REVERSE_V2": Facts(
        integer=SAME,
        int16=True,
        versions=[(INT8, 3), (in_(0, "bool"), 2)],
        runtime=("1.14.0", "2.2.0", "2.5.0"),
        micro_op="AddReverseV2"),
    "SHAPE": Facts(runtime=("1.10.0",), micro_op="AddShape"),
    "SLICE": Facts(
        integer=SAME,
        int16=True,
        versions=[(in_(0, "uint32"), 6), (rank_gt(0, 4), 5), (INT16, 4), (in_(0, "string"), 3), (INT8, 2)],
        runtime=("1.14.0", "1.14.0", "1.14.0", "2.4.0", "2.5.0", "2.14.0"),
        micro_op="AddSlice"),
    "SPACE_TO_BATCH_ND": Facts(
        integer=SAME,
        versions=SPACE_BATCH,
        runtime=("1.6.0", "1.14.0", "2.3.0", "2.12.0"),
        micro_op="AddSpaceToBatchNd"),
    "SPACE_TO_DEPTH": Facts(integer=SAME, micro_op="AddSpaceToDepth"),
    "SPLIT": Facts(  # input 1 is the data
        integer=SAME,
        int16=True,
        versions=[(in_(1, "int16"), 4), (in_(1, "int32"), 3), (in_(1, "int8"), 2)],
        runtime=("1.5.0", "1.14.0", "1.14.0", "2.3.0"),
        micro_op="AddSplit"),
    "SPLIT_V": Facts(integer=SAME, int16=True, versions=INT8_ONLY, runtime=("1.13.1", "2.3.0"), micro_op="AddSplitV"),
    "SQUEEZE": Facts(
        integer=SAME,
        int16=True,
        versions=[(in_(0, "string"), 2)],
        runtime=("1.6.0", "2.5.0"),
        micro_op="AddSqueeze"),
    "STRIDED_SLICE": Facts(
        integer=SAME,
        int16=True,
        versions=[(attr("offset"), 8), (in_(0, "uint32"), 7),
            (either(attr("ellipsis_mask", 0), attr("new_axis_mask", 0)), 6),
            (in_(0, "string"), 5), (rank_gt(0, 4), 4), (in_(0, "bool"), 3), (INT8, 2)],
        runtime=("1.6.0", "1.14.0", "2.1.0", "2.2.0", "2.5.0", "2.6.0", "2.14.0", "2.14.0"),
        micro_op="AddStridedSlice"),
    # tile.cc copies int16 as any other type; op_version.cc gives int16 version 1 (as the official 16x8 writes it)
    "TILE": Facts(
        integer=SAME,
        int16=True,
        versions=[(INT8, 3), (in_(0, "string"), 2)],
        runtime=("1.10.1", "2.2.0", "2.8.0")),
    "TRANSPOSE": Facts(
        integer=SAME,
        int16=True,
        versions=[(rank_gt(0, 5), 6), (INT16, 5), (rank_gt(0, 4), 4), (in_(0, "bool"), 3), (INT8, 2)],
        runtime=("1.6.0", "1.14.0", "1.15.0", "2.3.0", "2.4.0", "2.12.0"),
        micro_op="AddTranspose"),
    "UNPACK": Facts(
        integer=SAME,
        int16=True,
        versions=[(in_(0, "int8", "uint8"), 2), (in_(0, "bool"), 3), (I16_IO, 4)],
        runtime=("1.11.0", "1.14.0", "2.2.0", "2.3.0"),
        micro_op="AddUnpack"),
    # bucketize.cc: float32 / float64 / int32 / int64 values in, int32 bucket ids out (std::upper_bound over the
    # boundaries, as TensorFlow's Bucketize: a value equal to a boundary goes above it); Keras' Discretization
    "BUCKETIZE": Facts(no_integer="LiteRT's BUCKETIZE reads float and integer values, not int8 (bucketize.cc)",
                       runtime=("2.8.0",)),
    # where.cc: a bool condition in, int64 coordinates out (no float operand)
    "WHERE": Facts(runtime=("1.14.0",)),
    "ZEROS_LIKE": Facts(runtime=("1.12.0",), micro_op="AddZerosLike"),
})

# index ops (lower/index.py), read in LiteRT's kernels; runtime versions from runtime_version.cc
add_entries({
    # matrix_diag.cc writes a raw 0 off the diagonal: in int8 that is not the output's zero point (the official
    # converter's int8 MATRIX_DIAG is off by it, measured 0.99 on outputs spanning 1.96), so it stays float
    "MATRIX_DIAG": Facts(no_integer="matrix_diag.cc fills the off-diagonal with a raw 0, not the zero point",
                         runtime=("1.14.0",)),
    # matrix_set_diag.cc copies raw values of the input and the diagonal: both at the output's parameters
    "MATRIX_SET_DIAG": Facts(integer=AS_OUTPUT, int16=True, runtime=("1.14.0",)),
    "REVERSE_SEQUENCE": Facts(no_integer="reverse_sequence.cc takes float32, int16, int32, int64 and uint8, no int8",
                              runtime=("1.14.0",)),
    "SEGMENT_SUM": Facts(no_integer="segment_sum.cc sums float32 and int32 data only", runtime=("2.2.0",)),
    # unique.cc compares raw int8 / int16 values: the unique values keep the input's parameters
    "UNIQUE": Facts(integer=SAME, int16=True, runtime=("1.14.0",)),
    # sparse_to_dense.cc copies raw values and the default: both at the output's parameters; no int16 kernel
    "SPARSE_TO_DENSE": Facts(
        integer=AS_OUTPUT,
        no_16x8=True,
        versions=[(in_(2, "int8", "uint8"), 3), (in_(2, "int64"), 2)],
        runtime=("1.9.0", "1.14.0", "1.15.0")),
})
