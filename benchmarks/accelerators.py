"""LiteRT's accelerators, fuselite beside tf.lite.TFLiteConverter: does each file load in the CompiledModel API,
does it run fully on LiteRT's GPU accelerator (and which ops are left to the CPU, with LiteRT's reason), how far
the GPU's numbers are from Keras' (float) or the CPU file's (int8), and how Intel OpenVINO's NPU plugin
partitions it (OpenVINO's CPU device standing in for the NPU).

The models: ``fuselite.testing.models.ACCELERATOR_BUILDERS`` (eleven small models people put on phones) and five of
them in int8 (``INTEGER_ACCELERATOR_MODELS``), random weights, calibrated on 16 random samples. Each model is
converted four ways: fuselite's defaults, fuselite ``target="gpu"``, fuselite ``target="npu"`` and the official
converter with its defaults (in a child process: it can crash the process). Timings on software Vulkan say
nothing of a phone: placement and numbers only.

    .venv/bin/python benchmarks/accelerators.py --out docs/accelerators.md     # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/accelerators.py --models mlp,cnn --int8 mlp    # a few

Needs Mesa's Vulkan driver for the GPU columns (scripts/install-vulkan.sh) and openvino for the NPU ones.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

SAMPLES = 8  # inputs each comparison runs (the range of an output is taken over all of them)

_OFFICIAL = r"""
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, tensorflow as tf, keras
model = keras.models.load_model(sys.argv[1], compile=False)
conv = tf.lite.TFLiteConverter.from_keras_model(model)
if sys.argv[3] == "int8":
    with np.load(sys.argv[4]) as z:
        samples = [[z[k] for k in sorted(z.files) if k.startswith(f"{s}/")] for s in range(int(z["n"]))]
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: iter(samples)
open(sys.argv[2], "wb").write(conv.convert())
"""


def official(model, mode: str, calibration: list[list[np.ndarray]], work: str) -> tuple[bytes | None, str | None]:
    """The official converter's file (its defaults; int8: DEFAULT optimizations and the calibration samples), in a
    child process: (bytes or None, why not)."""
    src, out, feed = (os.path.join(work, n) for n in (f"{model.name}.keras", f"{model.name}-{mode}.tflite",
                                                      "calibration.npz"))
    model.save(src)
    np.savez(feed, n=len(calibration), **{f"{s}/{k}": x for s, xs in enumerate(calibration) for k, x in enumerate(xs)})
    r = subprocess.run([sys.executable, "-c", _OFFICIAL, src, out, mode, feed], capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0 or not os.path.exists(out):
        lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "")
        return None, (f"crashed (signal {-r.returncode})" if r.returncode < 0 else why[:200])
    return open(out, "rb").read(), None


def fuselite_file(model, mode: str, calibration, **options) -> tuple[bytes | None, str | None, object]:
    import tensorflow as tf

    import fuselite

    if mode == "int8":
        options.update(optimizations=[tf.lite.Optimize.DEFAULT], representative_dataset=lambda: iter(calibration))
    conv = fuselite.Converter.from_keras_model(model, **options)
    try:
        return conv.convert(), None, conv.report
    except Exception as e:  # the GPU / NPU target's own check refused it: the reason is the row's
        return None, " ".join(str(e).split())[:300], conv.report


def feeds(data: bytes, inputs: list[list[np.ndarray]]) -> list[dict]:
    """Each sample as the file's first signature takes it (state inputs of a target="gpu" file: zeros)."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    key = next(iter(interp.get_signature_list()))
    details = interp.get_signature_runner(key).get_input_details()
    names = sorted(details, key=lambda k: details[k]["index"])
    out = []
    for xs in inputs:
        feed, given = {}, list(xs)
        for name in names:
            d = details[name]
            match = next((x for x in given if tuple(x.shape) == tuple(d["shape"]) and x.dtype == d["dtype"]), None)
            if match is not None:
                given.remove(match)
                feed[name] = match
            else:
                feed[name] = np.zeros(d["shape"], d["dtype"])
        out.append(feed)
    return out


