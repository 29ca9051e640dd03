"""The checks around writing: stock LiteRT prepares and runs the file, TFLite Micro's op and shape
limits, the run on TFLite Micro's interpreter, the Ethos-U compile with Vela.

Each pass body is ``(module, ctx)``; ``fuselite/pipeline.py`` declares where it runs."""

from __future__ import annotations

import os

import numpy as np

from fuselite.errors import ConversionError, NeedsStaticBatch
from fuselite.quantize.select import op_name
from fuselite.runtime.kernel_errors import MissingKernelError
from fuselite.runtime.micro import MicroUnavailable, run_on_micro
from fuselite.runtime.prepare_check import litert_problem
from fuselite.runtime.vela import VelaUnavailable, compile_with_vela
from fuselite.tflite.micro import dynamic_input_problems, micro_problems, reset_witness

DYNAMIC_SIZE = 3  # the size the check before writing gives a dynamic input dimension, beside the written one


def check_on_litert(module, ctx) -> None:
    """Prepare (and on zeros, invoke) the written model on stock LiteRT, with XNNPACK and on the builtin
    kernels alone (users run both; XNNPACK takes some ops and checks less): what either rejects is an error.
    Where the first signature has an input of a dynamic batch, also at a batch of ``DYNAMIC_SIZE`` (a shape the
    file admits): a model that fails there only is converted again with a fixed batch (``NeedsStaticBatch``; the
    report says why).
    A model for TFLite Micro with an op only it has a kernel for is run there instead (the next stage)."""
    if ctx.micro_only:
        ctx.report.warn(f"not run on LiteRT: {len(ctx.micro_only)} LSTM(s) with int16 activations (16x8), a kernel "
                        "TFLite Micro has and LiteRT has not (LiteRT's 16x8 models keep the 8x8->16 LSTM); run and "
                        "measured on TFLite Micro's interpreter instead")
        return
    problem, shapes, dynamic = None, _sample_shapes(ctx), None
    while problem is None:
        for builtin in (False, True):
            try:
                problem = litert_problem(ctx.output, builtin=builtin, shapes=shapes)
            except MissingKernelError as e:
                ctx.report.warn(f"not run on LiteRT before writing: {e}")
                return
            if problem is not None:
                break
        if problem is None:  # it runs as written (or at the samples' shapes): then at another batch, once
            if dynamic is not None:
                return
            dynamic = _dynamic_shapes(ctx.output)
            if dynamic is None or dynamic == shapes:
                return
            shapes = dynamic
    message, node, kind = problem
    if dynamic is not None and shapes is dynamic:
        at = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
        message = f"at a batch of {DYNAMIC_SIZE} ({at}): {message}"
        if ctx.batch_size is None:
            raise NeedsStaticBatch(f"LiteRT cannot run the model {message}")
    where = ""
    fn = module.functions[next(iter(module.signatures.values()))] if module.signatures else None
    if fn is not None and node is not None and node < len(fn.ops) and fn.ops[node].kind == kind:
        op = fn.ops[node]
        types = ", ".join(_operand(v) for v in op.inputs if v is not None)
        outs = ", ".join(_operand(v) for v in op.outputs)
        where = f"{kind} '{op_name(op)}'{' at ' + op.location if op.location else ''} (inputs {types}; outputs {outs}): "
    kernels = "LiteRT's builtin kernels (no XNNPACK)" if builtin else "LiteRT (with XNNPACK)"
    raise ConversionError(f"{kernels} cannot run the converted model: {where}{message}")


def _dynamic_shapes(model: bytes) -> dict[str, tuple] | None:
    """The first signature's inputs with a dynamic batch (their first dimension) at ``DYNAMIC_SIZE``, their other
    dimensions as written (a dynamic height or length may have a smallest size the model takes); None if no
    input has a dynamic batch."""
    from fuselite.runtime import interpreter

    interp = interpreter(model, allocate=False)
    signatures = interp.get_signature_list()
    if not signatures:
        return None
    details = interp.get_signature_runner(next(iter(signatures))).get_input_details()
    if not any(len(d["shape_signature"]) and d["shape_signature"][0] == -1 for d in details.values()):
        return None
    return {name: tuple(DYNAMIC_SIZE if k == 0 and len(d["shape_signature"]) and d["shape_signature"][0] == -1
                        else int(n) for k, n in enumerate(d["shape"])) for name, d in details.items()}


def _sample_shapes(ctx) -> dict[str, tuple] | None:
    """The first calibration sample's input shapes (a dynamic dimension at the user's size), if any."""
    samples = getattr(ctx, "error_samples", None)
    return {name: np.shape(x) for name, x in samples[0].items()} if samples else None


def _operand(v) -> str:
    """A value's type for an error message, with its scale and zero point when it is quantized."""
    if v.quant is None:
        return str(v.dtype)
    if len(v.quant.scale) > 1:
        return f"{v.dtype} (scales {min(v.quant.scale):.3g}..{max(v.quant.scale):.3g} per channel)"
    return f"{v.dtype} (scale {v.quant.scale[0]:.3g}, zero point {v.quant.zero_point[0]})"


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


def run_on_tflite_micro(module, ctx) -> None:
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
        result = run_on_micro(ctx.output, inputs, measure_arena=ctx.micro_sources)
    except MicroUnavailable as e:
        ctx.report.warn(f"not run on TFLite Micro before writing: {e}")
        return
    if "error" in result:
        raise ConversionError(result["error"])
    ctx.report.micro["ran"] = True
    if "arena_bytes" in result:
        ctx.report.micro["arena_bytes"] = result["arena_bytes"]


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
