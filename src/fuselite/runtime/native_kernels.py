"""Compiled kernels for CUSTOM ops: shared libraries exporting a classic ``TfLiteRegistration``.

The library's registration functions (``init``/``free``/``prepare``/``invoke``/
``profiling_string``) are put into the node's registration as they are, so a compiled kernel
runs with its own function pointers (no Python on the hot path).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

from fuselite.runtime.abi import KernelInitFn, RegisterFn, TfLiteNode, TfLiteRegistration, TfLiteRegistrationV1
from fuselite.runtime.kernel_errors import KernelError
from fuselite.runtime.kernel_symbols import registration_symbols


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

    def load(self, custom_code: str) -> NativeRegistration:
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
                fn_addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            except AttributeError:
                continue
            reg_addr = RegisterFn(fn_addr)()
            if not reg_addr:
                raise KernelError(f"custom op {custom_code!r}: {name}() in {path} returned NULL")
            reg = TfLiteRegistrationV1.from_address(reg_addr)
            if not reg.invoke:
                raise KernelError(f"custom op {custom_code!r}: the registration returned by {name}() has no invoke")
            loaded = NativeRegistration(
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
class NativeRegistration:
    """The function pointers of a loaded library's registration."""

    lib: ctypes.CDLL  # keeps the library loaded (ctypes never unloads it anyway)
    symbol: str
    address: int
    init: int | None
    free: int | None
    prepare: int | None
    invoke: int
    profiling_string: int | None


def bind_native_kernel(ctx_ptr: int, node: TfLiteNode, reg: TfLiteRegistration, code: str,
                       kernel: NativeKernel) -> None:
    """Make ``node`` run ``kernel``.

    The kernel's ``init`` (if any) is called with the node's custom options and its result becomes
    ``node->user_data``; the kernel's functions replace those of the node's registration.
    """
    native = kernel.load(code)
    if native.init:
        node.user_data = KernelInitFn(native.init)(ctx_ptr, node.custom_initial_data, max(node.custom_initial_data_size, 0))
    reg.free = native.free
    reg.prepare = native.prepare
    reg.profiling_string = native.profiling_string
    reg.invoke = native.invoke
