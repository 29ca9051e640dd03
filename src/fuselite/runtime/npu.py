"""A model compiled for an NPU by LiteRT's vendor compiler plugins (in the ``ai-edge-litert`` wheel), in a child
process: the plugins are native code that can take a process down, and they report what they did on the
native stderr only.

* Intel OpenVINO compiles on the device: ``CompiledModel`` with ``HardwareAccelerator.NPU`` and the plugin's
  folders in its ``Environment``, ``IntelOpenVinoOptions(graph_backend=CPU)`` here (OpenVINO's CPU device stands
  in for the NPU: the same partitioning, conversion and dispatch). It needs ``openvino`` from PyPI, the release
  the plugin links (``libopenvino.so.2631``: 2026.3), its ``libs`` folder on the child's ``LD_LIBRARY_PATH``.
* Qualcomm, MediaTek, Google Tensor and Samsung compile ahead of time: ``ai_edge_litert.aot.aot_compile`` with
  the vendor's target; their plugins need the vendor's SDK (``ai-edge-litert-sdk-<vendor>``, which downloads it
  from the vendor at install), and without it :func:`compile_for_npu` says which library is missing and what to
  install, in one line.

The result (:func:`compile_for_npu`): partitions, ops the plugin took and the total, each op it left to the CPU
with the plugin's words, and (Intel) the outputs of a run on the compiled model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import tempfile

from fuselite.runtime.accelerators import RUN_SAMPLES, read_sample_outputs, write_samples
from fuselite.runtime.child import isolated_env, run_isolated
from fuselite.runtime.compiled import exit_description, op_names

TIMEOUT_S = 600
OPENVINO = "fuselite[npu]"
# vendor -> (its aot target module, default SoC, what installs its SDK)
VENDORS = {
    "intel_openvino": ("intel_openvino", "LNL", f"pip install '{OPENVINO}' (Intel's plugin links libopenvino.so.2631)"),
    "qualcomm": ("qualcomm", "SM8650", "pip install ai-edge-litert-sdk-qualcomm (it downloads Qualcomm's QNN SDK at "
                 "install), with the SDK's libraries on LD_LIBRARY_PATH"),
    "mediatek": ("mediatek", "MT6989", "pip install ai-edge-litert-sdk-mediatek (it downloads MediaTek's NeuroPilot "
                 "SDK at install), with its libraries on LD_LIBRARY_PATH"),
    "google_tensor": ("google_tensor", "TENSOR_G4", "pip install ai-edge-litert-sdk-google-tensor (Google's Tensor "
                      "compiler)"),
    "samsung": ("samsung", "E9955", "pip install ai-edge-litert-sdk-samsung (Samsung's Exynos AI Studio SDK)"),
}
DEFAULT_NPU = "intel_openvino"


class NpuUnavailable(RuntimeError):
    """The vendor's compiler plugin cannot run here (its SDK or runtime is missing): the message names it and
    what to install."""


def parse_npu_config(config: str | None) -> tuple[str, str]:
    """("vendor", "SoC") from an ``accelerator_config`` of target="npu": "qualcomm", "qualcomm:SM8750"; the
    vendor's default SoC where none is given. A ValueError names the vendors otherwise."""
    vendor, _, soc = (config or DEFAULT_NPU).partition(":")
    if vendor not in VENDORS:
        raise ValueError(f"target='npu': accelerator_config is a vendor of LiteRT's NPU compiler plugins, "
                         f"optionally with its SoC ('qualcomm:SM8650'): one of {', '.join(VENDORS)}; got {config!r}")
    return vendor, soc or VENDORS[vendor][1]


def openvino_libs() -> str | None:
    """The ``libs`` folder of the installed ``openvino`` package, None where it is not installed."""
    spec = importlib.util.find_spec("openvino")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = os.path.join(list(spec.submodule_search_locations)[0], "libs")
    return libs if os.path.isdir(libs) else None


_JIT_CHILD = RUN_SAMPLES + r"""
import json, os, sys
import numpy as np
import ai_edge_litert
from ai_edge_litert.compiled_model import CompiledModel, Environment, EnvironmentOptions, HardwareAccelerator
from ai_edge_litert.options import IntelOpenVinoGraphBackend, IntelOpenVinoOptions, Options

path, feed, out = sys.argv[1], sys.argv[2], sys.argv[3]
root = os.path.dirname(ai_edge_litert.__file__)
vendor = os.path.join(root, "vendors", "intel_openvino")
env = Environment.create(options=EnvironmentOptions(runtime_path=root,
                                                    compiler_plugin_path=os.path.join(vendor, "compiler"),
                                                    dispatch_library_path=os.path.join(vendor, "dispatch")))
opts = Options(hardware_accelerators=HardwareAccelerator.NPU | HardwareAccelerator.CPU,
               intel_openvino_options=IntelOpenVinoOptions(graph_backend=IntelOpenVinoGraphBackend.CPU))
result = {}
def say(**kw):
    result.update(kw)
    with open(out + ".json", "w") as f:
        json.dump(result, f)
say(stage="compiling")
try:
    cm = CompiledModel.from_file(path, environment=env, options=opts)
except Exception as e:
    say(stage="done", error=" ".join(str(e).split()))
    sys.exit(0)
say(stage="running")
run_samples(cm, read_samples(feed), out + ".npz")
say(stage="done", ran=True)
"""

