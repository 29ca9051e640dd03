"""A model on LiteRT's GPU accelerator (``CompiledModel`` with ``HardwareAccelerator.GPU``), in a child process.

The wheel's GPU accelerator (``libLiteRtWebGpuAccelerator.so``: WebGPU over Vulkan) runs on a phone's GPU and,
without one, on Mesa's software Vulkan driver (lavapipe, ``scripts/install-vulkan.sh``). It runs in a child
process: a graphics driver can take a process down, and the accelerator says which ops it leaves to the CPU,
and why, on the native stderr only ("Following operations are not supported by GPU delegate:" then one
"OP: reason" line each, then "N operations will run on the GPU, and the remaining M operations will run on the
CPU."), which :func:`run_on_gpu` reads back.

The child loads the model on the GPU alone first: that either places every op there or fails, after the
accelerator has listed what it refused. Where it failed, it loads GPU + CPU (the ops the GPU refuses on the CPU,
as an app would run it) to compare the numbers all the same.

Example::

    result = run_on_gpu(model, {"x": x})
    result.fully_on_gpu, result.cpu_ops, result.outputs     # (op, LiteRT's reason) pairs; {name: array}
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from fuselite.runtime.child import isolated_env, run_isolated
from fuselite.runtime.compiled import exit_description

TIMEOUT_S = 600
INSTALL_VULKAN = ("LiteRT's GPU accelerator needs a Vulkan driver: on Debian 12, as root, `apt-get install -t "
                  "bookworm-backports mesa-vulkan-drivers libvulkan1` (scripts/install-vulkan.sh; a phone's GPU "
                  "driver on a device)")
_ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")

# What the accelerators' child processes share: the samples read ("<sample>/<input name>" in an .npz), each run
# on a CompiledModel and the outputs saved the same way (runtime/npu.py's child uses it too).
RUN_SAMPLES = r"""
import numpy as np

def read_samples(feed):
    with np.load(feed, allow_pickle=False) as z:
        samples = {}
        for key in z.files:
            k, name = key.split("/", 1)
            samples.setdefault(int(k), {})[name] = z[key]
    return [samples[k] for k in sorted(samples)]

def run_samples(cm, samples, out):
    sigs = cm.get_signature_list()
    key = next(iter(sigs))
    index = cm.get_signature_index(key)
    details, names = cm.get_input_tensor_details(key), sigs[key]["inputs"]
    got = {}
    for s, inputs in enumerate(samples):
        for k, name in enumerate(names):
            if tuple(details[name]["shape"]) != inputs[name].shape:
                cm.resize_input_tensor(k, list(inputs[name].shape), index)
        ins, outs = cm.create_input_buffers(index), cm.create_output_buffers(index)
        for name, b in zip(names, ins):
            b.write(np.ascontiguousarray(inputs[name], dtype=details[name]["dtype"]))
        cm.run_by_index(index, ins, outs)
        od = cm.get_output_tensor_details(key)
        for name, b in zip(sigs[key]["outputs"], outs):
            shape = tuple(int(n) for n in od[name]["shape"])
            got[f"{s}/{name}"] = np.asarray(b.read(int(np.prod(shape)), od[name]["dtype"])).reshape(shape)
    np.savez(out, **got)
"""

_CHILD = RUN_SAMPLES + r"""
import json, os, sys
from ai_edge_litert.compiled_model import CompiledModel, HardwareAccelerator
from ai_edge_litert.options import GpuOptions, Options

path, feed, out, precision = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
samples = read_samples(feed)

def options(accel):
    return Options(hardware_accelerators=accel, gpu_options=GpuOptions(enforce_f32=precision == "fp32"))

result = {}

def say(**kw):
    result.update(kw)
    with open(out + ".json", "w") as f:
        json.dump(result, f)

def log(text):
    sys.stderr.write("\n@@fuselite " + text + "\n")
    sys.stderr.flush()

