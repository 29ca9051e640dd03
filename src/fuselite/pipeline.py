"""The conversion pipeline, declared as data: one list of named passes, run by ``passes/manager.py``.

Read :data:`PIPELINE` top to bottom to know what a conversion does; ``fuselite pipeline``
prints it. Each pass is a function ``(module, ctx)`` (``ctx``: the
:class:`~fuselite.context.ConversionContext`) declared once here with a one-line doc;
its time goes into ``report.stage_seconds`` under its name, and ``--print-after NAME``
prints the IR after it. Adding a stage (quantization, a target check) is adding one
entry to :data:`PIPELINE`.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from collections import Counter
from dataclasses import replace

import numpy as np

from fuselite import frontend
from fuselite.budget import layer_of, plan_layers
from fuselite.errors import ConversionError, NeedsStaticBatch
from fuselite.fusion import is_composite, prepare_composites
from fuselite.ir import Quantization, Value
from fuselite.lower import lower_module
from fuselite.passes.bidirectional import split_bidirectional
from fuselite.passes.clone import snapshot_module
from fuselite.passes.control_flow import specialize_loop_invariants
from fuselite.passes.dce import dce
from fuselite.passes.ethos_u_forms import reverse_as_split_concat
from fuselite.passes.fold_tf import fold_tf
from fuselite.passes.inline import inline_calls
from fuselite.passes.manager import FixedPoint, Group, Pass, check_pipeline, run_pass, run_pipeline
from fuselite.passes.micro_forms import (
    expand_gelu,
    full_rank_strided_slices,
    int32_select_as_arithmetic,
    tile_as_broadcast_to,
)
from fuselite.passes.optimize import optimize
from fuselite.passes.patterns import rewrite_tf_patterns
from fuselite.passes.reset_witness import add_reset_witnesses
from fuselite.passes.shapes import refine_shapes
from fuselite.passes.tensor_lists import lower_tensor_lists
from fuselite.passes.unroll_rnn import of_unknown_length, unroll_sequence_rnns
from fuselite.passes.variables import freeze_variables, materialize_variables
from fuselite.quantize import KeepFloat, quantize_dynamic, quantize_float16
from fuselite.quantize.fake_quant import FAKE_QUANT_OPS, absorb_fake_quants
from fuselite.quantize.int8 import LSTM_16X8, computes_16x8, lstm_state_sources, quantize_int8
from fuselite.quantize.options import QuantizationOptionError
from fuselite.quantize.select import op_name
from fuselite.rnn.forms.policy import forms_reason, rnn_forms, static_length_error
from fuselite.rnn.sources.loops import fuse_lstm_loops
from fuselite.runtime.calibrate import collect_ranges
from fuselite.runtime.compare import micro_quantization_error, quantization_error
from fuselite.runtime.kernel_errors import MissingKernelError
from fuselite.runtime.micro import MicroUnavailable, run_on_micro
from fuselite.runtime.prepare_check import litert_problem
from fuselite.runtime.vela import VelaUnavailable, compile_with_vela
from fuselite.tflite.flatbuffer import write_flatbuffer
from fuselite.tflite.micro import dynamic_input_problems, micro_problems, reset_witness


def count_ops(module) -> dict[str, int]:
    """Op kinds -> how many, over every function (for the report)."""
    c: Counter = Counter()
    for fn in module.functions.values():
        c.update(op.kind for op in fn.ops)
    return dict(sorted(c.items()))


# -- the passes --------------------------------------------------------------------------


def import_program(module, ctx) -> bool:
    entries = ctx.trace(ctx)
    imported = frontend.import_concrete_functions(entries, ctx.batch_size, ctx.input_shapes)
    module.functions.update(imported.functions)
    module.signatures.update(imported.signatures)
    ctx.report.signatures = list(module.signatures)
    ctx.report.ops_before = count_ops(module)
    return True


def settle_quantization_mode(module, ctx) -> int:
    """A quantization-aware-trained program (FakeQuant ops) asked to be optimized becomes full integer from its
    trained ranges, as with tf.lite.TFLiteConverter; full integer without a representative_dataset needs one."""
    ctx.fake_quants = sum(n for kind, n in ctx.report.ops_before.items() if kind in FAKE_QUANT_OPS)
    mode = ctx.quantization
    if ctx.fake_quants and mode == "dynamic":
        ctx.quantization = "int8"
        if ctx.provenance is not None:
            ctx.provenance = replace(ctx.provenance, quantization="int8")
        ctx.report.warn(f"quantization-aware-trained model ({ctx.fake_quants} FakeQuant op(s)): full-integer int8 "
                        "from the trained ranges, as with tf.lite.TFLiteConverter"
                        + ("" if ctx.representative_dataset is None else
                           "; the representative_dataset calibrates the tensors no FakeQuant guards"))
    elif ctx.fake_quants and mode is None:
        ctx.report.warn(f"{ctx.fake_quants} FakeQuant op(s) kept as QUANTIZE / DEQUANTIZE pairs in a float model "
                        "(as with tf.lite.TFLiteConverter); optimizations=[tf.lite.Optimize.DEFAULT] makes it int8")
    if ctx.quantization in ("int8", "int16x8") and ctx.representative_dataset is None and not ctx.fake_quants:
        raise QuantizationOptionError(f"{ctx.quantization} quantization needs a representative_dataset (calibration "
                                      "data), or a quantization-aware-trained model (FakeQuant ops)")
    if ctx.on_micro and ctx.quantization == "dynamic":
        raise QuantizationOptionError(f"target={ctx.target!r}: TFLite Micro has no kernels for dynamic quantization "
                                      "(int8 weights with float activations); quantize to int8 or int16x8 with a "
                                      "representative_dataset, or not at all")
    return ctx.fake_quants


def keep_keras_int4_weights(module, ctx) -> int:
    """Where a Keras int4 kernel's folded float32 array is used, a DEQUANTIZE of its int4 values (int8 where
    LiteRT cannot hold it as int4; the report says why)."""
    by_shape = {}
    for k in ctx.keras_int4:
        for arr, transposed in ((k.folded, False), (np.ascontiguousarray(k.folded.T), True)):
            by_shape.setdefault(arr.shape, []).append((arr, k, transposed))
    done: dict[int, Value] = {}
    kept: dict[str, tuple] = {}
    for fn in module.functions.values():
        for op in list(fn.ops):
            for i, v in enumerate(op.inputs):
                if v is None or not v.is_const or v.const.dtype != np.float32 or v.const.shape not in by_shape:
                    continue
                if v.uid not in done:
                    hit = next(((k, t) for arr, k, t in by_shape[v.const.shape] if np.array_equal(arr, v.const)),
                               None)
                    if hit is None:
                        continue
                    done[v.uid] = _dequantized_kernel(fn, op, v, *hit)
                    kept[hit[0].layer] = (hit[0], v.const.nbytes)
                op.inputs[i] = done[v.uid]
    for layer, (k, before) in kept.items():
        after = (k.values.size + 1) // 2 if k.bits == 4 else k.values.size
        ctx.report.warn(f"Keras int4 kernel of '{layer}' kept as int{k.bits} weights (a DEQUANTIZE when the model "
                        f"loads; {before:,} -> {after:,} bytes)" + (f": {k.why}" if k.why else ""))
    return len(kept)


def _dequantized_kernel(fn, op, v, kernel, transposed: bool):
    import ml_dtypes

    values = kernel.values.T if transposed else kernel.values
    quant = Quantization(tuple(float(s) for s in kernel.scale), tuple(int(z) for z in kernel.zero_point),
                         0 if transposed else 1)
    dtype = ml_dtypes.int4 if kernel.bits == 4 else np.int8
    w = fn.const(np.ascontiguousarray(values).astype(dtype), f"{v.name}_int{kernel.bits}", quant=quant)
    dq = fn.make_op("tfl.DEQUANTIZE", [w], [(np.dtype(np.float32), v.shape)], name=f"{v.name}_dequantize",
                    location=op.location)
    fn.ops.insert(fn.ops.index(op), dq)
    return dq.outputs[0]


def inline_plain_calls(module, ctx) -> int:
    return inline_calls(module, keep=is_composite)  # composites stay calls until fused


def inline_composites(module, ctx) -> int:
    return inline_calls(module)


def freeze_read_only_variables(module, ctx) -> int:
    frozen = freeze_variables(module)
    ctx.frozen += frozen
    ctx.record_frozen_variables()
    return len(frozen)


QUANTIZED = ("dynamic", "int8", "int16x8")  # modes whose recurrent layers keep the fused ops by default


def _dynamic_batch(ctx) -> bool:
    """Whether fusion rules, recognised loops and TensorList loops may leave an unknown batch dynamic: not for
    TFLite Micro (its FILL needs constant dims) nor for integer quantization (the integer LSTM's calibration
    replays a static state shape). The same conversions keep the fused LSTM by default (rnn/forms/policy.py,
    QUANTIZED_FORMS)."""
    return not ctx.on_micro and ctx.quantization not in ("int8", "int16x8")


def _forms(ctx) -> dict:
    """The recurrent layers' forms for this conversion (rnn/forms/policy.py); the report says why."""
    quantized = ctx.on_micro or ctx.quantization in QUANTIZED
    sixteen = ctx.quantization == "int16x8" and not ctx.on_micro  # LiteRT has no 16x8 LSTM kernel
    ctx.report.recurrent = {"threads": ctx.threads, "target": ctx.target, "rnn_form": ctx.rnn_form,
                            "reason": forms_reason(ctx.rnn_form, quantized, ctx.threads, ctx.target, sixteen)}
    return rnn_forms(ctx.rnn_form, quantized, ctx.bidirectional, ctx.threads, _static_length(ctx), sixteen)


