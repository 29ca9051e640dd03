"""The quantization stages: the quantization mode settled, weights-only modes, calibration, full
integer with the per-layer error shares and ``max_quantization_error``, the error measured.

Each pass body is ``(module, ctx)``; ``fuselite/pipeline.py`` declares where it runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from fuselite.budget import layer_of, plan_layers
from fuselite.errors import ConversionError
from fuselite.ir import Quantization, Value
from fuselite.ops.catalog import MICRO_FLOAT_ONLY, MICRO_INT8_ONLY, NO_16X8
from fuselite.passes.clone import snapshot_module
from fuselite.quantize import KeepFloat, quantize_dynamic, quantize_float16
from fuselite.quantize.fake_quant import FAKE_QUANT_OPS, absorb_fake_quants
from fuselite.quantize.int8 import quantize_int8
from fuselite.quantize.int8_kernels import computes_16x8
from fuselite.quantize.integer_lstm import LSTM_16X8, lstm_state_sources
from fuselite.quantize.options import QuantizationOptionError
from fuselite.quantize.select import op_name
from fuselite.runtime.calibrate import DEFAULT_MAX_SAMPLES, collect_ranges
from fuselite.runtime.micro import MicroUnavailable
from fuselite.runtime.quantization_error import micro_quantization_error, quantization_error
from fuselite.runtime.signatures import packs_too_much
from fuselite.stages.export import ordered_flatbuffer
from fuselite.targets import target_named


def settle_quantization_mode(module, ctx) -> int:
    """A quantization-aware-trained program (FakeQuant ops) asked to be optimized becomes full integer from its
    trained ranges, as with tf.lite.TFLiteConverter; full integer without a representative_dataset needs one."""
    ctx.fake_quants = sum(n for kind, n in ctx.report.ops_before.items() if kind in FAKE_QUANT_OPS)
    mode = ctx.quantization
    if ctx.fake_quants and mode == "int4":
        raise QuantizationOptionError(f"a quantization-aware-trained model ({ctx.fake_quants} FakeQuant op(s)) is "
                                      "made int8 from its trained ranges, not int4: leave target_spec.supported_types "
                                      "unset")
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
    if ctx.on_micro and ctx.quantization in ("dynamic", "int4"):
        weights = "int8" if ctx.quantization == "dynamic" else "int4"
        raise QuantizationOptionError(f"target={ctx.target!r}: TFLite Micro has no kernels for {ctx.quantization} "
                                      f"quantization ({weights} weights with float activations); quantize to int8 or "
                                      "int16x8 with a representative_dataset, or not at all")
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


def _quantize_weights(module, ctx, mode: str, quantize) -> int:
    ctx.float_names = {}
    ctx.float_output = ordered_flatbuffer(module, ctx.float_names)  # the reference the error is measured against
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


def quantize_int4_weights(module, ctx) -> int:
    return _quantize_weights(module, ctx, "int4", lambda m, keep, outputs: quantize_dynamic(m, keep, outputs,
                                                                                           ctx.block_size))


MIN_SHARE_SECONDS = 1.0  # the error shares' time limit is the conversion's own time, at least this


ERROR_SAMPLES = 8  # calibration samples the quantization error is measured on


# ops whose inputs calibration keeps: an LSTM's (its inner ranges), RSQRT's (which kernel width is closer)
REPLAYED = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "RSQRT")


def calibrate(module, ctx) -> int:
    """Run the float model on the representative dataset; keep every float tensor's range (by value). Without
    one (a quantization-aware-trained model), the ranges are the FakeQuant ops' alone."""
    ctx.float_names = {}
    ctx.float_output = ordered_flatbuffer(module, ctx.float_names)
    if ctx.representative_dataset is None:
        ctx.error_samples, ctx.ranges, ctx.captured = [], {}, {}
        ctx.report.calibration = {"samples": 0, "tensors": 0}
        return 0
    # the values a replayed op computes from: its input, and an LSTM's initial states (its cell-state range)
    replay = {ctx.float_names[v.uid]: v.uid for fn in module.functions.values() for op in fn.ops
              if op.kind in REPLAYED for v in (op.inputs[0], *(lstm_state_sources(op) if op.kind != "RSQRT" else ()))
              if v.uid in ctx.float_names}
    captured: dict[str, list] = {}
    limit, limited = ctx.max_calibration_samples, {}
    ctx.error_samples, by_name, count = collect_ranges(ctx.float_output, ctx.representative_dataset,
                                                       keep=ERROR_SAMPLES, capture=replay, captured=captured,
                                                       limit=limit, limited=limited)
    ctx.ranges = {uid: by_name[name] for uid, name in ctx.float_names.items() if name in by_name}
    ctx.captured = {replay[name]: values for name, values in captured.items()}
    ctx.report.calibration = {"samples": count, "tensors": len(ctx.ranges)}
    if limited.get("limited"):
        ctx.report.calibration["limit"] = limit
        ctx.report.warn(f"calibration used {count} sample(s): the max_calibration_samples limit "
                        f"(--max-calibration-samples, default {DEFAULT_MAX_SAMPLES}) stopped a representative_dataset "
                        "that gives more (or never ends); raise the limit, or set it to None, to calibrate on more")
    return count


