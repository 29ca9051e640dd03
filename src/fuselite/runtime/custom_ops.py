"""Run models with TFLite CUSTOM ops on the stock LiteRT interpreter, with kernels you provide.

A fuselite composite becomes one ``CUSTOM`` op (``custom_code`` = its name, ``custom_options`` =
a flexbuffer of its attributes). LiteRT can only run such an op if a kernel is registered under
the custom code. This module supplies the kernels at run time::

    from fuselite.runtime import custom_ops

    def my_op(inputs, options):                 # NumPy kernel
        x, y = inputs
        return x * options["scale"] + y

    interp = custom_ops.interpreter(model_bytes, kernels={"my_op": my_op})
    interp.get_signature_runner()(x=..., y=...)

    # compiled kernel: a shared library exporting `TfLiteRegistration* Register_MY_OP(void)`
    interp = custom_ops.interpreter(model_bytes, kernels={"my_op": custom_ops.NativeKernel("libmy_op.so")})

How it works
------------
The ``ai-edge-litert`` wheel exports neither the TFLite C API (``TfLiteOperatorCreate``,
``TfLiteOpaque*``) nor ``tflite::MutableOpResolver::AddCustom`` (``libLiteRt.so`` exports only
``LiteRt*`` symbols, ``libpywrap_litert_common.so`` only module-init symbols), so the classic
``custom_op_registerers`` route cannot add a kernel from outside the wheel. What the interpreter
does offer is the delegate interface, which works purely through the C struct ABI of
``tensorflow/lite/core/c/common.h`` (function pointers inside ``TfLiteContext``):

* When the InterpreterBuilder meets a custom code it cannot resolve it keeps the node, with a
  per-node copy of a placeholder ``TfLiteRegistration`` ("it might be resolved by a delegate later").
* ``Interpreter(experimental_delegates=[...])`` accepts any object with
  ``_get_native_delegate_pointer()``; we hand it a ``TfLiteDelegate`` struct built with ctypes
  whose ``Prepare`` callback (flag ``kTfLiteDelegateFlagsAllowDynamicTensors``, so nothing is
  prepared before it runs) walks the execution plan with ``context->GetExecutionPlan`` /
  ``context->GetNodeAndRegistration``.
* For every CUSTOM node still carrying the placeholder registration and whose custom code has a
  kernel, it fills that node's registration in place -- ``prepare``/``invoke``/``free`` -- and
  sets ``node->user_data`` (calling the kernel's ``init`` with the node's custom options first).
  The node is thereby resolved exactly as an op resolver would have resolved it: same node, same
  inputs/outputs, normal arena planning, no graph partitioning. Compiled kernels run with their
  own function pointers (no Python on the hot path); Python kernels run through module-level
  ctypes trampolines that read/write tensors via ``TfLiteTensor.data`` and resize outputs with
  ``context->ResizeTensor``.
* Nodes left with the placeholder and no kernel are reported as :class:`MissingKernelError`
  when the interpreter is created.

The placeholder's ``invoke`` address, and the struct layouts this module declares, are checked
once per process against a tiny probe model (tensor names, dims, custom options and custom name
must read back exactly); on a mismatch you get a clear error instead of a crash.

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
import itertools
import os
import re
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fuselite.errors import ConversionError

__all__ = [
    "C_HEADER",
    "CustomOpInterpreter",
    "KernelError",
    "MissingKernelError",
    "NativeKernel",
    "PythonKernel",
    "decode_custom_options",
    "interpreter",
    "registration_symbols",
    "run",
    "write_c_header",
]

_DOC = "docs/custom-ops.md"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------
class MissingKernelError(ConversionError, RuntimeError):
    """The model has CUSTOM ops for which no kernel was provided.

    ``custom_ops`` lists the custom codes (sorted, unique). Also a ``RuntimeError``, so code that
    caught LiteRT's raw "unresolved custom op" error keeps working.
    """

    def __init__(self, custom_ops: Sequence[str], nodes: Sequence[str] = ()):
        self.custom_ops = sorted(set(custom_ops))
        names = ", ".join(repr(n) for n in self.custom_ops)
        first = self.custom_ops[0] if self.custom_ops else "my_op"
        symbol = registration_symbols(first)[0]
        flex = any(n.startswith("Flex") for n in self.custom_ops)
        message = (
            f"the model has {len(self.custom_ops)} custom op(s) with no kernel: {names}. "
            "The LiteRT interpreter can only run a CUSTOM op whose custom code has a registered kernel. "
            "Provide one per custom code:\n"
            f"  * a Python/NumPy kernel: fuselite.runtime.custom_ops.interpreter(model, kernels={{{first!r}: fn}}) "
            "where fn(inputs, options) returns the output array(s);\n"
            f"  * a compiled kernel: a shared library exporting `TfLiteRegistration* {symbol}(void)`, passed as "
            f"kernels={{{first!r}: NativeKernel('lib{_c_ident(first).lower()}.so')}}.\n"
            f"See {_DOC}."
        )
        if flex:
            message += " ('Flex*' ops are TensorFlow ops that need the Flex delegate, not a custom kernel.)"
        super().__init__(message, list(nodes))


class KernelError(RuntimeError):
    """A custom-op kernel failed, or cannot be bound (bad shared library, bad result...)."""


class BridgeUnavailableError(RuntimeError):
    """The installed ai-edge-litert does not match the TFLite C ABI this module declares."""


# ---------------------------------------------------------------------------------------------
# TFLite C ABI (tensorflow/lite/core/c/common.h). Only the fields we touch, in declaration order;
# structs that the runtime allocates are only ever read/written through pointers.
# ---------------------------------------------------------------------------------------------
_c_void_p, _c_int = ctypes.c_void_p, ctypes.c_int

kTfLiteOk, kTfLiteError = 0, 1
_BUILTIN_CUSTOM = 32  # tflite::BuiltinOperator_CUSTOM
_DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS = 1
# TfLiteAllocationType
_MEM_NONE, _MMAP_RO, _ARENA_RW, _ARENA_RW_PERSISTENT, _DYNAMIC = 0, 1, 2, 3, 4

# TfLiteType -> numpy dtype
_DTYPES = {
    1: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16, 8: np.complex64,
    9: np.int8, 10: np.float16, 11: np.float64, 12: np.complex128, 13: np.uint64, 16: np.uint32, 17: np.uint16,
}
_TYPE_NAMES = {0: "NOTYPE", 5: "STRING", 14: "RESOURCE", 15: "VARIANT", 18: "INT4", 19: "BFLOAT16"}


class _QuantizationParams(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("zero_point", ctypes.c_int32)]


class _Quantization(ctypes.Structure):
    _fields_ = [("type", _c_int), ("params", _c_void_p)]


class _Tensor(ctypes.Structure):  # TfLiteTensor
    _fields_ = [
        ("type", _c_int),
        ("data", _c_void_p),  # TfLitePtrUnion
        ("dims", _c_void_p),  # TfLiteIntArray*
        ("params", _QuantizationParams),
        ("allocation_type", _c_int),
        ("bytes", ctypes.c_size_t),
        ("allocation", _c_void_p),
        ("name", ctypes.c_char_p),
        ("delegate", _c_void_p),
        ("buffer_handle", _c_int),
        ("data_is_stale", ctypes.c_bool),
        ("is_variable", ctypes.c_bool),
        ("quantization", _Quantization),
        ("sparsity", _c_void_p),
        ("dims_signature", _c_void_p),
    ]


class _Node(ctypes.Structure):  # TfLiteNode
    _fields_ = [
        ("inputs", _c_void_p),
        ("outputs", _c_void_p),
        ("intermediates", _c_void_p),
        ("temporaries", _c_void_p),
        ("user_data", _c_void_p),
        ("builtin_data", _c_void_p),
        ("custom_initial_data", _c_void_p),
        ("custom_initial_data_size", _c_int),
        ("delegate", _c_void_p),
        ("might_have_side_effect", ctypes.c_bool),
    ]


class _Registration(ctypes.Structure):  # TfLiteRegistration (prefix up to registration_external)
    _fields_ = [
        ("init", _c_void_p),
        ("free", _c_void_p),
        ("prepare", _c_void_p),
        ("invoke", _c_void_p),
        ("profiling_string", _c_void_p),
        ("builtin_code", ctypes.c_int32),
        ("custom_name", ctypes.c_char_p),
        ("version", _c_int),
        ("registration_external", _c_void_p),
    ]


class _RegistrationV1(ctypes.Structure):  # what a user library must at least provide
    _fields_ = _Registration._fields_[:8]


class _Context(ctypes.Structure):  # TfLiteContext (prefix)
    _fields_ = [
        ("tensors_size", ctypes.c_size_t),
        ("GetExecutionPlan", _c_void_p),
        ("tensors", _c_void_p),
        ("impl_", _c_void_p),
        ("ResizeTensor", _c_void_p),
        ("ReportError", _c_void_p),
        ("AddTensors", _c_void_p),
        ("GetNodeAndRegistration", _c_void_p),
        ("ReplaceNodeSubsetsWithDelegateKernels", _c_void_p),
        ("recommended_num_threads", _c_int),
    ]


class _Delegate(ctypes.Structure):  # TfLiteDelegate
    _fields_ = [
        ("data_", _c_void_p),
        ("Prepare", _c_void_p),
        ("CopyFromBufferHandle", _c_void_p),
        ("CopyToBufferHandle", _c_void_p),
        ("FreeBufferHandle", _c_void_p),
        ("flags", ctypes.c_int64),
        ("opaque_delegate_builder", _c_void_p),
    ]


# Function-pointer prototypes.
_DelegatePrepareT = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_void_p)  # (context, delegate)
_KernelPrepareT = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_void_p)  # (context, node); also invoke
_KernelFreeT = ctypes.CFUNCTYPE(None, _c_void_p, _c_void_p)  # (context, user_data)
_KernelInitT = ctypes.CFUNCTYPE(_c_void_p, _c_void_p, _c_void_p, ctypes.c_size_t)  # (context, buffer, length)
_GetExecutionPlanT = ctypes.CFUNCTYPE(_c_int, _c_void_p, ctypes.POINTER(_c_void_p))
_GetNodeAndRegistrationT = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_int, ctypes.POINTER(_c_void_p), ctypes.POINTER(_c_void_p))
_ResizeTensorT = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_void_p, _c_void_p)
_ReportErrorT = ctypes.CFUNCTYPE(None, _c_void_p, ctypes.c_char_p, ctypes.c_char_p)  # ReportError(ctx, "%s", msg)
_RegisterFnT = ctypes.CFUNCTYPE(_c_void_p)

_libc = ctypes.CDLL(None)
_libc.malloc.restype = _c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]

_TENSOR_SIZE = ctypes.sizeof(_Tensor)


def _int_array(address: int | None) -> list[int]:
    """Read a TfLiteIntArray* ({int size; int data[];})."""
    if not address:
        return []
    n = _c_int.from_address(address).value
    if n <= 0:
        return []
    return list((_c_int * n).from_address(address + ctypes.sizeof(_c_int)))


def _new_int_array(values: Sequence[int]) -> int:
    """A malloc'ed TfLiteIntArray; the runtime takes ownership (and frees it with free())."""
    n = len(values)
    ptr = _libc.malloc(ctypes.sizeof(_c_int) * (n + 1))
    if not ptr:
        raise MemoryError("malloc failed")
    arr = (_c_int * (n + 1)).from_address(ptr)
    arr[0] = n
    for i, v in enumerate(values):
        arr[i + 1] = int(v)
    return ptr


