"""The custom-op bridge: a ``TfLiteDelegate`` that binds kernels to unresolved CUSTOM nodes.

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
  own function pointers (no Python on the hot path, :mod:`fuselite.runtime.native_kernels`);
  Python kernels run through module-level ctypes trampolines that read/write tensors via
  ``TfLiteTensor.data`` and resize outputs with ``context->ResizeTensor``
  (:mod:`fuselite.runtime.python_kernels`).
* Nodes left with the placeholder and no kernel are reported as ``MissingKernelError``
  when the interpreter is created.

The placeholder's ``invoke`` address, and the struct layouts of :mod:`fuselite.runtime.abi`, are
checked once per process against a tiny probe model (:mod:`fuselite.runtime.probe`: tensor names,
dims, custom options and custom name must read back exactly); on a mismatch you get a clear error
instead of a crash.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass

from fuselite.runtime.abi import (
    BUILTIN_CUSTOM,
    DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS,
    DelegatePrepareFn,
    GetExecutionPlanFn,
    GetNodeAndRegistrationFn,
    TfLiteContext,
    TfLiteDelegate,
    TfLiteNode,
    TfLiteRegistration,
    dims,
    int_array,
    kTfLiteError,
    kTfLiteOk,
    new_handle,
    report_error,
    tensor_at,
)
from fuselite.runtime.kernel_errors import KernelError
from fuselite.runtime.native_kernels import NativeKernel, bind_native_kernel
from fuselite.runtime.python_kernels import PythonKernel, bind_python_kernel
from fuselite.runtime.text_kernels import text_kernel

# Every live bridge, by the handle in its delegate struct's data_, until the C++ interpreter is gone.
_BRIDGES: dict[int, CustomOpBridge] = {}


@dataclass
class BoundNode:
    """A CUSTOM node the bridge gave a kernel."""

    custom_code: str
    node_index: int
    subgraph: int
    kind: str  # "python" | "native"


class CustomOpBridge:
    """Per-interpreter state; referenced from ``_BRIDGES`` until the C++ interpreter is gone.

    ``placeholder_invoke`` is the ``invoke`` address of the registration LiteRT gives unresolved
    custom ops (learned by the probe). With ``probe=True`` nothing is bound: the bridge records
    what it reads of the first CUSTOM node in ``probe_result``.
    """

    def __init__(self, kernels: Mapping[str, PythonKernel | NativeKernel], probe: bool = False,
                 placeholder_invoke: int | None = None):
        self.kernels = dict(kernels)
        self.probe = probe
        self.placeholder_invoke = placeholder_invoke
        self.handle = new_handle()
        self.struct = TfLiteDelegate()
        self.struct.data_ = self.handle
        self.struct.Prepare = _DELEGATE_PREPARE_ADDR
        self.struct.flags = DELEGATE_FLAGS_ALLOW_DYNAMIC_TENSORS
        self.contexts: dict[int, int] = {}  # context address -> subgraph ordinal
        self.done: set[tuple[int, int]] = set()
        self.bound: list[BoundNode] = []
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
        ctx = TfLiteContext.from_address(ctx_ptr)
        subgraph = self.contexts.setdefault(ctx_ptr, len(self.contexts))
        plan = ctypes.c_void_p()
        if GetExecutionPlanFn(ctx.GetExecutionPlan)(ctx_ptr, ctypes.byref(plan)) != kTfLiteOk:
            raise KernelError("GetExecutionPlan failed")
        get_node = GetNodeAndRegistrationFn(ctx.GetNodeAndRegistration)
        for node_index in int_array(plan.value):
            node_p, reg_p = ctypes.c_void_p(), ctypes.c_void_p()
            if get_node(ctx_ptr, node_index, ctypes.byref(node_p), ctypes.byref(reg_p)) != kTfLiteOk:
                raise KernelError(f"GetNodeAndRegistration({node_index}) failed")
            reg = TfLiteRegistration.from_address(reg_p.value)
            if reg.builtin_code != BUILTIN_CUSTOM or not reg.custom_name:
                continue
            code = reg.custom_name.decode("utf-8", "replace")
            node = TfLiteNode.from_address(node_p.value)
            if self.probe:
                self._probe(ctx, node, reg, code)
                continue
            key = (ctx_ptr, node_index)
            if key in self.done:
                continue  # already bound: delegates are re-applied after e.g. an input resize
            if not self._is_placeholder(reg):
                if code in self.kernels:
                    self.shadowed.add(code)  # LiteRT has its own kernel for this custom code
                continue
            kernel = self.kernels.get(code) or text_kernel(code)  # tensorflow-text's own, where it is installed
            if kernel is None:
                self.missing.append((code, subgraph, node_index))
                self.done.add(key)
                continue
            self._bind(ctx_ptr, node, reg, code, kernel, node_index, subgraph)
            self.done.add(key)

    def _is_placeholder(self, reg: TfLiteRegistration) -> bool:
        """Is this the registration LiteRT gives an unresolved custom op (CreateUnresolvedCustomOp)?"""
        return (
            reg.invoke == self.placeholder_invoke
            and not reg.init
            and not reg.prepare
            and not reg.free
            and not reg.registration_external
        )

    def _bind(self, ctx_ptr, node, reg, code, kernel, node_index, subgraph) -> None:
        options_bytes = b""
        if node.custom_initial_data and node.custom_initial_data_size > 0:
            options_bytes = ctypes.string_at(node.custom_initial_data, node.custom_initial_data_size)
        if isinstance(kernel, NativeKernel):
            bind_native_kernel(ctx_ptr, node, reg, code, kernel)
            self.bound.append(BoundNode(code, node_index, subgraph, "native"))
            return
        bind_python_kernel(node, reg, code, kernel, node_index, options_bytes, self.kernel_errors)
        self.bound.append(BoundNode(code, node_index, subgraph, "python"))

    def _probe(self, ctx: TfLiteContext, node: TfLiteNode, reg: TfLiteRegistration, code: str) -> None:
        ins, outs = int_array(node.inputs), int_array(node.outputs)
        t_in = tensor_at(ctx, ins[0]) if ins else None
        t_out = tensor_at(ctx, outs[0]) if outs else None
        opts = ctypes.string_at(node.custom_initial_data, node.custom_initial_data_size) if node.custom_initial_data else b""
        self.probe_result = {
            "code": code,
            "tensors_size": ctx.tensors_size,
            "inputs": ins,
            "outputs": outs,
            "in_name": t_in.name if t_in else None,
            "in_dims": dims(t_in) if t_in else None,
            "in_type": t_in.type if t_in else None,
            "out_name": t_out.name if t_out else None,
            "out_dims": dims(t_out) if t_out else None,
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
        bridge = _BRIDGES[TfLiteDelegate.from_address(delegate_ptr).data_]
        bridge.prepare(ctx_ptr)
        return kTfLiteOk
    except BaseException as e:
        if bridge is not None and bridge.error is None:
            bridge.error = e
        report_error(ctx_ptr, f"fuselite custom-op bridge: {type(e).__name__}: {e}")
        return kTfLiteError


# Module-level callback, like the Python kernels' trampolines: it must outlive every interpreter.
_DELEGATE_PREPARE_CB = DelegatePrepareFn(_delegate_prepare)
_DELEGATE_PREPARE_ADDR = ctypes.cast(_DELEGATE_PREPARE_CB, ctypes.c_void_p).value
