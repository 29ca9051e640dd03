"""LiteRT's ``CompiledModel`` API (``ai_edge_litert.compiled_model``): the entry point to its CPU, GPU and NPU
accelerators, which loads a file through LiteRT's own model loader (``litert/core/model/model_load.cc``) rather
than the ``Interpreter``'s.

That loader refuses some files the ``Interpreter`` runs: any *variable tensor* ("Variable tensors not yet
supported", ``model_load.cc``, LiteRT 2.3 and the 2.4 nightlies) — the state operands of LiteRT's sequence ops
(``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN``, the bidirectional ones, the integer LSTM) and fuselite's reset
witness. :func:`loader_problems` finds them in a file without loading it, naming the op that holds each.

:func:`run_compiled` runs one signature in ``CompiledModel`` on the CPU in a *worker process*, started once per
process and kept (a model then loads and runs in milliseconds): ``libLiteRt.so`` loaded into a process that
has TensorFlow aborts TensorFlow's later ops (seen: SIGABRT in ``floor_mod``, SIGSEGV in ``set_random_seed``),
and a native runtime can crash on a file — the worker is started again and the call says so. The GPU and NPU
accelerators run in child processes of their own (``fuselite.runtime.accelerators``, ``fuselite.runtime.npu``).

Example::

    from fuselite.runtime.compiled import loader_problems, run_compiled
    assert not loader_problems(model)
    outputs = run_compiled(model, {"sequence": x})   # {output name: array}, as fuselite.runtime.run returns
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import numpy as np

from fuselite.runtime.child import exit_description  # noqa: F401  (compiled.exit_description, as before)

API = "CompiledModel"
VARIABLE_TENSORS = "variable tensors, which CompiledModel's loader refuses (\"Variable tensors not yet supported\")"
TIMEOUT_S = 600


class CompiledModelError(RuntimeError):
    """``CompiledModel`` could not load or run a model (its message says which, and LiteRT's words)."""


def model_object(data: bytes):
    """The flatbuffer as LiteRT's object API ``ModelT`` (the file is one fuselite just wrote or checked)."""
    from ai_edge_litert import schema_py_generated as schema

    return schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(bytes(data), 0))


def op_names() -> dict[int, str]:
    """Builtin operator codes -> names ("FULLY_CONNECTED")."""
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def text(b) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def loader_problems(model: bytes) -> list[str]:
    """Why LiteRT's model loader (``CompiledModel``) would refuse ``model``, found by reading the file: one line
    per op that holds a variable tensor ("UNIDIRECTIONAL_SEQUENCE_LSTM (subgraph 0, op 3): variable tensor
    'lstm/state_h'"), [] when it has none."""
    m = model_object(model)
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in m.operatorCodes or []]
    names = op_names()
    problems = []
    for s, sg in enumerate(m.subgraphs or []):
        variables = {i for i, t in enumerate(sg.tensors or []) if t.isVariable}
        if not variables:
            continue
        for k, op in enumerate(sg.operators or []):
            held = [int(i) for i in (op.inputs if op.inputs is not None else []) if int(i) in variables]
            if held:
                kind = names.get(codes[op.opcodeIndex], str(codes[op.opcodeIndex]))
                tensors = ", ".join(f"'{text(sg.tensors[i].name)}'" for i in held)
                problems.append(f"{kind} (subgraph {s}, op {k}): variable tensor{'s' if len(held) > 1 else ''} "
                                f"{tensors}")
    return problems


