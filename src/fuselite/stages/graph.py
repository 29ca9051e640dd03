"""The graph stages: import, inlining, variables, composite and loop fusion, tensor lists, recurrent forms.

Each pass body is ``(module, ctx)``; ``fuselite/pipeline.py`` declares where it runs."""

from __future__ import annotations

from collections import Counter

from fuselite import frontend
from fuselite.fusion import is_composite, prepare_composites
from fuselite.ops.text_kernels import TEXT_KERNELS
from fuselite.passes.bidirectional import split_bidirectional
from fuselite.passes.inline import inline_calls
from fuselite.passes.manager import run_pass, run_pipeline
from fuselite.passes.tables import materialize_tables
from fuselite.passes.tensor_lists import lower_tensor_lists
from fuselite.passes.unroll_rnn import of_unknown_length, unroll_sequence_rnns
from fuselite.passes.variables import freeze_variables, materialize_variables
from fuselite.quantize import KeepFloat
from fuselite.rnn.forms.policy import forms_reason, rnn_forms, static_length_error
from fuselite.rnn.sources.loops import fuse_lstm_loops
from fuselite.stages.export import count_ops
from fuselite.stages.groups import REFINE, SETTLE
from fuselite.targets import target_named


def import_program(module, ctx) -> bool:
    entries = ctx.trace(ctx)
    imported = frontend.import_concrete_functions(entries, ctx.batch_size, ctx.input_shapes)
    module.functions.update(imported.functions)
    module.signatures.update(imported.signatures)
    ctx.report.signatures = list(module.signatures)
    ctx.report.ops_before = count_ops(module)
    return True


def inline_plain_calls(module, ctx) -> int:
    return inline_calls(module, keep=is_composite)  # composites stay calls until fused


def inline_composites(module, ctx) -> int:
    return inline_calls(module)


def freeze_read_only_variables(module, ctx) -> int:
    frozen = freeze_variables(module)
    ctx.frozen += frozen
    ctx.record_frozen_variables()
    return len(frozen)


QUANTIZED = ("dynamic", "int4", "int8", "int16x8")  # modes whose recurrent layers keep the fused ops by default


def _dynamic_batch(ctx) -> bool:
    """Whether fusion rules, recognised loops and TensorList loops may leave an unknown batch dynamic: not for
    TFLite Micro (its FILL needs constant dims) nor for integer quantization (the integer LSTM's calibration
    replays a static state shape). The same conversions keep the fused LSTM by default (rnn/forms/policy.py,
    QUANTIZED_FORMS)."""
    return not ctx.on_micro and ctx.quantization not in ("int8", "int16x8") and not target_named(ctx.target).unrolls_for


def _forms(ctx) -> dict:
    """The recurrent layers' forms for this conversion (rnn/forms/policy.py); the report says why."""
    quantized = ctx.on_micro or ctx.quantization in QUANTIZED
    sixteen = ctx.quantization == "int16x8" and not ctx.on_micro  # LiteRT has no 16x8 LSTM kernel
    where = target_named(ctx.target).unrolls_for
    if where and ctx.rnn_form == "default":  # no WHILE, FILL or SHAPE there
        ctx.report.recurrent = {"threads": ctx.threads, "target": ctx.target, "rnn_form": ctx.rnn_form,
                                "reason": f"unrolled for {where} (static shapes, no WHILE; LiteRT's fused sequence "
                                "ops keep state in variable tensors, which CompiledModel refuses)"}
        return rnn_forms("unrolled", quantized, ctx.bidirectional, ctx.threads, _static_length(ctx), sixteen)
    ctx.report.recurrent = {"threads": ctx.threads, "target": ctx.target, "rnn_form": ctx.rnn_form,
                            "reason": forms_reason(ctx.rnn_form, quantized, ctx.threads, ctx.target, sixteen)}
    return rnn_forms(ctx.rnn_form, quantized, ctx.bidirectional, ctx.threads, _static_length(ctx), sixteen,
                     compiled=ctx.for_compiled_model, integer=ctx.quantization in ("int8", "int16x8"))


def _static_length(ctx) -> str | None:
    """Why a recurrent layer of unknown length cannot take the loop form in this conversion (None: it can)."""
    if ctx.on_micro:
        return "TFLite Micro runs the shapes written in the model only"
    if target_named(ctx.target).unrolls_for:
        return f"target={ctx.target!r} runs static shapes and no WHILE"
    if ctx.integer_only and ctx.quantization in ("int8", "int16x8"):
        return ("an integer-only model (target_spec.supported_ops without TFLITE_BUILTINS) has no integer loop "
                "form in fuselite")
    return None