def _integer(module, ctx, promoted: tuple[str, ...] = ()) -> tuple[list[dict], dict[int, int]]:
    """Quantize ``module`` in ctx's full-integer mode, the layers in ``promoted`` one step wider: 16x8 where
    they have the kernel, float (when allowed) for an op that has only an int8 one (the LSTM)."""
    outputs: dict[int, int] = {}
    promoted_ = set(promoted)

    def wide(op) -> bool:
        if ctx.quantization == "int16x8":  # every op with a 16x8 kernel; the others int8 (the LSTM: 8x8->16)
            return True
        # the steps of unrolled recurrent cells run 16x8 (as the integer LSTM's insides are int16), except on
        # LiteRT's GPU accelerator, which takes no int16 tensor ("Tensor type(INT16) is not supported")
        if not target_named(ctx.target).int16_tensors:
            return False
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
        _, outs = _output_errors(ctx, ordered_flatbuffer(trial), _micro_only(tried))
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
    beside = Counter(r["kind"] for r in records if r.get("beside_float"))
    if beside:
        ctx.report.warn(f"{sum(beside.values())} op(s) stay float beside ops that must ({', '.join(sorted(beside))}"
                        "): each reads only float values and only float ops read it, or joins a float value into a "
                        "model output; quantized, its result would be dequantized at once (each op's reason is in "
                        "the report)")
    ctx.report.quantization["layers"] = report = plan.report()
    shares = {k["layer"]: k["share"] for k in report["layers"]}
    for r in records:
        if layer_of(r["op"]) in shares:
            r["layer_error_share"] = shares[layer_of(r["op"])]
    return count


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
    large = packs_too_much(ctx.float_output)
    reference, ctx.float_output = [ctx.float_output], None  # its last use: freed once it has run (see there)
    try:
        samples, outputs, per_tensor = quantization_error(reference, ctx.output, ctx.error_samples or None,
                                                          tensors=twins, signature=ctx.error_signature)
    except RuntimeError as e:  # LiteRT refused the quantized model on the calibration samples
        raise ConversionError(f"LiteRT cannot run the quantized model on the calibration samples: "
                              f"{str(e).splitlines()[0] if str(e) else e}") from None
    ctx.report.quantization.update(samples=samples, outputs=outputs)
    if ctx.error_signature:
        ctx.report.quantization["signature"] = ctx.error_signature
    if large:
        ctx.report.quantization["kernels"] = "builtin"  # (XNNPACK would pack a copy of the float weights)
    for i, uid in ctx.quantized_outputs.items():
        error = per_tensor.get(ctx.float_names.get(uid))
        if error is not None:
            records[i]["output_error"] = error