def _static_length(ctx) -> str | None:
    """Why a recurrent layer of unknown length cannot take the loop form in this conversion (None: it can)."""
    if ctx.on_micro:
        return "TFLite Micro runs the shapes written in the model only"
    if ctx.integer_only and ctx.quantization in ("int8", "int16x8"):
        return ("an integer-only model (target_spec.supported_ops without TFLITE_BUILTINS) has no integer loop "
                "form in fuselite")
    return None


def fuse_composites(module, ctx) -> int:
    ctx.report.composites, read = prepare_composites(module, ctx.rules, ctx.strict_fusion, ctx.batch_size,
                                                     refine_shapes=lambda m: run_pass(REFINE, m, ctx),
                                                     check=ctx.check_fusions, dynamic_batch=_dynamic_batch(ctx),
                                                     rnn_forms=_forms(ctx))
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


def materialize_mutable_variables(module, ctx) -> int:
    ctx.report.mutable_variables = materialize_variables(module, zero_initial=ctx.zero_initial)
    ctx.report.signatures = list(module.signatures)
    if ctx.report.mutable_variables and ctx.integer_only and ctx.target == "litert":
        ctx.report.warn("integer-only model with variables: LiteRT's interpreter.reset_all_variables() does not "
                        "reset them (its float witness is left out, see docs/variables.md); invoke the "
                        "'reset_variables' signature or call fuselite.runtime.reset_variables(interpreter)")
    return len(ctx.report.mutable_variables)


