"""The LiteRT kernel C ABI (``tensorflow/lite/core/c/common.h``) as ctypes structs, and helpers on them.

Only the fields fuselite touches are declared, in declaration order; structs that the runtime
allocates are only ever read and written through pointers. The layouts are checked once per
process against the installed runtime (:mod:`fuselite.runtime.probe`).
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence

import numpy as np

from fuselite.runtime.kernel_errors import KernelError

_c_void_p, _c_int = ctypes.c_void_p, ctypes.c_int

kTfLiteOk, kTfLiteError = 0, 1
BUILTIN_CUSTOM = 32  # tflite::BuiltinOperator_CUSTOM
DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS = 1
# TfLiteAllocationType
kTfLiteMemNone, kTfLiteMmapRo, kTfLiteArenaRw, kTfLiteArenaRwPersistent, kTfLiteDynamic = 0, 1, 2, 3, 4

# TfLiteType -> numpy dtype
NUMPY_DTYPES = {
    1: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16, 8: np.complex64,
    9: np.int8, 10: np.float16, 11: np.float64, 12: np.complex128, 13: np.uint64, 16: np.uint32, 17: np.uint16,
}
# TfLiteTypes without a numpy dtype
TYPE_NAMES = {0: "NOTYPE", 5: "STRING", 14: "RESOURCE", 15: "VARIANT", 18: "INT4", 19: "BFLOAT16"}


class TfLiteQuantizationParams(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("zero_point", ctypes.c_int32)]


class TfLiteQuantization(ctypes.Structure):
    _fields_ = [("type", _c_int), ("params", _c_void_p)]


class TfLiteTensor(ctypes.Structure):
    _fields_ = [
        ("type", _c_int),
        ("data", _c_void_p),  # TfLitePtrUnion
        ("dims", _c_void_p),  # TfLiteIntArray*
        ("params", TfLiteQuantizationParams),
        ("allocation_type", _c_int),
        ("bytes", ctypes.c_size_t),
        ("allocation", _c_void_p),
        ("name", ctypes.c_char_p),
        ("delegate", _c_void_p),
        ("buffer_handle", _c_int),
        ("data_is_stale", ctypes.c_bool),
        ("is_variable", ctypes.c_bool),
        ("quantization", TfLiteQuantization),
        ("sparsity", _c_void_p),
        ("dims_signature", _c_void_p),
    ]


class TfLiteNode(ctypes.Structure):
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


class TfLiteRegistration(ctypes.Structure):  # prefix up to registration_external
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


class TfLiteRegistrationV1(ctypes.Structure):  # what a user library must at least provide
    _fields_ = TfLiteRegistration._fields_[:8]


class TfLiteContext(ctypes.Structure):  # prefix
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


class TfLiteDelegate(ctypes.Structure):
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
DelegatePrepareFn = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_void_p)  # (context, delegate)
KernelPrepareFn = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_void_p)  # (context, node); also invoke
KernelFreeFn = ctypes.CFUNCTYPE(None, _c_void_p, _c_void_p)  # (context, user_data)
KernelInitFn = ctypes.CFUNCTYPE(_c_void_p, _c_void_p, _c_void_p, ctypes.c_size_t)  # (context, buffer, length)
GetExecutionPlanFn = ctypes.CFUNCTYPE(_c_int, _c_void_p, ctypes.POINTER(_c_void_p))
GetNodeAndRegistrationFn = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_int, ctypes.POINTER(_c_void_p),
                                            ctypes.POINTER(_c_void_p))
ResizeTensorFn = ctypes.CFUNCTYPE(_c_int, _c_void_p, _c_void_p, _c_void_p)
ReportErrorFn = ctypes.CFUNCTYPE(None, _c_void_p, ctypes.c_char_p, ctypes.c_char_p)  # ReportError(ctx, "%s", msg)
RegisterFn = ctypes.CFUNCTYPE(_c_void_p)

_libc = ctypes.CDLL(None)
_libc.malloc.restype = _c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]

_TENSOR_SIZE = ctypes.sizeof(TfLiteTensor)

# Integers stored in void* fields (``TfLiteDelegate.data_``, ``TfLiteNode.user_data``) to find the
# Python object behind a callback: one sequence for the process, never 0 (NULL).
_handles = itertools.count(1)


def new_handle() -> int:
    """A fresh handle for a void* field (unique in this process, never 0)."""
    return next(_handles)


def int_array(address: int | None) -> list[int]:
    """Read a TfLiteIntArray* ({int size; int data[];})."""
    if not address:
        return []
    n = _c_int.from_address(address).value
    if n <= 0:
        return []
    return list((_c_int * n).from_address(address + ctypes.sizeof(_c_int)))


def new_int_array(values: Sequence[int]) -> int:
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


def tensor_at(ctx: TfLiteContext, index: int) -> TfLiteTensor:
    """``context->tensors[index]``, with a bounds check."""
    if index < 0 or index >= ctx.tensors_size:
        raise KernelError(f"tensor index {index} out of range (subgraph has {ctx.tensors_size} tensors)")
    return TfLiteTensor.from_address(ctx.tensors + index * _TENSOR_SIZE)


def dims(t: TfLiteTensor) -> tuple[int, ...]:
    """The tensor's current shape."""
    return tuple(int_array(t.dims))


def numpy_dtype(t: TfLiteTensor, what: str) -> np.dtype:
    """The numpy dtype of the tensor's type; ``what`` names the tensor in the error if there is none."""
    if t.type not in NUMPY_DTYPES:
        name = TYPE_NAMES.get(t.type, f"TfLiteType {t.type}")
        raise KernelError(f"{what} has type {name}, which Python kernels do not support")
    return np.dtype(NUMPY_DTYPES[t.type])


def report_error(ctx_ptr: int, message: str) -> None:
    """``context->ReportError(context, "%s\\n", message)``; never raises."""
    try:
        ctx = TfLiteContext.from_address(ctx_ptr)
        if ctx.ReportError:
            ReportErrorFn(ctx.ReportError)(ctx_ptr, b"%s\n", message.encode("utf-8", "replace"))
    except Exception:  # pragma: no cover - never let reporting crash the runtime
        pass


def resize_tensor(ctx_ptr: int, t: TfLiteTensor, shape: Sequence[int], what: str) -> None:
    """``context->ResizeTensor(context, t, shape)``; ``what`` names the tensor in the error."""
    ctx = TfLiteContext.from_address(ctx_ptr)
    status = ResizeTensorFn(ctx.ResizeTensor)(ctx_ptr, ctypes.addressof(t), new_int_array(shape))
    if status != kTfLiteOk:
        raise KernelError(f"could not resize {what} to {tuple(shape)}")


def make_dynamic(t: TfLiteTensor, what: str) -> None:
    """What SetTensorToDynamic does for arena tensors: forget the arena slot, heap-allocate on resize."""
    if t.allocation_type == kTfLiteDynamic:
        return
    if t.allocation_type not in (kTfLiteArenaRw, kTfLiteArenaRwPersistent):
        raise KernelError(f"{what} cannot be resized (allocation type {t.allocation_type})")
    t.data = None
    t.allocation_type = kTfLiteDynamic