def _tensor(ctx: _Context, index: int) -> _Tensor:
    if index < 0 or index >= ctx.tensors_size:
        raise KernelError(f"tensor index {index} out of range (subgraph has {ctx.tensors_size} tensors)")
    return _Tensor.from_address(ctx.tensors + index * _TENSOR_SIZE)


def _dims(t: _Tensor) -> tuple[int, ...]:
    return tuple(_int_array(t.dims))


def _dtype(t: _Tensor, what: str) -> np.dtype:
    if t.type not in _DTYPES:
        name = _TYPE_NAMES.get(t.type, f"TfLiteType {t.type}")
        raise KernelError(f"{what} has type {name}, which Python kernels do not support")
    return np.dtype(_DTYPES[t.type])


def _report(ctx_ptr: int, message: str) -> None:
    try:
        ctx = _Context.from_address(ctx_ptr)
        if ctx.ReportError:
            _ReportErrorT(ctx.ReportError)(ctx_ptr, b"%s\n", message.encode("utf-8", "replace"))
    except Exception:  # pragma: no cover - never let reporting crash the runtime
        pass


def _resize(ctx_ptr: int, t: _Tensor, shape: Sequence[int], what: str) -> None:
    ctx = _Context.from_address(ctx_ptr)
    status = _ResizeTensorT(ctx.ResizeTensor)(ctx_ptr, ctypes.addressof(t), _new_int_array(shape))
    if status != kTfLiteOk:
        raise KernelError(f"could not resize {what} to {tuple(shape)}")


