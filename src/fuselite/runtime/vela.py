"""Compile a model with Arm's Vela (``ethos-u-vela``) for an Ethos-U NPU and read what it did.

Vela takes an int8 or 16x8 ``.tflite``, replaces the ops the NPU supports with ``ethos-u`` custom ops
(one per NPU region) and leaves the rest for the Cortex-M's TFLite Micro. It runs without the hardware.
Its compiler core is native code that may abort the process, and it prints why it leaves an op on the
CPU with C++'s ``std::cout`` (Python cannot capture that in-process), so it runs in a subprocess:
``python -m ethosu.vela``. What is read back:

- each op Vela left on the CPU, with its reason: the ``Warning (supported operators) operator: OP, ofm:
  'NAME'`` / ``Reason: ...`` lines, checked against the ops left in the compiled file;
- the split over the model's own ops (the compiled file's non-``ethos-u`` ops are the CPU's), and the
  counts Vela prints (over its own lowered operations: an LSTM is hundreds);
- its estimates from the summary CSV: cycles, inference time at the configuration's clock, SRAM and
  DRAM used.

Example::

    result = compile_with_vela(model_bytes, "ethos-u55-128")
    result["npu_ops"], result["cpu_ops"]   # 7, [{"op": "GATHER", "tensor": "...", "reason": "..."}]
"""

from __future__ import annotations

import csv
import glob
import importlib.util
import os
import re
import subprocess
import tempfile

from fuselite.paths import write_atomic
from fuselite.runtime.child import run_isolated

# Vela's --accelerator-config choices (ethosu/vela/architecture_features.py, Vela 5.2)
ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512",
                "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")
DEFAULT_ACCELERATOR = "ethos-u55-128"
TIMEOUT_S = 600
NPU_OP = "CUSTOM(ethos-u)"  # what an NPU region is in the compiled model (as op_kinds names it)
INSTALL = "pip install 'fuselite[ethos-u]' (Arm's Vela compiler, ethos-u-vela)"

_CPU_OP = re.compile(r"Warning \(supported operators\) operator: (\w+), ofm: '([^']*)'\s*\nReason: ([^\n]*)")
_COUNT = re.compile(r"(CPU|NPU) operators = (\d+)")
_SETTING = re.compile(r"^(Accelerator configuration|System configuration|Memory mode)\s+(\S.*?)\s*$", re.M)


class VelaUnavailable(RuntimeError):
    """The ``ethos-u-vela`` package is not installed."""


def vela_available() -> bool:
    return importlib.util.find_spec("ethosu") is not None and importlib.util.find_spec("ethosu.vela") is not None


def compile_with_vela(model: bytes, accelerator: str = DEFAULT_ACCELERATOR, keep: str | None = None,
                      name: str = "model") -> dict:
    """Run Vela on ``model`` for ``accelerator`` (one of :data:`ACCELERATORS`); ``keep``: a directory to copy
    the compiled model (``<name>_vela.tflite``) and Vela's summary CSV into. Returns
    ``{"accelerator", "system_config", "memory_mode", "ops", "npu_ops", "cpu_ops": [{"op", "tensor", "reason"}],
    "vela_operators": {"npu", "cpu"}, "cycles", "npu_cycles", "inference_ms", "sram_kib", "dram_kib",
    "compiled": [paths kept]}``, or ``{"error": what Vela said}``. Raises :class:`VelaUnavailable`."""
    if not vela_available():
        raise VelaUnavailable(f"Arm's Vela compiler is not installed: {INSTALL}")
    if accelerator not in ACCELERATORS:
        raise ValueError(f"unknown Ethos-U configuration {accelerator!r}")
    with tempfile.TemporaryDirectory(prefix="fuselite-vela-") as tmp:
        path = os.path.join(tmp, f"{name}.tflite")
        with open(path, "wb") as f:
            f.write(model)
        out_dir = os.path.join(tmp, "out")
        try:
            proc = run_isolated(["-m", "ethosu.vela", path, "--accelerator-config", accelerator, "--output-dir",
                                 out_dir], cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"Vela did not finish compiling the model in {TIMEOUT_S} s"}
        said = proc.stdout + proc.stderr
        compiled = os.path.join(out_dir, f"{name}_vela.tflite")
        if proc.returncode != 0 or not os.path.exists(compiled):
            return {"error": f"Vela could not compile the model for {accelerator} (exit code {proc.returncode}): "
                             + _last_lines(said)}
        with open(compiled, "rb") as f:
            left = op_kinds(f.read())
        source_ops = len(op_kinds(model))
        summary = _summary(out_dir)
        kept = []
        if keep is not None:
            os.makedirs(keep, exist_ok=True)
            for file in [compiled, *glob.glob(os.path.join(out_dir, "*.csv"))]:
                target = os.path.join(keep, os.path.basename(file))
                with open(file, "rb") as f:  # a new file by a rename: a symlink planted at the name is replaced,
                    write_atomic(target, f.read())  # not followed
                kept.append(target)
    cpu = [{"op": op, "tensor": tensor, "reason": reason.strip()} for op, tensor, reason in _CPU_OP.findall(said)]
    on_cpu = [k for k in left if k != NPU_OP]
    settings = dict(_SETTING.findall(said))
    counts = {kind.lower(): int(n) for kind, n in _COUNT.findall(said)}
    result = {"accelerator": accelerator, "system_config": settings.get("System configuration"),
              "memory_mode": settings.get("Memory mode"), "ops": source_ops,
              "npu_ops": source_ops - len(on_cpu), "cpu_ops": cpu, "vela_operators": counts,
              "npu_regions": left.count(NPU_OP), "compiled": kept, **summary}
    listed = sorted(c["op"] for c in cpu)
    if listed != sorted(on_cpu):  # an op on the CPU that Vela gave no warning for: named all the same
        missing = list(on_cpu)
        for op in listed:
            if op in missing:
                missing.remove(op)
        result["cpu_ops"] += [{"op": op, "tensor": None, "reason": "left on the CPU by Vela (no reason printed)"}
                              for op in missing]
    return result


def op_kinds(data: bytes) -> list[str]:
    """The op kinds of a model's subgraphs, one entry per op; a custom op as ``CUSTOM(code)``."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    kinds = []
    for code in model.operatorCodes:
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        custom = code.customCode.decode() if isinstance(code.customCode, bytes) else code.customCode
        kinds.append(f"CUSTOM({custom})" if builtin == schema.BuiltinOperator.CUSTOM else names[builtin])
    return [kinds[op.opcodeIndex] for sg in model.subgraphs for op in sg.operators]


def _summary(out_dir: str) -> dict:
    """Vela's estimates from its summary CSV (``model_summary_<system config>.csv``)."""
    files = glob.glob(os.path.join(out_dir, "*_summary_*.csv"))
    if not files:
        return {}
    with open(files[0], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}
    row = rows[0]

    def number(key, scale=1.0):
        try:
            return float(row[key]) * scale
        except (KeyError, ValueError):
            return None

    cycles, npu = number("cycles_total"), number("cycles_npu")
    return {"cycles": None if cycles is None else int(cycles), "npu_cycles": None if npu is None else int(npu),
            "inference_ms": number("inference_time", 1e3), "clock_mhz": number("core_clock", 1e-6),
            "sram_kib": number("sram_memory_used"), "dram_kib": number("dram_memory_used")}


def _last_lines(said: str, n: int = 4) -> str:
    lines = [ln.strip() for ln in said.splitlines() if ln.strip() and not ln.startswith("Warning: No ")]
    return "; ".join(lines[-n:]) or "(nothing printed)"
