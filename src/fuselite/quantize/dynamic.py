"""Dynamic-range quantization: int8 weights, float activations, on LiteRT's hybrid kernels.

``optimizations=[tf.lite.Optimize.DEFAULT]`` without a representative dataset. Each op
with a hybrid kernel gets its constant weights as int8 (symmetric, zero point 0, values in
[-127, 127], the quantization spec's rule for weights) and computes in float; everything
else is unchanged. Per op, from the kernels (``docs/kernel-contracts.md`` cites each line; each op's
``hybrid`` entry in ``ops/catalog.py``):

==============================  =====================  =============  ===================
op                              int8 operands          scales         ``asymmetric_quantize_inputs``
==============================  =====================  =============  ===================
FULLY_CONNECTED                 1 (weights)            per channel 0  true (v12)
CONV_2D                         1 (filter)             per channel 0  (no such option; v5)
DEPTHWISE_CONV_2D               1 (filter)             per channel 3  (always asymmetric; v6)
BATCH_MATMUL                    1 (constant rhs)       per tensor     true (v4)
EMBEDDING_LOOKUP                1 (table)              per tensor     (float output; v1)
UNIDIRECTIONAL_SEQUENCE_LSTM    1-11, 16               per tensor     true (v3)
BIDIRECTIONAL_SEQUENCE_LSTM     1-11, 16, 18-28, 33,   per tensor     true (v3)
                                40-47
UNIDIRECTIONAL_SEQUENCE_RNN     1, 2                   per tensor     true (v3)
BIDIRECTIONAL_SEQUENCE_RNN      1, 2, 5, 6, 10, 11     per tensor     true (v3)
==============================  =====================  =============  ===================

The sequence kernels read one scale per operand (``params.scale``), so their weights are
per tensor; they also need every weight operand in one type, so a sequence op is
quantized whole or not at all. A ``GATHER`` from a constant table (Keras ``Embedding``)
becomes ``EMBEDDING_LOOKUP`` on an int8 table (LiteRT has no hybrid ``GATHER``); the table
has one scale, as TF's converter quantizes it and as TFLite Micro's hybrid lookup
requires (per-row scales would add 4 bytes per row and an int64 zero point per row).
A time-major ``BIDIRECTIONAL_SEQUENCE_RNN`` is made batch-major first: LiteRT's hybrid
kernel is wrong in its time-major loop (see :func:`_batch_major_bidirectional_rnn`).

**The rule for what stays float.** Every constant float32 weight operand of an op in the
table is quantized, unless each of the op's weights has fewer than ``FLOAT_WEIGHTS_BELOW``
(1024) elements: then the op stays float32, as TF's converter leaves such tensors (``_small``; a fused LSTM's
weights counted as its Keras layer holds them, and kept float where TF would make only some of them int8);
biases, layer-norm and state operands stay float32 as the kernels require. Ops without a hybrid kernel (ADD, MUL, PRELU, ...)
keep their float constants, and so do ops named in ``keep_float``; each such op that reads
a float32 constant is listed in the report with the reason.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module, Op, Quantization, Value
from fuselite.ir.arrays import row_ranges
from fuselite.ops.catalog import FLOAT_WEIGHTS_BELOW, HYBRID_KERNELS, HybridKernel  # noqa: F401
from fuselite.quantize.int4 import blockwise_int4, make_blockwise, why_not_blockwise
from fuselite.quantize.select import KeepFloat, WeightBytes, content_key, record
from fuselite.quantize.select import add_record as _add

FLOAT32 = np.dtype(np.float32)


def symmetric_int8(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, Quantization]:
    """``w`` as int8 in [-127, 127] with zero point 0: one scale, or one per index of ``axis``.

    A scale is max|w| / 127 over what it covers (1.0 where that is all zeros, so that
    every scale is positive); values are rounded to nearest with the stored float32 scale.
    """
    w = np.asarray(w)
    if w.ndim == 0:
        q, quant = symmetric_int8(w.reshape(1), axis)
        return q.reshape(()), quant
    per_channel = axis is not None
    others = tuple(d for d in range(w.ndim) if d != axis) if per_channel else None
    peak = np.zeros(w.shape[axis] if per_channel else 1)
    for start, stop in row_ranges(w, 8):  # a slice of rows at a time: no whole float64 copy of a large weight
        if start == stop or w.size == 0:
            continue
        part = np.abs(np.asarray(w[start:stop], np.float64))
        if not per_channel:
            peak = np.maximum(peak, part.max())
        elif axis == 0:
            peak[start:stop] = part.max(axis=others)
        else:
            peak = np.maximum(peak, part.max(axis=others))
    bshape = tuple(-1 if d == axis else 1 for d in range(w.ndim)) if per_channel else (1,) * w.ndim
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    steps = scale.astype(np.float64).reshape(bshape)
    q = np.empty(w.shape, np.int8)
    for start, stop in row_ranges(w, 8):
        rows = steps[start:stop] if per_channel and axis == 0 else steps
        q[start:stop] = np.clip(np.rint(np.asarray(w[start:stop], np.float64) / rows), -127, 127)
    return q, Quantization(tuple(float(s) for s in scale), (0,) * len(scale), 0 if axis is None else axis)


def _float_weights(op: Op) -> list[int]:
    """Operands that are float32 constants of more than one element (a scalar is a parameter, not a weight)."""
    return [i for i, v in enumerate(op.inputs)
            if v is not None and v.is_const and v.const.dtype == FLOAT32 and v.const.size > 1]


def _weight_operands(op: Op, kernel: HybridKernel) -> list[int]:
    """The kernel's weight operands ``op`` has. A diagonal recurrence (an IndyLSTM's ``[units]`` recurrent
    weights, ``diagonal_recurrent_tensors``) stays float32: the hybrid kernel reads those operands as float
    (``lstm_eval.cc``, ``recurrent_to_gate_diag``)."""
    present = [i for i in kernel.weights if i < len(op.inputs) and op.inputs[i] is not None]
    if op.attrs.get("diagonal_recurrent_tensors"):
        present = [i for i in present if not (5 <= i <= 8 and op.inputs[i].rank == 1)]
    return present


def _why_float(op: Op, kernel: HybridKernel) -> str | None:
    """Why ``op`` cannot run its hybrid kernel here (None: it can)."""
    x = op.inputs[0] if op.inputs else None
    if kernel.float_input and (x is None or x.dtype != FLOAT32):
        return "its input is not float32"
    if any(o.dtype != FLOAT32 for o in op.outputs[:1]):
        return "its output is not float32"
    present = _weight_operands(op, kernel)
    if not present:
        return "it has no weight operand"
    for i in present:
        v = op.inputs[i]
        if not v.is_const:
            return f"operand {i} (a weight) is not a constant"
        if v.const.dtype != FLOAT32:
            return f"operand {i} (a weight) is {v.const.dtype}, not float32"
        if kernel.axis is not None and v.const.ndim <= kernel.axis:
            return f"operand {i} has rank {v.const.ndim}; per-channel axis {kernel.axis} needs more"
    return None


# The operands of a fused LSTM that are one weight of the layer it came from, as TF's converter sees the layer: a
# Keras LSTM's kernel [inputs, 4 x units] is the four input-to-gate operands, its recurrent kernel the four
# recurrent-to-gate ones, then the projection (peepholes, [units] each, are not counted: no Keras LSTM has them);
# the bidirectional op has a backward set 17 on, and the auxiliary input's two kernels at 40 and 44
# (bidirectional_sequence_lstm.cc)
_UNI_LSTM_WEIGHTS = {"kernel": (1, 2, 3, 4), "recurrent kernel": (5, 6, 7, 8), "projection": (16,)}
LAYER_WEIGHTS = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _UNI_LSTM_WEIGHTS,
    "BIDIRECTIONAL_SEQUENCE_LSTM": {
        **{f"forward {k}": g for k, g in _UNI_LSTM_WEIGHTS.items()},
        **{f"backward {k}": tuple(i + 17 for i in g) for k, g in _UNI_LSTM_WEIGHTS.items()},
        "forward auxiliary kernel": (40, 41, 42, 43), "backward auxiliary kernel": (44, 45, 46, 47)},
}


def layer_weight_sizes(op: Op, kernel: HybridKernel) -> dict[str, int]:
    """{weight: elements} of ``op``'s weights as the layer it came from holds them (``LAYER_WEIGHTS``: a fused
    LSTM's four gate matrices summed back into the layer's kernel, and into its recurrent kernel), else
    {"operand i": elements} of each weight operand."""
    present = set(_weight_operands(op, kernel))
    groups = LAYER_WEIGHTS.get(op.kind) or {f"operand {i}": (i,) for i in sorted(present)}
    return {name: sum(op.inputs[i].const.size for i in g if i in present)
            for name, g in groups.items() if present.intersection(g)}


def _small(op: Op, kernel: HybridKernel) -> str | None:
    """Why ``op`` keeps float weights for their size, or None. Every weight under ``kernel.float_below``
    elements: it stays float32, as TF's converter leaves it (``minimum_elements_for_weights``). Quantized, such a
    layer loses more accuracy than its size is worth: the hybrid kernel quantizes its input per invoke, and int8
    weights alone (dequantized at load) still cost their rounding (Keras 3 Bidirectional(GRU(8)): 0.28% of the
    output range, the official converter's file 0.00%; ConvLSTM2D 0.41% against 0.00%).

    A fused LSTM's weights are counted as its layer holds them (``layer_weight_sizes``), as TF's converter
    counts them: a Keras LSTM(24) on 8 features has a kernel of 768 elements, which TF leaves float, and a
    recurrent kernel of 2,304, which it makes int8 (each of the fused op's gate matrices has 192 and 576). The
    hybrid LSTM kernel takes all its weights int8 or none, so where TF quantizes only some of them the fused op
    stays float, saying so: all int8 is worse than TF's file (Bidirectional(LSTM(24)) on 20 x 8: 0.24% of the
    output range against its 0.096%; LSTM(64) on 20 x 3: 0.24% against 0.076%), and the loop form
    (``rnn_form="loop"``, dynamic range's default) quantizes the recurrent kernel alone, as TF does (0.096%). The
    other ops' weight operands are each one of the layer's weights: the op is quantized when one is large enough
    (as before)."""
    sizes = layer_weight_sizes(op, kernel)
    if not sizes or max(sizes.values()) >= kernel.float_below and (
            op.kind not in LAYER_WEIGHTS or min(sizes.values()) >= kernel.float_below):
        return None
    if max(sizes.values()) < kernel.float_below:
        return (f"each weight has fewer than {kernel.float_below} elements: kept float32, as "
                "tf.lite.TFLiteConverter leaves it (int8 would cost more accuracy than the bytes are worth)")
    small = ", ".join(f"{k} ({n:,})" for k, n in sizes.items() if n < kernel.float_below)
    large = ", ".join(f"{k} ({n:,})" for k, n in sizes.items() if n >= kernel.float_below)
    return (f"kept float32 (rnn_form='loop', the default, quantizes it as TF does): LiteRT's hybrid {op.kind} takes "
            f"its weights int8 or none, and tf.lite.TFLiteConverter makes this layer's {large} int8 but leaves its "
            f"{small} float (fewer than {kernel.float_below} elements): all int8 costs more accuracy than TF's file "
            "(Bidirectional(LSTM(24)): 0.24% of the output range against 0.096%)")


class _Quantizer:
    """Quantizes one function; equal constants (the steps of an unrolled GRU) become one quantized tensor, and the
    functions of a module (a decoder's prefill and decode signatures) quantize a weight they share once
    (``arrays``: its quantized array and parameters, by content)."""

    def __init__(self, fn: Function, arrays: dict):
        self.fn, self.arrays = fn, arrays
        self.done: dict[tuple, Value] = {}

    def _const(self, v: Value, key: tuple, quantize, suffix: str) -> Value:
        if key not in self.done:
            if key not in self.arrays:
                self.arrays[key] = quantize(v.const)
            q, quant = self.arrays[key]
            self.done[key] = self.fn.const(q, f"{v.name}_{suffix}", quant=quant)
        return self.done[key]

    def int8(self, v: Value, axis: int | None) -> Value:
        return self._const(v, (content_key(v.const), axis), lambda w: symmetric_int8(w, axis), "int8")

    def int4(self, op: Op, block_size: int) -> Op:
        """Give ``op`` (a FULLY_CONNECTED) blockwise int4 weights; the op whose output is its result (``op``, or its
        activation's op)."""
        w = op.inputs[1]
        q = self._const(w, (content_key(w.const), "int4", block_size), lambda a: blockwise_int4(a, block_size), "int4")
        return make_blockwise(self.fn, op, q)

    def quantize(self, op: Op, kernel: HybridKernel) -> str:
        """Give ``op`` int8 weights; returns how (the report's scheme)."""
        present = _weight_operands(op, kernel)
        scheme = "per-tensor" if kernel.axis is None else f"per-channel (axis {kernel.axis})"
        for i in present:
            op.inputs[i] = self.int8(op.inputs[i], kernel.axis)
        if kernel.asymmetric_option:
            op.attrs["asymmetric_quantize_inputs"] = True
        return scheme


def _gather_to_embedding_lookup(fn: Function, op: Op) -> Op | None:
    """``GATHER(table, ids)`` on axis 0 of a constant float table -> ``EMBEDDING_LOOKUP`` (None if not that).

    LiteRT's ``EMBEDDING_LOOKUP`` has a hybrid kernel (int8 table, float rows); ``GATHER``
    does not. Ids of another rank are flattened and the rows reshaped back (at most one
    unknown dimension).
    """
    if op.kind != "GATHER" or len(op.inputs) != 2:
        return None
    table, ids = op.inputs
    if not (table.is_const and table.const.dtype == FLOAT32 and table.const.ndim >= 2):
        return None
    if op.attrs.get("axis", 0) != 0 or op.attrs.get("batch_dims", 0) != 0 or ids.dtype != np.dtype(np.int32):
        return None
    if ids.shape is None or sum(d is None for d in ids.shape) > 1:
        return None
    (out,) = op.outputs
    index = fn.ops.index(op)
    row = tuple(table.const.shape[1:])
    new: list[Op] = []
    flat = ids
    if len(ids.shape) != 1:
        n = None if None in ids.shape else int(np.prod(ids.shape))
        new.append(fn.make_op("tfl.RESHAPE", [ids, fn.const(np.array([-1], np.int32), "flat_ids_shape")],
                              [(np.dtype(np.int32), (n,))], name=f"{op.name}/flat_ids", location=op.location))
        flat = new[-1].outputs[0]
    lookup = fn.make_op("tfl.EMBEDDING_LOOKUP", [flat, table], [(FLOAT32, (flat.shape[0],) + row)],
                        name=f"{op.name}/embedding_lookup", location=op.location)
    new.append(lookup)
    result = lookup.outputs[0]
    if len(ids.shape) != 1:
        target = np.array([-1 if d is None else d for d in ids.shape] + list(row), np.int32)
        new.append(fn.make_op("tfl.RESHAPE", [result, fn.const(target, "rows_shape")], [(FLOAT32, out.shape)],
                              name=f"{op.name}/rows", location=op.location))
        result = new[-1].outputs[0]
    fn.ops[index:index + 1] = new
    fn.replace_uses(out, result)
    return lookup


def _swap_time_and_batch(fn: Function, v: Value, name: str, location) -> tuple[Op, Value]:
    """An op giving ``v`` ([a, b, ...]) as [b, a, ...]: a RESHAPE when a or b is 1 (same bytes), else a TRANSPOSE."""
    shape = v.shape
    swapped = (shape[1], shape[0], *shape[2:])
    if 1 in shape[:2] and sum(d is None for d in shape) <= 1:
        target = fn.const(np.array([-1 if d is None else d for d in swapped], np.int32), "shape")
        op = fn.make_op("tfl.RESHAPE", [v, target], [(v.dtype, swapped)], name=name, location=location)
    else:
        perm = fn.const(np.array([1, 0, *range(2, len(shape))], np.int32), "perm")
        op = fn.make_op("tfl.TRANSPOSE", [v, perm], [(v.dtype, swapped)], name=name, location=location)
    return op, op.outputs[0]


def _batch_major_bidirectional_rnn(fn: Function, op: Op) -> None:
    """Make a time-major ``BIDIRECTIONAL_SEQUENCE_RNN`` batch-major (inputs and outputs swapped around it).

    LiteRT's hybrid kernel runs its time-major loop ``max_time`` times over (``EvalHybrid``
    in ``tensorflow/lite/kernels/bidirectional_sequence_rnn.cc``: ``for (int t = 0; t <
    max_time; t++) { for (int s = 0; s < max_time; s++) ...``), carrying the hidden
    states over, so each direction starts from a wrong state (measured: the first step off
    by 60% of the output range). Its batch-major loop is right, and for a batch of 1 the
    two layouts have the same bytes (the swaps are reshapes).
    """
    if not op.attrs.get("time_major", False) or any(
            v is not None and (v.shape is None or len(v.shape) != 3) for v in (op.inputs[0], *op.outputs)):
        return
    index = fn.ops.index(op)
    before = []
    for i in (0, 9):
        v = op.inputs[i] if i < len(op.inputs) else None
        if v is not None:
            swap, out = _swap_time_and_batch(fn, v, f"{op.name}/batch_major_{i}", op.location)
            before.append(swap)
            op.inputs[i] = out
    after = []
    for o in op.outputs:
        o.shape = (o.shape[1], o.shape[0], *o.shape[2:])
        swap, back = _swap_time_and_batch(fn, o, f"{op.name}/time_major_{o.index}", op.location)
        fn.replace_uses(o, back)  # the swap is not placed yet: it keeps reading ``o``
        after.append(swap)
    op.attrs["time_major"] = False
    fn.ops[index:index + 1] = [*before, op, *after]


def quantize_dynamic(module: Module, keep: KeepFloat | None = None,
                     outputs: dict[int, int] | None = None, block_size: int | None = None) -> list[dict]:
    """int8 weights on every op with a hybrid kernel; one report record per op that reads float weights.

    ``block_size`` (mode ``"int4"``): FULLY_CONNECTED weights blockwise int4 where the kernels run it
    (``int4.py``), int8 where they do not (the record says why)."""
    keep = keep or KeepFloat()
    records: list[dict] = []
    arrays: dict = {}
    for fn in module.functions.values():
        quantizer, counter = _Quantizer(fn, arrays), WeightBytes()
        for op in list(fn.ops):
            if op.kind == "GATHER" and keep.match(op) is None:
                op = _gather_to_embedding_lookup(fn, op) or op
            kernel = HYBRID_KERNELS.get(op.kind)
            if kernel is None and not _float_weights(op):
                continue
            before = counter.before(op)
            entry = keep.match(op)
            why = (f"keep_float {entry!r}" if entry is not None
                   else f"LiteRT has no hybrid {op.kind} kernel" if kernel is None else _why_float(op, kernel)
                   or _small(op, kernel))
            if why is None:
                if op.kind == "BIDIRECTIONAL_SEQUENCE_RNN":
                    _batch_major_bidirectional_rnn(fn, op)
                narrow = None if block_size is None else why_not_blockwise(op, block_size)
                if block_size is not None and narrow is None:
                    after = quantizer.int4(op, block_size)
                    _add(records, outputs, after, record(fn, op, "int4 weights", before, counter.after(op),
                                                         scheme=f"blockwise (block {block_size})"))
                    continue
                scheme = quantizer.quantize(op, kernel)
                if narrow is not None:
                    scheme = f"{scheme}; not int4: {narrow}"
                _add(records, outputs, op, record(fn, op, "int8 weights", before, counter.after(op), scheme=scheme))
            elif _float_weights(op) or kernel is not None:
                _add(records, outputs, op, record(fn, op, "float", before, counter.after(op), why))
    keep.check_used(module)
    return records