def _make_dynamic(t: _Tensor, what: str) -> None:
    """What SetTensorToDynamic does for arena tensors: forget the arena slot, heap-allocate on resize."""
    if t.allocation_type == _DYNAMIC:
        return
    if t.allocation_type not in (_ARENA_RW, _ARENA_RW_PERSISTENT):
        raise KernelError(f"{what} cannot be resized (allocation type {t.allocation_type})")
    t.data = None
    t.allocation_type = _DYNAMIC


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------
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


@dataclass
class NativeKernel:
    """A compiled kernel: a shared library exporting a classic registration function.

    ``symbol`` is the name of ``TfLiteRegistration* Symbol(void)``; by default it is derived from
    the custom code the kernel is bound to (``"my_custom_fused_op"`` / ``"MyCustomFusedOp"`` ->
    ``Register_MY_CUSTOM_FUSED_OP``; see :func:`registration_symbols`). The registration's
    ``init``/``free``/``prepare``/``invoke``/``profiling_string`` are used as they are by the
    interpreter; ``init`` receives the node's raw ``custom_options`` bytes (the flexbuffer).
    """

    library: str | os.PathLike
    symbol: str | None = None
    _loaded: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def load(self, custom_code: str) -> _NativeRegistration:
        symbols = [self.symbol] if self.symbol else registration_symbols(custom_code)
        key = tuple(symbols)
        if key in self._loaded:
            return self._loaded[key]
        path = os.path.abspath(os.fspath(self.library))
        if not os.path.exists(path):
            raise KernelError(f"custom op {custom_code!r}: shared library {path} does not exist")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise KernelError(f"custom op {custom_code!r}: cannot load {path}: {e}") from e
        for name in symbols:
            try:
                fn_addr = ctypes.cast(getattr(lib, name), _c_void_p).value
            except AttributeError:
                continue
            reg_addr = _RegisterFnT(fn_addr)()
            if not reg_addr:
                raise KernelError(f"custom op {custom_code!r}: {name}() in {path} returned NULL")
            reg = _RegistrationV1.from_address(reg_addr)
            if not reg.invoke:
                raise KernelError(f"custom op {custom_code!r}: the registration returned by {name}() has no invoke")
            loaded = _NativeRegistration(
                lib=lib, symbol=name, address=reg_addr, init=reg.init, free=reg.free, prepare=reg.prepare,
                invoke=reg.invoke, profiling_string=reg.profiling_string,
            )
            self._loaded[key] = loaded
            return loaded
        raise KernelError(
            f"custom op {custom_code!r}: {path} exports none of {', '.join(symbols)} "
            "(expected `TfLiteRegistration* <symbol>(void)` with C linkage; pass NativeKernel(..., symbol=...))"
        )


@dataclass(frozen=True)
class _NativeRegistration:
    lib: ctypes.CDLL  # keeps the library loaded (ctypes never unloads it anyway)
    symbol: str
    address: int
    init: int | None
    free: int | None
    prepare: int | None
    invoke: int
    profiling_string: int | None


def _c_ident(name: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"[^0-9A-Za-z]+", "_", snake).strip("_").upper()


def registration_symbols(custom_code: str) -> list[str]:
    """Registration function names tried for ``custom_code``, most conventional first.

    ``"my_custom_fused_op"`` and ``"MyCustomFusedOp"`` -> ``["Register_MY_CUSTOM_FUSED_OP", ...]``.
    """
    out = ["Register_" + _c_ident(custom_code), "Register_" + re.sub(r"[^0-9A-Za-z]+", "_", custom_code).upper()]
    out.append("Register_" + re.sub(r"[^0-9A-Za-z]+", "_", custom_code))
    return list(dict.fromkeys(out))


