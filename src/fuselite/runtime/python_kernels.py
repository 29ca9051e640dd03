"""NumPy kernels for CUSTOM ops, run by the interpreter through ctypes trampolines.

A :class:`PythonKernel` bound to a node gets one :class:`_PyNodeKernel` instance, found from
the node's ``user_data`` (a handle); the node's registration points at module-level ctypes
callbacks that read and write tensors via ``TfLiteTensor.data`` and resize outputs with
``context->ResizeTensor``.

Shapes of Python-kernel outputs
-------------------------------
* If the kernel has a ``shape`` function (``PythonKernel(fn, shape=...)``), it is called at
  prepare time with the input shapes and options and the outputs are resized to what it
  returns (a ``None``/-1 dimension makes that output dynamic).
* Otherwise outputs keep the shapes recorded in the model; outputs whose model shape has
  unknown (-1) dimensions are made dynamic. In all cases, if the arrays the kernel returns
  have another shape, the output tensor is switched to a dynamic tensor and resized at invoke
  time (like ``SetTensorToDynamic`` + ``ResizeTensor`` in a C kernel), so results are never
  truncated.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuselite.runtime.abi import (
    KernelFreeFn,
    KernelPrepareFn,
    TfLiteContext,
    TfLiteNode,
    TfLiteRegistration,
    dims,
    int_array,
    kTfLiteError,
    kTfLiteOk,
    make_dynamic,
    new_handle,
    numpy_dtype,
    report_error,
    resize_tensor,
    tensor_at,
)
from fuselite.runtime.kernel_errors import KernelError


def decode_custom_options(data: bytes) -> Any:
    """Decode a CUSTOM op's ``custom_options``: a flexbuffer (fuselite writes a map) -> Python value.

    Empty options give ``{}``; bytes that are not a valid flexbuffer are returned unchanged.
    """
    if not data:
        return {}
    try:
        from flatbuffers import flexbuffers

        return flexbuffers.Loads(bytes(data))
    except Exception:
        return bytes(data)


@dataclass(frozen=True)
class PythonKernel:
    """A NumPy kernel for one custom code.

    ``invoke(inputs, options)``: ``inputs`` is the list of input arrays (copies, in the op's input
    order; ``None`` for an omitted optional input), ``options`` the decoded custom options (a dict
    for fuselite composites; raw ``bytes`` if ``raw_options``). Returns one array (single output) or
    a sequence with one array per output. Results are cast to the output tensor's dtype when numpy
    allows it under ``same_kind`` casting (e.g. float64 -> float32), otherwise it is an error.

    ``shape(input_shapes, options)`` (optional): the output shape(s) from the input shapes, called
    at prepare time; one tuple for a single output or a sequence of tuples. Use ``None``/-1 for a
    dimension only known when the kernel runs.
    """

    invoke: Callable[[list, Any], Any]
    shape: Callable[[list, Any], Any] | None = None
    raw_options: bool = False


# One instance per bound node, by the handle stored in its user_data.
_NODE_KERNELS: dict[int, _PyNodeKernel] = {}


class _PyNodeKernel:
    def __init__(self, code: str, node_index: int, kernel: PythonKernel, options: Any, errors: list):
        self.code, self.node_index, self.kernel, self.options = code, node_index, kernel, options
        self.errors = errors  # the owning bridge's error list (exceptions raised by kernels)

    def where(self, what: str = "") -> str:
        return f"custom op {self.code!r} (node {self.node_index})" + (f" {what}" if what else "")

    def prepare(self, ctx_ptr: int, node: TfLiteNode) -> None:
        ctx = TfLiteContext.from_address(ctx_ptr)
        ins = int_array(node.inputs)
        outs = int_array(node.outputs)
        if self.kernel.shape is None:
            for k, idx in enumerate(outs):
                if idx < 0:
                    continue
                t = tensor_at(ctx, idx)
                sig = int_array(t.dims_signature)
                if any(d < 0 for d in sig):
                    make_dynamic(t, self.where(f"output {k}"))
            return
        in_shapes = [None if i < 0 else dims(tensor_at(ctx, i)) for i in ins]
        shapes = self.kernel.shape(in_shapes, self.options)
        if shapes is not None and len(outs) == 1 and _is_shape(shapes):
            shapes = [shapes]
        shapes = list(shapes or [])
        if len(shapes) != len(outs):
            raise KernelError(f"{self.where()}: shape() returned {len(shapes)} shape(s) for {len(outs)} output(s)")
        for k, (idx, shape) in enumerate(zip(outs, shapes)):
            if idx < 0 or shape is None:
                continue
            t = tensor_at(ctx, idx)
            shape = tuple(-1 if d is None else int(d) for d in shape)
            if any(d < 0 for d in shape):
                make_dynamic(t, self.where(f"output {k}"))
            elif shape != dims(t):
                resize_tensor(ctx_ptr, t, shape, self.where(f"output {k}"))

    def invoke(self, ctx_ptr: int, node: TfLiteNode) -> None:
        ctx = TfLiteContext.from_address(ctx_ptr)
        arrays = []
        for k, idx in enumerate(int_array(node.inputs)):
            if idx < 0:
                arrays.append(None)
                continue
            t = tensor_at(ctx, idx)
            dtype, shape = numpy_dtype(t, self.where(f"input {k}")), dims(t)
            count = int(np.prod(shape, dtype=np.int64))
            if count == 0:
                arrays.append(np.zeros(shape, dtype))
                continue
            if not t.data or t.bytes < count * dtype.itemsize:
                raise KernelError(f"{self.where()}: input {k} has no data ({t.bytes} bytes for shape {shape})")
            raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(t.data)
            arrays.append(np.frombuffer(raw, dtype=dtype).reshape(shape).copy())
        result = self.kernel.invoke(arrays, self.options)
        outs = int_array(node.outputs)
        if isinstance(result, list | tuple) and not (len(outs) == 1 and len(result) != 1):
            results = list(result)
        else:
            results = [result]  # one array (for a single output, a plain list/tuple is that array)
        if len(results) != len(outs):
            raise KernelError(f"{self.where()}: kernel returned {len(results)} array(s) for {len(outs)} output(s)")
        for k, (idx, value) in enumerate(zip(outs, results)):
            if idx < 0:
                continue
            what = self.where(f"output {k}")
            t = tensor_at(ctx, idx)
            dtype = numpy_dtype(t, what)
            arr = np.asarray(value)
            if arr.dtype != dtype:
                if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
                    raise KernelError(f"{what}: kernel returned {arr.dtype}, the tensor is {dtype}")
                arr = arr.astype(dtype)
            arr = np.ascontiguousarray(arr)
            if arr.shape != dims(t) or (arr.nbytes and not t.data):
                if arr.shape != dims(t):
                    make_dynamic(t, what)
                resize_tensor(ctx_ptr, t, arr.shape, what)
            if arr.nbytes:
                if not t.data or t.bytes < arr.nbytes:
                    raise KernelError(f"{what}: output buffer is not allocated ({t.bytes} bytes for {arr.nbytes})")
                ctypes.memmove(t.data, arr.ctypes.data, arr.nbytes)


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple | list) and all(d is None or isinstance(d, int | np.integer) for d in x)


def _node_kernel(node_ptr: int) -> _PyNodeKernel:
    node = TfLiteNode.from_address(node_ptr)
    inst = _NODE_KERNELS.get(node.user_data or 0)
    if inst is None:
        raise KernelError("fuselite custom-op bridge: unknown kernel handle")
    return inst


def _py_prepare(ctx_ptr, node_ptr):
    inst = None
    try:
        inst = _node_kernel(node_ptr)
        inst.prepare(ctx_ptr, TfLiteNode.from_address(node_ptr))
        return kTfLiteOk
    except BaseException as e:  # never let an exception escape into C
        return _fail(ctx_ptr, inst, "prepare", e)


def _py_invoke(ctx_ptr, node_ptr):
    inst = None
    try:
        inst = _node_kernel(node_ptr)
        inst.invoke(ctx_ptr, TfLiteNode.from_address(node_ptr))
        return kTfLiteOk
    except BaseException as e:
        return _fail(ctx_ptr, inst, "invoke", e)


def _py_free(ctx_ptr, user_data):
    _NODE_KERNELS.pop(user_data or 0, None)


def _fail(ctx_ptr: int, inst: _PyNodeKernel | None, phase: str, e: BaseException) -> int:
    where = inst.where() if inst is not None else "custom op"
    report_error(ctx_ptr, f"{where}: Python kernel {phase} raised {type(e).__name__}: {e}")
    if inst is not None:
        inst.errors.append(e)
        del inst.errors[:-8]
    return kTfLiteError


# Module-level callbacks: they must outlive every interpreter that may call them (a
# SignatureRunner can keep the C++ interpreter alive after the Python Interpreter is gone).
_PY_PREPARE_CB = KernelPrepareFn(_py_prepare)
_PY_INVOKE_CB = KernelPrepareFn(_py_invoke)
_PY_FREE_CB = KernelFreeFn(_py_free)
_PY_PREPARE_ADDR = ctypes.cast(_PY_PREPARE_CB, ctypes.c_void_p).value
_PY_INVOKE_ADDR = ctypes.cast(_PY_INVOKE_CB, ctypes.c_void_p).value
_PY_FREE_ADDR = ctypes.cast(_PY_FREE_CB, ctypes.c_void_p).value


def bind_python_kernel(node: TfLiteNode, reg: TfLiteRegistration, code: str, kernel: PythonKernel,
                       node_index: int, options_bytes: bytes, errors: list) -> None:
    """Make ``node`` run ``kernel``.

    The node gets a per-node instance behind ``node->user_data`` and the trampolines of this module
    as ``prepare``/``invoke``/``free``; exceptions the kernel raises are appended to ``errors``.
    """
    options = options_bytes if kernel.raw_options else decode_custom_options(options_bytes)
    handle = new_handle()
    _NODE_KERNELS[handle] = _PyNodeKernel(code, node_index, kernel, options, errors)
    node.user_data = handle
    reg.free = _PY_FREE_ADDR
    reg.prepare = _PY_PREPARE_ADDR
    reg.invoke = _PY_INVOKE_ADDR