def fuse_composites(module, ctx) -> int:
    ctx.report.composites, read = prepare_composites(module, ctx.rules, ctx.strict_fusion, ctx.batch_size,
                                                     refine_shapes=lambda m: run_pass(REFINE, m, ctx),
                                                     check=ctx.check_fusions, dynamic_batch=_dynamic_batch(ctx),
                                                     settings={"rnn_forms": _forms(ctx)})
    ctx.read_variables.update(read)
    ctx.record_frozen_variables()
    return sum(r["status"] == "fused" for r in ctx.report.composites)


def fuse_recognised_loops(module, ctx) -> int:
    records = fuse_lstm_loops(module, ctx.batch_size, settle=lambda m: run_pipeline([SETTLE], m, ctx),
                              rnn_forms=_forms(ctx), dynamic_batch=_dynamic_batch(ctx))
    ctx.report.composites += records
    return len(records)


def lower_tensor_list_ops(module, ctx) -> None:
    lower_tensor_lists(module, ctx.report, dynamic_batch=_dynamic_batch(ctx))


def variables_as_signature_io(module, ctx) -> int:
    from fuselite.passes.state_io import variables_as_signature_io as state_io

    ctx.report.state_io = state_io(module, ctx.zero_initial, why=f"target={ctx.target!r}")
    return len(ctx.report.state_io)


def materialize_mutable_variables(module, ctx) -> int:
    ctx.report.mutable_variables = materialize_variables(module, zero_initial=ctx.zero_initial)
    ctx.report.signatures = list(module.signatures)
    if ctx.report.mutable_variables and ctx.target == "litert" and ctx.for_compiled_model and not ctx.integer_only:
        ctx.report.warn("model with variables: reset them by invoking its 'reset_variables' signature (or "
                        "fuselite.runtime.reset_variables(interpreter)); LiteRT's interpreter.reset_all_variables() "
                        "leaves them as they are: the float witness that would make it reset them is a variable "
                        "tensor, which CompiledModel's loader refuses (litert_api='interpreter' writes it; "
                        "docs/variables.md)")
    elif ctx.report.mutable_variables and ctx.integer_only and ctx.target == "litert":
        ctx.report.warn("integer-only model with variables: LiteRT's interpreter.reset_all_variables() does not "
                        "reset them (its float witness is left out, see docs/variables.md); invoke the "
                        "'reset_variables' signature or call fuselite.runtime.reset_variables(interpreter)")
    return len(ctx.report.mutable_variables)


def materialize_lookup_tables(module, ctx) -> int:
    ctx.report.lookup_tables = materialize_tables(module)
    return len(ctx.report.lookup_tables)


def record_text_kernels(module, ctx) -> int:
    """The report names the tensorflow-text kernels the model's CUSTOM ops need (an app links and registers them;
    fuselite.runtime does so itself)."""
    counts = Counter(op.attrs.get("custom_code") for fn in module.functions.values() for op in fn.ops
                     if op.kind == "CUSTOM" and op.attrs.get("custom_code") in TEXT_KERNELS)
    ctx.report.text_kernels = [{"custom_code": code, "ops": n, "registrar": TEXT_KERNELS[code].registrar,
                                "what": TEXT_KERNELS[code].what} for code, n in sorted(counts.items())]
    return sum(counts.values())


def split_bidirectional_ops(module, ctx) -> int:
    kinds = sorted({op.kind for fn in module.functions.values() for op in fn.ops
                    if op.kind.startswith("BIDIRECTIONAL_SEQUENCE_")})
    if ctx.bidirectional == "fused":
        why = "TFLite Micro has no bidirectional kernel" if ctx.on_micro else \
            "LiteRT's bidirectional kernels have no integer form" if ctx.quantization in ("int8", "int16x8") else None
        if why is None or not kinds:
            return 0
        ctx.report.warn(f"bidirectional='fused': {why}; {', '.join(kinds)} split into unidirectional ops")
    return split_bidirectional(module)


def unroll_rnns(module, ctx) -> int:
    keep = KeepFloat(ctx.keep_float)
    skip = lambda op: keep.match(op) is not None  # noqa: E731
    why = _static_length(ctx)
    unknown = of_unknown_length(module, skip) if why else []
    if unknown:  # an integer-only or TFLite Micro model has no other SimpleRNN form than the unrolled one
        raise static_length_error(f"the SimpleRNN {unknown[0].describe()}", why)
    return unroll_sequence_rnns(module, skip=skip)