def _as_kernel(code: str, value: Any) -> PythonKernel | NativeKernel:
    if isinstance(value, PythonKernel | NativeKernel):
        return value
    if isinstance(value, str | os.PathLike):
        return NativeKernel(value)
    invoke = getattr(value, "invoke", None)
    if callable(invoke):
        return PythonKernel(invoke, getattr(value, "shape", None), bool(getattr(value, "raw_options", False)))
    if callable(value):
        return PythonKernel(value)
    raise TypeError(
        f"kernel for custom op {code!r} must be a function(inputs, options), a PythonKernel, an object with "
        f"invoke(inputs, options), a NativeKernel or a shared-library path; got {type(value).__name__}"
    )


# ---------------------------------------------------------------------------------------------
# Python kernels: one instance per node, found through node->user_data (a handle).
# ---------------------------------------------------------------------------------------------
_handles = itertools.count(1)
_NODE_KERNELS: dict[int, _PyNodeKernel] = {}
_BRIDGES: dict[int, _Bridge] = {}


class _PyNodeKernel:
    def __init__(self, code: str, node_index: int, kernel: PythonKernel, options: Any, errors: list):
        self.code, self.node_index, self.kernel, self.options = code, node_index, kernel, options
        self.errors = errors  # the owning bridge's error list (exceptions raised by kernels)

    def where(self, what: str = "") -> str:
        return f"custom op {self.code!r} (node {self.node_index})" + (f" {what}" if what else "")

    def prepare(self, ctx_ptr: int, node: _Node) -> None:
        ctx = _Context.from_address(ctx_ptr)
        ins = _int_array(node.inputs)
        outs = _int_array(node.outputs)
        if self.kernel.shape is None:
            for k, idx in enumerate(outs):
                if idx < 0:
                    continue
                t = _tensor(ctx, idx)
                sig = _int_array(t.dims_signature)
                if any(d < 0 for d in sig):
                    _make_dynamic(t, self.where(f"output {k}"))
            return
        in_shapes = [None if i < 0 else _dims(_tensor(ctx, i)) for i in ins]
        shapes = self.kernel.shape(in_shapes, self.options)
        if shapes is not None and len(outs) == 1 and _is_shape(shapes):
            shapes = [shapes]
        shapes = list(shapes or [])
        if len(shapes) != len(outs):
            raise KernelError(f"{self.where()}: shape() returned {len(shapes)} shape(s) for {len(outs)} output(s)")
        for k, (idx, shape) in enumerate(zip(outs, shapes)):
            if idx < 0 or shape is None:
                continue
            t = _tensor(ctx, idx)
            shape = tuple(-1 if d is None else int(d) for d in shape)
            if any(d < 0 for d in shape):
                _make_dynamic(t, self.where(f"output {k}"))
            elif shape != _dims(t):
                _resize(ctx_ptr, t, shape, self.where(f"output {k}"))

    def invoke(self, ctx_ptr: int, node: _Node) -> None:
        ctx = _Context.from_address(ctx_ptr)
        arrays = []
        for k, idx in enumerate(_int_array(node.inputs)):
            if idx < 0:
                arrays.append(None)
                continue
            t = _tensor(ctx, idx)
            dtype, shape = _dtype(t, self.where(f"input {k}")), _dims(t)
            count = int(np.prod(shape, dtype=np.int64))
            if count == 0:
                arrays.append(np.zeros(shape, dtype))
                continue
            if not t.data or t.bytes < count * dtype.itemsize:
                raise KernelError(f"{self.where()}: input {k} has no data ({t.bytes} bytes for shape {shape})")
            raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(t.data)
            arrays.append(np.frombuffer(raw, dtype=dtype).reshape(shape).copy())
        result = self.kernel.invoke(arrays, self.options)
        outs = _int_array(node.outputs)
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
            t = _tensor(ctx, idx)
            dtype = _dtype(t, what)
            arr = np.asarray(value)
            if arr.dtype != dtype:
                if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
                    raise KernelError(f"{what}: kernel returned {arr.dtype}, the tensor is {dtype}")
                arr = arr.astype(dtype)
            arr = np.ascontiguousarray(arr)
            if arr.shape != _dims(t) or (arr.nbytes and not t.data):
                if arr.shape != _dims(t):
                    _make_dynamic(t, what)
                _resize(ctx_ptr, t, arr.shape, what)
            if arr.nbytes:
                if not t.data or t.bytes < arr.nbytes:
                    raise KernelError(f"{what}: output buffer is not allocated ({t.bytes} bytes for {arr.nbytes})")
                ctypes.memmove(t.data, arr.ctypes.data, arr.nbytes)


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple | list) and all(d is None or isinstance(d, int | np.integer) for d in x)


def _node_kernel(node_ptr: int) -> _PyNodeKernel:
    node = _Node.from_address(node_ptr)
    inst = _NODE_KERNELS.get(node.user_data or 0)
    if inst is None:
        raise KernelError("fuselite custom-op bridge: unknown kernel handle")
    return inst


def _py_prepare(ctx_ptr, node_ptr):
    inst = None
    try:
        inst = _node_kernel(node_ptr)
        inst.prepare(ctx_ptr, _Node.from_address(node_ptr))
        return kTfLiteOk
    except BaseException as e:  # never let an exception escape into C
        return _fail(ctx_ptr, inst, "prepare", e)


def _py_invoke(ctx_ptr, node_ptr):
    inst = None
    try:
        inst = _node_kernel(node_ptr)
        inst.invoke(ctx_ptr, _Node.from_address(node_ptr))
        return kTfLiteOk
    except BaseException as e:
        return _fail(ctx_ptr, inst, "invoke", e)


def _py_free(ctx_ptr, user_data):
    _NODE_KERNELS.pop(user_data or 0, None)


def _fail(ctx_ptr: int, inst: _PyNodeKernel | None, phase: str, e: BaseException) -> int:
    where = inst.where() if inst is not None else "custom op"
    _report(ctx_ptr, f"{where}: Python kernel {phase} raised {type(e).__name__}: {e}")
    if inst is not None:
        inst.errors.append(e)
        del inst.errors[:-8]
    return kTfLiteError


