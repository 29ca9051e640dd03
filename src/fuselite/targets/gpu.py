"""target="gpu": LiteRT's GPU accelerator (``CompiledModel`` with ``HardwareAccelerator.GPU``) — static shapes,
recurrent layers unrolled, forms of ops it takes (``passes/gpu_forms.py``), state as signature inputs and
outputs (``passes/state_io.py``), float32 / float16 weights or int8 without int16 tensors; before writing, where a
Vulkan driver is present, the model runs on the accelerator: every op placed there or an error listing each op
left on the CPU with LiteRT's reason, and the GPU's outputs against the CPU's in the report."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuselite.errors import ConversionError, InputError, NeedsStaticBatch
from fuselite.quantize import QuantizationOptionError
from fuselite.targets.base import Target, register

# how far the GPU's outputs may be from the CPU's (its arithmetic is float16 by default): a fraction of each
# output's range, as docs/accelerators.md measures it
GPU_TOLERANCE = 0.01
GPU_SAMPLES = 4
# accelerator_config of target="gpu": the precision the app runs LiteRT's GPU accelerator at — fp16, its default,
# or fp32 (GpuOptions(enforce_f32=True)). An int8 file at fp16 rounds its activations' quantization in float16 and
# lands about as far from the CPU's numbers as int8 is from float (docs/accelerators.md); at fp32 it gives them.
GPU_PRECISIONS = ("fp16", "fp32")
ENFORCE_F32 = "GpuOptions(enforce_f32=True)"
TARGET_WORDS = {"gpu": "LiteRT's GPU accelerator", "npu": "the NPU"}  # the inputs the GPU check runs (the calibration samples where there are as many)


class Gpu(Target):
    name = "gpu"
    help = ("gpu: LiteRT's GPU accelerator (CompiledModel, HardwareAccelerator.GPU): static shapes, recurrent layers "
            "unrolled, ops and types it takes; run on it before writing where a Vulkan driver is present")
    what = "LiteRT's GPU accelerator"
    groups = frozenset({"static-inputs", "accelerator-forms", "gpu-forms", "state-io", "on-gpu"})
    cli_refused_quantize = ("int16x8", "int4")
    unrolls_for = "LiteRT's GPU accelerator"
    int16_tensors = False  # "Tensor type(INT16) is not supported"
    options = ("accelerator_config",)

    def accelerator(self, conv: Any) -> str | None:
        return conv.accelerator_config  # None: fp16, and fp32 measured too where fp16 is over GPU_TOLERANCE

    def check_options(self, conv: Any) -> None:
        if conv.accelerator_config is not None and conv.accelerator_config not in GPU_PRECISIONS:
            raise InputError(f"target='gpu': accelerator_config is the precision the app runs the GPU at: "
                             f"{' or '.join(GPU_PRECISIONS)} ({ENFORCE_F32}); got {conv.accelerator_config!r}")
        if conv.max_quantization_error is not None:
            raise InputError("target='gpu': max_quantization_error meets its budget by making layers 16x8 (int16 "
                             "activations), which LiteRT's GPU accelerator does not take; leave it unset")

    def check_mode(self, mode: str | None) -> None:
        if mode in ("int16x8", "int4"):
            what = {"int16x8": "int16 activations (\"Tensor type(INT16) is not supported\")",
                    "int4": "int4 weights (its process aborts loading them: SIGABRT, LiteRT 2.3)"}[mode]
            raise QuantizationOptionError(f"target='gpu': LiteRT's GPU accelerator takes no {what}; its weights "
                                          "are float32, float16 (target_spec.supported_types=[tf.float16]) or int8 "
                                          "(dynamic range), or the model int8 with a representative_dataset")


GPU = register(Gpu())


def check_static_gpu_inputs(module, ctx) -> None:
    """target="gpu" / "npu": an input with a dynamic dimension besides the batch is an error naming
    ``input_shapes``; a dynamic batch is converted as 1 (or ``batch_size``)."""
    from fuselite.tflite.micro import dynamic_input_problems

    problems = [p.replace("TFLite Micro runs the shapes written in the model only",
                          f"target={ctx.target!r} runs static shapes").replace(
                              "the batch may stay dynamic: it runs as 1", "the batch is fixed at 1 or batch_size")
                for p in dynamic_input_problems(module)]
    if problems:
        raise ConversionError(f"{TARGET_WORDS[ctx.target]} cannot run this model (target={ctx.target!r}): {len(problems)} "
                              "problem(s):\n  " + "\n  ".join(problems))
    if ctx.batch_size is None:
        for fn in (module.functions[f] for f in dict.fromkeys(module.signatures.values())):
            if any(v.shape and v.shape[0] is None for v in fn.inputs):
                raise NeedsStaticBatch(f"target={ctx.target!r} runs static shapes")


def run_on_the_gpu(module, ctx: Any) -> None:
    """Load the written model on LiteRT's GPU accelerator (a child process) and run it on the inputs the CPU check
    used: an op left on the CPU is an error listing each with LiteRT's reason; the GPU's outputs against the
    CPU's go into the report (``report.gpu``). Without a Vulkan driver, a warning says so."""
    from fuselite.runtime.accelerators import GpuUnavailable, run_on_gpu
    from fuselite.runtime.compiled import loader_problems
    from fuselite.runtime.samples import input_samples, relative_error

    problems = loader_problems(ctx.output)
    if problems:
        raise ConversionError("LiteRT's GPU accelerator cannot load the model (CompiledModel's loader refuses "
                              "variable tensors): " + "; ".join(problems))
    samples = input_samples(ctx.output, GPU_SAMPLES, ctx.error_samples)
    if samples is None:
        raise ConversionError("target='gpu': the model has inputs that are not numbers (strings), which LiteRT's "
                              "GPU accelerator does not take")
    try:
        result = run_on_gpu(ctx.output, samples, precision=ctx.accelerator or "fp16")
    except GpuUnavailable as e:
        ctx.report.gpu = {**ctx.report.gpu, "ran": False, "why": str(e)}  # (the static prediction stays)
        ctx.report.warn(f"not run on LiteRT's GPU accelerator before writing: {e}")
        return
    report = {"ran": True, **result.to_json()}
    ctx.report.gpu = report  # (replaces the static prediction: measured)
    if result.error and not result.cpu_ops:  # a crash, a time-out, a refusal without an op list
        raise ConversionError(f"LiteRT's GPU accelerator could not run the model (target='gpu'): {result.error}")
    if result.cpu_ops or not result.fully_on_gpu:
        listed = "\n  ".join(f"{op}: {why}" for op, why in result.cpu_ops) or (result.error or "not fully on the GPU")
        counts = (f" ({result.gpu_op_count} op(s) on the GPU, {result.cpu_op_count} on the CPU)"
                  if result.cpu_op_count else "")
        raise ConversionError(f"LiteRT's GPU accelerator leaves ops of this model to the CPU{counts} "
                              f"(target='gpu'):\n  {listed}")
    if result.error:
        raise ConversionError(f"LiteRT's GPU accelerator could not run the model: {result.error}")
    from fuselite.runtime import run

    cpu = [run(ctx.output, inputs) for inputs in samples]
    precision = ctx.accelerator or "fp16"
    errors = relative_error(result.samples, cpu)
    report.update(precision=precision, error_against_cpu=errors, samples=len(samples))
    worst = max(errors.values(), default=0.0)
    if ctx.accelerator is None and not worst <= GPU_TOLERANCE:  # (NaN too) what the app gets at fp32
        at_fp32 = run_on_gpu(ctx.output, samples, precision="fp32")
        if not at_fp32.error and at_fp32.samples:
            report["error_against_cpu_fp32"] = relative_error(at_fp32.samples, cpu)
    if not worst <= GPU_TOLERANCE:
        name = max(errors, key=lambda k: errors[k] if np.isfinite(errors[k]) else np.inf)
        fp32 = report.get("error_against_cpu_fp32", {}).get(name)
        way = (f"; at fp32 ({ENFORCE_F32} in the app, accelerator_config='fp32') {100 * fp32:.3g}%"
               if fp32 is not None else "")
        ctx.report.warn(f"LiteRT's GPU accelerator at {precision} gives output '{name}' {100 * worst:.3g}% of its "
                        f"range away from the CPU's (above {100 * GPU_TOLERANCE:g}%){way}")
