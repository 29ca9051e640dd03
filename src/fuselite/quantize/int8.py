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

from fuselite.errors import ConversionError
from fuselite.ir import Function, Module, Op, Quantization, Value
from fuselite.quantize.dynamic import symmetric_int8
from fuselite.quantize.int8_forms import (
    bounded_ranges,
    index_arithmetic,
    integer_forms,
    is_mask_fill,
    is_mask_term,
    masked_logits,
    masked_low,
    mode_of,
    operand_scales,
    output_edges,
    rsqrt_width,
    saturated_ranges,
    wide_values,
)
from fuselite.quantize.int8_kernels import (
    COMPARISONS,
    INDEX_ARITHMETIC,
    INT16_KINDS,
    INTEGER_KERNELS,
    LARGE_NEGATIVE,
    NO_INTEGER_KERNEL,
    IntegerKernel,
    fixed_scale_starved,
    fixed_scale_steps,
    input_scale_floor,
    only_moves,
    output_scale_floor,
    result_range,
)
from fuselite.quantize.int8_params import (
    FIXED_INT16,
    FLOAT32,
    INT8,
    INT16,
    INT16_HEADROOM,
    NoRange,
    activation_params,
    bias_scales,
    dequantized,
    holds,
    int32_bias,
    is_activation,
    params_for,
    quantize_values,
    represented,
)
from fuselite.quantize.integer_lstm import (
    LSTM_8X8,
    LSTM_16X8,
    OUTPUT_MARGIN,
    initial_states,
    initial_values,
    integer_lstm,
    lstm_cell_peak,
    shared_name,
    variable_read,
    why_not_integer_lstm,
)
from fuselite.quantize.select import KeepFloat, WeightBytes, content_key, op_name, record
from fuselite.quantize.select import add_record as _add


class NotIntegerError(ConversionError):
    """Ops that cannot be made integer while the options ask for integer only."""


