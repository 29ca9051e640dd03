"""The check before writing: stock LiteRT prepares and runs the file (the targets' own checks and runs are in
``fuselite/targets/``).

Each pass body is ``(module, ctx)``; ``fuselite/pipeline.py`` declares where it runs."""

from __future__ import annotations

import math

import numpy as np

from fuselite.errors import ConversionError, NeedsStaticBatch
from fuselite.ir import BlockwiseQuantization
from fuselite.passes.fold_tf import size_text
from fuselite.quantize.select import op_name
from fuselite.runtime.kernel_errors import MissingKernelError
from fuselite.runtime.prepare_check import INVOKE_BELOW, litert_problem
from fuselite.runtime.samples import input_details, relative
from fuselite.runtime.signatures import packs_too_much

DYNAMIC_SIZE = 3  # the size the check before writing gives a dynamic input dimension, beside the written one
DYNAMIC_SIZES = (32, 96, 224)  # sizes tried for dynamic dimensions besides the batch where 1 does not run


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
    written = shapes is None
    if packs_too_much(ctx.output):
        ctx.report.warn(f"checked on LiteRT's builtin kernels alone ({len(ctx.output) / 2**20:.0f} MiB: XNNPACK "
                        "packs its own copy of the weights when it prepares, as much memory again); `fuselite "
                        "verify` runs the file with XNNPACK")
    while problem is None:
        try:
            problem, builtin = _problem(ctx.output, shapes)
            if problem is not None and written and dynamic is None:
                sized = _larger_sizes(ctx, problem)  # its dynamic sizes, written as 1, may be too small for it
                if sized is not None:
                    problem, shapes = None, sized
        except MissingKernelError as e:
            ctx.report.warn(f"not run on LiteRT before writing: {e}")
            return
        if problem is None:  # it runs as written (or at the samples' shapes): then at another batch, once
            if dynamic is not None:
                return
            dynamic = _dynamic_shapes(ctx.output, shapes)
            if dynamic is None or dynamic == shapes:
                return
            shapes = dynamic
    message, node, kind = problem
    if not message.strip():  # LiteRT's arena failed to allocate (out of memory): it says nothing
        message = _unexplained(ctx.output)
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


def _problem(model: bytes, shapes) -> tuple:
    """(LiteRT's problem with ``model`` at ``shapes`` or None, whether on the builtin kernels): with XNNPACK
    first (not for a large file: ``packs_too_much``), then on the builtin kernels alone."""
    for builtin in (True,) if packs_too_much(model) else (False, True):
        try:
            problem = litert_problem(model, builtin=builtin, shapes=shapes)
        except MemoryError as e:  # NumPy's zeros for an input (its message may be empty)
            problem = (f"out of memory: {e}" if str(e) else "", None, None)
        if problem is not None:
            return problem, builtin
    return None, True


def _unexplained(model: bytes) -> str:
    """The reason to give where LiteRT failed without one (its arena could not be allocated): the bytes the
    model's tensors take as written, and the largest of them."""
    from fuselite.runtime.interpreters import interpreter

    try:
        tensors = interpreter(model, allocate=False).get_tensor_details()
    except Exception:  # noqa: BLE001 - a reason is still given
        tensors = []
    sizes = [(math.prod(int(d) for d in t["shape"]) * np.dtype(t["dtype"]).itemsize, t) for t in tensors
             if np.dtype(t["dtype"]).kind in "biufc"]
    if not sizes:
        return "LiteRT gave no reason (most likely out of memory)"
    largest, t = max(sizes, key=lambda s: s[0])
    return (f"LiteRT gave no reason, most likely out of memory allocating its tensors: they take "
            f"{size_text(sum(n for n, _ in sizes))} as written, the largest '{t['name']}' "
            f"({np.dtype(t['dtype']).name} {[int(d) for d in t['shape']]}) {size_text(largest)}")


def _larger_sizes(ctx, problem) -> dict[str, tuple] | None:
    """Where the model fails at its written shapes (each dynamic dimension 1) and has a dynamic dimension
    besides the batch: the first of ``DYNAMIC_SIZES`` for those dimensions at which it runs on both kernel sets
    (a convolutional network with valid padding needs an image larger than 1 x 1), said in the report; None
    if it runs at none of them (the problem is the model's)."""
    details = input_details(ctx.output)
    if not details or not any(n == -1 for d in details.values() for n in list(d["shape_signature"])[1:]):
        return None
    for size in DYNAMIC_SIZES:
        shapes = {name: tuple(size if k > 0 and n == -1 else int(d["shape"][k])
                              for k, n in enumerate(d["shape_signature"])) for name, d in details.items()}
        if _problem(ctx.output, shapes)[0] is None:
            at = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
            ctx.report.warn(f"checked on LiteRT at {at}: at its written shapes (each dynamic dimension 1) "
                            f"{problem[0].splitlines()[0]}")
            return shapes
    return None


def _dynamic_shapes(model: bytes, base: dict[str, tuple] | None = None) -> dict[str, tuple] | None:
    """The first signature's inputs with a dynamic batch (their first dimension) at ``DYNAMIC_SIZE``, their other
    dimensions as in ``base`` or as written (a dynamic height or length may have a smallest size the model
    takes); None if no input has a dynamic batch."""
    details = input_details(model)
    if not details or not any(len(d["shape_signature"]) and d["shape_signature"][0] == -1 for d in details.values()):
        return None
    return {name: tuple(DYNAMIC_SIZE if k == 0 and len(d["shape_signature"]) and d["shape_signature"][0] == -1
                        else int(n) for k, n in enumerate(base[name] if base and name in base else d["shape"]))
            for name, d in details.items()}