def _quantize_weights(module, ctx, mode: str, quantize) -> int:
    ctx.float_names = {}
    ctx.float_output = _ordered_flatbuffer(module, ctx.float_names)  # the reference the error is measured against
    outputs = {}  # record index -> the uid of its op's first output (for the per-op error)
    return _record_quantization(ctx, mode, quantize(module, KeepFloat(ctx.keep_float), outputs), outputs)


def _record_quantization(ctx, mode: str, records: list[dict], outputs: dict[int, int]) -> int:
    """The report's quantization section from a quantizer's per-op records; how many ops were quantized."""
    ctx.quantized_outputs = outputs
    ctx.report.quantization = {
        "mode": mode, "ops": records,
        "weight_bytes_before": sum(r["weight_bytes_before"] for r in records),
        "weight_bytes_after": sum(r["weight_bytes_after"] for r in records)}
    return sum(r["mode"] != "float" for r in records)


def quantize_float16_weights(module, ctx) -> int:
    return _quantize_weights(module, ctx, "float16", quantize_float16)


def quantize_int8_weights(module, ctx) -> int:
    return _quantize_weights(module, ctx, "dynamic", quantize_dynamic)


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


def calibrate(module, ctx) -> int:
    """Run the float model on the representative dataset; keep every float tensor's range (by value). Without
    one (a quantization-aware-trained model), the ranges are the FakeQuant ops' alone."""
    ctx.float_names = {}
    ctx.float_output = _ordered_flatbuffer(module, ctx.float_names)
    if ctx.representative_dataset is None:
        ctx.error_samples, ctx.ranges, ctx.captured = [], {}, {}
        ctx.report.calibration = {"samples": 0, "tensors": 0}
        return 0
    # the values a replayed op computes from: its input, and an LSTM's initial states (its cell-state range)
    replay = {ctx.float_names[v.uid]: v.uid for fn in module.functions.values() for op in fn.ops
              if op.kind in REPLAYED for v in (op.inputs[0], *(lstm_state_sources(op) if op.kind != "RSQRT" else ()))
              if v.uid in ctx.float_names}
    captured: dict[str, list] = {}
    ctx.error_samples, by_name, count = collect_ranges(ctx.float_output, ctx.representative_dataset,
                                                       keep=ERROR_SAMPLES, capture=replay, captured=captured)
    ctx.ranges = {uid: by_name[name] for uid, name in ctx.float_names.items() if name in by_name}
    ctx.captured = {replay[name]: values for name, values in captured.items()}
    ctx.report.calibration = {"samples": count, "tensors": len(ctx.ranges)}
    return count