# Module-level callbacks: they must outlive every interpreter that may call them (a
# SignatureRunner can keep the C++ interpreter alive after the Python Interpreter is gone).
_PY_PREPARE_CB = _KernelPrepareT(_py_prepare)
_PY_INVOKE_CB = _KernelPrepareT(_py_invoke)
_PY_FREE_CB = _KernelFreeT(_py_free)
_PY_PREPARE_ADDR = ctypes.cast(_PY_PREPARE_CB, _c_void_p).value
_PY_INVOKE_ADDR = ctypes.cast(_PY_INVOKE_CB, _c_void_p).value
_PY_FREE_ADDR = ctypes.cast(_PY_FREE_CB, _c_void_p).value


# ---------------------------------------------------------------------------------------------
# The delegate that binds kernels to unresolved CUSTOM nodes.
# ---------------------------------------------------------------------------------------------
@dataclass
class _BoundNode:
    custom_code: str
    node_index: int
    subgraph: int
    kind: str  # "python" | "native"


class _Bridge:
    """Per-interpreter state; referenced from ``_BRIDGES`` until the C++ interpreter is gone."""

    def __init__(self, kernels: Mapping[str, PythonKernel | NativeKernel], probe: bool = False):
        self.kernels = dict(kernels)
        self.probe = probe
        self.handle = next(_handles)
        self.struct = _Delegate()
        self.struct.data_ = self.handle
        self.struct.Prepare = _DELEGATE_PREPARE_ADDR
        self.struct.flags = _DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS
        self.contexts: dict[int, int] = {}  # context address -> subgraph ordinal
        self.done: set[tuple[int, int]] = set()
        self.bound: list[_BoundNode] = []
        self.missing: list[tuple[str, int, int]] = []
        self.shadowed: set[str] = set()  # custom codes LiteRT resolved itself (our kernel unused)
        self.kernel_errors: list[BaseException] = []
        self.error: BaseException | None = None
        self.probe_result: dict | None = None
        _BRIDGES[self.handle] = self

    # The object handed to Interpreter(experimental_delegates=[...]).
    def _get_native_delegate_pointer(self) -> int:
        return ctypes.addressof(self.struct)

    def release(self) -> None:
        _BRIDGES.pop(self.handle, None)

    def prepare(self, ctx_ptr: int) -> None:
        ctx = _Context.from_address(ctx_ptr)
        subgraph = self.contexts.setdefault(ctx_ptr, len(self.contexts))
        plan = _c_void_p()
        if _GetExecutionPlanT(ctx.GetExecutionPlan)(ctx_ptr, ctypes.byref(plan)) != kTfLiteOk:
            raise KernelError("GetExecutionPlan failed")
        get_node = _GetNodeAndRegistrationT(ctx.GetNodeAndRegistration)
        for node_index in _int_array(plan.value):
            node_p, reg_p = _c_void_p(), _c_void_p()
            if get_node(ctx_ptr, node_index, ctypes.byref(node_p), ctypes.byref(reg_p)) != kTfLiteOk:
                raise KernelError(f"GetNodeAndRegistration({node_index}) failed")
            reg = _Registration.from_address(reg_p.value)
            if reg.builtin_code != _BUILTIN_CUSTOM or not reg.custom_name:
                continue
            code = reg.custom_name.decode("utf-8", "replace")
            node = _Node.from_address(node_p.value)
            if self.probe:
                self._probe(ctx, node, reg, code)
                continue
            key = (ctx_ptr, node_index)
            if key in self.done:
                continue  # already bound: delegates are re-applied after e.g. an input resize
            if not _is_placeholder(reg):
                if code in self.kernels:
                    self.shadowed.add(code)  # LiteRT has its own kernel for this custom code
                continue
            kernel = self.kernels.get(code)
            if kernel is None:
                self.missing.append((code, subgraph, node_index))
                self.done.add(key)
                continue
            self._bind(ctx_ptr, node, reg, code, kernel, node_index, subgraph)
            self.done.add(key)

    def _bind(self, ctx_ptr, node, reg, code, kernel, node_index, subgraph) -> None:
        options_bytes = b""
        if node.custom_initial_data and node.custom_initial_data_size > 0:
            options_bytes = ctypes.string_at(node.custom_initial_data, node.custom_initial_data_size)
        if isinstance(kernel, NativeKernel):
            native = kernel.load(code)
            if native.init:
                node.user_data = _KernelInitT(native.init)(
                    ctx_ptr, node.custom_initial_data, max(node.custom_initial_data_size, 0)
                )
            reg.free = native.free
            reg.prepare = native.prepare
            reg.profiling_string = native.profiling_string
            reg.invoke = native.invoke
            self.bound.append(_BoundNode(code, node_index, subgraph, "native"))
            return
        options = options_bytes if kernel.raw_options else decode_custom_options(options_bytes)
        handle = next(_handles)
        _NODE_KERNELS[handle] = _PyNodeKernel(code, node_index, kernel, options, self.kernel_errors)
        node.user_data = handle
        reg.free = _PY_FREE_ADDR
        reg.prepare = _PY_PREPARE_ADDR
        reg.invoke = _PY_INVOKE_ADDR
        self.bound.append(_BoundNode(code, node_index, subgraph, "python"))

    def _probe(self, ctx: _Context, node: _Node, reg: _Registration, code: str) -> None:
        ins, outs = _int_array(node.inputs), _int_array(node.outputs)
        t_in = _tensor(ctx, ins[0]) if ins else None
        t_out = _tensor(ctx, outs[0]) if outs else None
        opts = ctypes.string_at(node.custom_initial_data, node.custom_initial_data_size) if node.custom_initial_data else b""
        self.probe_result = {
            "code": code,
            "tensors_size": ctx.tensors_size,
            "inputs": ins,
            "outputs": outs,
            "in_name": t_in.name if t_in else None,
            "in_dims": _dims(t_in) if t_in else None,
            "in_type": t_in.type if t_in else None,
            "out_name": t_out.name if t_out else None,
            "out_dims": _dims(t_out) if t_out else None,
            "options": opts,
            "init": reg.init,
            "free": reg.free,
            "prepare": reg.prepare,
            "invoke": reg.invoke,
            "version": reg.version,
            "registration_external": reg.registration_external,
        }


