"""The ABI probe: once per process, check the struct layouts against the installed runtime.

A tiny model with one CUSTOM op is loaded with the bridge in probe mode; what the bridge reads
back (tensor names, dims, custom options, custom name) must match exactly, and it yields the
address of the placeholder ``invoke`` LiteRT gives unresolved custom ops, which is how the bridge
recognises them later. A mismatch raises ``BridgeUnavailableError`` instead of crashing.
"""

from __future__ import annotations

import threading

from fuselite.runtime.bridge import CustomOpBridge
from fuselite.runtime.kernel_errors import BridgeUnavailableError

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

    bridge = CustomOpBridge({}, probe=True)
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


def placeholder_invoke_address() -> int:
    """The ``invoke`` address of LiteRT's placeholder registration; probes the ABI on first use.

    Raises ``BridgeUnavailableError`` (every time) if the probe failed.
    """
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
