"""LiteRT's ``CompiledModel`` API (``ai_edge_litert.compiled_model``): the entry point to its CPU, GPU and NPU
accelerators, which loads a file through LiteRT's own model loader (``litert/core/model/model_load.cc``) rather
than the ``Interpreter``'s.

That loader refuses some files the ``Interpreter`` runs: any *variable tensor* ("Variable tensors not yet
supported", ``model_load.cc``, LiteRT 2.3 and the 2.4 nightlies) — the state operands of LiteRT's sequence ops
(``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN``, the bidirectional ones, the integer LSTM) and fuselite's reset
witness. :func:`loader_problems` finds them in a file without loading it, naming the op that holds each.

* :func:`run_compiled`: one signature run in ``CompiledModel`` on the CPU, in this process (a load costs a few
  milliseconds once the wrapper is imported), as the check before writing does;
* the GPU and NPU accelerators run in a child process (``fuselite.runtime.accelerators``): their drivers can
  crash a process, and LiteRT prints which ops they leave to the CPU, and why, on the native stderr.

Example::

    from fuselite.runtime.compiled import loader_problems, run_compiled
    assert not loader_problems(model)
    outputs = run_compiled(model, {"sequence": x})   # {output name: array}, as fuselite.runtime.run returns
"""

from __future__ import annotations

import threading

import numpy as np

API = "CompiledModel"
VARIABLE_TENSORS = "variable tensors, which CompiledModel's loader refuses (\"Variable tensors not yet supported\")"

_lock = threading.Lock()
_environment = None


class CompiledModelError(RuntimeError):
    """``CompiledModel`` could not load or run a model (its message says which, and LiteRT's words)."""


def loader_problems(model: bytes) -> list[str]:
    """Why LiteRT's model loader (``CompiledModel``) would refuse ``model``, found by reading the file: one line
    per op that holds a variable tensor ("UNIDIRECTIONAL_SEQUENCE_LSTM (subgraph 0, op 3): variable tensor
    'lstm/state_h'"), [] when it has none."""
    from fuselite.inspect import _op_names, _text, load_model

    m = load_model(model)
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in m.operatorCodes or []]
    names = _op_names()
    problems = []
    for s, sg in enumerate(m.subgraphs or []):
        variables = {i for i, t in enumerate(sg.tensors or []) if t.isVariable}
        if not variables:
            continue
        for k, op in enumerate(sg.operators or []):
            held = [int(i) for i in (op.inputs if op.inputs is not None else []) if int(i) in variables]
            if held:
                kind = names.get(codes[op.opcodeIndex], str(codes[op.opcodeIndex]))
                tensors = ", ".join(f"'{_text(sg.tensors[i].name)}'" for i in held)
                problems.append(f"{kind} (subgraph {s}, op {k}): variable tensor{'s' if len(held) > 1 else ''} "
                                f"{tensors}")
    return problems


def _shared_environment():
    """One LiteRT environment for this process's CPU runs (creating one per model loads the accelerator
    registry each time)."""
    global _environment
    with _lock:
        if _environment is None:
            from ai_edge_litert.compiled_model import Environment

            _environment = Environment.create()
        return _environment


def load_compiled(model: bytes, num_threads: int = 1):
    """``model`` loaded in ``CompiledModel`` on the CPU (XNNPACK and LiteRT's builtin kernels), or a
    :class:`CompiledModelError` with the loader's reason (read from the file where LiteRT's own message is only
    "Failed to load model")."""
    problems = loader_problems(model)
    if problems:
        raise CompiledModelError(f"CompiledModel cannot load the model: {VARIABLE_TENSORS}: " + "; ".join(problems))
    from ai_edge_litert.compiled_model import CompiledModel, CpuOptions, HardwareAccelerator, Options

    options = Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=CpuOptions(num_threads=num_threads))
    try:
        return CompiledModel.from_buffer(bytes(model), environment=_shared_environment(), options=options)
    except (RuntimeError, ValueError) as e:
        raise CompiledModelError(f"CompiledModel cannot load the model: {' '.join(str(e).split())}") from None


def run_compiled(model: bytes, inputs: dict, signature_key: str | None = None, num_threads: int = 1,
                 compiled=None) -> dict[str, np.ndarray]:
    """Run one signature of ``model`` in ``CompiledModel`` on the CPU: ``{output name: array}`` for ``inputs``
    by name (every input of the signature). Input shapes other than the file's are resized to (a dynamic
    dimension). ``compiled``: a model :func:`load_compiled` made (run it again without loading it again).
    Raises :class:`CompiledModelError` with LiteRT's reason."""
    cm = compiled if compiled is not None else load_compiled(model, num_threads)
    sigs = cm.get_signature_list()
    if not sigs:
        raise CompiledModelError("CompiledModel: the model has no signatures")
    key = signature_key or next(iter(sigs))
    if key not in sigs:
        raise CompiledModelError(f"CompiledModel: no signature '{key}' (the model has {', '.join(sigs)})")
    names, outs = sigs[key]["inputs"], sigs[key]["outputs"]
    missing = sorted(set(names) - set(inputs))
    if missing:
        raise CompiledModelError(f"CompiledModel: signature '{key}' needs the inputs {', '.join(missing)}")
    index = cm.get_signature_index(key)
    try:
        details = cm.get_input_tensor_details(key)
        for k, name in enumerate(names):
            value = np.asarray(inputs[name])
            if tuple(details[name]["shape"]) != value.shape:
                cm.resize_input_tensor(k, list(value.shape), index)
        in_buffers, out_buffers = cm.create_input_buffers(index), cm.create_output_buffers(index)
        for name, buffer in zip(names, in_buffers):
            buffer.write(np.ascontiguousarray(inputs[name], dtype=details[name]["dtype"]))
        cm.run_by_index(index, in_buffers, out_buffers)
        out_details = cm.get_output_tensor_details(key)
        result = {}
        for name, buffer in zip(outs, out_buffers):
            shape = tuple(int(n) for n in out_details[name]["shape"])
            result[name] = np.asarray(buffer.read(int(np.prod(shape)), out_details[name]["dtype"])).reshape(shape)
        return result
    except (RuntimeError, ValueError, TypeError) as e:
        raise CompiledModelError(f"CompiledModel cannot run signature '{key}': {' '.join(str(e).split())}") from None