def relative(got: list[dict], want: list[np.ndarray]) -> float:
    """The largest |got - want| of the output shaped as Keras', over all samples, as a fraction of want's range."""
    a = np.concatenate([np.ravel(next(v for v in g.values() if v.shape == w.shape)).astype(np.float64)
                        for g, w in zip(got, want)])
    b = np.concatenate([np.ravel(w).astype(np.float64) for w in want])
    return float(np.abs(a - b).max() / (np.ptp(b) or 1.0))


def placement(data: bytes | None, samples: list[dict]) -> dict:
    """The file on CompiledModel (CPU) and LiteRT's GPU accelerator."""
    from fuselite.runtime import run
    from fuselite.runtime.accelerators import GpuUnavailable, run_on_gpu
    from fuselite.runtime.compiled import CompiledModelError, run_compiled
    from fuselite.runtime.samples import relative_error

    if data is None:
        return {}
    row: dict = {}
    try:
        got = run_compiled(data, samples[0])
        want = run(data, samples[0])
        row["compiled"] = True
        row["compiled_error"] = max(relative_error([got], [want]).values(), default=0.0)
    except CompiledModelError as e:
        row["compiled"], row["compiled_why"] = False, str(e)[:200]
    from fuselite.runtime.gpu_rules import gpu_problems

    row["gpu_predicted"] = not gpu_problems(data)
    try:
        g = run_on_gpu(data, samples)
        row.update(gpu_full=g.fully_on_gpu, gpu_cpu_ops=g.cpu_ops, gpu_error=g.error, gpu_samples=g.samples)
    except GpuUnavailable as e:
        row.update(gpu_full=None, gpu_error=str(e))
    return row


def fp32_run(data: bytes, samples: list[dict]) -> list[dict]:
    """The GPU's outputs at fp32 (GpuOptions(enforce_f32=True)); [] where it did not run."""
    from fuselite.runtime.accelerators import GpuUnavailable, run_on_gpu

    try:
        g = run_on_gpu(data, samples, precision="fp32")
    except GpuUnavailable:
        return []
    return g.samples if not g.error else []


def npu_partitions(data: bytes | None, samples: list[dict]) -> dict:
    from fuselite.runtime.npu import NpuUnavailable, compile_for_npu

    if data is None:
        return {}
    try:
        r = compile_for_npu(data, "intel_openvino", samples)
    except NpuUnavailable as e:
        return {"error": str(e)}
    r.pop("samples", None)
    return r


def measure(name: str, mode: str, work: str) -> dict:
    import keras

    from fuselite.runtime import run
    from fuselite.testing import models as zoo

    model = zoo.build(name, keras)
    calibration = [zoo.sample_inputs(model, seed=s) for s in range(16)]
    inputs = [zoo.sample_inputs(model, seed=100 + s) for s in range(SAMPLES)]
    stateful = any(getattr(layer, "stateful", False) for layer in model.layers)
    keras_out = []
    for xs in inputs:
        for layer in model.layers:
            if getattr(layer, "stateful", False):
                layer.reset_state()
        keras_out.append(np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False)))
    row = {"model": name, "mode": mode}
    t0 = time.perf_counter()
    for key, options in (("fuselite", {}), ("gpu", {"target": "gpu"}), ("npu", {"target": "npu"})):
        data, why, report = fuselite_file(model, mode, calibration, **options)
        row[key] = {"converts": data is not None, "why": why, "report": report}
        if data is None:
            continue
        samples = feeds(data, inputs)
        if key == "fuselite":
            row[key].update(placement(data, samples))
        elif key == "gpu":
            row[key].update(placement(data, samples))
            if row[key].get("gpu_samples"):
                cpu = [run(data, s) for s in samples]
                row[key]["against_keras"] = relative(cpu, keras_out)
                gpu = row[key]["gpu_samples"]
                row[key]["gpu_against_keras"] = relative(gpu, keras_out)
                cpu_out = [next(v for v in c.values() if v.shape == k.shape) for c, k in zip(cpu, keras_out)]
                row[key]["gpu_against_cpu"] = relative(gpu, cpu_out)
                builtin = [next(v for v in run(data, s, builtin_kernels=True).values() if v.shape == k.shape)
                           for s, k in zip(samples, keras_out)]
                row[key]["kernel_spread"] = relative(cpu, builtin)  # the CPU's own: XNNPACK vs builtin kernels
                at_fp32 = fp32_run(data, samples)  # GpuOptions(enforce_f32=True): accelerator_config="fp32"
                if at_fp32:
                    row[key]["fp32_against_keras"] = relative(at_fp32, keras_out)
                    row[key]["fp32_against_cpu"] = relative(at_fp32, cpu_out)
                    row[key]["fp32_against_builtin"] = relative(at_fp32, builtin)
        else:  # the target's own compilation (report.npu)
            row[key].update({k: v for k, v in report.npu.items() if k != "error_against_cpu"})
    data, why = official(model, mode, calibration, work)
    row["official"] = {"converts": data is not None, "why": why}
    if data is not None:
        samples = feeds(data, inputs)
        row["official"].update(placement(data, samples))
        row["official"]["npu"] = npu_partitions(data, samples)
    row["stateful"], row["seconds"] = stateful, time.perf_counter() - t0
    return row


