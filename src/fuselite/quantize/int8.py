"""Full integer: int8 (or int16, 16x8) activations from calibrated ranges, int8 weights, int32 (int64) biases.

Follows the TFLite quantization spec (``tensorflow/lite/g3doc/performance/quantization_spec.md``)
and each kernel's contract (``docs/kernel-contracts.md``):

* activations: int8, asymmetric, per tensor, from the calibrated range widened to hold 0;
* weights of ``FULLY_CONNECTED`` / ``CONV_2D`` (axis 0) and ``DEPTHWISE_CONV_2D`` (axis 3):
  int8, symmetric, per channel; their biases int32 at ``input scale * weight scale[c]``,
  zero point 0 (a conv without a bias gets a zero one: the int8 kernel needs it);
* ops whose kernel passes values through (reshape, pooling, slicing, ``GATHER``, ...) give
  their output the input's scale and zero point, as the spec restricts them;
* ``SOFTMAX`` / ``LOGISTIC`` outputs (1/256, -128), ``TANH`` (1/128, 0), as the kernels need;
* other constants an op reads (an ``ADD`` of a constant, a ``GATHER`` table) are quantized
  like activations, asymmetric int8 from their own range.

Between an op that stays float and its integer neighbours a ``DEQUANTIZE`` / ``QUANTIZE``
is placed (one per value); at the model's inputs and outputs too, unless
``inference_input_type`` / ``inference_output_type`` ask for int8 (or uint8) tensors there.
An op without an integer form here stays float, or, with only integer op sets, is a
conversion error listing every such op.

The ``wide`` ops (16x8 mode: all; int8 mode: the steps of unrolled recurrent cells, and the
layers an error budget widens) get int16 activations (symmetric, zero point 0) and int64
biases where ``INT16_KINDS`` says their kernels take them; ``QUANTIZE`` moves values between
int8 and int16. ``UNIDIRECTIONAL_SEQUENCE_LSTM`` becomes the 8x8->16 integer LSTM; stateful
layers' variables hold integers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fuselite.ir import Module, Op, Quantization
from fuselite.ops.catalog import FLOAT_WEIGHTS_BELOW
from fuselite.quantize.int8_engine import Int8Function, NotIntegerError
from fuselite.quantize.int8_forms import (
    WIDE_ROWS,
    bounded_ranges,
    index_arithmetic,
    integer_forms,
    masked_logits,
    mode_of,
    operand_scales,
    output_edges,
    rsqrt_width,
    saturated_ranges,
    shared_ranges,
    uneven_rows,
    uneven_share,
    wide_values,
)
from fuselite.quantize.int8_kernels import (
    INDEX_ARITHMETIC,
    INTEGER_KERNELS,
    NO_INTEGER_KERNEL,
    fixed_scale_starved,
    fixed_scale_steps,
)
from fuselite.quantize.int8_params import (
    FLOAT32,
    INT8,
    INT16,
    NoRange,
    is_activation,
)
from fuselite.quantize.int8_ranges import collapsed_ranges
from fuselite.quantize.integer_lstm import (
    LSTM_8X8,
    LSTM_16X8,
    initial_states,
    initial_values,
    integer_lstm,
    lstm_cell_peak,
    variable_read,
    why_not_integer_lstm,
)
from fuselite.quantize.select import KeepFloat, WeightBytes, op_name, record
from fuselite.quantize.select import add_record as _add

JOINS_FLOAT = ("it joins a value an op computes in float (no integer kernel) into a float model output: joined "
               "in float, the float value is never quantized (as tf.lite.TFLiteConverter leaves it)")


def joins_float_output(fn, op: Op) -> bool:
    """``op`` puts values side by side (CONCATENATION, PACK) into model outputs that nothing else reads, and one
    of them is computed by an op that stayed float (CUMSUM, RFFT2D): quantizing it to join int8 neighbours only
    to dequantize the result at the edge adds an error the float join does not have (a cumsum beside a max and a
    mean: 1.01% of the range against 0.65%, median over 100 draws)."""
    if op.kind not in ("CONCATENATION", "PACK"):
        return False
    if not all(fn.is_output(o) and not fn.uses(o) for o in op.outputs):
        return False
    return any(v is not None and not v.is_const and v.dtype == FLOAT32 and v.producer is not None
               and v.producer.kind in NO_INTEGER_KERNEL for v in op.inputs)


FLOAT_ISLAND = ("it reads only float values (model inputs, ops without an integer kernel) and only ops without an "
                "integer kernel read it: quantized, its result would be dequantized at once, with an error the "
                "float op does not have (Flux's timestep phase, t * 1000 * freqs, before SIN / COS)")


def _small_weights(op: Op) -> bool:
    """``op`` reads no weight, or a small one: under ``FLOAT_WEIGHTS_BELOW`` elements, the size below which TF's
    converter (and fuselite's dynamic range) leaves a weight float (a rotary embedding's positions times its
    frequencies, written as a FULLY_CONNECTED of 32 weights)."""
    kernel = INTEGER_KERNELS[op.kind]
    if kernel.weight is None:
        return True
    w = op.inputs[kernel.weight[0]] if kernel.weight[0] < len(op.inputs) else None
    return w is not None and w.is_const and w.const.size < FLOAT_WEIGHTS_BELOW


def float_islands(fn, float_inputs: bool, kept_float: Callable[[Op], bool]) -> set[int]:
    """The ops without weights (or with small ones: ``_small_weights``) that stay float between float values: each
    of their float inputs is a model input (``float_inputs``: the model's edges are float) or an output of an op
    that stays float (a CAST of positions), and each of their outputs is read only by ops that stay float (never
    a model output). The largest such set: a chain (a MUL, a RESHAPE, a MUL before a SIN) stays float as one."""
    inputs = {v.uid for v in fn.inputs} if float_inputs else set()
    kept = {id(op) for op in fn.ops if op.kind in NO_INTEGER_KERNEL or kept_float(op)}
    island = {id(op) for op in fn.ops if op.kind in INTEGER_KERNELS and _small_weights(op)
              and id(op) not in kept and any(is_activation(v) for v in op.inputs)}
    changed = True
    while changed:
        changed = False
        for op in fn.ops:
            if id(op) not in island:
                continue
            floats = kept | island
            reads_float = all(v.uid in inputs or v.producer is not None and id(v.producer) in floats
                              for v in op.inputs if is_activation(v))
            read_float = all(not fn.is_output(o) and all(id(u) in floats for u in fn.uses(o))
                             for o in op.outputs)
            if not (reads_float and read_float):
                island.discard(id(op))
                changed = True
    return island


def quantize_int8(module: Module, ranges: dict[int, tuple[float, float]], keep: KeepFloat | None = None,
                  integer_only: bool = False, input_type: str = "float32", output_type: str = "float32",
                  outputs: dict[int, int] | None = None, captured: dict[int, list] | None = None,
                  wide: Callable[[Op], bool] = lambda op: False,
                  narrow: Callable[[Op], bool] = lambda op: False, wide_inputs: bool = False,
                  fixed: dict[int, Quantization] | None = None, int16_lstm: bool = False) -> list[dict]:
    """Make the signature functions integer; one report record per op (how, or why it stays float).

    ``ranges``: value uid -> calibrated (min, max). ``integer_only``: an op that stays float
    is an error (``TFLITE_BUILTINS_INT8`` alone). ``input_type`` / ``output_type``: the
    model's float32, int8 or uint8 edges. ``captured``: value uid -> its values per
    calibration sample (the inputs of each LSTM, replayed for its cell-state range). ``wide``:
    the ops whose outputs are int16 (16x8 kernels) where their kernel has that form; ``narrow``: ops
    that stay int8 all the same (the target runtime has no int16 form of them). ``fixed``: value uid -> the
    int8 parameters a FakeQuant op trained for it (quantization-aware training), used as they are.
    ``int16_lstm``: the LSTMs among the ``wide`` ops take int16 activations (TFLite Micro's 16x8 kernel), not
    the 8x8->16 form LiteRT has.
    """
    keep = keep or KeepFloat()
    records: list[dict] = []
    problems: list[str] = []
    captured = captured or {}
    ranges = dict(ranges)  # narrowed here per quantization (saturating inputs): the caller's stay as calibrated
    variables: dict[str, tuple] = {}  # shared_name -> (dtype, Quantization) of the variables made integer
    given = wide

    def wide(op: Op) -> bool:  # (and the ops ``uneven_rows`` marks)
        return given(op) or bool(op.attrs.get(WIDE_ROWS))

    for fname in dict.fromkeys(module.signatures.values()):
        fn = module.functions[fname]
        uneven = {id(op): share for op in fn.ops if (share := uneven_share(op, ranges)) is not None}
        uneven_rows(fn, ranges, narrow)
        integer_forms(fn, keep, ranges, wide, narrow)
        uneven_rows(fn, ranges, narrow)
        fn.topo_sort()
        narrow_rsqrt = {id(op) for op in fn.ops if op.kind == "RSQRT" and wide(op)
                        and rsqrt_width(op, ranges, captured) == INT8}
        starved = {id(op) for op in fn.ops if fixed_scale_starved(op, ranges) and not narrow(op)}
        widened = wide_values(fn, lambda op, more=starved: wide(op) or id(op) in more,
                              lambda op, skip=narrow_rsqrt: narrow(op) or id(op) in skip, wide_inputs)
        calibrated = dict(ranges)  # (before the range rules below: what calibration saw)
        saturated_ranges(fn, ranges, widened)
        masked_logits(fn, ranges, widened)
        bounded_ranges(fn, ranges)
        shared_ranges(fn, ranges)
        q = Int8Function(fn, ranges, widened, variables, fixed)
        computes_integers = index_arithmetic(fn)
        collapsed = collapsed_ranges(fn, calibrated, wide=widened, skip=computes_integers | {
            id(op) for op in fn.ops if keep.match(op) is not None or any(o.uid in q.fixed for o in op.outputs)})
        collapsed = {(op_name(op), op.kind): collapsed[id(op)] for op in fn.ops if id(op) in collapsed}
        first_record = len(records)
        joins = {id(op) for op in fn.ops if output_type == "float32" and joins_float_output(fn, op)}
        islands = float_islands(fn, input_type == "float32", lambda op, j=joins: id(op) in j or keep.match(op) is not None)
        counter = WeightBytes()
        lstms = {id(op): why_not_integer_lstm(fn, op) for op in fn.ops if op.kind == "UNIDIRECTIONAL_SEQUENCE_LSTM"}
        states = {id(op.inputs[i].producer) for op in fn.ops if lstms.get(id(op), "x") is None for i in (18, 19)}
        for op in fn.ops:  # a stateful LSTM's variable reads (and the RESHAPE after each) take its state's type
            read = [variable_read(op.inputs[i]) for i in (18, 19)] if lstms.get(id(op), "x") is None else []
            states |= {id(r) for r in read if r is not None}
            states |= {id(op.inputs[i].producer.inputs[0].producer) for i, r in zip((18, 19), read) if r is not None}
        for v in fn.inputs:
            if v.dtype == FLOAT32 and input_type == "int16":
                v.quant, v.dtype = q.params(v, INT16), INT16
            elif v.dtype == FLOAT32 and input_type in ("int8", "uint8"):
                v.quant = q.params(v, INT8)
                if input_type == "uint8":
                    v.quant = Quantization(v.quant.scale, (v.quant.zero_point[0] + 128,))
                v.dtype = np.dtype(input_type)
        for op in list(fn.ops):
            if not any(is_activation(v) or (v is not None and v.quant is not None)
                       for v in (*op.inputs, *op.outputs)):
                continue  # integer bookkeeping (shapes, ids): unchanged
            if id(op) in states and keep.match(op) is None:
                continue  # an integer LSTM's initial state: made integer with it
            if op.kind == "SHAPE":
                continue  # reads only the shape: any input type
            kernel = INTEGER_KERNELS.get(op.kind)
            entry = keep.match(op)
            if id(op) in computes_integers and entry is None:
                _add(records, outputs, op, record(fn, op, "float", counter.before(op), counter.after(op),
                                                  INDEX_ARITHMETIC, no_integer_kernel=True))
                continue
            why = f"keep_float {entry!r}" if entry is not None else q.why_float(op, kernel)
            before = counter.before(op)
            if op.kind in ("READ_VARIABLE", "ASSIGN_VARIABLE") and entry is None:
                try:
                    q.read_variable(op) if op.kind == "READ_VARIABLE" else q.assign_variable(op)
                except NoRange as e:
                    why = str(e)
                else:
                    _add(records, outputs, op, record(fn, op, mode_of(op), before, counter.after(op),
                                                      scheme="integer variable", scales=operand_scales(op)))
                    continue
            if op.kind == "UNIDIRECTIONAL_SEQUENCE_LSTM" and entry is None:
                why = lstms[id(op)] or (None if op.inputs[0].uid in captured else "no calibration values of its input")
                if why is None:
                    try:
                        stateful = variable_read(op.inputs[19]) is not None
                        sixteen = int16_lstm and wide(op)
                        peak = lstm_cell_peak(op, captured[op.inputs[0].uid], carry=stateful,
                                              initial=initial_states(op, captured, stateful))
                        notes = integer_lstm(q, op, peak, sixteen)
                    except NoRange as e:
                        why = str(e)
                    else:
                        _add(records, outputs, op, record(fn, op, "int16x8" if sixteen else "int8", before,
                                                          counter.after(op), scales=operand_scales(op),
                                                          scheme=LSTM_16X8 if sixteen else LSTM_8X8,
                                                          **({"warnings": notes} if notes else {})))
                        for read in filter(None, (variable_read(op.inputs[i].producer.inputs[0]) for i in (18, 19))):
                            _add(records, outputs, read, record(fn, read, mode_of(read), 0, 0, scales=operand_scales(read),
                                                                scheme="integer variable (the LSTM's state)"))
                        continue
            island = id(op) in islands
            if why is None and entry is None and (island or id(op) in joins):
                for i, v in enumerate(op.inputs):
                    if v is not None and not v.is_const and v.quant is not None and v.dtype != FLOAT32:
                        op.inputs[i] = q.float_input(v, op)
                _add(records, outputs, op, record(fn, op, "float", before, counter.after(op),
                                                  FLOAT_ISLAND if island else JOINS_FLOAT, beside_float=True))
                continue
            if why is None:
                if id(op) in uneven and not given(op):  # (its parts' ranges are the group's by now)
                    q.notes.append(f"CONCATENATION '{op_name(op)}': a part peaks at {uneven[id(op)]:.2g} of the "
                                   "whole, whose "
                                   "one scale its kernel gives every input; " + (
                                       "it runs int16 with the norm that reads it, row-scaled" if wide(op) else
                                       "that part keeps few of the int8 steps (no norm reads it in a form that can "
                                       "run int16 here)"))
                if id(op) in starved and not wide(op):
                    q.notes.append(f"{op.kind} '{op_name(op)}': its calibrated outputs span "
                                   f"{fixed_scale_steps(op, ranges):.1f} steps of its int8 kernel's fixed scale; it "
                                   "runs on its int16 kernel (256 times the steps), requantized to int8 after")
                try:
                    q.integer(op, kernel)
                except NoRange as e:
                    why = str(e)
                else:
                    _add(records, outputs, op, record(fn, op, mode_of(op), before, counter.after(op),
                                                      scales=operand_scales(op), **q.take_notes()))
                    continue
            for i, v in enumerate(op.inputs):
                if v is not None and not v.is_const and v.quant is not None and v.dtype != FLOAT32:
                    op.inputs[i] = q.float_input(v, op)
            if op.kind in NO_INTEGER_KERNEL and entry is None:  # float in every mode, as the official quantizer
                why = f"no integer kernel: {NO_INTEGER_KERNEL[op.kind]}"
                _add(records, outputs, op, record(fn, op, "float", before, counter.after(op), why,
                                                  no_integer_kernel=True))
                continue
            problems.append(f"{op.kind} '{op_name(op)}'{' at ' + op.location if op.location else ''}: {why}")
            _add(records, outputs, op, record(fn, op, "float", before, counter.after(op), why))
        for rec in records[first_record:]:  # a tensor calibration saw at one value (or never): said, by its op
            if (note := collapsed.get((rec["op"], rec["kind"]))) is not None:
                rec.setdefault("warnings", []).append(note)
        output_edges(fn, q, output_type)
    initial_values(module, variables)
    if integer_only and problems:
        raise NotIntegerError(f"{len(problems)} op(s) cannot be integer, and target_spec.supported_ops has only "
                              "integer op sets (TFLITE_BUILTINS_INT8 or the 16x8 set; add TFLITE_BUILTINS to let "
                              "them run in float)", problems)
    keep.check_used(module)
    return records
