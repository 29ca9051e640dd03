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

This module is the public face: the interpreter, and the names a user needs from the modules
that do the work --

* :mod:`fuselite.runtime.bridge`: how kernels are attached (a ctypes ``TfLiteDelegate`` that fills
  in the registrations of unresolved CUSTOM nodes);
* :mod:`fuselite.runtime.python_kernels`: :class:`PythonKernel`, and the shapes of its outputs;
* :mod:`fuselite.runtime.native_kernels`: :class:`NativeKernel` (shared libraries);
* :mod:`fuselite.runtime.c_header`: :data:`C_HEADER` to compile them against;
* :mod:`fuselite.runtime.abi` and :mod:`fuselite.runtime.probe`: the C structs, checked once per
  process against the installed runtime;
* :mod:`fuselite.runtime.kernel_errors`: :class:`MissingKernelError`, :class:`KernelError`.
"""

from __future__ import annotations

import os
import re
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from fuselite.runtime.bridge import CustomOpBridge
from fuselite.runtime.c_header import C_HEADER, write_c_header
from fuselite.runtime.kernel_errors import BridgeUnavailableError, KernelError, MissingKernelError  # noqa: F401
from fuselite.runtime.kernel_symbols import registration_symbols
from fuselite.runtime.native_kernels import NativeKernel
from fuselite.runtime.probe import placeholder_invoke_address
from fuselite.runtime.python_kernels import PythonKernel, decode_custom_options
from fuselite.runtime.text_kernels import missing_hints

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
        placeholder_invoke = placeholder_invoke_address()  # checks the ABI (raises BridgeUnavailableError)
        bound = {str(code): _as_kernel(str(code), k) for code, k in (kernels or {}).items()}
        for code, k in bound.items():
            if isinstance(k, NativeKernel):
                k.load(code)  # fail early, with the library's own error
        bridge = CustomOpBridge(bound, placeholder_invoke=placeholder_invoke)
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
            codes = [c for c, _, _ in bridge.missing]
            raise MissingKernelError(codes, nodes, missing_hints(codes))
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
            return MissingKernelError(missing, hints=missing_hints(missing))
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
                num_threads: int = 1, allocate: bool = True, **kwargs) -> CustomOpInterpreter:
    """A ready LiteRT interpreter (tensors allocated unless ``allocate`` is False) for ``model`` with the
    given custom-op kernels.

    ``model``: flatbuffer bytes or a path. ``kernels``: see :class:`CustomOpInterpreter`.
    ``kwargs`` go to ``ai_edge_litert.interpreter.Interpreter`` (e.g. ``experimental_delegates``).
    Raises :class:`MissingKernelError` naming every CUSTOM op that has no kernel.
    """
    if isinstance(model, bytes | bytearray | memoryview):
        interp = CustomOpInterpreter(model_content=bytes(model), kernels=kernels, num_threads=num_threads, **kwargs)
    else:
        interp = CustomOpInterpreter(model_path=os.fspath(model), kernels=kernels, num_threads=num_threads, **kwargs)
    if allocate:
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
        from fuselite.runtime.signatures import signature_inputs

        ordered = signature_inputs(model, key) if isinstance(model, bytes | bytearray | memoryview) else None
        inputs = dict(zip(ordered or sigs[key]["inputs"], inputs))
    return {k: np.asarray(v) for k, v in runner(**inputs).items()}


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
