"""Forms of LiteRT ops that LiteRT's accelerators take (target="gpu", target="npu"): the same values from ops they
run.

Intel OpenVINO's NPU compiler plugin (target="npu") takes no ``SPLIT_V`` ("op type 102 is not supported"), which
becomes a ``STRIDED_SLICE`` per part, and reads a ``RESHAPE``'s shape from its options, which are written
(``reshape_shape_options``); ``EXPAND_DIMS`` and ``SQUEEZE`` become ``RESHAPE`` there too.

The GPU accelerator's op rules (``tflite/delegates/gpu/common/model_builder.cc``, and what the WebGPU accelerator printed here:
docs/accelerators.md):

* ``GATHER`` takes indices of rank 1 only ("Only support 1D indices"): a Keras ``Embedding`` gathers a
  ``[batch, length]`` index tensor. The indices are flattened (``RESHAPE`` to ``[n]``), gathered, and the result
  reshaped to the shape the gather had: the same values in the same order.
* An int8 ``SPLIT``, ``SPLIT_V`` or ``UNPACK`` with an output nothing reads (an unrolled LSTM's forget gate at
  its first step, where the cell state is zero) crashes the accelerator when the model runs (SIGSEGV in
  ``libLiteRtWebGpuAccelerator.so``, LiteRT 2.3; float32 runs): such an op is one ``STRIDED_SLICE`` per part
  that is read (without a shrink mask, which the GPU refuses; a ``RESHAPE`` where an ``UNPACK``'s part drops
  the axis).
* ``EXPAND_DIMS`` and ``SQUEEZE`` are not supported ("Operation is not supported"; a Keras ``Conv1D`` is one of
  each around a ``CONV_2D``): with static shapes each is the ``RESHAPE`` to its output shape.

The recurrent forms (unrolled: no ``WHILE``, ``SHAPE`` or ``FILL``) are chosen where the forms are
(``stages/graph.py``); a stateful layer's state is passed in and out (``passes/state_io.py``).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module

_I32 = np.dtype(np.int32)


def _static(shape) -> bool:
    return shape is not None and None not in shape


def gathers_with_1d_indices(module: Module) -> int:
    """Every ``GATHER`` whose static indices are not of rank 1 -> ``RESHAPE`` (indices to [n]), ``GATHER``,
    ``RESHAPE`` (to the gather's shape); how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "GATHER"]:
            params, indices = op.inputs[:2]
            out = op.outputs[0]
            if (indices.rank == 1 or not _static(indices.shape) or not _static(out.shape) or params.shape is None
                    or op.attrs.get("batch_dims")):
                continue
            n = int(np.prod(indices.shape, dtype=np.int64))
            flat = fn.make_op("tfl.RESHAPE", [indices, fn.const(np.array([n], np.int32), "shape")],
                              [(indices.dtype, (n,))], {}, name=f"{op.name}/indices_1d", location=op.location)
            axis = int(op.attrs.get("axis", 0)) % params.rank
            gathered = (*params.shape[:axis], n, *params.shape[axis + 1:])
            gather = fn.make_op("tfl.GATHER", [params, flat.outputs[0]], [(out.dtype, gathered)], dict(op.attrs),
                                name=op.name, location=op.location)
            back = fn.make_op("tfl.RESHAPE", [gather.outputs[0], fn.const(np.array(out.shape, np.int32), "shape")],
                              [(out.dtype, out.shape)], {}, name=f"{op.name}/shaped", location=op.location)
            fn.replace_op(op, [flat, gather, back], [back.outputs[0]])
            count += 1
    return count


def expand_and_squeeze_as_reshape(module: Module) -> int:
    """Every ``EXPAND_DIMS`` / ``SQUEEZE`` with a static output shape -> ``RESHAPE`` to it; how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind in ("EXPAND_DIMS", "SQUEEZE")]:
            x, out = op.inputs[0], op.outputs[0]
            if not _static(out.shape):
                continue
            reshape = fn.make_op("tfl.RESHAPE", [x, fn.const(np.array(out.shape, np.int32), "shape")],
                                 [(out.dtype, out.shape)], {}, name=op.name, location=op.location)
            fn.replace_op(op, [reshape], [reshape.outputs[0]])
            count += 1
    return count


def _split_parts(op) -> tuple | None:
    """(input, axis, [(start, size)] per output, whether each part drops the axis) of a SPLIT / SPLIT_V /
    UNPACK with static operands, None otherwise."""
    if op.kind == "UNPACK":
        x = op.inputs[0]
        axis = int(op.attrs.get("axis", 0))
        return (x, axis, [(k, 1) for k in range(len(op.outputs))], True) if _static(x.shape) else None
    if op.kind == "SPLIT":
        axis_v, x = op.inputs[:2]
        if not axis_v.is_const or not _static(x.shape):
            return None
        axis = int(np.asarray(axis_v.const).reshape(-1)[0])
        size = x.shape[axis] // len(op.outputs)
        return x, axis, [(k * size, size) for k in range(len(op.outputs))], False
    x, sizes_v, axis_v = op.inputs[:3]  # SPLIT_V
    if not sizes_v.is_const or not axis_v.is_const or not _static(x.shape):
        return None
    axis = int(np.asarray(axis_v.const).reshape(-1)[0])
    sizes = [int(o.shape[axis % len(x.shape)]) for o in op.outputs]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    return x, axis, list(zip(starts.tolist(), sizes)), False


def _slices(fn, op, parts: tuple, used: list[bool]) -> tuple[list, list]:
    """(new ops, outputs) for ``op`` (a SPLIT / SPLIT_V / UNPACK of ``parts``, :func:`_split_parts`): a
    ``STRIDED_SLICE`` per part ``used`` (a ``RESHAPE`` after it where the part drops the axis); an unused part
    keeps its (now producerless, unread) value."""
    x, axis, spans, drops = parts
    rank = len(x.shape)
    axis %= rank
    new, outs = [], []
    for k, (out, (start, size)) in enumerate(zip(op.outputs, spans)):
        if not used[k]:
            outs.append(out)
            continue
        begin, end = [0] * rank, list(x.shape)
        begin[axis], end[axis] = start, start + size
        shape = (*x.shape[:axis], size, *x.shape[axis + 1:])
        piece = fn.make_op("tfl.STRIDED_SLICE", [x, fn.const(np.array(begin, np.int32), "begin"),
                                                 fn.const(np.array(end, np.int32), "end"),
                                                 fn.const(np.ones(rank, np.int32), "strides")],
                           [(x.dtype, shape)], {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0,
                                                "new_axis_mask": 0, "shrink_axis_mask": 0, "offset": False},
                           name=f"{op.name}/{k}", location=op.location)
        new.append(piece)
        value = piece.outputs[0]
        if drops:
            r = fn.make_op("tfl.RESHAPE", [value, fn.const(np.array(out.shape, np.int32), "shape")],
                           [(out.dtype, out.shape)], {}, name=f"{op.name}/{k}/shaped", location=op.location)
            new.append(r)
            value = r.outputs[0]
        outs.append(value)
    return new, outs


def unused_parts_as_slices(module: Module) -> int:
    """Every ``SPLIT`` / ``SPLIT_V`` / ``UNPACK`` with an output nothing reads -> one ``STRIDED_SLICE`` per part
    read (and a ``RESHAPE`` where the part drops the axis); how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind in ("SPLIT", "SPLIT_V", "UNPACK")]:
            used = [bool(fn.uses(o)) or fn.is_output(o) for o in op.outputs]
            parts = _split_parts(op) if not all(used) else None
            if parts is None:
                continue
            fn.replace_op(op, *_slices(fn, op, parts, used))
            count += 1
    return count