log("gpu")
say(stage="loading on the GPU")
try:
    cm = CompiledModel.from_file(path, options=options(HardwareAccelerator.GPU))
    say(gpu_only=True, fully=bool(cm.is_fully_accelerated()))
except Exception as e:
    say(gpu_only=False, gpu_error=" ".join(str(e).split()))
    log("gpu+cpu")
    say(stage="loading on the GPU and the CPU")
    try:
        cm = CompiledModel.from_file(path, options=options(HardwareAccelerator.GPU | HardwareAccelerator.CPU))
        say(fully=bool(cm.is_fully_accelerated()))
    except Exception as e:
        say(stage="done", load_error=" ".join(str(e).split()))
        sys.exit(0)
say(stage="running")
try:
    run_samples(cm, samples, out + ".npz")
    say(stage="done", ran=True)
except Exception as e:
    say(stage="done", run_error=" ".join(str(e).split()))
"""

_UNSUPPORTED_HEADER = "Following operations are not supported by GPU delegate:"
_SPLIT = re.compile(r"(\d+) operations will run on the GPU, and the remaining (\d+) operations will run on the CPU")
_OP_LINE = re.compile(r"^([A-Z][A-Z0-9_]*): (.+)$")


class GpuUnavailable(RuntimeError):
    """LiteRT's GPU accelerator cannot run here (no Vulkan driver, or one it refuses): the message says what to
    install."""


@dataclasses.dataclass
class GpuResult:
    """What LiteRT's GPU accelerator did with a model: whether every op ran there (``fully_on_gpu``), each op it
    left to the CPU with its reason (``cpu_ops``: (op, reason), as LiteRT words it), how many ops ran where
    (``gpu_op_count`` / ``cpu_op_count``, None where it did not say), the outputs of each sample's run
    (``samples``: GPU + CPU where the GPU alone could not load it; [] where it did not run) and any error."""

    fully_on_gpu: bool
    cpu_ops: list[tuple[str, str]]
    gpu_op_count: int | None
    cpu_op_count: int | None
    samples: list[dict[str, np.ndarray]]
    error: str | None = None

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """The first sample's outputs ({} where it did not run)."""
        return self.samples[0] if self.samples else {}

    def to_json(self) -> dict:
        return {"fully_on_gpu": self.fully_on_gpu, "cpu_ops": [list(p) for p in self.cpu_ops],
                "gpu_op_count": self.gpu_op_count, "cpu_op_count": self.cpu_op_count, "error": self.error}


def write_samples(path: str, samples: list[dict]) -> None:
    """The samples as the children read them (``RUN_SAMPLES``): "<sample>/<input name>" in an .npz."""
    np.savez(path, **{f"{s}/{k}": np.asarray(v) for s, sample in enumerate(samples) for k, v in sample.items()})


def read_sample_outputs(path: str) -> list[dict[str, np.ndarray]]:
    """Each sample's outputs as a child saved them ([] where it saved none)."""
    runs: dict[int, dict] = {}
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as z:
            for key in z.files:
                k, name = key.split("/", 1)
                runs.setdefault(int(k), {})[name] = z[key]
    return [runs[k] for k in sorted(runs)]


def vulkan_problem() -> str | None:
    """Why LiteRT's GPU accelerator cannot run here (no Vulkan loader or driver), None where it can try."""
    if sys.platform != "linux":
        return f"the GPU check runs on Linux with a Vulkan driver; this is {sys.platform}"
    if ctypes.util.find_library("vulkan") is None:
        return f"no Vulkan loader (libvulkan.so.1) here; {INSTALL_VULKAN}"
    if not any(glob.glob(os.path.join(d, "*.json")) for d in _ICD_DIRS):
        return f"no Vulkan driver (an ICD file in {_ICD_DIRS[0]}) here; {INSTALL_VULKAN}"
    return None


