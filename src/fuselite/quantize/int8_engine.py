"""The int8 / 16x8 engine: one function made integer in op order (``Int8Function``): each value's parameters,
each op's integer form as its kernel takes it, and the conversions where integer meets float (or int8 meets
int16). ``int8.py`` drives it over a model and says what the mode is."""

from __future__ import annotations

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Function, Op, Quantization, Value
from fuselite.quantize.dynamic import symmetric_int8
from fuselite.quantize.int8_forms import (
    is_mask_fill,
    is_mask_term,
    masked_low,
)
from fuselite.quantize.int8_kernels import (
    COMPARISONS,
    INT16_KINDS,
    LARGE_NEGATIVE,
    IntegerKernel,
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
    shared_name,
)
from fuselite.quantize.select import content_key, op_name

_MOVES = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "STRIDED_SLICE", "SLICE", "GATHER"})  # same values


class NotIntegerError(ConversionError):
    """Ops that cannot be made integer while the options ask for integer only."""


INT16_EXIT_MARGIN = 0.1  # of a value's calibrated range, each side, where it leaves int16 for int8


class Int8Function:
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
        self.log_cone: dict[int, str] | None = None  # op id -> why it stays float (what a LOG reads: _wide_log_input)

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
        wide_log = self._wide_log_input(op)
        if wide_log is not None:
            return wide_log
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

    def _wide_log_input(self, op: Op) -> str | None:
        """Why ``op`` stays float if it computes what a LOG reads from values that reach below one int8 step of
        their range (a log-mel spectrogram: energies from 1e-6 to 1e3): on the int8 grid such values become 0 or
        one step and their logs are off by more than log 2. The LOG, and the ops back from it while their results
        are such values (the mel matrix, a magnitude's SQRT and squares: nonnegative, down to near 0), stay
        float, and so do the values squared on the way (a DFT's parts, whose squares reach that low: their
        small values matter as much) and the linear maps that make them (the DFT matrices, a window, the frames:
        the input's own int8 steps would set a noise floor in every bin)."""
        cone = self.log_cone
        if cone is None:
            cone = self.log_cone = {}
            for log in (o for o in self.fn.ops if o.kind == "LOG" and self._below_a_step(o.inputs[0])):
                lo, hi = self.ranges[log.inputs[0].uid]
                why = (f"the LOG '{op_name(log)}' reads values from {lo:.3g} to {hi:.3g}: below one int8 step "
                       f"({hi / 255:.3g}) their logs would be off by more than log 2, so what it reads is float")
                cone.setdefault(id(log), why)
                stack = [(log.inputs[0], False)]
                while stack:
                    v, squared = stack.pop()
                    p = v.producer
                    if p is None or id(p) in cone or not (squared or self._below_a_step(v)):
                        continue
                    cone[id(p)] = why
                    if p.kind == "MUL" and p.inputs[0] is p.inputs[1]:  # a square: what it squares is as wide
                        stack.append((p.inputs[0], True))
                    elif squared and (p.kind in _MOVES or p.kind == "FULLY_CONNECTED" and p.inputs[1].is_const
                                      or p.kind == "MUL" and p.inputs[1] is not None and p.inputs[1].is_const):
                        stack.append((p.inputs[0], True))  # a linear map of the values squared: its input too
                    else:
                        stack.extend((u, False) for u in p.inputs if u is not None and not u.is_const)
        return cone.get(id(op))

    def _below_a_step(self, v: Value) -> bool:
        """``v``'s calibrated values are nonnegative and reach below one int8 step of their range."""
        lo, hi = self.ranges.get(v.uid, (None, None))
        return lo is not None and hi > 0 and 0 <= lo < hi / 255

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
                # would clip here; the int8 range gets a margin (the integer LSTM's output has a wider one, 25%:
                # this one was not measured wider)
                lo, hi = self.ranges[v.uid]
                margin = INT16_EXIT_MARGIN * (hi - lo)
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
            shared = {v.quant for v in op.inputs if v is not None and v.dtype == dtype and not v.is_const}
            if len(shared) == 1 and result_range(op.kind, ins) == represented(next(iter(shared)), dtype):
                target = next(iter(shared))  # the group's one scale already (int8_ranges.shared_ranges)
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