def _sample_shapes(ctx) -> dict[str, tuple] | None:
    """The first calibration sample's input shapes (a dynamic dimension at the user's size), if any."""
    samples = getattr(ctx, "error_samples", None)
    return {name: np.shape(x) for name, x in samples[0].items()} if samples else None


def _operand(v) -> str:
    """A value's type for an error message, with its scale and zero point when it is quantized."""
    if v.quant is None:
        return str(v.dtype)
    if isinstance(v.quant, BlockwiseQuantization):
        return f"{v.dtype} (blockwise, block {v.quant.block_size})"
    if len(v.quant.scale) > 1:
        return f"{v.dtype} (scales {min(v.quant.scale):.3g}..{max(v.quant.scale):.3g} per channel)"
    return f"{v.dtype} (scale {v.quant.scale[0]:.3g}, zero point {v.quant.zero_point[0]})"


# -- LiteRT's CompiledModel API -------------------------------------------------------------------------

COMPILED_TOLERANCE = 1e-5  # float outputs: CompiledModel's against the Interpreter's, as a fraction of the range


def check_on_compiled_model(module, ctx) -> None:
    """Load the written model in LiteRT's CompiledModel API on the CPU (its loader is not the Interpreter's) and
    run its first signature on the inputs the Interpreter checks it with: a file that loads nowhere but the
    Interpreter is written only where the conversion asked for a form that needs it (the report says which API
    the file is for, and why); CompiledModel's outputs against the Interpreter's (XNNPACK) go into the report."""
    from fuselite.runtime.compiled import (
        VARIABLE_TENSORS,
        CompiledModelError,
        load_compiled,
        loader_problems,
        run_compiled,
    )

    if ctx.on_micro or ctx.micro_only:  # a file for TFLite Micro (or one only it runs)
        return
    problems = loader_problems(ctx.output)
    if problems:
        why = _interpreter_reason(ctx)
        ctx.report.litert_api = {"apis": ["Interpreter"], "why": f"{why}: {VARIABLE_TENSORS}",
                                 "variable_tensors": problems}
        if ctx.for_compiled_model:
            ctx.report.warn(f"this file is for LiteRT's Interpreter API alone: {why} keep state in "
                            f"{VARIABLE_TENSORS} ({problems[0]}{' ...' if len(problems) > 1 else ''})")
        return
    ctx.report.litert_api = {"apis": ["Interpreter", "CompiledModel"],
                             "why": "no variable tensors: CompiledModel's loader takes it"}
    if len(ctx.output) >= INVOKE_BELOW:  # read, not loaded (as the Interpreter's check prepares, not invokes)
        return
    try:
        inputs = _check_inputs(ctx)
    except MissingKernelError as e:  # custom ops: the app registers their kernels, in either API
        ctx.report.litert_api["why"] += f"; not run in CompiledModel here ({str(e).splitlines()[0]})"
        return
    from fuselite.runtime import run

    want = None
    if inputs is not None:  # (string inputs: loaded, not run)
        try:
            want = run(ctx.output, inputs)
        except Exception:  # the Interpreter's own check passed on zeros; these inputs are the check's own
            want = None
    try:
        got = run_compiled(ctx.output, inputs) if want is not None else load_compiled(ctx.output)
    except CompiledModelError as e:
        # not the conversion's doing (an output whose shape is known only at run time: "Failed to set custom
        # allocation for output"): the file is for the Interpreter, and the report says why
        ctx.report.litert_api = {"apis": ["Interpreter"], "why": str(e)}
        ctx.report.warn(f"this file runs on LiteRT's Interpreter but not in its CompiledModel API: {e}")
        return
    if got is None:
        return
    errors = {name: relative(got[name], want[name]) for name in want if name in got}
    worst = max(errors.values(), default=0.0)
    ctx.report.litert_api["compiled_model_error"] = worst
    if worst > COMPILED_TOLERANCE:
        name = max(errors, key=errors.get)
        ctx.report.warn(f"LiteRT's CompiledModel gives output '{name}' {100 * worst:.3g}% of its range away from "
                        "the Interpreter's (on the CPU, the same inputs)")


def _interpreter_reason(ctx) -> str:
    """What made a file need variable tensors, in words (the forms asked for, or kept by default)."""
    if ctx.litert_api == "interpreter":
        return "litert_api='interpreter': LiteRT's fused sequence ops (and the reset witness)"
    if ctx.rnn_form == "fused":
        return "rnn_form='fused': LiteRT's fused sequence ops"
    if ctx.bidirectional == "fused":
        return "bidirectional='fused': LiteRT's bidirectional sequence ops"
    return ("LiteRT's fused sequence ops where no other form can be written (an integer LSTM of a length known only "
            "at run time: give it with input_shapes)")


def check_samples(ctx, count: int) -> list[dict] | None:
    """``count`` samples of the first signature's inputs for the checks on LiteRT's other runtimes
    (:func:`~fuselite.runtime.samples.input_samples`: the calibration samples where there are enough)."""
    from fuselite.runtime.samples import input_samples

    return input_samples(ctx.output, count, getattr(ctx, "error_samples", None) or [])


def _check_inputs(ctx) -> dict | None:
    """The first signature's inputs for the CompiledModel check (the first of :func:`check_samples`)."""
    samples = check_samples(ctx, 1)
    return samples[0] if samples else None


def predict_gpu_placement(module, ctx) -> None:
    """The report says whether the written file would run fully on LiteRT's GPU accelerator (read from the file:
    ``fuselite.runtime.gpu_rules``), and what to change (target="gpu")."""
    from fuselite.runtime.gpu_rules import gpu_problems

    if ctx.on_micro or ctx.micro_only:
        return
    problems = gpu_problems(ctx.output)
    ctx.report.gpu = {"predicted": not problems, "problems": problems}