def _delegate_prepare(ctx_ptr, delegate_ptr):
    bridge = None
    try:
        bridge = _BRIDGES[_Delegate.from_address(delegate_ptr).data_]
        bridge.prepare(ctx_ptr)
        return kTfLiteOk
    except BaseException as e:
        if bridge is not None and bridge.error is None:
            bridge.error = e
        _report(ctx_ptr, f"fuselite custom-op bridge: {type(e).__name__}: {e}")
        return kTfLiteError


_DELEGATE_PREPARE_CB = _DelegatePrepareT(_delegate_prepare)
_DELEGATE_PREPARE_ADDR = ctypes.cast(_DELEGATE_PREPARE_CB, _c_void_p).value


# ---------------------------------------------------------------------------------------------
# ABI probe: once per process, check our struct layouts against the installed runtime and learn
# the address of the placeholder `invoke` LiteRT gives unresolved custom ops.
# ---------------------------------------------------------------------------------------------
_PROBE_CODE = "__fuselite_abi_probe__"
_PROBE_OPTIONS = b"fuselite-probe\x01\x02"
_probe_lock = threading.Lock()
_placeholder_invoke: int | None = None
_probe_error: BaseException | None = None
_probed = False


def _probe_model() -> bytes:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT()
    m.version = 3
    m.description = "fuselite ABI probe"
    m.buffers = [schema.BufferT()]
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = _PROBE_CODE
    code.version = 1
    m.operatorCodes = [code]
    tensors = []
    for name, shape in (("fuselite_probe_in", [3, 5]), ("fuselite_probe_out", [7])):
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name, shape, schema.TensorType.FLOAT32, 0
        tensors.append(t)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0], [1]
    op.customOptions = list(_PROBE_OPTIONS)
    sg = schema.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.operators = tensors, [0], [1], [op]
    m.subgraphs = [sg]
    b = flatbuffers.Builder(256)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _run_probe() -> int:
    from ai_edge_litert.interpreter import Interpreter

    bridge = _Bridge({}, probe=True)
    try:
        interp = Interpreter(model_content=_probe_model(), experimental_delegates=[bridge])
        r = bridge.probe_result
        expected = {
            "code": _PROBE_CODE, "tensors_size": 2, "inputs": [0], "outputs": [1],
            "in_name": b"fuselite_probe_in", "in_dims": (3, 5), "in_type": 1,
            "out_name": b"fuselite_probe_out", "out_dims": (7,), "options": _PROBE_OPTIONS,
            "init": None, "free": None, "prepare": None, "version": 1, "registration_external": None,
        }
        if bridge.error is not None:
            raise bridge.error
        bad = [k for k, v in expected.items() if r is None or r.get(k) != v]
        if bad or not r.get("invoke"):
            raise BridgeUnavailableError(
                "the installed ai-edge-litert does not match the TFLite C struct layout fuselite expects "
                f"(mismatched: {', '.join(bad) or 'invoke'}); custom-op kernels cannot be attached"
            )
        del interp
        return r["invoke"]
    finally:
        bridge.release()


def _placeholder_invoke_address() -> int:
    global _placeholder_invoke, _probe_error, _probed
    with _probe_lock:
        if not _probed:
            try:
                _placeholder_invoke = _run_probe()
            except BaseException as e:
                _probe_error = e
            _probed = True
    if _probe_error is not None:
        if isinstance(_probe_error, BridgeUnavailableError):
            raise _probe_error
        raise BridgeUnavailableError(f"custom-op bridge self-test failed: {_probe_error}") from _probe_error
    return _placeholder_invoke  # type: ignore[return-value]


def _is_placeholder(reg: _Registration) -> bool:
    """Is this the registration LiteRT gives an unresolved custom op (CreateUnresolvedCustomOp)?"""
    return (
        reg.invoke == _placeholder_invoke
        and not reg.init
        and not reg.prepare
        and not reg.free
        and not reg.registration_external
    )


# ---------------------------------------------------------------------------------------------
# Public interpreter API
# ---------------------------------------------------------------------------------------------
def _interpreter_base():
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter


_UNRESOLVED_RE = re.compile(r"unresolved custom op: ([^\s.]+)")