_AOT_CHILD = r"""
import importlib, json, sys
from ai_edge_litert.aot import aot_compile as ac
path, out, module, soc = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
target = importlib.import_module(f"ai_edge_litert.aot.vendors.{module}.target")
soc_model = next((m for m in target.SocModel if m.name.upper() == soc.upper() or str(m.value).upper() == soc.upper()),
                 None)
if soc_model is None:
    json.dump({"error": f"unknown SoC {soc!r}; the plugin knows " + ", ".join(m.name for m in target.SocModel)},
              open(out + ".json", "w"))
    sys.exit(0)
try:
    r = ac.aot_compile(path, output_dir=out + "_compiled", target=target.Target(soc_model), keep_going=True)
    json.dump({"report": r.compilation_report(), "models": len(r.models)}, open(out + ".json", "w"))
except Exception as e:
    json.dump({"error": " ".join(str(e).split())}, open(out + ".json", "w"))
"""

_PARTITIONED = re.compile(r"Partitioned subgraph<(\d+)>, selected (\d+) ops, from a total of (\d+) ops\. resulted in "
                          r"(\d+) partitions")
_UNSUPPORTED_CODE = re.compile(r"op type (\d+) is not supported")
_MISSING_LIBRARY = re.compile(r"(?:Could not load shared library [^:]+: )?(lib[\w.+-]+\.so[\w.]*): cannot open shared "
                              r"object file")


def parse_partitions(log: str) -> dict:
    """What a compiler plugin said of its partitioning: {"partitions", "npu_ops", "ops", "cpu_ops": [{"op",
    "reason", "count"}]} summed over the subgraphs."""
    parts = _PARTITIONED.findall(log)
    names = op_names()
    counts: dict[str, int] = {}
    for code in _UNSUPPORTED_CODE.findall(log):
        name = names.get(int(code), f"op type {code}")
        counts[name] = counts.get(name, 0) + 1
    return {"partitions": sum(int(p[3]) for p in parts), "npu_ops": sum(int(p[1]) for p in parts),
            "ops": sum(int(p[2]) for p in parts),
            "cpu_ops": [{"op": op, "reason": "not supported by the vendor's compiler plugin", "count": n}
                        for op, n in counts.items()]}


def compile_for_npu(model: bytes, config: str | None, samples: list[dict] | None = None,
                    timeout: float = TIMEOUT_S) -> dict:
    """Compile ``model`` with the vendor's plugin (``config``: :func:`parse_npu_config`) in a child process:
    {"vendor", "soc", "compiled", "partitions", "npu_ops", "ops", "cpu_ops", "error", "samples": outputs of each
    sample run on the compiled model (Intel)}. Raises :class:`NpuUnavailable` where the plugin's SDK or runtime
    is missing."""
    vendor, soc = parse_npu_config(config)
    module, _, install = VENDORS[vendor]
    with tempfile.TemporaryDirectory(prefix="fuselite-npu-") as tmp:
        path, feed, out = (os.path.join(tmp, n) for n in ("model.tflite", "inputs.npz", "result"))
        with open(path, "wb") as f:
            f.write(model)
        env = isolated_env(TMPDIR=tmp)  # aot_compile's error logs and temporary models: removed with tmp
        if vendor == "intel_openvino":
            libs = openvino_libs()
            if libs is None:
                raise NpuUnavailable(f"Intel's OpenVINO compiler plugin needs OpenVINO: {install}")
            env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libs, env.get("LD_LIBRARY_PATH")) if p)
            write_samples(feed, samples or [])
            argv = ["-c", _JIT_CHILD, path, feed, out]
        else:
            argv = ["-c", _AOT_CHILD, path, out, module, soc]
        try:  # the plugins write into the working directory (MediaTek's DLA dumps): the child's is tmp
            proc = run_isolated(argv, cwd=tmp, env=env, capture_output=True, text=True, errors="replace",
                                timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"vendor": vendor, "soc": soc, "compiled": False, "error": f"did not finish in {timeout:.0f} s"}
        state = json.load(open(out + ".json")) if os.path.exists(out + ".json") else {}
        log = proc.stderr + "".join(open(os.path.join(tmp, n), errors="replace").read()
                                    for n in os.listdir(tmp) if n.endswith(".error"))
        runs = read_sample_outputs(out + ".npz")
    missing = _MISSING_LIBRARY.search(log) or re.search(r"Failed to load (\w+) shared library", log)
    if missing and not re.search(r"[1-9]\d* compiler plugins were applied successfully", log):
        library = missing.group(1) if missing.lastindex else missing.group(0)
        if vendor == "intel_openvino" and not library.startswith("libopenvino.so") \
                and "frontend" not in library:  # the plugin loaded: a partition reached for Intel's NPU driver
            raise NpuUnavailable(f"Intel's OpenVINO plugin reached for {library} (Intel's NPU compiler, from its NPU "
                                 f"driver, not on PyPI) to compile a partition: "
                                 f"{parse_partitions(log)['partitions']} partition(s)")
        raise NpuUnavailable(f"{vendor}'s compiler plugin cannot run here ({missing.group(0).strip()}): {install}")
    result = {"vendor": vendor, "soc": soc, **parse_partitions(log)}
    applied = re.search(r"(\d+) compiler plugins were applied successfully", log)
    if vendor == "intel_openvino":
        result["compiled"] = bool(applied and int(applied.group(1)) > 0)
    else:
        result["compiled"] = bool(state.get("models")) and "COMPILATION FAILURES" not in state.get("report", "")
    failure = re.search(r"Exception in compilation: ([^\n]+(?:\n[^\n]+){0,3})", log)
    if proc.returncode != 0:
        result["error"] = (f"the compiler plugin's process ended with {exit_description(proc.returncode)} "
                           f"({state.get('stage')})")
    elif state.get("error"):
        result["error"] = state["error"]
    elif not result["compiled"]:
        result["error"] = " ".join(failure.group(1).split()) if failure else "the plugin compiled nothing"
    result["samples"] = runs
    return result