def _integer(module, ctx, promoted: tuple[str, ...] = ()) -> tuple[list[dict], dict[int, int]]:
    """Quantize ``module`` in ctx's full-integer mode, the layers in ``promoted`` one step wider: 16x8 where
    they have the kernel, float (when allowed) for an op that has only an int8 one (the LSTM)."""
    outputs: dict[int, int] = {}
    promoted_ = set(promoted)

    def wide(op) -> bool:
        if ctx.quantization == "int16x8":  # every op with a 16x8 kernel; the others int8 (the LSTM: 8x8->16)
            return True
        # the steps of unrolled recurrent cells run 16x8 (as the integer LSTM's insides are int16)
        return bool(op.attrs.get("_recurrent_cell")) or layer_of(op_name(op)) in promoted_

    keep = list(ctx.keep_float)
    if ctx.on_micro:  # integer in LiteRT, float only in TFLite Micro: float there
        keep += [op_name(op) for fn in module.functions.values() for op in fn.ops if op.kind in MICRO_FLOAT_ONLY]
    if promoted and not ctx.integer_only and not ctx.on_micro:  # (TFLite Micro has the 16x8 LSTM)
        keep += [op_name(op) for fn in module.functions.values() for op in fn.ops
                 if op.kind in NO_16X8 and layer_of(op_name(op)) in promoted_]
    records = quantize_int8(module, ctx.ranges, KeepFloat(keep), ctx.integer_only, ctx.inference_input_type,
                            ctx.inference_output_type, outputs, ctx.captured, wide=wide,
                            narrow=lambda op: ctx.on_micro and op.kind in MICRO_INT8_ONLY,
                            wide_inputs=ctx.quantization == "int16x8", fixed=ctx.fixed_params,
                            int16_lstm=ctx.on_micro)
    return records, outputs


def _micro_only(records: list[dict]) -> list[str]:
    """The ops of a quantized model that LiteRT has no kernel for (LSTMs with int16 activations)."""
    return [r["op"] for r in records if r.get("scheme") == LSTM_16X8]