class _Int8Function:
    """Quantizes one function in op order: each value's parameters, and a conversion where integer meets
    float (or int8 meets int16)."""

    def __init__(self, fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int] | None = None,
                 variables: dict | None = None, fixed: dict[int, Quantization] | None = None):
        self.fn = fn
        self.ranges = ranges
        self.fixed = fixed or {}  # value uid -> its trained (FakeQuant) int8 parameters
        self.notes: list[str] = []  # warnings for the report, taken by the op's record (take_notes)
        self.variables = variables if variables is not None else {}  # shared_name -> (dtype, Quantization)
        self.wide = wide or set()  # uids of the float values that become int16 (16x8 ops)
        self.float_twin: dict[int, Value] = {}  # integer value uid -> its DEQUANTIZE output
        self.weights: dict[tuple, Value] = {}  # (content, channel axis) -> the int8 weight
        self.float_weights: dict[int, np.ndarray] = {}  # int8 weight uid -> the float values it was made of
        self.twins: dict[tuple[int, str], Value] = {}  # (value uid, dtype) -> its QUANTIZE output

    def dtype(self, v: Value) -> np.dtype:
        return INT16 if v.uid in self.wide else INT8

    def params(self, v: Value, dtype: np.dtype | None = None) -> Quantization:
        if v.uid not in self.ranges:
            raise NoRange(f"no calibrated range for %{v.name}")
        if (dtype or self.dtype(v)) == INT8 and v.uid in self.fixed:
            return self.fixed[v.uid]
        return params_for(dtype or self.dtype(v), *self.ranges[v.uid], headroom=INT16_HEADROOM)

    def why_float(self, op: Op, kernel: IntegerKernel | None) -> str | None:
        if kernel is None:
            return f"no integer {op.kind} form in fuselite yet"
        if any(o.meta.get("is_variable") for o in op.outputs):  # FILL(0) writing a float fused RNN's state
            return "it writes a float sequence op's state (a variable tensor the kernel updates in place)"
        state = op.inputs[0] if op.inputs else None
        if state is not None and state.meta.get("is_variable") and state.dtype == FLOAT32:
            # a float sequence op's state, read after the op: a QUANTIZE of the state itself would depend on
            # the state's writer only and could be ordered before the op (reading the initial state)
            return "it reads a float sequence op's state after the op"
        # an output that takes its input's (or a fixed) parameters needs no range of its own (a SPLIT's part the
        # model never reads has none: LiteRT leaves it without data)
        ranged = op.outputs if kernel.output == "range" else []
        values = [v for v in (*op.inputs, *ranged) if is_activation(v)]
        missing = [v.name for v in values if v.quant is None and v.uid not in self.ranges]
        if missing:
            return f"no calibrated range for {', '.join(missing[:3])}"
        if op.kind in COMPARISONS:  # comparisons.cc: each input's scale must be below 1 (else the process aborts)
            wide = [v.name for v in op.inputs if v is not None and v.dtype == FLOAT32 and
                    (activation_params(v.const.min(), v.const.max()) if v.is_const else
                     self.params(v, INT8) if v.uid in self.ranges else Quantization((0.0,), (0,))).scale[0] >= 1.0]
            if wide:
                return f"the range of {wide[0]} needs an int8 scale >= 1, which LiteRT's integer comparison rejects"
        if kernel.weight is not None:
            w = op.inputs[kernel.weight[0]]
            if w is None or not w.is_const or w.const.dtype != FLOAT32:
                return f"operand {kernel.weight[0]} (a weight) is not a float32 constant"
        return None

    def int8_input(self, v: Value, op: Op | None) -> Value:
        return self.integer_input(v, op, INT8)

    def integer_input(self, v: Value, op: Op | None, dtype: np.dtype) -> Value:
        """``v`` as an int8 (or int16) operand of ``op``: itself if it is one, else one QUANTIZE (placed
        before ``op``; last when ``op`` is None) from float, from the other integer width, or from a uint8
        model input."""
        if v.dtype == dtype:
            return v
        key = (v.uid, dtype.name)
        if key not in self.twins:
            if v.dtype == INT16 and dtype == INT8 and v.uid in self.ranges:
                # Leaving an int16 (16x8) part: values beyond the calibrated range that int16's headroom kept
                # would clip here; the int8 range gets the margin the integer LSTM's output has.
                lo, hi = self.ranges[v.uid]
                margin = OUTPUT_MARGIN * (hi - lo)
                quant = activation_params(lo - margin, hi + margin)
            elif v.dtype == FLOAT32 or v.uid in self.ranges:
                quant = self.params(v, dtype)
            elif v.dtype == np.uint8 and dtype == INT8:  # a uint8 model input: the same reals, zero point - 128
                quant = Quantization(v.quant.scale, (v.quant.zero_point[0] - 128,))
            else:
                quant = params_for(dtype, *represented(v.quant, v.dtype))
            q = self.fn.make_op("tfl.QUANTIZE", [v], [(dtype, v.shape)], name=f"{v.name}_{dtype.name}")
            q.outputs[0].quant = quant
            self.fn.ops.insert(self.fn.ops.index(op) if op is not None else len(self.fn.ops), q)
            self.twins[key] = q.outputs[0]
        return self.twins[key]

    def read_variable(self, op: Op) -> None:
        """A variable's value, in the variable's integer type: int16 when the ops reading it are 16x8, with
        the range of what is read and assigned (over the calibration samples, the state carried on)."""
        name, out = shared_name(op.inputs[0]), op.outputs[0]
        if name is None:
            raise NoRange("a variable read through an unknown handle")
        if name not in self.variables:
            values = [out] + [a.inputs[1] for a in self.fn.ops if a.kind == "ASSIGN_VARIABLE"
                              and shared_name(a.inputs[0]) == name]
            known = [self.ranges[v.uid] for v in values if v.uid in self.ranges]
            if not known:
                raise NoRange(f"no calibrated range for variable {name}")
            dtype = self.dtype(out)
            self.variables[name] = (dtype, params_for(dtype, min(lo for lo, _ in known), max(hi for _, hi in known),
                                                      headroom=INT16_HEADROOM))
        out.dtype, out.quant = self.variables[name]

    def assign_variable(self, op: Op) -> None:
        """The value assigned, converted (one QUANTIZE) to the variable's type and parameters if need be."""
        name, v = shared_name(op.inputs[0]), op.inputs[1]
        if name not in self.variables:
            if v.dtype in (INT8, INT16):
                self.variables[name] = (v.dtype, v.quant)
            else:
                self.variables[name] = (INT8, self.params(v, INT8))
        dtype, quant = self.variables[name]
        if v.dtype != dtype or v.quant != quant:
            q = self.fn.make_op("tfl.QUANTIZE", [v], [(dtype, v.shape)], name=f"{v.name}_to_{name}")
            q.outputs[0].quant = quant
            self.fn.ops.insert(self.fn.ops.index(op), q)
            op.inputs[1] = q.outputs[0]

    def float_input(self, v: Value, op: Op) -> Value:
        """``v`` as a float operand of ``op``: itself if float, else one DEQUANTIZE (placed before ``op``)."""
        if v.dtype == FLOAT32:
            return v
        if v.uid not in self.float_twin:
            d = self.fn.make_op("tfl.DEQUANTIZE", [v], [(FLOAT32, v.shape)], name=f"{v.name}_dequantize")
            self.fn.ops.insert(self.fn.ops.index(op), d)
            self.float_twin[v.uid] = d.outputs[0]
        return self.float_twin[v.uid]

    def const_as_activation(self, v: Value, dtype: np.dtype) -> Value:
        q = params_for(dtype, float(v.const.min()), float(v.const.max()))
        return self.fn.const(quantize_values(v.const, q, dtype), f"{v.name}_{dtype.name}", quant=q)

    def pad_value(self, v: Value, x: Value, dtype: np.dtype) -> Value:
        """PADV2's constant at the parameters of its (integer) input ``x``, as pad.cc requires: exact where ``x``
        can hold it; a fill far below (or above) every value (-inf before max pooling) clamps to the lowest
        (highest) code, which no window's maximum (minimum) is below (above)."""
        if x.dtype != dtype or x.quant is None:
            raise NoRange("PADV2's input is not integer")
        lo, hi = represented(x.quant, dtype)
        c = float(np.asarray(v.const).reshape(-1)[0])
        step = x.quant.scale[0]
        if not (lo - step / 2 <= c <= hi + step / 2 or c <= LARGE_NEGATIVE or c >= -LARGE_NEGATIVE):
            raise NoRange(f"PADV2's value {c:g} is outside what its input's {dtype.name} parameters hold "
                           f"[{lo:.3g}, {hi:.3g}]")
        return self.fn.const(quantize_values(np.asarray(v.const), x.quant, dtype), f"{v.name}_{dtype.name}",
                             quant=x.quant)

    def op_dtype(self, op: Op) -> np.dtype:
        """int16 when the op's outputs are to be wide and its kernel has a 16x8 form, else int8."""
        wide = op.kind in INT16_KINDS and any(o.uid in self.wide for o in op.outputs)
        if only_moves(op) and op.kind in INT16_KINDS and any(v is not None and v.dtype == INT16 for v in op.inputs):
            wide = True  # moving an int16 value (the integer LSTM's cell state): it stays int16
        return INT16 if wide else INT8

    def integer(self, op: Op, kernel: IntegerKernel) -> None:
        """Make ``op`` integer; raises NoRange (and changes nothing) when it cannot be."""
        if not any(v is not None and (is_activation(v) or v.dtype in (INT8, INT16) or v.quant is not None
                                      or (v.is_const and v.const.dtype == FLOAT32)) for v in op.inputs):
            raise NoRange(f"{op.kind} has no operand to quantize")
        dtype = self.op_dtype(op)
        ranged = {o.uid: self.params(o, dtype) for o in op.outputs
                  if kernel.output == "range" and o.dtype == FLOAT32}
        for i, v in enumerate(op.inputs):
            if v is None:
                continue
            if kernel.weight is not None and i == kernel.weight[0]:
                # one int8 tensor per distinct weight: the steps of an unrolled cell share their matrices
                # (and their per-channel scales, which the file would otherwise repeat per step)
                key = (content_key(v.const), kernel.weight[1])
                if key not in self.weights:
                    q, quant = symmetric_int8(v.const, kernel.weight[1])
                    self.weights[key] = self.fn.const(q, f"{v.name}_int8", quant=quant)
                    self.float_weights[self.weights[key].uid] = v.const
                op.inputs[i] = self.weights[key]
            elif kernel.bias is not None and i == kernel.bias:
                continue  # after the weight and the input are known
            elif op.kind == "PADV2" and i == 2 and v.is_const and v.const.dtype == FLOAT32:
                op.inputs[i] = self.pad_value(v, op.inputs[0], dtype)
            elif op.outputs[0].uid in self.ranges and (op.kind in ("SELECT_V2", "ADD") and is_mask_fill(v) or (
                    op.kind == "MUL" and v.is_const and is_mask_term(op.outputs[0], self.ranges))):
                # a mask's fill (-1e9): at the output's lowest code (its zeros exact), not a range of its own
                # that would swamp the other operand (or, a computed mask's factor, need a multiplier past int32);
                # added, at that code less twice the output's largest (a masked logit + it clamps to the lowest)
                q = self.params(op.outputs[0], dtype)
                if op.kind == "ADD":
                    lo, hi = self.ranges[op.outputs[0].uid]
                    q = params_for(dtype, masked_low(lo, hi), 0.0)
                op.inputs[i] = self.fn.const(quantize_values(v.const, q, dtype), f"{v.name}_{dtype.name}", quant=q)
            elif v.is_const and v.const.dtype == FLOAT32:
                op.inputs[i] = self.const_as_activation(v, dtype)
            elif is_activation(v) or v.quant is not None:
                op.inputs[i] = self.integer_input(v, op, dtype)
        least = input_scale_floor(op, dtype)
        if least and op.inputs[0].dtype == dtype and op.inputs[0].quant.scale[0] < least:
            # the kernel cannot prepare (TFLite Micro aborts the process): the input requantized to that scale
            lo, hi = represented(op.inputs[0].quant, dtype)
            grow = least / op.inputs[0].quant.scale[0]
            r = self.fn.make_op("tfl.QUANTIZE", [op.inputs[0]], [(dtype, op.inputs[0].shape)],
                                name=f"{op.inputs[0].name}_requantize")
            r.outputs[0].quant = params_for(dtype, lo * grow, hi * grow)
            self.fn.ops.insert(self.fn.ops.index(op), r)
            op.inputs[0] = r.outputs[0]
        if kernel.bias is not None:
            self.bias(op, kernel)
        floor = output_scale_floor(op.kind, dtype, [v.quant.scale[0] for v in op.inputs
                                                     if v is not None and v.dtype == dtype and v.quant is not None],
                                   op.attrs.get("fused_activation_function", "NONE"))
        for uid, quant in ranged.items():
            if quant.scale[0] < floor:  # the kernel's output multiplier would not fit: a wider output range
                lo, hi = represented(quant, dtype)
                ranged[uid] = params_for(dtype, lo * floor / quant.scale[0], hi * floor / quant.scale[0])
        if dtype == INT16 and op.kind in ("ADD", "SUB"):
            # general int16 scales, as the official quantizer sets (tools/optimize/quantize_model.cc:846-875)
            op.attrs["pot_scale_int16"] = False
        first = next(v for v in op.inputs if v is not None and v.dtype == dtype)
        for o in op.outputs:
            if o.dtype != FLOAT32:
                continue
            if kernel.output == "same":
                o.quant = first.quant
            elif kernel.output == "fixed":
                scale, zero_point = FIXED_INT16 if dtype == INT16 else kernel.fixed
                o.quant = Quantization((float(np.float32(scale)),), (zero_point,))
                self._note_fixed_range(op, o, scale, dtype)
            else:
                o.quant = ranged[o.uid]
            o.dtype = dtype
        if kernel.inputs_as_output:  # every input at the output's parameters, which clip no result
            ins = [holds(v, dtype) for v in op.inputs if v is not None and v.dtype == dtype]
            target = params_for(dtype, *result_range(op.kind, ins))
            op.outputs[0].quant = target
            for i, v in enumerate(op.inputs):
                if v is not None and v.dtype == dtype and v.is_const and v.quant != target:
                    op.inputs[i] = self.fn.const(quantize_values(dequantized(v), target, dtype),
                                                 f"{v.name}_as_output", quant=target)
                elif v is not None and v.dtype == dtype and v.quant != target:
                    r = self.fn.make_op("tfl.QUANTIZE", [v], [(dtype, v.shape)], name=f"{v.name}_requantize")
                    r.outputs[0].quant = target
                    self.fn.ops.insert(self.fn.ops.index(op), r)
                    op.inputs[i] = r.outputs[0]

    def _note_fixed_range(self, op: Op, out: Value, scale: float, dtype: np.dtype) -> None:
        """A model output whose kernel fixes its scale (SOFTMAX, LOGISTIC, TANH...) while its calibrated values
        span a small part of that range: few steps across them, said in the report."""
        if not self.fn.is_output(out) or out.uid not in self.ranges:
            return
        lo, hi = self.ranges[out.uid]
        steps = (hi - lo) / scale
        if steps < 16:
            self.notes.append(f"{op.kind} '{op_name(op)}' (a model output): its kernel fixes the {dtype.name} scale "
                              f"at {scale:.3g}, and its values span [{lo:.3g}, {hi:.3g}] in calibration, {steps:.1f} "
                              "steps: its error relative to that span is large (16x8 gives it 1/32768; a model "
                              "whose outputs use more of the range, as trained ones do, is not affected)")

    def take_notes(self) -> dict:
        """The warnings noted since the last call, as a record's ``warnings`` entry (or nothing)."""
        notes, self.notes = self.notes, []
        return {"warnings": notes} if notes else {}

    def bias(self, op: Op, kernel: IntegerKernel) -> None:
        x, w = op.inputs[kernel.input], op.inputs[kernel.weight[0]]
        channels = w.const.shape[kernel.weight[1]]
        b = op.inputs[kernel.bias] if kernel.bias < len(op.inputs) else None
        if b is None and not kernel.needs_bias:
            return
        values = np.zeros(channels, np.float64) if b is None else np.asarray(b.const, np.float64)
        scales = np.float64(x.quant.scale[0]) * np.asarray(w.quant.scale, np.float64)
        wide = x.dtype == INT16  # 16x8 kernels take an int64 bias
        if not wide:
            scales = self._bias_fits(op, kernel, values, scales)
        q = int32_bias(values, scales, np.int64 if wide else np.int32)
        quant = Quantization(tuple(float(np.float32(s)) for s in scales), (0,) * channels, 0)
        bias = self.fn.const(q, f"{b.name if b is not None else op.name}_bias_{q.dtype.name}", quant=quant)
        while len(op.inputs) <= kernel.bias:
            op.inputs.append(None)
        op.inputs[kernel.bias] = bias

    def _bias_fits(self, op: Op, kernel: IntegerKernel, values: np.ndarray, scales: np.ndarray) -> np.ndarray:
        """The bias scales, widened (``bias_scales``) where a bias would pass BIAS_MAX steps; the weight
        requantized at the scales that go with them (this op's own copy)."""
        w, x = op.inputs[kernel.weight[0]], op.inputs[kernel.input]
        widened, over = bias_scales(values, scales, per_tensor=len(w.quant.scale) == 1)
        if not over or w.uid not in self.float_weights:
            return scales
        w_scales = (widened / np.float64(x.quant.scale[0])).astype(np.float32)
        axis = w.quant.axis if len(w_scales) > 1 else None
        real = np.asarray(self.float_weights[w.uid], np.float64)
        shape = tuple(-1 if d == axis else 1 for d in range(real.ndim))
        q = np.clip(np.rint(real / w_scales.astype(np.float64).reshape(shape)), -127, 127).astype(np.int8)
        quant = Quantization(tuple(float(s) for s in w_scales), (0,) * len(w_scales), w.quant.axis)
        op.inputs[kernel.weight[0]] = self.fn.const(q, f"{w.name}_for_bias", quant=quant)
        self.notes.append(f"{op.kind} '{op_name(op)}': its bias would pass int32's range at its input's scale "
                          f"({over} channel(s)); their weight scales widened to hold it")
        return np.float64(x.quant.scale[0]) * w_scales.astype(np.float64)


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
    for fname in dict.fromkeys(module.signatures.values()):
        fn = module.functions[fname]
        integer_forms(fn, keep, ranges, wide)
        fn.topo_sort()
        narrow_rsqrt = {id(op) for op in fn.ops if op.kind == "RSQRT" and wide(op)
                        and rsqrt_width(op, ranges, captured) == INT8}
        starved = {id(op) for op in fn.ops if fixed_scale_starved(op, ranges) and not narrow(op)}
        widened = wide_values(fn, lambda op, more=starved: wide(op) or id(op) in more,
                              lambda op, skip=narrow_rsqrt: narrow(op) or id(op) in skip, wide_inputs)
        saturated_ranges(fn, ranges, widened)
        masked_logits(fn, ranges, widened)
        bounded_ranges(fn, ranges)
        q = _Int8Function(fn, ranges, widened, variables, fixed)
        computes_integers = index_arithmetic(fn)
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
            if why is None:
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
        output_edges(fn, q, output_type)
    initial_values(module, variables)
    if integer_only and problems:
        raise NotIntegerError(f"{len(problems)} op(s) cannot be integer, and target_spec.supported_ops has only "
                              "integer op sets (TFLITE_BUILTINS_INT8 or the 16x8 set; add TFLITE_BUILTINS to let "
                              "them run in float)", problems)
    keep.check_used(module)
    return records
