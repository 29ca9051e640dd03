"""Whether a file would run fully on LiteRT's GPU accelerator, read from the file (no GPU needed): the op rules of
its parsers (``tflite/delegates/gpu/common/model_builder.cc``, ``ml_drift_delegate/tflite/model_builder.cc`` and
``tflite/tools/versioning/gpu_compatibility.cc`` in LiteRT's sources), checked against what the accelerator
itself printed for the models of ``benchmarks/accelerators.py`` (docs/accelerators.md).

Every conversion's report carries it (``report.gpu["predicted"]``); ``target="gpu"`` writes forms it runs and
runs the file there before writing. Only the first subgraph is the GPU's (the delegate takes the largest
partition of the primary subgraph); ops in other subgraphs (a ``WHILE``'s body) do not run there at all.

Example::

    problems = gpu_problems(model)   # ["WHILE: Operation is not supported.", "GATHER: Only support 1D indices"]
"""

from __future__ import annotations

# builtin ops the GPU accelerator's parsers take (both switches), by name
SUPPORTED = frozenset("""
ABS ADD ADD_N ARG_MAX ATAN2 AVERAGE_POOL_2D BATCH_MATMUL BITCAST BITWISE_XOR CAST CEIL CONCATENATION CONV_2D COS
CUMSUM DENSIFY DEPTH_TO_SPACE DEPTHWISE_CONV_2D DEQUANTIZE DIV DYNAMIC_UPDATE_SLICE ELU EMBEDDING_LOOKUP EQUAL EXP
FLOOR FLOOR_DIV FLOOR_MOD FULLY_CONNECTED GATHER GELU GREATER GREATER_EQUAL HARD_SWISH LEAKY_RELU LESS LESS_EQUAL
LOG LOGICAL_AND LOGICAL_NOT LOGICAL_OR LOGISTIC LSTM MAXIMUM MAX_POOL_2D MEAN MINIMUM MIRROR_PAD MUL NEG NOT_EQUAL
ONE_HOT PACK PAD PADV2 POW PRELU QUANTIZE REDUCE_ALL REDUCE_ANY REDUCE_MAX REDUCE_MIN REDUCE_PROD RELU RELU6
RELU_0_TO_1 RELU_N1_TO_1 RESHAPE RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR REVERSE_V2 RIGHT_SHIFT ROUND RSQRT
SELECT SELECT_V2 SIGN SIN SLICE SOFTMAX SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE STRIDED_SLICE
SUB SUM TANH TILE TOPK_V2 TRANSPOSE TRANSPOSE_CONV UNPACK
""".split())
_INT_OK = frozenset("""
ABS ADD ATAN2 COS DIV FLOOR_DIV FLOOR_MOD MAXIMUM MINIMUM MUL NEG REDUCE_MAX REDUCE_MIN REDUCE_PROD RIGHT_SHIFT SIGN
SIN SUB SUM TILE CAST CONCATENATION DYNAMIC_UPDATE_SLICE GATHER PACK PAD PADV2 RESHAPE REVERSE_V2 SELECT SELECT_V2
SLICE STRIDED_SLICE TRANSPOSE EQUAL NOT_EQUAL LESS LESS_EQUAL GREATER GREATER_EQUAL LOGICAL_AND LOGICAL_OR
LOGICAL_NOT BITCAST
""".split())  # the ops that take int16 / int32 tensors there (IsIntSupportedOp, SupportAllPrecisionOp)


def gpu_problems(model: bytes) -> list[str]:
    """Why LiteRT's GPU accelerator would leave ops of ``model``'s first signature to the CPU, one "OP: reason"
    line per op kind and reason (LiteRT's words where it has them); [] where every op is one it takes."""
    from ai_edge_litert import schema_py_generated as schema

    from fuselite.runtime.compiled import model_object, op_names

    m = model_object(model)
    names = op_names()
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    codes = [(names.get(max(c.builtinCode, c.deprecatedBuiltinCode), "?") if c.customCode is None else "CUSTOM")
             for c in m.operatorCodes or []]
    index = m.signatureDefs[0].subgraphIndex if m.signatureDefs else 0
    sg = m.subgraphs[index]
    tensors = sg.tensors or []
    problems: list[str] = []

    def say(text: str) -> None:
        if text not in problems:
            problems.append(text)

    for op in sg.operators or []:
        kind = codes[op.opcodeIndex]
        if kind not in SUPPORTED:
            say(f"{kind}: Operation is not supported.")
            continue
        inputs = [tensors[i] for i in (op.inputs if op.inputs is not None else []) if i >= 0]
        outputs = [tensors[i] for i in (op.outputs if op.outputs is not None else [])]
        if kind == "GATHER" and len(inputs) > 1 and len(inputs[1].shape if inputs[1].shape is not None else []) != 1:
            say("GATHER: Only support 1D indices")
        if kind == "STRIDED_SLICE" and op.builtinOptions is not None and op.builtinOptions.shrinkAxisMask:
            say("STRIDED_SLICE: Slice does not support shrink_axis_mask parameter.")
        for t in inputs + outputs:
            if len(t.shape if t.shape is not None else []) >= 5:
                say(f"{kind}: Tensor dimensions must be less than 5.")
            constant = 0 < t.buffer < len(m.buffers or []) and m.buffers[t.buffer].data is not None
            if not constant and types.get(t.type) == "INT16" and kind not in _INT_OK:
                say("DEQUANTIZE: Unsupported dequantization type." if kind == "DEQUANTIZE" and t in inputs
                    else f"{kind}: Tensor type(INT16) is not supported.")
    return problems