class CustomOpInterpreter(_interpreter_base()):
    """``ai_edge_litert.interpreter.Interpreter`` with kernels for the model's CUSTOM ops.

    ``kernels`` maps a custom code to a kernel: a function ``fn(inputs, options)``, a
    :class:`PythonKernel`, an object with ``invoke(inputs, options)`` (and optional ``shape``),
    a :class:`NativeKernel`, or a shared-library path (a :class:`NativeKernel` whose registration
    symbol is derived from the custom code). All other arguments are the stock Interpreter's.

    Raises :class:`MissingKernelError` if a CUSTOM op is left without a kernel. Tensors are not
    allocated (call ``allocate_tensors()``, or use :func:`interpreter`).
    """

    def __init__(self, model_path=None, model_content=None, kernels: Mapping[str, Any] | None = None,
                 experimental_delegates=None, **kwargs):
        _placeholder_invoke_address()  # checks the ABI (raises BridgeUnavailableError)
        bound = {str(code): _as_kernel(str(code), k) for code, k in (kernels or {}).items()}
        for code, k in bound.items():
            if isinstance(k, NativeKernel):
                k.load(code)  # fail early, with the library's own error
        bridge = _Bridge(bound)
        self._fuselite_bridge = bridge
        delegates = [bridge, *(experimental_delegates or [])]
        try:
            super().__init__(model_path=model_path, model_content=model_content,
                             experimental_delegates=delegates, **kwargs)
        except BaseException:
            bridge.release()
            if bridge.error is not None:
                raise KernelError(f"binding custom-op kernels failed: {bridge.error}") from bridge.error
            raise
        # Keep the delegate struct and its state alive exactly as long as the C++ interpreter.
        weakref.finalize(self._interpreter, bridge.release)
        if bridge.missing:
            nodes = [f"custom op {c!r}: subgraph {s}, node {n}" for c, s, n in bridge.missing]
            raise MissingKernelError([c for c, _, _ in bridge.missing], nodes)
        if bridge.shadowed:
            warnings.warn(
                f"LiteRT has a built-in kernel for custom op(s) {', '.join(sorted(bridge.shadowed))}; "
                "the kernel passed in `kernels` is not used for them",
                stacklevel=2,
            )

    @property
    def custom_op_nodes(self) -> list[dict]:
        """The CUSTOM nodes bound to a kernel: ``{"custom_code", "node_index", "subgraph", "kind"}``."""
        return [dict(vars(b)) for b in self._fuselite_bridge.bound]

    def _translate(self, e: RuntimeError) -> BaseException:
        missing = _UNRESOLVED_RE.findall(str(e))
        if missing:
            return MissingKernelError(missing)
        errors = self._fuselite_bridge.kernel_errors
        if errors:
            cause = errors[-1]
            errors.clear()
            err = KernelError(str(e).strip())
            err.__cause__ = cause
            return err
        return e

    def allocate_tensors(self):
        try:
            return super().allocate_tensors()
        except RuntimeError as e:
            err = self._translate(e)
            if err is e:
                raise
            raise err from err.__cause__

    def invoke(self):
        try:
            return super().invoke()
        except RuntimeError as e:
            err = self._translate(e)
            if err is e:
                raise
            raise err from err.__cause__

    def get_signature_runner(self, signature_key=None):
        """The stock SignatureRunner, with kernel failures raised as :class:`KernelError`."""
        return _SignatureRunner(super().get_signature_runner(signature_key), self)


class _SignatureRunner:
    def __init__(self, runner, interp: CustomOpInterpreter):
        self._runner, self._interp = runner, interp

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def __call__(self, **kwargs):
        try:
            return self._runner(**kwargs)
        except RuntimeError as e:
            err = self._interp._translate(e)
            if err is e:
                raise
            raise err from err.__cause__


def interpreter(model: bytes | str | os.PathLike, kernels: Mapping[str, Any] | None = None,
                num_threads: int = 1, **kwargs) -> CustomOpInterpreter:
    """A ready LiteRT interpreter (tensors allocated) for ``model`` with the given custom-op kernels.

    ``model``: flatbuffer bytes or a path. ``kernels``: see :class:`CustomOpInterpreter`.
    ``kwargs`` go to ``ai_edge_litert.interpreter.Interpreter`` (e.g. ``experimental_delegates``).
    Raises :class:`MissingKernelError` naming every CUSTOM op that has no kernel.
    """
    if isinstance(model, bytes | bytearray | memoryview):
        interp = CustomOpInterpreter(model_content=bytes(model), kernels=kernels, num_threads=num_threads, **kwargs)
    else:
        interp = CustomOpInterpreter(model_path=os.fspath(model), kernels=kernels, num_threads=num_threads, **kwargs)
    interp.allocate_tensors()
    return interp


def run(model: bytes, inputs: dict | list, kernels: Mapping[str, Any] | None = None,
        signature_key: str | None = None, num_threads: int = 1) -> dict:
    """Run one signature of ``model`` with custom-op kernels; like ``fuselite.runtime.run``."""
    interp = interpreter(model, kernels, num_threads)
    sigs = interp.get_signature_list()
    key = signature_key or next(iter(sigs))
    runner = interp.get_signature_runner(key)
    if not isinstance(inputs, dict):
        inputs = dict(zip(sigs[key]["inputs"], inputs))
    return {k: np.asarray(v) for k, v in runner(**inputs).items()}


