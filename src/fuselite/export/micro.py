"""Would a converted model also run on TFLite Micro? What its kernels and op resolver say.

``MICRO_BUILTINS`` are the ops ``MicroMutableOpResolver`` can register (every ``Add...`` of
``tensorflow/lite/micro/micro_mutable_op_resolver.h`` in tflite-micro at 90b983c, read, not
guessed); :func:`micro_problems` lists each op of a model TFLM could not run, with why. Known
type limits of kernels it does have are checked too (docs/kernel-contracts.md §12, §14). It is a
static check: a model it passes is not run here (tests do that with the TFLM interpreter).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir.core import op_name

MICRO_BUILTINS = frozenset(
    "ABS ADD ADD_N ARG_MAX ARG_MIN ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL BATCH_TO_SPACE_ND BROADCAST_ARGS "
    "BROADCAST_TO CALL_ONCE CAST CEIL CONCATENATION CONV_2D COS CUMSUM CUSTOM DEPTHWISE_CONV_2D DEPTH_TO_SPACE "
    "DEQUANTIZE DIV DYNAMIC_UPDATE_SLICE ELU EMBEDDING_LOOKUP EQUAL EXP EXPAND_DIMS FILL FLOOR FLOOR_DIV FLOOR_MOD "
    "FULLY_CONNECTED GATHER GATHER_ND GREATER GREATER_EQUAL HARD_SWISH IF L2_NORMALIZATION L2_POOL_2D LEAKY_RELU "
    "LESS LESS_EQUAL LOG LOGICAL_AND LOGICAL_NOT LOGICAL_OR LOGISTIC LOG_SOFTMAX MAXIMUM MAX_POOL_2D MEAN MINIMUM "
    "MIRROR_PAD MUL NEG NOT_EQUAL PACK PAD PADV2 PRELU QUANTIZE READ_VARIABLE REDUCE_ALL REDUCE_MAX REDUCE_MIN RELU "
    "RELU6 RESHAPE RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR REVERSE_V2 ROUND RSQRT SELECT_V2 SHAPE SIN SLICE SOFTMAX "
    "SPACE_TO_BATCH_ND SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE SQUEEZE STRIDED_SLICE SUB SUM "
    "SVDF TANH TRANSPOSE TRANSPOSE_CONV UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK VAR_HANDLE WHILE ZEROS_LIKE".split())

_INT32, _INT16, _F32 = np.dtype(np.int32), np.dtype(np.int16), np.dtype(np.float32)


def _type_limit(op) -> str | None:
    """A known type a TFLM kernel does not take (observed with the tflite-micro interpreter)."""
    ins = [v.dtype if v is not None else None for v in op.inputs]
    if op.kind == "SELECT_V2" and len(ins) > 1 and ins[1] == _INT32:
        return "TFLite Micro's SELECT_V2 takes no int32 values"
    if op.kind == "GATHER" and ins and ins[0] == _INT16:
        return "TFLite Micro's GATHER takes no int16 table"
    if op.kind == "FILL" and len(ins) > 1 and ins[1] != _F32:
        return "TFLite Micro's FILL takes a float32 value only"
    return None


def micro_problems(module) -> list[str]:
    """Every op (kind, node, source line, why) TFLite Micro could not run; [] if none. (A dynamic batch is
    no problem: TFLM runs the written shape, batch 1.)"""
    problems = []
    for fn in module.functions.values():
        for op in fn.ops:
            if op.dialect != "tfl":
                continue
            why = "no TFLite Micro kernel" if op.kind not in MICRO_BUILTINS else _type_limit(op)
            if why:
                problems.append(f"{op.kind} '{op_name(op)}'{' at ' + op.location if op.location else ''}: {why}")
    return problems
