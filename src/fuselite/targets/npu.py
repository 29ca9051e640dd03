"""target="npu": an NPU through LiteRT's vendor compiler plugins (``accelerator_config``: the vendor, optionally
with its SoC: "intel_openvino", "qualcomm:SM8650") — static shapes, recurrent layers unrolled, forms the vendor's
plugin takes (``passes/accelerator_forms.py``), state as signature inputs and outputs; after export the model is
compiled by the plugin (``fuselite.runtime.npu``): partitions, ops offloaded, each op left to the CPU with the
plugin's words, and the compiled model's outputs against the CPU's, in the report."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuselite.errors import ConversionError, InputError
from fuselite.quantize import QuantizationOptionError
from fuselite.targets.base import Target, register

NPU_SAMPLES = 4
NPU_TOLERANCE = 0.01


class Npu(Target):
    name = "npu"
    help = ("npu: an NPU through LiteRT's vendor compiler plugins (--accelerator-config VENDOR[:SOC], default "
            "intel_openvino): static shapes, forms the plugin takes, compiled by it after export (partitions and "
            "ops left on the CPU in the report)")
    what = "LiteRT's NPU compiler plugins"
    groups = frozenset({"static-inputs", "accelerator-forms", "npu-forms", "state-io", "on-npu"})
    options = ("accelerator_config",)
    cli_refused_quantize = ("int4",)
    unrolls_for = "the NPU plugins"

    def accelerator(self, conv: Any) -> str | None:
        from fuselite.runtime.npu import DEFAULT_NPU

        return conv.accelerator_config or DEFAULT_NPU

    def check_options(self, conv: Any) -> None:
        from fuselite.runtime.npu import VENDORS, openvino_libs, parse_npu_config

        try:
            vendor, _ = parse_npu_config(conv.accelerator_config)
        except ValueError as e:
            raise InputError(str(e)) from None
        if vendor == "intel_openvino" and openvino_libs() is None:
            raise InputError(f"target='npu' (intel_openvino) compiles with Intel's OpenVINO plugin, which needs "
                             f"OpenVINO: {VENDORS[vendor][2]}")

    def check_mode(self, mode: str | None) -> None:
        if mode == "int4":
            raise QuantizationOptionError("target='npu': LiteRT's NPU plugins take int8 (or float) models, not "
                                          "int4 weights; quantize to int8 with a representative_dataset")


NPU = register(Npu())


def compile_on_npu(module, ctx: Any) -> None:
    """Compile the written model with the vendor's plugin (a child process) and run it where the plugin compiles
    on this machine (Intel's): the partitions, the ops offloaded and those left to the CPU with the plugin's words,
    and the outputs against the CPU's go into ``report.npu``. A missing SDK is an error naming what to install."""
    from fuselite.runtime import run
    from fuselite.runtime.npu import NpuUnavailable, compile_for_npu
    from fuselite.runtime.samples import input_samples, relative_error

    samples = input_samples(ctx.output, NPU_SAMPLES, ctx.error_samples)
    try:
        result = compile_for_npu(ctx.output, ctx.accelerator, samples)
    except NpuUnavailable as e:
        raise ConversionError(f"target='npu': {e}") from None
    runs = result.pop("samples", [])
    ctx.report.npu = result
    if result.get("error"):
        raise ConversionError(f"target='npu': {result['vendor']}'s compiler plugin could not compile the model: "
                              f"{result['error']}")
    if runs and samples:
        errors = relative_error(runs, [run(ctx.output, s) for s in samples])
        result["error_against_cpu"] = errors
        worst = max(errors.values(), default=0.0)
        if not np.isfinite(worst) or worst > NPU_TOLERANCE:
            name = max(errors, key=errors.get)
            ctx.report.warn(f"the NPU's output '{name}' is {100 * worst:.3g}% of its range from the CPU's")
    if result["cpu_ops"] or result["partitions"] > 1:
        left = ", ".join(f"{c['op']} x{c['count']}" for c in result["cpu_ops"])
        ctx.report.warn(f"target='npu': {result['partitions']} partition(s), {result['npu_ops']} of {result['ops']} "
                        f"ops on the NPU{'; left to the CPU: ' + left if left else ''}")