# ---------------------------------------------------------------------------------------------
# A minimal C header for compiled kernels (the TFLite headers are not shipped with the wheels).
# ---------------------------------------------------------------------------------------------
C_HEADER = r"""/* fuselite_tflite_kernel.h -- minimal TFLite kernel C ABI for custom-op kernels.
 *
 * Declares the parts of tensorflow/lite/core/c/common.h a classic custom-op kernel uses,
 * with the same names and layouts, so kernels written against the real header compile
 * unchanged (the real header can be used instead of this one). Build:
 *     gcc -O2 -shared -fPIC my_op.c -o libmy_op.so
 * and export `TfLiteRegistration* Register_MY_OP(void)` (C linkage; `extern "C"` in C++).
 * Arrays handed to context->ResizeTensor must come from malloc (the runtime free()s them):
 * use TfLiteIntArrayCreate below.
 */
#ifndef FUSELITE_TFLITE_KERNEL_H_
#define FUSELITE_TFLITE_KERNEL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TfLiteStatus {
  kTfLiteOk = 0,
  kTfLiteError = 1,
  kTfLiteDelegateError = 2,
  kTfLiteApplicationError = 3,
  kTfLiteDelegateDataNotFound = 4,
  kTfLiteDelegateDataWriteError = 5,
  kTfLiteDelegateDataReadError = 6,
  kTfLiteUnresolvedOps = 7,
  kTfLiteCancelled = 8,
  kTfLiteOutputShapeNotKnown = 9
} TfLiteStatus;

typedef enum TfLiteType {
  kTfLiteNoType = 0, kTfLiteFloat32 = 1, kTfLiteInt32 = 2, kTfLiteUInt8 = 3, kTfLiteInt64 = 4,
  kTfLiteString = 5, kTfLiteBool = 6, kTfLiteInt16 = 7, kTfLiteComplex64 = 8, kTfLiteInt8 = 9,
  kTfLiteFloat16 = 10, kTfLiteFloat64 = 11, kTfLiteComplex128 = 12, kTfLiteUInt64 = 13,
  kTfLiteResource = 14, kTfLiteVariant = 15, kTfLiteUInt32 = 16, kTfLiteUInt16 = 17,
  kTfLiteInt4 = 18, kTfLiteBFloat16 = 19
} TfLiteType;

typedef enum TfLiteAllocationType {
  kTfLiteMemNone = 0, kTfLiteMmapRo, kTfLiteArenaRw, kTfLiteArenaRwPersistent, kTfLiteDynamic,
  kTfLitePersistentRo, kTfLiteCustom, kTfLiteVariantObject, kTfLiteNonCpu
} TfLiteAllocationType;

typedef struct TfLiteIntArray {
  int size;
  int data[];
} TfLiteIntArray;

typedef union TfLitePtrUnion {
  int32_t* i32; uint32_t* u32; int64_t* i64; uint64_t* u64; float* f; double* f64;
  char* raw; const char* raw_const; uint8_t* uint8; bool* b; int16_t* i16; uint16_t* ui16;
  int8_t* int8; void* data;
} TfLitePtrUnion;

typedef struct TfLiteQuantizationParams { float scale; int32_t zero_point; } TfLiteQuantizationParams;
typedef struct TfLiteQuantization { int type; void* params; } TfLiteQuantization;
typedef int TfLiteBufferHandle;

struct TfLiteDelegate;
struct TfLiteRegistration;

typedef struct TfLiteTensor {
  TfLiteType type;
  TfLitePtrUnion data;
  TfLiteIntArray* dims;
  TfLiteQuantizationParams params;
  TfLiteAllocationType allocation_type;
  size_t bytes;
  const void* allocation;
  const char* name;
  struct TfLiteDelegate* delegate;
  TfLiteBufferHandle buffer_handle;
  bool data_is_stale;
  bool is_variable;
  TfLiteQuantization quantization;
  void* sparsity;
  const TfLiteIntArray* dims_signature;
} TfLiteTensor;

typedef struct TfLiteNode {
  TfLiteIntArray* inputs;
  TfLiteIntArray* outputs;
  TfLiteIntArray* intermediates;
  TfLiteIntArray* temporaries;
  void* user_data;
  void* builtin_data;
  const void* custom_initial_data;
  int custom_initial_data_size;
  struct TfLiteDelegate* delegate;
  bool might_have_side_effect;
} TfLiteNode;

/* Prefix of TfLiteContext: kernels only receive pointers to it. */
typedef struct TfLiteContext {
  size_t tensors_size;
  TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext* context, TfLiteIntArray** execution_plan);
  TfLiteTensor* tensors;
  void* impl_;
  TfLiteStatus (*ResizeTensor)(struct TfLiteContext*, TfLiteTensor* tensor, TfLiteIntArray* new_size);
  void (*ReportError)(struct TfLiteContext*, const char* msg, ...);
  TfLiteStatus (*AddTensors)(struct TfLiteContext*, int tensors_to_add, int* first_new_tensor_index);
  TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext*, int node_index, TfLiteNode** node,
                                         struct TfLiteRegistration** registration);
  void* ReplaceNodeSubsetsWithDelegateKernels;
  int recommended_num_threads;
} TfLiteContext;

/* TfLiteRegistration up to `version` (the runtime only reads these fields of yours). */
typedef struct TfLiteRegistration {
  void* (*init)(TfLiteContext* context, const char* buffer, size_t length);
  void (*free)(TfLiteContext* context, void* buffer);
  TfLiteStatus (*prepare)(TfLiteContext* context, TfLiteNode* node);
  TfLiteStatus (*invoke)(TfLiteContext* context, TfLiteNode* node);
  const char* (*profiling_string)(const TfLiteContext* context, const TfLiteNode* node);
  int32_t builtin_code;
  const char* custom_name;
  int version;
  void* registration_external;
  void* async_kernel;
  uint64_t inplace_operator;
} TfLiteRegistration;

#ifndef FUSELITE_NO_INT_ARRAY_HELPERS
static inline TfLiteIntArray* TfLiteIntArrayCreate(int size) {
  TfLiteIntArray* a = (TfLiteIntArray*)malloc(sizeof(int) * (size_t)(size + 1));
  if (a) a->size = size;
  return a;
}
static inline TfLiteIntArray* TfLiteIntArrayCopy(const TfLiteIntArray* src) {
  TfLiteIntArray* a = TfLiteIntArrayCreate(src->size);
  for (int i = 0; a && i < src->size; ++i) a->data[i] = src->data[i];
  return a;
}
static inline void TfLiteIntArrayFree(TfLiteIntArray* a) { free(a); }
#endif

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FUSELITE_TFLITE_KERNEL_H_ */
"""


def write_c_header(directory: str | os.PathLike) -> Path:
    """Write :data:`C_HEADER` as ``<directory>/fuselite_tflite_kernel.h`` and return its path."""
    path = Path(directory) / "fuselite_tflite_kernel.h"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(C_HEADER)
    return path