def split_v_as_slices(module: Module) -> int:
    """Every ``SPLIT_V`` of static operands -> one ``STRIDED_SLICE`` per part read (Intel OpenVINO's compiler
    plugin takes no ``SPLIT_V``: "op type 102 is not supported"); how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "SPLIT_V"]:
            parts = _split_parts(op)
            if parts is None:
                continue
            fn.replace_op(op, *_slices(fn, op, parts, [bool(fn.uses(o)) or fn.is_output(o) for o in op.outputs]))
            count += 1
    return count


def reshape_shape_options(module: Module) -> int:
    """Every ``RESHAPE`` to a static shape also names it in its options (``ReshapeOptions.new_shape``), which
    Intel OpenVINO's compiler plugin reads instead of the shape operand (without it: "Requested output shape []
    is incompatible with input shape"); how many."""
    count = 0
    for fn in module.functions.values():
        for op in fn.ops:
            out = op.outputs[0] if op.outputs else None
            if op.kind == "RESHAPE" and out is not None and _static(out.shape) and "new_shape" not in op.attrs:
                op.attrs["new_shape"] = [int(d) for d in out.shape]
                count += 1
    return count


def neg_as_mul(module: Module) -> int:
    """Every float ``NEG`` -> ``MUL`` by -1 (Intel OpenVINO's plugin takes no ``NEG``: "op type 59 is not
    supported"; a Keras LayerNormalization's mean is subtracted through one); how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "NEG"]:
            x, out = op.inputs[0], op.outputs[0]
            if x.dtype != np.float32:
                continue
            mul = fn.make_op("tfl.MUL", [x, fn.const(np.array(-1.0, np.float32), "minus_one")], [(out.dtype, out.shape)],
                             {"fused_activation_function": "NONE"}, name=op.name, location=op.location)
            fn.replace_op(op, [mul], [mul.outputs[0]])
            count += 1
    return count