# The worker: one request a line on stdin ({"model", "inputs", "out", "signature", "threads"}: file paths), one
# answer a line on stdout ({"ok": true} with the outputs in "out", or {"error": LiteRT's words}).
_WORKER = r"""
import json, sys
import numpy as np
from ai_edge_litert.compiled_model import CompiledModel, CpuOptions, Environment, HardwareAccelerator, Options

env = Environment.create()
answer = sys.stdout
sys.stdout = sys.stderr  # LiteRT's own prints never mix with the answers

def run(req):
    options = Options(hardware_accelerators=HardwareAccelerator.CPU,
                      cpu_options=CpuOptions(num_threads=int(req.get("threads", 1))))
    try:
        cm = CompiledModel.from_file(req["model"], environment=env, options=options)
    except Exception as e:
        return {"error": "CompiledModel cannot load the model: " + " ".join(str(e).split())}
    if req.get("inputs") is None:
        return {"ok": True}
    sigs = cm.get_signature_list()
    key = req.get("signature") or next(iter(sigs))
    if key not in sigs:
        return {"error": f"CompiledModel: no signature '{key}' (the model has {', '.join(sigs)})"}
    with np.load(req["inputs"], allow_pickle=False) as z:
        inputs = {k: z[k] for k in z.files}
    names, outs = sigs[key]["inputs"], sigs[key]["outputs"]
    missing = sorted(set(names) - set(inputs))
    if missing:
        return {"error": f"CompiledModel: signature '{key}' needs the inputs {', '.join(missing)}"}
    try:
        index = cm.get_signature_index(key)
        details = cm.get_input_tensor_details(key)
        for k, name in enumerate(names):
            if tuple(details[name]["shape"]) != inputs[name].shape:
                cm.resize_input_tensor(k, list(inputs[name].shape), index)
        ins, bufs = cm.create_input_buffers(index), cm.create_output_buffers(index)
        for name, b in zip(names, ins):
            b.write(np.ascontiguousarray(inputs[name], dtype=details[name]["dtype"]))
        cm.run_by_index(index, ins, bufs)
        od = cm.get_output_tensor_details(key)
        got = {}
        for name, b in zip(outs, bufs):
            shape = tuple(int(n) for n in od[name]["shape"])
            got[name] = np.asarray(b.read(int(np.prod(shape)), od[name]["dtype"])).reshape(shape)
    except Exception as e:
        return {"error": f"CompiledModel cannot run signature '{key}': " + " ".join(str(e).split())}
    np.savez(req["out"], **got)
    return {"ok": True}

for line in sys.stdin:
    answer.write(json.dumps(run(json.loads(line))) + "\n")
    answer.flush()
"""


class _Worker:
    """The CompiledModel worker process of this process (started on first use, again after a crash)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.tmp: str | None = None

    def _start(self) -> None:
        self.tmp = self.tmp or tempfile.mkdtemp(prefix="fuselite-compiled-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        # -I: no code from the working directory; LiteRT's log lines go to a file, not the user's terminal
        self.log = open(os.path.join(self.tmp, "litert.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", _WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=self.tmp, env=env)

    def call(self, request: dict, timeout: float) -> dict:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            request = {**request, "out": os.path.join(self.tmp, "out.npz")}
            paths = {}
            for key in ("model", "inputs"):
                if request.get(key) is not None:
                    paths[key] = os.path.join(self.tmp, f"{key}.bin")
                    with open(paths[key], "wb") as f:
                        f.write(request[key])
                    request[key] = paths[key]
            result: list = []
            reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
                reader.start()
                reader.join(timeout)
            except (BrokenPipeError, OSError):
                pass
            line = result[0] if result else ""
            if not line:
                code = self.proc.poll()
                self._stop()
                why = f"did not answer in {timeout:.0f} s" if code is None else f"ended with {exit_description(code)}"
                return {"error": f"LiteRT's CompiledModel {why} on this model (run in a worker process)"}
            answer = json.loads(line)
            if answer.get("ok") and request.get("inputs") is not None:
                with np.load(request["out"], allow_pickle=False) as z:
                    answer["outputs"] = {k: z[k] for k in z.files}
            return answer

    def _stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self._stop()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


_worker = _Worker()
atexit.register(_worker.close)


def load_compiled(model: bytes, num_threads: int = 1) -> None:
    """Load ``model`` in ``CompiledModel`` on the CPU (in the worker process): a :class:`CompiledModelError`
    with the loader's reason where it does not (read from the file where LiteRT's own message is only "Failed to
    load model")."""
    problems = loader_problems(model)
    if problems:
        raise CompiledModelError(f"CompiledModel cannot load the model: {VARIABLE_TENSORS}: " + "; ".join(problems))
    answer = _worker.call({"model": bytes(model), "inputs": None, "threads": num_threads}, TIMEOUT_S)
    if "error" in answer:
        raise CompiledModelError(answer["error"])


def run_compiled(model: bytes, inputs: dict, signature_key: str | None = None, num_threads: int = 1,
                 timeout: float = TIMEOUT_S) -> dict[str, np.ndarray]:
    """Run one signature of ``model`` in ``CompiledModel`` on the CPU (in the worker process): ``{output name:
    array}`` for ``inputs`` by name (every input of the signature). Input shapes other than the file's are
    resized to (a dynamic dimension). Raises :class:`CompiledModelError` with LiteRT's reason."""
    problems = loader_problems(model)
    if problems:
        raise CompiledModelError(f"CompiledModel cannot load the model: {VARIABLE_TENSORS}: " + "; ".join(problems))
    import io

    feed = io.BytesIO()
    np.savez(feed, **{k: np.asarray(v) for k, v in inputs.items()})
    answer = _worker.call({"model": bytes(model), "inputs": feed.getvalue(), "signature": signature_key,
                           "threads": num_threads}, timeout)
    if "error" in answer:
        raise CompiledModelError(answer["error"])
    return answer["outputs"]
