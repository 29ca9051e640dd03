"""target="micro": TFLite Micro — only ops, versions and operand types its kernels take, static shapes; the
checks before writing and the run on TFLite Micro's interpreter after export (also the LiteRT target's, when
it is asked for the firmware sources)."""

from __future__ import annotations

from typing import Any

from fuselite.errors import ConversionError
from fuselite.quantize import QuantizationOptionError
from fuselite.runtime.micro import MicroUnavailable, run_on_micro
from fuselite.targets.base import Target, register
from fuselite.tflite.micro import dynamic_input_problems, micro_problems, reset_witness


class Micro(Target):
    name = "micro"
    help = "micro: TFLite Micro (only ops and types its kernels take; an op it cannot run is an error)"
    what = "TFLite Micro"
    runs_on_micro = True
    groups = frozenset({"micro-inputs", "micro-forms", "micro-target", "on-micro"})

    def check_mode(self, mode: str | None) -> None:
        if mode in ("float16", "int4"):  # "dynamic": decided after import (a QAT model is int8): settle_quantization_mode
            raise QuantizationOptionError(f"target={self.name!r}: TFLite Micro has no kernels for {mode} "
                                          "quantization (float16 or int4 weights with float activations); "
                                          "quantize to int8 or int16x8 with a representative_dataset, or not at all")


MICRO = register(Micro())


def check_static_inputs(module, ctx) -> None:
    """The micro target: an input with a dynamic dimension besides the batch is an error at once (before forms
    that would fail on it for another reason)."""
    problems = dynamic_input_problems(module)
    if problems:
        raise ConversionError(f"TFLite Micro cannot run this model (target={ctx.target!r}): {len(problems)} "
                              "problem(s):\n  " + "\n  ".join(problems))


def check_micro_target(module, ctx) -> None:
    """The micro target: every op TFLite Micro could not run, listed together, is a conversion error."""
    problems = micro_problems(module) + dynamic_input_problems(module)
    if problems:
        raise ConversionError(f"TFLite Micro cannot run this model (target={ctx.target!r}): {len(problems)} "
                              "problem(s):\n  "
                              + "\n  ".join(problems))


def run_on_tflite_micro(module, ctx: Any) -> None:
    """Load the written model in TFLite Micro's interpreter and run it on zeros (a subprocess); for the
    firmware sources, measure its tensor arena."""
    problems = list(ctx.report.micro["problems"])
    witness = [op for fn in module.functions.values() for op in fn.ops if reset_witness(op)]
    if witness:  # not the model's problem (the static check leaves it out), but in this file
        problems.append(f"{witness[0].kind} '{witness[0].name}': fuselite's reset witness for LiteRT's "
                        "reset_all_variables() (the LiteRT target's; TFLite Micro has no kernel for it)")
    if problems:  # the LiteRT target, asked for firmware sources
        raise ConversionError("micro_sources: this model would not run on TFLite Micro (convert with "
                              "target='micro' for the forms it runs):\n  " + "\n  ".join(problems))
    fn = module.functions[next(iter(module.signatures.values()))] if module.signatures else None
    inputs = [([1 if d is None else d for d in v.shape], v.dtype.name) for v in fn.inputs] if fn else []
    try:
        result = run_on_micro(ctx.output, inputs, measure_arena=ctx.micro_sources is not None)
    except MicroUnavailable as e:
        ctx.report.warn(f"not run on TFLite Micro before writing: {e}")
        return
    if "error" in result:
        raise ConversionError(result["error"])
    ctx.report.micro["ran"] = True
    if "arena_bytes" in result:
        ctx.report.micro["arena_bytes"] = result["arena_bytes"]