def _output_errors(ctx, model: bytes, micro_only: list[str]) -> tuple[int, list[dict]]:
    """(samples, each output's error against the float model): on LiteRT, or, for a model with ``micro_only``
    ops (LSTMs with int16 activations: TFLite Micro's kernels alone), on TFLite Micro's interpreter."""
    if not micro_only:
        n, outs, _ = quantization_error(ctx.float_output, model, ctx.error_samples or None)
        return n, outs
    try:
        return micro_quantization_error(ctx.float_output, model, ctx.error_samples or None)
    except MicroUnavailable as e:
        raise ConversionError(f"target={ctx.target!r}, 16x8: the LSTM(s) {', '.join(map(repr, micro_only))} "
                              f"with int16 activations run on TFLite Micro alone, where their error is measured: {e}"
                              ) from None
    except RuntimeError as e:  # TFLM refused or failed to run the model
        raise ConversionError(f"target={ctx.target!r}: {e}") from None


NO_16X8 = ("UNIDIRECTIONAL_SEQUENCE_LSTM",)  # integer, but no 16x8 kernel in LiteRT: wider means float
# int16 in LiteRT, not in TFLite Micro (kernels/gather.cc: float32 and int8 data; resize_bilinear.cc, reduce.cc's
# max / min, elementwise.cc's rsqrt: int8 only)
MICRO_INT8_ONLY = ("GATHER", "RESIZE_BILINEAR", "REDUCE_MAX", "REDUCE_MIN", "RSQRT")
# integer in LiteRT, float only in TFLite Micro (exp.cc, elementwise.cc: float32)
MICRO_FLOAT_ONLY = ("EXP", "LOG", "SQRT")


def _candidate_layers(records: list[dict], integer_only: bool, int16_lstm: bool = False) -> list[str]:
    """Layers with an op that could run wider: int8 and computing (16x8 exists), or an LSTM (float allowed, or
    ``int16_lstm``: the target has its 16x8 kernel)."""
    layers = []
    for r in records:
        if r["mode"] != "int8" or r["kind"] in ("READ_VARIABLE", "ASSIGN_VARIABLE"):
            continue
        if r["kind"] in NO_16X8 and integer_only and not int16_lstm:
            continue
        if r["kind"] in NO_16X8 or computes_16x8(r["kind"]):
            layers.append(layer_of(r["op"]))
    return list(dict.fromkeys(layers))


def quantize_full_int8(module, ctx) -> int:
    """Quantize; measure each layer's share of the error (quantizing again with it wider, on LiteRT); with
    ``max_quantization_error``, make the fewest layers wider that meet it."""
    ctx.ranges = dict(ctx.ranges)
    absorbed = absorb_fake_quants(module, ctx.ranges, ctx.fixed_params)
    if absorbed:
        ctx.report.calibration["fake_quant_ranges"] = absorbed
    pristine = snapshot_module(module)
    records, outputs = _integer(module, ctx)

    def measure(promoted: tuple[str, ...]) -> float:
        trial = snapshot_module(pristine)
        tried, _ = _integer(trial, ctx, promoted)
        _, outs = _output_errors(ctx, _ordered_flatbuffer(trial), _micro_only(tried))
        return max(o["relative_error"] for o in outs)

    # the shares cost at most what the conversion so far did (a share is a whole quantization and run)
    spent = sum(ctx.report.stage_seconds.values())
    plan = plan_layers(_candidate_layers(records, ctx.integer_only, ctx.on_micro), measure, ctx.max_quantization_error,
                       time_limit=max(spent, MIN_SHARE_SECONDS))
    if plan.promoted:
        module.functions.clear()
        module.functions.update(pristine.functions)
        records, outputs = _integer(module, ctx, tuple(plan.promoted))
    count = _record_quantization(ctx, ctx.quantization, records, outputs)
    ctx.micro_only = _micro_only(records)
    for r in records:
        for note in r.get("warnings", ()):
            ctx.report.warn(note)
    floats = Counter(r["kind"] for r in records if r.get("no_integer_kernel"))
    if floats:
        ctx.report.warn(f"{sum(floats.values())} op(s) stay float, between DEQUANTIZE and QUANTIZE, as with "
                        f"tf.lite.TFLiteConverter: LiteRT has no integer kernel for {', '.join(sorted(floats))}")
    ctx.report.quantization["layers"] = report = plan.report()
    shares = {k["layer"]: k["share"] for k in report["layers"]}
    for r in records:
        if layer_of(r["op"]) in shares:
            r["layer_error_share"] = shares[layer_of(r["op"])]
    return count


