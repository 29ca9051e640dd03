"""tensorflow-text's TFLite kernels on the stock ``ai_edge_litert`` interpreter.

tensorflow-text ships its kernels in ``libpybinds_library_common.so`` and adds them to a resolver with
``tflite_registrar.Add<Op>(resolver_address)``, each a call to ``tflite::MutableOpResolver::AddCustom`` of that
library. ``ai_edge_litert``'s Python ``Interpreter`` takes no resolver (no ``custom_op_registerers``), so fuselite
builds one: a ``MutableOpResolver`` laid out as its header declares it (the vtable the library exports, two empty
``std::unordered_map``s as libstdc++ lays out a default-constructed one), lets every registrar add to it, and asks
the library's own ``FindOp`` for each code. Each registration found becomes a :class:`NativeKernel` that the
custom-op bridge binds to the model's unresolved nodes (``fuselite/runtime/bridge.py``), its functions used as
they are. The layout is checked once per process: every code the registrars add must be found again by
``FindOp`` and be one ``fuselite/ops/text_kernels.py`` lists; otherwise the kernels are not used and
:class:`MissingKernelError` says why.
"""

from __future__ import annotations

import ctypes
import os
import struct
from functools import lru_cache

from fuselite.ops.text_kernels import INSTALL, TEXT_KERNELS
from fuselite.runtime.abi import TfLiteRegistrationV1
from fuselite.runtime.native_kernels import NativeKernel, NativeRegistration

# tflite::MutableOpResolver (mutable_op_resolver.h, TF 2.21) on x86-64 / aarch64 with libstdc++: the vptr and
# OpResolver's shared_ptr (24 bytes), a bool, two std::vectors of delegate creators, then builtins_ and
# custom_ops_ (std::unordered_map: 56 bytes each), then a std::vector of chained resolvers
_BUILTINS, _CUSTOM_OPS, _SIZE = 80, 136, 216
# a default-constructed std::unordered_map (libstdc++ _Hashtable): buckets -> its single bucket (at +48), one
# bucket, no first node (+16), no elements (+24), a max load factor of 1.0 (+32)
_SINGLE_BUCKET, _COUNT, _FIRST, _ELEMENTS, _LOAD = 48, 8, 16, 24, 32


class TextKernelsUnavailable(Exception):
    """tensorflow-text's kernels cannot be registered here (the package is missing, or its library is not laid
    out as fuselite reads it)."""


@lru_cache(maxsize=1)
def _registrations() -> dict[str, tuple[int, ctypes.CDLL]] | TextKernelsUnavailable:
    """custom code -> (the address of tensorflow-text's registration, the library holding it), or why not."""
    try:
        from tensorflow_text.core.pybinds import tflite_registrar
    except ImportError as e:
        return TextKernelsUnavailable(f"tensorflow-text is not installed ({e}): {INSTALL}")
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(tflite_registrar.__file__), "libpybinds_library_common.so"))
        vtable = ctypes.cast(lib._ZTVN6tflite17MutableOpResolverE, ctypes.c_void_p).value
        find_op = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int)(
            ctypes.cast(lib._ZNK6tflite17MutableOpResolver6FindOpEPKci, ctypes.c_void_p).value)
    except (OSError, AttributeError) as e:
        return TextKernelsUnavailable(f"tensorflow-text's kernel library is not one fuselite can read: {e}")
    resolver = (ctypes.c_char * 512)()  # never freed: the registrations live in it for the process
    base = ctypes.addressof(resolver)
    struct.pack_into("<Q", resolver, 0, vtable + 16)  # the vptr: past offset-to-top and the type info
    for table in (_BUILTINS, _CUSTOM_OPS):
        struct.pack_into("<QQ", resolver, table, base + table + _SINGLE_BUCKET, 1)
        struct.pack_into("<f", resolver, table + _LOAD, 1.0)
    for name in sorted(TEXT_KERNELS.values(), key=lambda k: k.registrar):
        add = getattr(tflite_registrar, name.registrar, None)
        if add is None:
            return TextKernelsUnavailable(f"tensorflow-text has no registrar {name.registrar}")
        add(base)
    found: dict[str, tuple[int, ctypes.CDLL]] = {}
    node = struct.unpack_from("<Q", resolver, _CUSTOM_OPS + _FIRST)[0]
    while node:  # each node: the next, then the key (std::string, int), then the TfLiteRegistration
        text, length = struct.unpack_from("<QQ", ctypes.string_at(node + 8, 16))
        code = ctypes.string_at(text, length).decode("utf-8", "replace")
        address = find_op(base, code.encode(), 1)
        if not address or code not in TEXT_KERNELS:
            return TextKernelsUnavailable(f"tensorflow-text's resolver is not laid out as fuselite reads it (found "
                                          f"{code!r}, FindOp {address})")
        found[code] = (address, lib)
        node = ctypes.c_void_p.from_address(node).value
    count = struct.unpack_from("<Q", resolver, _CUSTOM_OPS + _ELEMENTS)[0]
    if count != len(found) or set(found) != set(TEXT_KERNELS):
        return TextKernelsUnavailable(f"tensorflow-text registered {sorted(found)} ({count}); fuselite lists "
                                      f"{sorted(TEXT_KERNELS)}")
    return found


class TextKernel(NativeKernel):
    """One of tensorflow-text's TFLite kernels, bound by the custom-op bridge like a compiled kernel."""

    def __init__(self, code: str):
        super().__init__(library="tensorflow-text", symbol=code)

    def load(self, custom_code: str) -> NativeRegistration:
        found = _registrations()
        if isinstance(found, TextKernelsUnavailable):
            raise found
        address, lib = found[custom_code]
        reg = TfLiteRegistrationV1.from_address(address)
        return NativeRegistration(lib=lib, symbol=custom_code, address=address, init=reg.init, free=reg.free,
                                  prepare=reg.prepare, invoke=reg.invoke, profiling_string=reg.profiling_string)


def text_kernel(code: str) -> TextKernel | None:
    """The kernel tensorflow-text has for custom code ``code`` (None where it has none or cannot be
    registered here: :func:`why_not` says why)."""
    if code not in TEXT_KERNELS or isinstance(_registrations(), TextKernelsUnavailable):
        return None
    return TextKernel(code)


def missing_hints(codes) -> dict[str, str]:
    """For ``MissingKernelError``: code -> why its tensorflow-text kernel is not here, for the codes that are such."""
    return {code: why for code in codes if (why := why_not(code))}


def why_not(code: str) -> str | None:
    """Why a tensorflow-text custom op has no kernel here (None: it has one, or ``code`` is not one of them)."""
    if code not in TEXT_KERNELS:
        return None
    found = _registrations()
    return str(found) if isinstance(found, TextKernelsUnavailable) else None