def _ops(pairs) -> str:
    seen: dict[str, str] = {}
    for op, why in pairs or []:
        seen.setdefault(op, why)
    return "; ".join(f"{op} ({why.split(' keyword')[0].split(' ' + 'lstm')[0][:60]})" for op, why in seen.items())


def _yes(flag) -> str:
    return "—" if flag is None else ("yes" if flag else "**no**")


def render(rows: list[dict], command: str) -> str:
    lines = ["## Measured: fuselite beside tf.lite.TFLiteConverter", "",
             f"Made by `{command}` (`benchmarks/accelerators.py`), ai-edge-litert 2.3.0, TensorFlow 2.21, Keras 3, "
             "on the 2-core development machine: LiteRT's GPU accelerator over Mesa's software Vulkan (lavapipe, "
             "mesa 25.0 from bookworm-backports), Intel's OpenVINO NPU plugin on OpenVINO's CPU device "
             f"(openvino 2026.3.1). Random weights; {SAMPLES} random inputs per comparison, errors as a fraction of "
             "the output's range over them. Placement and numbers only: timings on software Vulkan mean nothing "
             "for a phone.", ""]
    def count(key, test):
        return sum(1 for r in rows if test(r.get(key, {})))
    n = len(rows)
    lines += ["### Summary", "",
              "| | loads and runs in CompiledModel (CPU) | fully on LiteRT's GPU accelerator |", "|---|---|---|",
              f"| fuselite defaults | {count('fuselite', lambda x: x.get('compiled'))} / {n} | "
              f"{count('fuselite', lambda x: x.get('gpu_full'))} / {n} |",
              f"| fuselite `target=\"gpu\"` | {count('gpu', lambda x: x.get('compiled'))} / {n} | "
              f"{count('gpu', lambda x: x.get('gpu_full'))} / {n} |",
              f"| official converter (defaults) | {count('official', lambda x: x.get('compiled'))} / {n} "
              f"({n - count('official', lambda x: x.get('converts'))} do not convert) | "
              f"{count('official', lambda x: x.get('gpu_full'))} / {n} |", "",
              "The report's static GPU check (`fuselite.runtime.gpu_rules`, read from the file) against the "
              "accelerator: it agreed on "
              f"{sum(1 for r in rows for k in ('fuselite', 'official') if 'gpu_full' in r[k] and r[k]['gpu_full'] is not None and r[k]['gpu_predicted'] == r[k]['gpu_full'])}"
              f" of {sum(1 for r in rows for k in ('fuselite', 'official') if r[k].get('gpu_full') is not None)} "
              "files (fuselite's defaults and the official converter's).", "",
              "### CompiledModel and the GPU, by model", "",
              "| model | fuselite: CompiledModel | fuselite: GPU (ops left to the CPU) | official: CompiledModel | "
              "official: GPU (ops left to the CPU) |", "|---|---|---|---|---|"]
    for r in rows:
        f, o = r["fuselite"], r["official"]
        fo = _yes(f.get("compiled")) if f.get("converts") else f"does not convert: {f.get('why')}"
        oo = _yes(o.get("compiled")) if o.get("converts") else f"does not convert: {o.get('why')}"
        lines.append(f"| {r['model']} ({r['mode']}) | {fo} | {_yes(f.get('gpu_full'))} {_ops(f.get('gpu_cpu_ops'))} "
                     f"| {oo} | {_yes(o.get('gpu_full')) if o.get('converts') else ''} {_ops(o.get('gpu_cpu_ops'))} |")
    lines += ["", "### fuselite `target=\"gpu\"`", "",
              "The file on the CPU against Keras, the GPU's outputs against Keras and against the CPU's (the same "
              "file, XNNPACK; and builtin kernels): a fraction of the output's range. The GPU at fp16 (its default) "
              "and at fp32 (`GpuOptions(enforce_f32=True)` in the app; `accelerator_config=\"fp32\"` makes the "
              "check run so). \"CPU XNNPACK vs builtin\" is the CPU's own spread: the same file on LiteRT's two "
              "kernel sets.", "",
              "| model | fully on the GPU | CPU vs Keras | CPU XNNPACK vs builtin | GPU fp16 vs Keras | GPU fp16 vs CPU "
              "| GPU fp32 vs Keras | GPU fp32 vs CPU (XNNPACK / builtin) | state as inputs / outputs |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["gpu"]
        if not g.get("converts"):
            lines.append(f"| {r['model']} ({r['mode']}) | does not convert: {g.get('why')} | | | | | | | |")
            continue
        state = ", ".join(s["name"] for s in g["report"].state_io) or ""
        lines.append(f"| {r['model']} ({r['mode']}) | {_yes(g.get('gpu_full'))} | {_pct(g.get('against_keras'))} | "
                     f"{_pct(g.get('kernel_spread'))} | {_pct(g.get('gpu_against_keras'))} | "
                     f"{_pct(g.get('gpu_against_cpu'))} | {_pct(g.get('fp32_against_keras'))} | "
                     f"{_pct(g.get('fp32_against_cpu'))} / {_pct(g.get('fp32_against_builtin'))} | {state} |")
    lines += ["", "### Intel OpenVINO's NPU plugin (OpenVINO's CPU device)", "",
              "| model | fuselite `target=\"npu\"`: partitions, ops offloaded, left to the CPU | official converter's "
              "file: the same |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} ({r['mode']}) | {_npu(r['npu'])} | {_npu(r['official'].get('npu', {}))} |")
    return "\n".join(lines) + "\n"


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.2g}%"


