"""target="ethos-u": an Arm Ethos-U NPU — the micro target's forms and checks (what Vela leaves to the CPU runs
on TFLite Micro), full integer with integer input and output, forms the NPU takes, compiled with Vela after
export (the NPU / CPU split, cycles and memory in the report)."""

from __future__ import annotations

import os
from typing import Any

from fuselite.errors import ConversionError, InputError
from fuselite.quantize import QuantizationOptionError, TargetSpec
from fuselite.quantize.options import io_type, option_name
from fuselite.runtime.vela import (
    DEFAULT_ACCELERATOR,
    INSTALL,
    VelaUnavailable,
    compile_with_vela,
    vela_available,
)
from fuselite.targets.base import check_directory, register
from fuselite.targets.micro import Micro


class EthosU(Micro):
    name = "ethos-u"
    help = ("ethos-u: full integer (int8, or --quantize int16x8) with integer input and output, in forms an Arm "
            "Ethos-U NPU takes, compiled with Vela (needs ethos-u-vela; the report gives the NPU / CPU split)")
    what = "Arm's Vela compiler"
    groups = Micro.groups | {"ethos-u-forms", "ethos-u"}
    options = ("accelerator_config", "vela_output")
    cli_quantize = "int8"
    cli_refused_quantize = ("float16", "dynamic", "int4")

    def selects(self, group: str, ctx: Any) -> bool:
        if group == "ethos-u-forms":  # Vela maps REVERSE_V2 to the NPU on the Ethos-U85 only
            return not str(ctx.accelerator).startswith("ethos-u85")
        return super().selects(group, ctx)

    def accelerator(self, conv: Any) -> str | None:
        return conv.accelerator_config or DEFAULT_ACCELERATOR

    def check_options(self, conv: Any) -> None:
        """Vela installed, the configuration one of Vela's."""
        from fuselite.runtime.vela import ACCELERATORS

        if conv.accelerator_config is not None and conv.accelerator_config not in ACCELERATORS:
            raise InputError(f"accelerator_config must be one of Vela's configurations: {', '.join(ACCELERATORS)}; "
                             f"got {conv.accelerator_config!r}")
        if conv.vela_output is not None:
            check_directory(conv.vela_output, "vela_output")
        if not vela_available():
            raise InputError(f"target='ethos-u' compiles the model with Arm's Vela, which is not installed: {INSTALL}")

    def quantization_settings(self, conv: Any, settings: tuple) -> tuple:
        """Full integer (int8 unless the 16x8 op set is asked for) with integer input and output, which Vela
        needs."""
        floats = [n for n in ("inference_input_type", "inference_output_type")
                  if getattr(conv, n) is not None and io_type(getattr(conv, n)) == "float32"]
        if floats:
            raise QuantizationOptionError(f"target='ethos-u': {' and '.join(floats)} float32, but the NPU takes "
                                          "integer tensors only (Vela compiles int8 and 16x8 models): leave "
                                          "them unset (int8, or int16 with 16x8) or set int8")
        spec = TargetSpec()
        spec.supported_types, spec.supported_ops = list(conv.target_spec.supported_types or []), \
            list(conv.target_spec.supported_ops or [])
        ops = {option_name(o).upper() for o in spec.supported_ops}
        if "float16" in {option_name(t).lower() for t in spec.supported_types}:
            raise QuantizationOptionError("target='ethos-u': float16 weights run on no Ethos-U; it is full integer "
                                          "(int8, or 16x8 with supported_ops=[...ACTIVATIONS_INT16_WEIGHTS_INT8])")
        sixteen = "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8" in ops
        if not sixteen and "TFLITE_BUILTINS_INT8" not in ops:
            spec.supported_ops = ["TFLITE_BUILTINS_INT8"] + [o for o in spec.supported_ops
                                                             if option_name(o).upper() != "TFLITE_BUILTINS"]
        wide = "int16" if sixteen else "int8"
        return (conv.optimizations or ["DEFAULT"], spec, conv.representative_dataset,
                conv.inference_input_type or wide, conv.inference_output_type or wide)


ETHOS_U = register(EthosU())


def compile_for_ethos_u(module, ctx) -> None:
    """target="ethos-u": compile the written model with Vela for the accelerator; the NPU / CPU split (each CPU
    op with Vela's reason), its cycle and memory estimates into the report; with ``vela_output``, its compiled
    model kept there."""
    keep = None if ctx.vela_output is None else os.fspath(ctx.vela_output)
    try:
        result = compile_with_vela(ctx.output, ctx.accelerator, keep=keep, name=ctx.output_name)
    except VelaUnavailable as e:
        raise ConversionError(f"target='ethos-u': {e}") from None
    if "error" in result:
        raise ConversionError(f"target='ethos-u': {result['error']}")
    ctx.report.ethos_u = result
