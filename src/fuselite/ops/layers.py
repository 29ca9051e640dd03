"""Layers with weights (fully connected, convolutions, matrix products, lookups, recurrent sequence ops), normalizations and pooling: one catalog entry each (``catalog.py`` says what an entry holds)."""

from __future__ import annotations

from fuselite.ops.catalog import add_entries
from fuselite.ops.conditions import (
    INT16_INT8,
    POOL_LIKE,
    SEQUENCE_HYBRID,
    asymmetric,
    attr,
    both,
    float_weights_only,
    grouped_conv,
    hybrid_weights,
    in_,
    out,
    per_channel,
)
from fuselite.ops.facts import FLOAT_WEIGHTS_BELOW, RANGE, SAME, Facts, HybridKernel, IntegerKernel

_LSTM = (*range(1, 12), 16)  # the LSTM's weights (input and recurrent kernels, peepholes, projection)

add_entries({
    "AVERAGE_POOL_2D": Facts(
        integer=SAME,
        int16=True,
        versions=POOL_LIKE,
        runtime=("1.5.0", "1.14.0", "2.3.0"),
        micro_op="AddAveragePool2D"),
    # both operands activations (a constant right-hand side quantized as one, per tensor: the kernel reads
    # params.scale), as operator_property.cc's quantize_input_as_activations
    "BATCH_MATMUL": Facts(  # adj_x / adj_y: no change
        integer=RANGE,
        int16=True,
        hybrid=HybridKernel((1,), None, True, float_below=FLOAT_WEIGHTS_BELOW),
        versions=INT16_INT8 + [(both(hybrid_weights(1), asymmetric), 4)],
        runtime=("2.3.0", "2.3.0", "2.4.0", "2.5.0"),
        micro_op="AddBatchMatMul",
        micro_limits=(float_weights_only(1),)),
    "BIDIRECTIONAL_SEQUENCE_LSTM": Facts(
        hybrid=HybridKernel((*_LSTM, *(i + 17 for i in _LSTM), *range(40, 48)),
            None, True, float_below=FLOAT_WEIGHTS_BELOW),
        versions=SEQUENCE_HYBRID,
        runtime=("1.14.0", "1.14.0", "1.14.0")),
    "BIDIRECTIONAL_SEQUENCE_RNN": Facts(
        hybrid=HybridKernel((1, 2, 5, 6, 10, 11), None, True, float_below=FLOAT_WEIGHTS_BELOW),
        versions=SEQUENCE_HYBRID,
        runtime=("1.14.0", "1.14.0", "2.3.0")),
    "CONV_2D": Facts(
        integer=IntegerKernel("range", weight=(1, 0), bias=2, needs_bias=True),
        int16=True,
        hybrid=HybridKernel((1,), 0, False, float_below=FLOAT_WEIGHTS_BELOW),
        versions=[(grouped_conv, 6), (both(in_(0, "int8"), in_(1, "int8"), out(0, "int8")), 3),
            (both(hybrid_weights(1), per_channel(1, 0)), 5), (hybrid_weights(1), 2)],
        runtime=("1.5.0", "1.14.0", "1.14.0", "2.3.0", "2.4.0", "2.9.0"),
        micro_op="AddConv2D",
        micro_limits=(float_weights_only(1),)),
    "CONV_3D": Facts(runtime=("2.5.0",)),
    "DEPTHWISE_CONV_2D": Facts(
        integer=IntegerKernel("range", weight=(1, 3), bias=2, needs_bias=True),
        int16=True,
        hybrid=HybridKernel((1,), 3, False, float_below=FLOAT_WEIGHTS_BELOW),
        versions=[(both(hybrid_weights(1), per_channel(1, 3)), 6), (hybrid_weights(1), 4),
            (both(in_(0, "int8"), in_(1, "int8"), out(0, "int8")), 3),
            (lambda op: op.attrs.get("dilation_h_factor", 1) != 1
             or op.attrs.get("dilation_w_factor", 1) != 1, 2)],
        runtime=("1.5.0", "1.12.0", "1.14.0", "2.2.0", "2.3.0", "2.3.0"),
        micro_op="AddDepthwiseConv2D",
        micro_limits=(float_weights_only(1),)),
    "EMBEDDING_LOOKUP": Facts(
        hybrid=HybridKernel((1,), None, False, float_input=False),
        versions=[(lambda op: per_channel(1, 0)(op) and len(op.inputs[1].quant.scale) > 1, 4)],
        runtime=("1.13.0", "1.14.0", "1.14.0", "2.18.0"),
        micro_op="AddEmbeddingLookup"),
    # Only a literally 2-input FC is v6; a None bias is still written as input -1.
    # Hybrid (dynamic range): per-channel 12 comes first; a hybrid FC with keep_num_dims is 5.
    "FULLY_CONNECTED": Facts(
        integer=IntegerKernel("range", weight=(1, 0), bias=2),
        int16=True,
        hybrid=HybridKernel((1,), 0, True, float_below=FLOAT_WEIGHTS_BELOW),
        versions=[(both(hybrid_weights(1), per_channel(1, 0)), 12), (lambda op: len(op.inputs) == 2, 6),
            (attr("keep_num_dims"), 5), (both(in_(0, "int8"), in_(1, "int8"), out(0, "int8")), 4),
            (both(hybrid_weights(1), asymmetric), 9), (hybrid_weights(1), 3),
            (lambda op: op.attrs.get("weights_format", "DEFAULT") != "DEFAULT", 2)],
        runtime=("1.5.0", "1.10.0", "1.14.0", "1.14.0", "2.0.0", "2.1.0", "2.3.0", "2.3.0", "2.3.0", "2.11.0",
                 "2.15.0", "2.17.0"),
        micro_op="AddFullyConnected",
        micro_limits=(float_weights_only(1),)),
    "L2_NORMALIZATION": Facts(integer=IntegerKernel("fixed", fixed=(1 / 128, 0)), micro_op="AddL2Normalization"),  # l2norm.cc: the output is Q0.7
    "L2_POOL_2D": Facts(micro_op="AddL2Pool2D"),
    "LOCAL_RESPONSE_NORMALIZATION": Facts(no_integer="LiteRT's LOCAL_RESPONSE_NORMALIZATION takes float32 only"),
    "LSTM": Facts(
        versions=[(lambda op: op.attrs.get("kernel_type", "FULL") == "BASIC", 2)],
        runtime=("1.7.0", "1.10.0")),
    "MAX_POOL_2D": Facts(
        integer=SAME,
        int16=True,
        versions=POOL_LIKE,
        runtime=("1.5.0", "1.14.0", "2.3.0"),
        micro_op="AddMaxPool2D"),
    "SVDF": Facts(micro_op="AddSvdf", micro_limits=(float_weights_only(1),)),
    # transpose_conv.cc: 0 output shape, 1 weights [O, H, W, I] (per channel on 0), 2 input, 3 bias (optional)
    "TRANSPOSE_CONV": Facts(
        integer=IntegerKernel("range", weight=(1, 0), bias=3, input=2),
        int16=True,
        versions=[(lambda op: op.attrs.get("fused_activation_function", "NONE") != "NONE", 4),
            (lambda op: len(op.inputs) == 4 and op.inputs[3] is not None, 3),
            (in_(1, "int8"), 2)],
        runtime=("1.9.0", "2.2.0", "2.3.0", "2.13.0"),
        micro_op="AddTransposeConv",
        micro_limits=(float_weights_only(1),)),
    # version 5: int16 activations, int8 weights (TFLite Micro's 16x8 kernel; LiteRT registers up to 4)
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Facts(
        no_16x8=True,
        hybrid=HybridKernel(_LSTM, None, True, float_below=FLOAT_WEIGHTS_BELOW),
        versions=[(both(in_(0, "int16"), out(0, "int16")), 5),
            (attr("diagonal_recurrent_tensors"), 4),
            (both(hybrid_weights(2), asymmetric), 3), (hybrid_weights(2), 2)],
        runtime=("1.13.1", "1.14.0", "2.3.0", "2.12.0"),
        micro_op="AddUnidirectionalSequenceLSTM",
        micro_limits=(float_weights_only(2),)),
    "UNIDIRECTIONAL_SEQUENCE_RNN": Facts(
        hybrid=HybridKernel((1, 2), None, True, float_below=FLOAT_WEIGHTS_BELOW),
        versions=SEQUENCE_HYBRID,
        runtime=("1.14.0", "1.14.0", "2.3.0")),
})

add_entries({
    # conv3d_transpose.cc: 0 output shape (int32 [5]), 1 filter [D, H, W, out, in], 2 input, 3 bias (optional);
    # Conv3DOptions. Kept float in integer modes, as TensorFlow's converter keeps it (runtime_version.cc: 2.6.0)
    "CONV_3D_TRANSPOSE": Facts(
        no_integer="kept float, as TensorFlow's converter keeps CONV_3D_TRANSPOSE (fuselite writes no int8 form of "
                   "it yet)",
        runtime=("2.6.0",)),
})