def _npu(n: dict) -> str:
    if not n:
        return "—"
    if n.get("converts") is False:
        return f"does not convert: {n.get('why')}"
    if n.get("error") and "partitions" not in n:
        return n["error"][:120]
    left = ", ".join(f"{c['op']} x{c['count']}" for c in n.get("cpu_ops", []))
    text = f"{n.get('partitions')} partition(s), {n.get('npu_ops')} of {n.get('ops')} ops"
    if left:
        text += f"; CPU: {left}"
    if n.get("error"):
        text += f"; not compiled: {n['error'][:80]}"
    return text


def main(argv=None) -> None:
    from fuselite.testing import models as zoo

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(zoo.ACCELERATOR_BUILDERS))
    p.add_argument("--int8", default=",".join(zoo.INTEGER_ACCELERATOR_MODELS))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    jobs = [(m, "float") for m in args.models.split(",") if m] + [(m, "int8") for m in args.int8.split(",") if m]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuselite-accelerators-") as work:
        for name, mode in jobs:
            row = measure(name, mode, work)
            rows.append(row)
            print(f"{name} ({mode}): {row['seconds']:.0f} s", file=sys.stderr, flush=True)
    command = "python benchmarks/accelerators.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    text = render(rows, command)
    if args.out:
        write_measured(args.out, text)
    print(text)


BEGIN, END = "<!-- measured: benchmarks/accelerators.py -->", "<!-- end measured -->"


def write_measured(path: str, text: str) -> None:
    """Put ``text`` between the page's BEGIN and END markers (the guide around it stays as written), or write
    the page with them."""
    page = open(path).read() if os.path.exists(path) else ""
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        page = head + BEGIN + "\n" + text + rest[rest.index(END):]
    else:
        page = f"{BEGIN}\n{text}{END}\n"
    with open(path, "w") as f:
        f.write(page)


if __name__ == "__main__":
    main()