MIN_SHARE_SECONDS = 1.0  # the error shares' time limit is the conversion's own time, at least this
ERROR_SAMPLES = 8  # calibration samples the quantization error is measured on
COLLECT_ABOVE = 4 << 20  # bytes of constants above which export collects garbage first
# ops whose inputs calibration keeps: an LSTM's (its inner ranges), RSQRT's (which kernel width is closer)
REPLAYED = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "RSQRT")


def measure_quantization_error(module, ctx) -> None:
    """Run the float and the quantized model on LiteRT on the same inputs; record each output's error.

    Each quantized op's output is compared too where both files have it (same value,
    float32, same shape): the error it carries, its own and what flows into it. A model LiteRT cannot run (an
    LSTM with int16 activations, for TFLite Micro) runs on TFLite Micro's interpreter, outputs only.
    """
    records = ctx.report.quantization["ops"]
    if ctx.micro_only:
        samples, outputs = _output_errors(ctx, ctx.output, ctx.micro_only)
        ctx.report.quantization.update(samples=samples, outputs=outputs, runtime="TFLite Micro")
        return
    twins = {ctx.float_names[uid]: ctx.tensor_names[uid] for uid in ctx.quantized_outputs.values()
             if uid in ctx.float_names and uid in ctx.tensor_names}
    samples, outputs, per_tensor = quantization_error(ctx.float_output, ctx.output, ctx.error_samples or None,
                                                      tensors=twins)
    ctx.report.quantization.update(samples=samples, outputs=outputs)
    for i, uid in ctx.quantized_outputs.items():
        error = per_tensor.get(ctx.float_names.get(uid))
        if error is not None:
            records[i]["output_error"] = error


def _ordered_flatbuffer(module, tensor_names: dict | None = None, provenance=None) -> bytes:
    for fn in module.functions.values():
        fn.topo_sort()
    return write_flatbuffer(module, tensor_names, provenance)


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