def parse_placement(stderr: str) -> tuple[list[tuple[str, str]], int | None, int | None]:
    """The ops LiteRT's GPU delegate left to the CPU, with its reasons (each (op, reason) once), and its GPU / CPU
    op counts summed over the subgraphs (it reports each subgraph it is given: a WHILE's body too), from what it
    printed while loading on the GPU alone."""
    text = stderr.split("@@fuselite gpu+cpu")[0]
    ops: list[tuple[str, str]] = []
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if _UNSUPPORTED_HEADER in line:
            for follow in lines[k + 1:]:
                m = _OP_LINE.match(follow.strip())
                if not m:
                    break
                if (m.group(1), m.group(2).strip()) not in ops:
                    ops.append((m.group(1), m.group(2).strip()))
    split = _SPLIT.findall(text)
    if not split:
        return ops, None, None
    return ops, sum(int(g) for g, _ in split), sum(int(c) for _, c in split)


def run_on_gpu(model: bytes, inputs: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
               timeout: float = TIMEOUT_S, precision: str = "fp16") -> GpuResult:
    """Load ``model`` on LiteRT's GPU accelerator in a child process and run its first signature on ``inputs``
    (by name; a list: one run per sample, in order, as a stateful app would). Raises :class:`GpuUnavailable` where there is no Vulkan driver (or one the accelerator refuses);
    a crash, a time-out or a refusal is the result's ``error``."""
    problem = vulkan_problem()
    if problem:
        raise GpuUnavailable(problem)
    with tempfile.TemporaryDirectory(prefix="fuselite-gpu-") as tmp:
        path, feed, out = (os.path.join(tmp, n) for n in ("model.tflite", "inputs.npz", "result"))
        with open(path, "wb") as f:
            f.write(model)
        samples = [inputs] if isinstance(inputs, dict) else list(inputs)
        write_samples(feed, samples)
        env = isolated_env()
        runtime_dir = os.path.join(tmp, "xdg")
        os.mkdir(runtime_dir, 0o700)
        env.setdefault("XDG_RUNTIME_DIR", runtime_dir)
        try:  # -I: the child reads no code from the working directory or PYTHON* variables
            proc = run_isolated(["-c", _CHILD, path, feed, out, precision], cwd=tmp, env=env, capture_output=True,
                                text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            return GpuResult(False, [], None, None, [], f"LiteRT's GPU accelerator did not finish in {timeout:.0f} s")
        state = json.load(open(out + ".json")) if os.path.exists(out + ".json") else {}
        cpu_ops, gpu_count, cpu_count = parse_placement(proc.stderr)
        runs = read_sample_outputs(out + ".npz")
    refused = _refused_driver(proc.stderr)
    if refused:
        raise GpuUnavailable(refused)
    error = None
    if proc.returncode != 0:
        error = (f"the GPU accelerator's process ended with {exit_description(proc.returncode)} while "
                 f"{state.get('stage', 'starting')}")
    elif state.get("load_error") or state.get("run_error"):
        error = state.get("load_error") or state.get("run_error")
    fully = bool(state.get("gpu_only") and state.get("fully") and not cpu_ops)
    if not fully and not cpu_ops and state.get("gpu_error") and error is None:
        error = state["gpu_error"]
    return GpuResult(fully, cpu_ops, gpu_count, cpu_count, runs, error)


def _refused_driver(stderr: str) -> str | None:
    """A Vulkan driver the GPU accelerator cannot use (Debian 12's own Mesa 22), from what it printed."""
    m = re.search(r"Vulkan [^\n]*required", stderr)
    if m:
        return f"the Vulkan driver here is refused by LiteRT's GPU accelerator ({m.group(0).strip()}); {INSTALL_VULKAN}"
    if "No adapter" in stderr or "Failed to create WebGPU" in stderr:
        return f"LiteRT's GPU accelerator found no usable GPU adapter; {INSTALL_VULKAN}"
    return None