def _return_freed_memory() -> None:
    """Give the memory just freed back to the system (glibc keeps freed blocks under 32 MiB in its heap,
    where the builder's one large block cannot reuse them: resident memory would hold them beside it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to do
        pass


def export_flatbuffer(module, ctx) -> None:
    # The ops the passes replaced reference their values and back (cycles): their constants (a copy of
    # the weights before lowering transposed them) are freed only by the cycle collector. For a large model,
    # free them now, before the writer needs room for the file (a full collection costs ~0.1 s).
    if sum(v.const.nbytes for fn in module.functions.values() for op in fn.ops for v in op.inputs
           if v is not None and v.is_const) > COLLECT_ABOVE:
        gc.collect()
        _return_freed_memory()
    ctx.tensor_names = {}
    ctx.output = _ordered_flatbuffer(module, ctx.tensor_names, ctx.provenance)
    ctx.report.ops_after = count_ops(module)
    problems = micro_problems(module)
    ctx.report.micro = {"target": ctx.target, "runs": not problems, "problems": problems}
    ctx.report.size_bytes = len(ctx.output)
    ctx.report.subgraphs = len(module.functions)


# -- the declaration ---------------------------------------------------------------------

UNROLL_RNNS = Pass("unroll-sequence-rnns", unroll_rnns,
                   "SimpleRNN sequence ops become FULLY_CONNECTED / ADD / TANH steps (no integer or TFLite Micro "
                   "RNN kernel)")
DCE = Pass("dce", lambda m, ctx: dce(m), "drop ops nothing uses and functions nothing calls")
FOLD = Pass("fold-constants", lambda m, ctx: fold_tf(m), "evaluate TF ops whose inputs are all constants")
REFINE = Pass("refine-shapes", lambda m, ctx: refine_shapes(m),
              "re-run TensorFlow's shape inference with what is now known")
SPECIALIZE = Pass("specialize-loop-invariants", lambda m, ctx: specialize_loop_invariants(m),
                  "bind constants that loops and branches pass through unchanged into their bodies")
FREEZE = Pass("freeze-variables", freeze_read_only_variables, "variables nothing assigns become constants")

SETTLE = Group("settle", [
    FOLD,
    FixedPoint("fold-and-refine", [REFINE, FOLD], "shapes and folded constants feed each other", max_rounds=4),
    SPECIALIZE,
], "fold constants and shapes to a fixed point, then bind loop invariants")

PIPELINE = [
    Pass("import", import_program, "trace the program; import its graph and function library"),
    Group("micro-inputs", [
        Pass("check-static-inputs", check_static_inputs,
             "an input with a dynamic dimension besides the batch is an error (TFLite Micro runs static shapes)"),
    ], "the micro target's inputs", when=lambda m, ctx: ctx.on_micro),
    Pass("settle-quantization-mode", settle_quantization_mode,
         "a quantization-aware-trained program (FakeQuant ops) asked to be optimized is made int8 from its ranges"),
    Pass("inline-calls", inline_plain_calls, "inline every call except to composite functions"),
    DCE,
    SPECIALIZE,
    FREEZE,
    SETTLE,
    Pass("fuse-composites", fuse_composites,
         "offer each composite function to its fusion rule; a fused body becomes the fused op (refining shapes)"),
    Pass("inline-composites", inline_composites, "inline the composites' bodies (fused or declined)"),
    DCE,
    FREEZE,
    Pass("fuse-recognised-loops", fuse_recognised_loops,
         "Keras LSTM / SimpleRNN / GRU while loops of SavedModels become fused ops (settling first)"),
    DCE,
    SETTLE,
    Pass("rewrite-tf-patterns", lambda m, ctx: rewrite_tf_patterns(m),
         "activations spelled as several TF ops (GELU, hard-swish) become one op"),
    Pass("lower-tensor-lists", lower_tensor_list_ops, "TensorLists of RNN loops become dense tensors"),
    DCE,
    Pass("materialize-variables", materialize_mutable_variables,
         "assigned variables become LiteRT resource variables (init, reset signature)"),
    Pass("lower", lambda m, ctx: lower_module(m), "TF ops become TFLite builtins, one rule per TF op type"),
    Pass("optimize", lambda m, ctx: optimize(m), "fold bias, batch norm and activations; CSE; static reshapes"),
    DCE,
    Pass("keras-int4-weights", keep_keras_int4_weights,
         "a Keras int4 kernel (quantize('int4')) that folding made float32 is int4 again, behind a DEQUANTIZE"),
    Pass("split-bidirectional", split_bidirectional_ops,
         "bidirectional sequence ops become two unidirectional ones and reverses (the form TensorFlow's flatbuffer "
         "importer, LiteRT's integer kernels and TFLite Micro take; bidirectional='fused' keeps LiteRT's op)"),
    Group("micro-forms", [
        UNROLL_RNNS,
        Pass("expand-gelu", lambda m, ctx: expand_gelu(m, integer=ctx.quantization in ("int8", "int16x8")),
             "GELU becomes elementwise builtins (erf polynomial in float, sigmoid form for integer models)"),
        Pass("int32-select-as-arithmetic", lambda m, ctx: int32_select_as_arithmetic(m),
             "an int32 SELECT_V2 becomes b + CAST(c) * (a - b)"),
        Pass("tile-as-broadcast-to", lambda m, ctx: tile_as_broadcast_to(m),
             "a TILE with constant multiples becomes BROADCAST_TO (between RESHAPEs where a tiled dim is not 1)"),
        Pass("full-rank-strided-slices", lambda m, ctx: full_rank_strided_slices(m),
             "a STRIDED_SLICE naming fewer dims than its input names them all (TFLite Micro reads every dim's)"),
        DCE,
    ], "the forms of ops TFLite Micro has kernels for", when=lambda m, ctx: ctx.on_micro),
    Group("ethos-u-forms", [
        Pass("reverse-as-split-concat", lambda m, ctx: reverse_as_split_concat(m),
             "a REVERSE_V2 along a static axis becomes SPLIT + CONCATENATION in the reverse order (Vela maps "
             "REVERSE_V2 to the NPU on the Ethos-U85 only)"),
    ], "the forms of ops the Ethos-U55 / U65 NPU takes",
        when=lambda m, ctx: ctx.target == "ethos-u" and not str(ctx.accelerator).startswith("ethos-u85")),
    Group("quantize", [
        Group("float16", [
            Pass("quantize-float16", quantize_float16_weights,
                 "float32 constant operands become float16 + DEQUANTIZE (as TF's float16 mode)"),
        ], "float16 weights", when=lambda m, ctx: ctx.quantization == "float16"),
        Group("dynamic-range", [
            Pass("quantize-dynamic", quantize_int8_weights,
                 "weights of ops with a hybrid kernel become int8 (FC, conv, sequence ops, embedding lookup)"),
        ], "int8 weights, float activations", when=lambda m, ctx: ctx.quantization == "dynamic"),
        Group("full-integer", [
            UNROLL_RNNS,
            DCE,
            Pass("calibrate", calibrate, "run the float model on the representative dataset; record tensor ranges"),
            Pass("quantize-int8", quantize_full_int8,
                 "int8 (int16) activations, int8 weights, int32 (int64) biases; float ops between QUANTIZE / "
                 "DEQUANTIZE"),
        ], "int8 (or int16x8) activations, int8 weights", when=lambda m, ctx: ctx.quantization in ("int8", "int16x8")),
    ], "quantize as the converter's options ask", when=lambda m, ctx: ctx.quantization is not None),
    Group("reset-witness", [
        Pass("witness-reset-all-variables", lambda m, ctx: add_reset_witnesses(m),
             "a signature using variables resets them after interpreter.reset_all_variables() (an in-place RNN "
             "state marks it)"),
    ], "LiteRT's reset_all_variables() resets resource variables too",
        when=lambda m, ctx: ctx.target == "litert" and not ctx.integer_only and bool(ctx.report.mutable_variables)),
    Group("micro-target", [
        Pass("check-micro-target", check_micro_target,
             "every op TFLite Micro has no kernel (or no such operand types) for, listed together, is an error"),
    ], "the micro target's compatibility check", when=lambda m, ctx: ctx.on_micro),
    Pass("export", export_flatbuffer, "order ops and write the schema-v3 flatbuffer"),
    Pass("check-on-litert", check_on_litert,
         "prepare the model on stock LiteRT and invoke it on zeros: an op or dtype its kernels reject is an error"),
    Group("on-micro", [
        Pass("run-on-tflite-micro", run_on_tflite_micro,
             "load and run the model on TFLite Micro's interpreter (a subprocess); for --micro-sources, measure "
             "its tensor arena"),
    ], "run on TFLite Micro", when=lambda m, ctx: ctx.on_micro or ctx.micro_sources),
    Group("ethos-u", [
        Pass("compile-with-vela", compile_for_ethos_u,
             "compile the model with Arm's Vela for the Ethos-U configuration (a subprocess): the NPU / CPU split "
             "with Vela's reasons, cycle and SRAM estimates"),
    ], "Arm's Vela compiler", when=lambda m, ctx: ctx.target == "ethos-u"),
    Group("quantization-error", [
        Pass("measure-quantization-error", measure_quantization_error,
             "run the float and the quantized model on LiteRT (the quantized one on TFLite Micro when only it has "
             "the kernels); report each output's error"),
    ], "what quantization cost, measured", when=lambda m, ctx: ctx.quantization is not None),
]

check_pipeline(PIPELINE)
